"""The plugin hooks (pluggy). A backend plugin is a module with an ``@hookimpl`` function
``ember_backends()`` exposed through the ``ember`` entry-point group::

    # pyproject.toml of the plugin
    [project.entry-points.ember]
    mybackend = "ember_mybackend.plugin"

The built-in backends register through the same hook (registry.py).
"""

import pluggy

hookspec = pluggy.HookspecMarker("ember")
hookimpl = pluggy.HookimplMarker("ember")


@hookspec
def ember_backends():
    """Return a list of :class:`ember.backend.BackendInfo`, one per backend the plugin offers.

    Keep this cheap: import the heavy library (numba, cupy) inside ``BackendInfo.load``."""
