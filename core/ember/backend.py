"""The backend protocol: what a backend is, what it declares, how it is called.

A backend is an object with a table ``impls`` from primitive name to a function
``impl(*buffers, **params) -> buffer`` (the primitives and their specs are the records in ember.primitives),
plus host transfer and a few queries. Buffers are whatever the backend likes (a NumPy array, a
CuPy array, a flat Python list); ember never looks inside them.

Subclass :class:`Backend`, fill ``impls``, and register it through the ``ember_backends`` hook
(registry.py). ``plugins/template`` is the smallest complete example.

Optional parts, each with a default that keeps a backend written without them working at
API 1.0: ``fused_impls`` (kernels for ember.fused's ops, declared in ``capabilities().fused``),
``compile(group)`` (a kernel for an ember.jit fusion group) and ``jit_runner()`` (the program
class that runs ember.jit graphs on the backend's buffers).

:class:`BackendProtocol` states the same contract structurally, for type checkers: a backend
that does not subclass :class:`Backend` can be checked against it (``mypy``), and
``isinstance(obj, BackendProtocol)`` tells whether the members are present (not their types).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, runtime_checkable

from . import dtypes as D
from .errors import NotImplementedByBackend

#: The protocol version. A plugin declaring a different major version is disabled.
API_VERSION = "1.0"

#: A backend's buffer: whatever the backend likes (a NumPy array, a CuPy array, a Python list).
Buffer: TypeAlias = Any


@dataclass
class Capabilities:
    """What a backend declares. The conformance suite checks the declaration both ways:
    declared-but-failing is a failure, implemented-but-undeclared is reported."""

    ops: frozenset[str] = frozenset()
    dtypes: frozenset[D.DType] = frozenset()
    devices: tuple[str, ...] = ("cpu",)
    fused: frozenset[str] = frozenset()  # optional fused ops (see ember.fused) it implements
    compiles_groups: bool = False  # implements compile(group) for ember.jit fusion groups
    # Buffers live on an accelerator: a host read (item, tolist, numpy) waits for queued work,
    # so ember defers its value checks to the next such read (ember.deferred) instead.
    on_device: bool = False
    notes: dict[str, Any] = field(default_factory=dict)


class Backend:
    """Base class of backends. Required: ``name``, ``impls`` and the host-transfer methods."""

    name: str = "abstract"
    version: str = "0"
    api_version: str = API_VERSION
    device: str = "cpu"
    impls: dict[str, Callable[..., Buffer]] = {}
    #: Optional fused ops (ember.fused): name -> kernel over buffers with the reference's
    #: signature. Only the names also listed in ``capabilities().fused`` are used.
    fused_impls: dict[str, Callable[..., Any]] = {}

    # -- availability and declaration ------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        """(True, "") if this backend can run here, else (False, the reason and the fix)."""
        return True, ""

    def capabilities(self) -> Capabilities:
        return Capabilities(ops=frozenset(self.impls), dtypes=frozenset(D.ALL), devices=(self.device,))

    # -- running primitives -----------------------------------------------------------------------
    def impl(self, name: str) -> Callable[..., Buffer]:
        try:
            return self.impls[name]
        except KeyError:
            raise NotImplementedByBackend(self.name, name) from None

    # -- buffers ----------------------------------------------------------------------------------
    def shape(self, buf: Buffer) -> tuple[int, ...]:
        raise NotImplementedByBackend(self.name, "shape")

    def dtype(self, buf: Buffer) -> D.DType:
        raise NotImplementedByBackend(self.name, "dtype")

    def from_list(self, flat: list[Any], shape: tuple[int, ...], dtype: D.DType) -> Buffer:
        """A buffer from a flat row-major list of Python numbers."""
        raise NotImplementedByBackend(self.name, "from_list")

    def to_list(self, buf: Buffer) -> list[Any]:
        """The buffer's elements as a flat row-major list of Python numbers."""
        raise NotImplementedByBackend(self.name, "to_list")

    def from_bytes(self, data: bytes, shape: tuple[int, ...], dtype: D.DType) -> Buffer:
        """A buffer from little-endian raw bytes (checkpoints use this; no numpy needed)."""
        raise NotImplementedByBackend(self.name, "from_bytes")

    def to_bytes(self, buf: Buffer) -> bytes:
        raise NotImplementedByBackend(self.name, "to_bytes")

    def from_numpy(self, array: Any) -> Buffer:
        return self.from_bytes(
            array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes(),
            tuple(array.shape),
            D.get(array.dtype.name),
        )

    def to_numpy(self, buf: Buffer) -> Any:
        import numpy as np

        dt = self.dtype(buf)
        if dt is D.string:  # text has no bytes form: an object array of str, as the numpy backend holds it
            out = np.empty(self.shape(buf), dtype=object)
            out.reshape(-1)[:] = self.to_list(buf)
            return out
        return (
            np.frombuffer(self.to_bytes(buf), dtype=np.dtype(dt.name).newbyteorder("<"))
            .astype(dt.name)
            .reshape(self.shape(buf))
        )

    def assign(self, dst: Buffer, src: Buffer) -> None:
        """Copy src's elements into dst in place (same shape and dtype). Optimizers use this."""
        raise NotImplementedByBackend(self.name, "assign")

    def synchronize(self) -> None:
        """Wait for queued work (asynchronous devices); a no-op on the CPU."""

    def compile(self, group: Any) -> Callable[..., Any] | None:
        """Optional: a callable running a fused group from ember.jit, or None to run it op by op."""
        return None

    def jit_runner(self) -> type | None:
        """Optional: the class that runs ember.jit graphs on this backend's buffers (a subclass
        of ``ember.jit.runner.Program``, such as the NumPy backend's, which computes into
        planned buffers), or None for the generic runner, which calls ``impls`` node by node."""
        return None

    def __repr__(self) -> str:
        return f"<ember backend {self.name} {self.version}>"

    def __deepcopy__(self, memo: dict[int, Any]) -> Backend:
        # A backend is a singleton: a deep copy of a tensor (or a model) must stay on it.
        return self


@runtime_checkable
class BackendProtocol(Protocol):
    """What ember calls on a backend, as a :class:`typing.Protocol` for plugin authors.

    Every :class:`Backend` subclass satisfies it; a type checker verifies one that does not:

    >>> from ember.backend import BackendProtocol
    >>> import ember
    >>> isinstance(ember.get_backend("numpy"), BackendProtocol)
    True
    """

    name: str
    version: str
    api_version: str
    device: str

    # read-only here, so a backend's own dict (of any value type) satisfies them
    @property
    def impls(self) -> Mapping[str, Callable[..., Buffer]]: ...
    @property
    def fused_impls(self) -> Mapping[str, Callable[..., Any]]: ...

    def available(self) -> tuple[bool, str]: ...
    def capabilities(self) -> Capabilities: ...
    def impl(self, name: str) -> Callable[..., Buffer]: ...
    def shape(self, buf: Buffer) -> tuple[int, ...]: ...
    def dtype(self, buf: Buffer) -> D.DType: ...
    def from_list(self, flat: list[Any], shape: tuple[int, ...], dtype: D.DType) -> Buffer: ...
    def to_list(self, buf: Buffer) -> list[Any]: ...
    def from_bytes(self, data: bytes, shape: tuple[int, ...], dtype: D.DType) -> Buffer: ...
    def to_bytes(self, buf: Buffer) -> bytes: ...
    def from_numpy(self, array: Any) -> Buffer: ...
    def to_numpy(self, buf: Buffer) -> Any: ...
    def assign(self, dst: Buffer, src: Buffer) -> None: ...
    def synchronize(self) -> None: ...
    def compile(self, group: Any) -> Callable[..., Any] | None: ...
    def jit_runner(self) -> type | None: ...


@dataclass
class BackendInfo:
    """What a plugin's ``ember_backends`` hook returns for each backend it offers.

    ``load`` is called only when the backend is first used, so listing plugins never imports
    heavy libraries (numba, cupy)."""

    name: str
    load: Callable[[], Backend]  # called on first use
    api_version: str = API_VERSION
    priority: int = 0  # higher wins when choosing a default among available backends
    description: str = ""
    # Optional: ``async () -> str`` for a backend whose device must be awaited before first use
    # (WebGPU's adapter request): "" when ready, else why not. See registry.prepare.
    setup: Callable[[], Any] | None = None
