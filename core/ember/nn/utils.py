"""``ember.nn.utils``: where PyTorch users look for gradient clipping (it lives in ember.optim).

>>> import ember
>>> from ember.nn.utils import clip_grad_norm_
>>> w = ember.tensor([3.0, 4.0], requires_grad=True)
>>> w.grad = ember.tensor([3.0, 4.0])
>>> clip_grad_norm_([w], 1.0).item()
5.0
"""

from ..optim.clip import clip_grad_norm_, clip_grad_value_

__all__ = ["clip_grad_norm_", "clip_grad_value_"]
