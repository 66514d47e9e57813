"""``ember.utils``: the namespaces a PyTorch user types without thinking (``ember.utils.data``,
``ember.utils.checkpoint``)."""

from . import checkpoint, data

__all__ = ["checkpoint", "data"]
