"""Simple layers: Identity, Linear, Flatten, Unflatten, Embedding."""

from __future__ import annotations

import math

from ..creation import empty
from ..errors import ShapeError, located
from ..tensor import Tensor, arange, where
from . import functional as F, init
from .module import Module
from .parameter import Parameter


class Identity(Module):
    """Returns its input (accepts and ignores constructor arguments, like PyTorch)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Linear(Module):
    """``y = x @ weight.T + bias``; weight (out_features, in_features).

    Initialization follows PyTorch: weight ~ kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)),
    and the same bound for the bias.

    >>> import ember
    >>> from ember import nn
    >>> nn.Linear(3, 2)(ember.ones(5, 3)).shape
    (5, 2)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight = Parameter(empty(self.out_features, self.in_features))
        if bias:
            self.bias = Parameter(empty(self.out_features))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1:] != (self.in_features,):
            raise located(
                ShapeError,
                f"{self!r}: expected input of shape (..., {self.in_features}), "
                f"got {x.shape} (last dim {x.shape[-1] if x.ndim else 'missing'} != in_features "
                f"{self.in_features})",
            )
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Flatten(Module):
    """Flatten dims ``start_dim..end_dim`` into one (by default everything but the batch dim)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split dim ``dim`` into ``unflattened_size``."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x):
        return x.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Embedding(Module):
    """A lookup table of ``num_embeddings`` vectors of size ``embedding_dim``, initialized N(0, 1);
    the row ``padding_idx`` starts at zero and gets no gradient.

    >>> import ember
    >>> from ember import nn
    >>> nn.Embedding(10, 4, padding_idx=0)(ember.tensor([[0, 3]])).shape
    (1, 2, 4)
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, _weight=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        if padding_idx is not None:
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise located(ValueError, f"padding_idx {padding_idx} must be within num_embeddings {num_embeddings}")
            padding_idx %= self.num_embeddings
        self.padding_idx = padding_idx
        if _weight is not None:
            if tuple(_weight.shape) != (self.num_embeddings, self.embedding_dim):
                raise located(
                    ShapeError,
                    f"Embedding: _weight has shape {tuple(_weight.shape)}, expected "
                    f"{(self.num_embeddings, self.embedding_dim)}",
                )
            self.weight = Parameter(_weight)
        else:
            self.weight = Parameter(empty(self.num_embeddings, self.embedding_dim))
            self.reset_parameters()

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            rows = arange(self.num_embeddings, backend=self.weight.backend).unsqueeze(1)
            self.weight.copy_(where(rows == self.padding_idx, 0.0, self.weight.detach()))

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}" + (
            f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        )

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None):
        m = cls(embeddings.shape[0], embeddings.shape[1], padding_idx, _weight=embeddings.detach())
        m.weight.requires_grad_(not freeze)
        return m
