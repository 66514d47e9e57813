"""ember-template: the plugin module ember's ``ember`` entry point names.

Keep it cheap: ember imports this module when it first looks for backends, so the array
library (here NumPy; for you perhaps CuPy or a compiler) is imported only in ``_load``.
"""

from ember import BackendInfo, hookimpl

__version__ = "0.1.0"


def _load():
    from .backend import TemplateBackend

    return TemplateBackend()


@hookimpl
def ember_backends():
    """The backends this plugin offers (one here)."""
    return [
        BackendInfo(
            "template", _load, priority=0, description="template backend: the backend contract written plainly in NumPy"
        )
    ]
