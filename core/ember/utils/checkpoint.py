"""``ember.utils.checkpoint.checkpoint``: torch.utils.checkpoint's name for :func:`ember.checkpoint`."""

from ..recompute import checkpoint

__all__ = ["checkpoint"]
