"""Containers: Sequential, ModuleList and ModuleDict (PyTorch's names and key scheme)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from typing import Any, Self

from ..errors import located
from .module import Module, _addindent


def _index(idx: int, n: int, what: str) -> int:
    idx = int(idx)
    if not -n <= idx < n:
        raise located(IndexError, f"index {idx} is out of range for a {what} of length {n}")
    return idx % n


class Sequential(Module):
    """Modules applied one after another; children are named "0", "1", ... (or by an OrderedDict).

    >>> import ember
    >>> from ember import nn
    >>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> len(net), type(net[1]).__name__, net(ember.ones(3, 4)).shape
    (3, 'ReLU', (3, 2))
    """

    def __init__(self, *modules: Any) -> None:  # modules, or one OrderedDict of them
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, idx: int | slice) -> Module:
        items = list(self._modules.items())
        if isinstance(idx, slice):
            return Sequential(OrderedDict(items[idx]))
        module: Module = items[_index(idx, len(items), "Sequential")][1]
        return module

    def __setitem__(self, idx: int, module: Module) -> None:
        key = list(self._modules)[_index(idx, len(self._modules), "Sequential")]
        self.add_module(key, module)

    def __delitem__(self, idx: int | slice) -> None:
        keys = list(self._modules)
        for k in keys[idx] if isinstance(idx, slice) else [keys[_index(idx, len(keys), "Sequential")]]:
            del self._modules[k]
        # Renumber, as PyTorch does, so that the keys stay 0..n-1.
        if all(k.isdigit() for k in keys):
            items = list(self._modules.values())
            self._modules.clear()
            for i, m in enumerate(items):
                self._modules[str(i)] = m

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> Self:
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> Self:
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> Self:
        items = list(self._modules.values())
        n = len(items)
        index = n if index >= n else _index(index, n, "Sequential") if n else 0
        items.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(items):
            self.add_module(str(i), m)
        return self


class ModuleList(Module):
    """A list of modules, registered as children "0", "1", ... (no forward of its own).

    >>> from ember import nn
    >>> layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    >>> len(layers), len(list(layers.parameters()))
    (3, 6)
    """

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx: int | slice) -> Any:
        items = list(self._modules.values())
        if isinstance(idx, slice):
            return ModuleList(items[idx])
        return items[_index(idx, len(items), "ModuleList")]

    def __setitem__(self, idx: int, module: Module) -> None:
        self.add_module(str(_index(idx, len(self._modules), "ModuleList")), module)

    def __delitem__(self, idx: int | slice) -> None:
        items = list(self._modules.values())
        if isinstance(idx, slice):
            del items[idx]
        else:
            del items[_index(idx, len(items), "ModuleList")]
        self._modules.clear()
        for i, m in enumerate(items):
            self._modules[str(i)] = m

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._modules.values())

    def __iadd__(self, modules: Iterable[Module]) -> Self:
        return self.extend(modules)

    def append(self, module: Module) -> Self:
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> Self:
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        items = list(self._modules.values())
        items.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(items):
            self.add_module(str(i), m)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise located(NotImplementedError, "ModuleList has no forward(); iterate over it in your own forward")

    def __repr__(self) -> str:
        # Like torch: runs of identical children print once, as "(0-3): 4 x Block(...)".
        reprs = [repr(m) for m in self]
        if not reprs:
            return "ModuleList()"
        runs: list[Any] = []  # [first index, last index, repr]
        for i, r in enumerate(reprs):
            if runs and runs[-1][2] == r:
                runs[-1][1] = i
            else:
                runs.append([i, i, r])
        lines = [_addindent(f"({a}): {r}" if a == b else f"({a}-{b}): {b - a + 1} x {r}") for a, b, r in runs]
        return "ModuleList(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """A dict of modules, registered as children under their keys.

    >>> from ember import nn
    >>> heads = nn.ModuleDict({"a": nn.Linear(2, 1), "b": nn.Identity()})
    >>> list(heads.keys())
    ['a', 'b']
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Any:
        if key not in self._modules:
            raise located(KeyError, f"ModuleDict has no key {key!r}; keys: {', '.join(self._modules)}")
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def keys(self) -> KeysView[str]:
        return self._modules.keys()

    def values(self) -> ValuesView[Any]:
        return self._modules.values()

    def items(self) -> ItemsView[str, Any]:
        return self._modules.items()

    def update(self, modules: Mapping[str, Module] | Iterable[tuple[str, Module]]) -> None:
        for key, m in modules.items() if hasattr(modules, "items") else modules:
            self.add_module(key, m)

    def pop(self, key: str) -> Any:
        m = self[key]
        del self._modules[key]
        return m

    def clear(self) -> None:
        self._modules.clear()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise located(NotImplementedError, "ModuleDict has no forward(); index it in your own forward")
