"""Parameter: a tensor that a Module owns and an optimizer updates.

It is an ordinary :class:`ember.Tensor` (a subclass that adds no fields) whose ``requires_grad``
is on by default. Assigning one to a Module attribute registers it; operations on it give plain
Tensors, so only the leaves are Parameters.
"""

from __future__ import annotations

from ..tensor import Tensor, tensor


class Parameter(Tensor):
    """A trainable tensor; shares the buffer of the tensor it wraps.

    >>> import ember
    >>> p = ember.nn.Parameter(ember.zeros(2))
    >>> p.requires_grad, p.shape
    (True, (2,))
    """

    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = tensor([])
        elif not isinstance(data, Tensor):
            data = tensor(data)
        p = Tensor.__new__(cls)
        p._data, p._backend, p._ctx, p.grad = data._data, data._backend, None, None
        p.requires_grad = False
        if requires_grad:
            p.requires_grad_()
        return p

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        # Copy the values, keep the backend object itself (backends are singletons).
        out = Parameter(self.detach().clone(), self.requires_grad)
        if self.grad is not None:
            out.grad = self.grad.detach().clone()
        memo[id(self)] = out
        return out
