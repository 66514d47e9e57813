"""Module: the base class of layers and models, with PyTorch's names and behaviour.

A Module keeps three ordered tables, filled by plain attribute assignment:

- ``_parameters``: the :class:`Parameter` s it owns (``self.weight = Parameter(...)``),
- ``_buffers``: tensors that are state but not trained (BatchNorm's running statistics),
  registered with :meth:`Module.register_buffer`,
- ``_modules``: its child modules (``self.fc = Linear(...)``).

Everything else (``parameters()``, ``state_dict()``, ``to()``, ``train()``, the repr) walks those
tables. There are no hooks.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Self

from .. import dtypes as D
from ..autodiff import no_grad
from ..errors import EmberError, located
from ..io.save import tensor_from_bytes
from ..io.tensorbytes import TensorBytes
from ..tensor import Tensor, tensor
from .parameter import Parameter

IncompatibleKeys = namedtuple("IncompatibleKeys", "missing_keys unexpected_keys")


class StateDictError(EmberError, RuntimeError):
    """A state_dict does not fit the model: missing, unexpected or wrongly shaped entries."""


def _addindent(text: str, spaces: int = 2) -> str:
    lines = text.split("\n")
    return lines[0] + "".join("\n" + " " * spaces + line for line in lines[1:])


def _as_tensor(value: Any) -> Tensor:
    """A state_dict value as an ember Tensor (ember tensors, NumPy arrays, anything with __array__)."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, TensorBytes):  # what ember.io.load_file / read_checkpoint return
        out: Tensor = tensor_from_bytes(value)
        return out
    if hasattr(value, "__array__") and not isinstance(value, (list, tuple)):
        import numpy as np

        return tensor(np.asarray(value))
    return tensor(value)


class Module:
    """Base class of every layer and model; subclasses define ``forward``.

    >>> import ember
    >>> from ember import nn
    >>> class Net(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = nn.Linear(3, 2)
    ...     def forward(self, x):
    ...         return self.fc(x).relu()
    >>> net = Net()
    >>> [name for name, _ in net.named_parameters()]
    ['fc.weight', 'fc.bias']
    >>> net(ember.ones(4, 3)).shape
    (4, 2)
    """

    training: bool
    # the tables (filled by __init__ through object.__setattr__, which this class overrides)
    _parameters: dict[str, Any]
    _buffers: dict[str, Any]
    _modules: dict[str, Any]  # a child may be None, as in torch

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise located(NotImplementedError, f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------------------------ registration
    def _tables(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        try:
            return self.__dict__["_parameters"], self.__dict__["_buffers"], self.__dict__["_modules"]
        except KeyError:
            raise located(
                AttributeError,
                f"{type(self).__name__}.__init__ must call super().__init__() "
                "before assigning parameters, buffers or submodules",
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Parameter):
            params, buffers, modules = self._tables()
            self.__dict__.pop(name, None)
            buffers.pop(name, None), modules.pop(name, None)
            params[name] = value
        elif isinstance(value, Module):
            params, buffers, modules = self._tables()
            self.__dict__.pop(name, None)
            params.pop(name, None), buffers.pop(name, None)
            modules[name] = value
        elif name in self.__dict__.get("_parameters", {}):
            if value is not None:
                raise located(
                    TypeError,
                    f"cannot assign a {type(value).__name__} to parameter {name!r} (use nn.Parameter(...) or None)",
                )
            self._parameters[name] = None
        elif name in self.__dict__.get("_buffers", {}):
            if value is not None and not isinstance(value, Tensor):
                raise located(
                    TypeError, f"cannot assign a {type(value).__name__} to buffer {name!r} (use a Tensor or None)"
                )
            self._buffers[name] = value
        elif name in self.__dict__.get("_modules", {}):
            if value is not None:
                raise located(TypeError, f"cannot assign a {type(value).__name__} to submodule {name!r}")
            self._modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: look in the three tables.
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if table in d and name in d[table]:
                return d[table][name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (a Parameter or None) under ``name``."""
        if param is not None and not isinstance(param, Parameter):
            raise located(
                TypeError, f"register_parameter({name!r}): expected a Parameter or None, got {type(param).__name__}"
            )
        self._tables()
        self.__dict__.pop(name, None)
        self._parameters[name] = param

    def register_buffer(self, name: str, value: Tensor | None, persistent: bool = True) -> None:
        """Register a non-trained tensor (saved in state_dict unless ``persistent=False``)."""
        if value is not None and not isinstance(value, Tensor):
            raise located(
                TypeError, f"register_buffer({name!r}): expected a Tensor or None, got {type(value).__name__}"
            )
        self._tables()
        self.__dict__.pop(name, None)
        self._buffers[name] = value
        (self._non_persistent.discard if persistent else self._non_persistent.add)(name)

    def add_module(self, name: str, module: Module | None) -> None:
        if module is not None and not isinstance(module, Module):
            raise located(TypeError, f"add_module({name!r}): expected a Module, got {type(module).__name__}")
        self._tables()
        self._modules[str(name)] = module

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        mod = self
        for part in target.split(".") if target else []:
            if part not in mod._modules:
                raise located(AttributeError, f"{type(mod).__name__} has no submodule {part!r} (in {target!r})")
            mod = mod._modules[part]
        return mod

    def get_parameter(self, target: str) -> Parameter:
        path, _, name = target.rpartition(".")
        mod = self.get_submodule(path)
        if name not in mod._parameters:
            raise located(AttributeError, f"{type(mod).__name__} has no parameter {name!r}")
        param: Parameter = mod._parameters[name]
        return param

    # ------------------------------------------------------------------------ traversal
    def named_modules(
        self, memo: set[int] | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """(name, module) for this module and every descendant, depth first; '' is self."""
        memo = set() if memo is None else memo
        if remove_duplicate and id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self) -> Iterator[Module]:
        for _, child in self.named_children():
            yield child

    def _named_members(
        self, table: str, prefix: str, recurse: bool, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Any]]:
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mod_prefix, mod in mods:
            for name, value in getattr(mod, table).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), value

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter) pairs; a parameter shared by two layers appears once.

        >>> from ember import nn
        >>> [n for n, _ in nn.Sequential(nn.Linear(2, 2), nn.ReLU()).named_parameters()]
        ['0.weight', '0.bias']
        """
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Tensor]]:
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def num_parameters(self, trainable_only: bool = False) -> int:
        """How many scalars the parameters hold (shared parameters counted once).

        >>> from ember import nn
        >>> nn.Linear(784, 10).num_parameters()
        7850
        """
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def cpu(self) -> Self:
        """``to("cpu")``: onto the default CPU backend unless already on a CPU one (devices.py)."""
        return self.to("cpu")

    def cuda(self, device: Any = None) -> Self:
        """``to("cuda")``: onto the CUDA backend (an error naming the fix where there is none)."""
        return self.to(device if device is not None else "cuda")

    def summary(self, input_shape: tuple[int, ...], **kwargs: Any) -> None:
        """Print each layer's output shape and parameter count for inputs of ``input_shape``
        (no batch axis), and the totals, like Keras's ``model.summary()`` (nn/summary.py)."""
        from .summary import summary

        print(summary(self, input_shape, **kwargs))

    # ------------------------------------------------------------------------ modes and updates
    def train(self, mode: bool = True) -> Self:
        """Training mode (dropout drops, batch norm uses batch statistics); returns self."""
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self) -> Self:
        """Evaluation mode: ``train(False)``."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient (to None, or to zeros in place)."""
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad = p.grad._full_like(0)  # a gradient may be a read-only broadcast view

    def apply(self, fn: Callable[[Module], Any]) -> Self:
        """Call ``fn`` on every submodule (children first) and on self; returns self.

        >>> from ember import nn
        >>> net = nn.Sequential(nn.Linear(2, 2)).apply(lambda m: None)
        """
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def to(self, target: Any, non_blocking: bool = False) -> Self:
        """Move or cast every parameter and buffer *in place* (so optimizers that hold them keep
        working): ``model.to("numba")`` changes the backend, ``model.to(ember.float64)`` casts
        floating-point tensors (integer buffers such as ``num_batches_tracked`` stay integer).

        >>> import ember
        >>> from ember import nn
        >>> nn.Linear(2, 2).to(ember.float64).weight.dtype
        ember.float64
        """
        is_dtype = isinstance(target, (D.DType, type)) or (isinstance(target, str) and target in D.BY_NAME)
        if is_dtype and not D.get(target).is_floating_point:
            raise located(TypeError, f"Module.to() only casts to floating-point dtypes, got {D.get(target)}")

        def move(t: Tensor | None) -> None:
            if t is None or (is_dtype and not t.dtype.is_floating_point):
                return
            moved = t.detach().to(target)
            t._data, t._backend = moved._data, moved._backend
            if t.grad is not None:
                t.grad = t.grad.detach().to(target)

        with no_grad():
            for m in self.modules():
                for p in m._parameters.values():
                    move(p)
                for b in m._buffers.values():
                    move(b)
        return self

    def float(self) -> Self:
        return self.to(D.float32)

    def double(self) -> Self:
        return self.to(D.float64)

    def half(self) -> Self:
        return self.to(D.float16)

    # ------------------------------------------------------------------------ state
    def state_dict(
        self, destination: dict[str, Any] | None = None, prefix: str = "", keep_vars: bool = False
    ) -> dict[str, Any]:
        """Ordered {dotted name: tensor} of parameters and persistent buffers, in PyTorch's order
        (a module's own parameters, then its buffers, then its children's). Tensors are detached
        and share memory with the model.

        >>> from ember import nn
        >>> list(nn.BatchNorm1d(3).state_dict())
        ['weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked']
        """
        out = OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                out[prefix + name] = b if keep_vars else b.detach()
        for name, child in self._modules.items():
            if child is not None:
                child.state_dict(out, prefix + name + ".", keep_vars)
        return out

    def _state_slots(self) -> dict[str, Any]:
        """{dotted name: the live tensor} for everything state_dict saves, shared ones included."""
        return self.state_dict(keep_vars=True)

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> Any:
        """Copy values into the model's parameters and buffers, in place.

        Accepts ember tensors, NumPy arrays or anything with ``__array__`` (a torch state_dict
        works). A shape mismatch is always an error; with ``strict`` (the default) so are
        missing and unexpected names. The error lists every problem with names and shapes.
        Returns ``(missing_keys, unexpected_keys)``.
        """
        slots = self._state_slots()
        given = {k: _as_tensor(v) for k, v in state_dict.items()}
        missing = [k for k in slots if k not in given]
        unexpected = [k for k in given if k not in slots]
        mismatched = [k for k in slots if k in given and tuple(given[k].shape) != slots[k].shape]
        if mismatched or (strict and (missing or unexpected)):
            lines = [f"state_dict does not fit {type(self).__name__}:"]
            if missing:
                lines.append(
                    "  missing (in the model, not in the state_dict): "
                    + ", ".join(f"{k} {slots[k].shape}" for k in missing)
                )
            if unexpected:
                lines.append(
                    "  unexpected (in the state_dict, not in the model): "
                    + ", ".join(f"{k} {tuple(given[k].shape)}" for k in unexpected)
                )
            if mismatched:
                lines.append(
                    "  shape mismatch: "
                    + ", ".join(f"{k} model {slots[k].shape} vs state_dict {tuple(given[k].shape)}" for k in mismatched)
                )
            raise located(StateDictError, "\n".join(lines) + "\n")
        with no_grad():
            for k, t in slots.items():
                if k in given:
                    t.copy_(given[k])
        return IncompatibleKeys(missing, unexpected)

    # ------------------------------------------------------------------------ repr
    def extra_repr(self) -> str:
        """The text inside the parentheses of this module's repr (subclasses override)."""
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): {_addindent(repr(child))}" for name, child in self._modules.items()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        body = "\n  ".join(([extra] if extra else []) + lines)
        return f"{type(self).__name__}(\n  {body}\n)"
