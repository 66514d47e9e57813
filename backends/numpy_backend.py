"""Deprecated: the NumPy backend moved to ``ember.backends.numpy.backend`` (backends/numpy/).

This name stays one version for plugins written before the move that subclass
``NumpyBackend`` or read its ``IMPLS``: it is the same module object, with a warning.
"""

import sys
import warnings

from .numpy import backend as _backend

warnings.warn(
    "ember.backends.numpy_backend moved to ember.backends.numpy.backend; the old name goes in the next version",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _backend
