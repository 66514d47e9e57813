"""ember.optim: optimizers, learning-rate schedules and gradient clipping, with PyTorch's names.

The modules, in the order a step flows through them:

- ``optimizer``: the ``Optimizer`` base (param groups, state, ``zero_grad``, ``step``,
  ``state_dict``) and the hyperparameter rules that make bad arguments fail early.
- ``sgd``, ``adam``, ``rmsprop``, ``adagrad``: ``SGD``, ``Adam``, ``AdamW``, ``RMSprop``,
  ``Adagrad``, ``Adadelta``: which state each keeps, and which update rule it runs.
- ``functional``: the update rules as plain functions of tensors (the reference
  decompositions a backend's fused ops must match) and the fused-op dispatch.
- ``lr_scheduler``: ``StepLR``, ``MultiStepLR``, ``ExponentialLR``, ``CosineAnnealingLR``,
  ``LinearLR``, ``LambdaLR``, ``SequentialLR``, ``OneCycleLR``, ``ReduceLROnPlateau`` and
  ``warmup_cosine``.
- ``clip``: ``clip_grad_norm_`` and ``clip_grad_value_``.
- ``state``: ``split_state_dict`` / ``join_state_dict``, a state_dict as tensors + JSON.

>>> import ember
>>> w = ember.tensor([2.0, -1.0], requires_grad=True)
>>> opt = ember.optim.Adam([w], lr=0.1)
>>> for _ in range(50):
...     opt.zero_grad()
...     loss = ((w - 1.0) ** 2).sum()
...     loss.backward()
...     opt.step()
>>> bool(((w - 1.0).abs() < 0.2).all())
True

See docs/optim.md.
"""

from . import functional, lr_scheduler
from .adagrad import Adadelta, Adagrad
from .adam import Adam, AdamW
from .clip import clip_grad_norm_, clip_grad_value_
from .optimizer import Optimizer, OptimizerError
from .rmsprop import RMSprop
from .sgd import SGD
from .state import join_state_dict, split_state_dict

__all__ = [
    "Optimizer",
    "OptimizerError",
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "Adadelta",
    "lr_scheduler",
    "functional",
    "clip_grad_norm_",
    "clip_grad_value_",
    "split_state_dict",
    "join_state_dict",
]
