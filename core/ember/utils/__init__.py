"""``ember.utils``: the namespaces a PyTorch user types without thinking (``ember.utils.data``)."""
from . import data

__all__ = ["data"]
