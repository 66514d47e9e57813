"""Devices: where a tensor's memory lives (``cpu``, ``cuda:0``), as torch names them.

A *backend* is the code that computes (numpy, numba, python, cupy); a *device* is the memory
it computes in. Several backends share a device: numpy, numba and python all run on ``cpu``.
``x.device`` is the device of ``x``'s backend; ``x.to(device)`` picks a backend for a device
by the table below and leaves ``x`` alone if its backend is already on that device.

| ``x.to(...)`` | backend |
|---|---|
| ``"cpu"`` | ``x``'s own backend if it runs on the CPU, else the default CPU backend: the current backend (``EMBER_BACKEND``, ``ember.use``) if it runs on the CPU, else numpy (python without numpy) |
| ``"cuda"``, ``"cuda:N"`` | the available CUDA backend of highest priority (ember-cupy) |
| a backend name (``"numba"``) | that backend |

docs/backends.md tells the same story for users.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from .errors import BackendError, located

#: Device types ember knows; a backend declares one of them as its ``device``.
TYPES = ("cpu", "cuda", "webgpu")

if TYPE_CHECKING:
    from .backend import Backend
    from .registry import _Registry as Registry


class device:  # noqa: N801 - torch.device's name
    """A device type and an optional index, like ``torch.device``.

    Unlike torch's, it also compares equal to its string, so ``x.device == "cpu"`` works.

    >>> import ember
    >>> ember.device("cuda:1")
    device(type='cuda', index=1)
    >>> ember.device("cuda", 0).index
    0
    >>> ember.ones(2).device == "cpu", str(ember.ones(2).device)
    (True, 'cpu')
    """

    __slots__ = ("type", "index")
    type: str  # noqa: A003 - torch's attribute names
    index: int | None

    def __init__(self, type: str | device, index: int | None = None) -> None:  # noqa: A002 - torch's name
        kind, number = (
            (type.type, type.index if index is None else index) if isinstance(type, device) else (type, index)
        )
        if isinstance(kind, str) and ":" in kind:
            if index is not None:
                raise located(ValueError, f"ember.device({type!r}, {index!r}): the index is given twice")
            kind, _, digits = kind.partition(":")
            if not digits.isdigit():
                raise located(
                    ValueError, f"ember.device: invalid index {digits!r} in {kind}:{digits}; expected e.g. 'cuda:0'"
                )
            number = int(digits)
        if kind not in TYPES:
            raise located(
                ValueError,
                f"ember.device: unknown device type {kind!r}; expected one of "
                f"{', '.join(TYPES)} (a backend name such as 'numba' goes to x.to() directly)",
            )
        if number is not None and (not isinstance(number, int) or number < 0):
            raise located(ValueError, f"ember.device: index must be a non-negative int, got {number!r}")
        object.__setattr__(self, "type", kind)
        object.__setattr__(self, "index", number)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ember.device is immutable")

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return (
            f"device(type={self.type!r})" if self.index is None else f"device(type={self.type!r}, index={self.index})"
        )

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return str(self) == other
        if isinstance(other, device):
            return (self.type, self.index) == (other.type, other.index)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))  # equal to its string, so hashed like it

    def __reduce__(self) -> tuple[Any, tuple[str, int | None]]:
        return device, (self.type, self.index)


def is_device(target: object) -> bool:
    """True for a ``device`` or a string naming one (``"cpu"``, ``"cuda:0"``); False for backend names.

    >>> is_device("cuda:0"), is_device("numba")
    (True, False)
    """
    if isinstance(target, device):
        return True
    return isinstance(target, str) and target.partition(":")[0] in TYPES


def of_backend(backend: Backend) -> device:
    """The device a backend computes on."""
    return device(getattr(backend, "device", "cpu") or "cpu")


def _on(backend: Backend, dev: device) -> bool:
    mine = of_backend(backend)
    return mine.type == dev.type and (dev.index is None or mine.index in (None, dev.index))


def backend_for(target: str | device | Backend, current: Backend | None = None) -> Backend:
    """The backend ``x.to(target)`` moves to, where ``current`` is ``x``'s backend (module table).

    >>> backend_for("cpu").device
    'cpu'
    >>> backend_for("numpy").name
    'numpy'
    """
    from .backend import Backend
    from .registry import REGISTRY, get_backend

    if isinstance(target, Backend):
        return target
    if not is_device(target):
        return get_backend(cast(str, target))  # not a device: a backend's name
    dev = device(target)
    if current is not None and _on(current, dev):
        return current
    if dev.type == "cpu":
        default = get_backend()
        if _on(default, dev):
            return default
        return get_backend(_cpu_default())
    for backend in _usable(REGISTRY):
        if _on(backend, dev):
            return backend
    raise located(
        BackendError,
        f"no backend runs on device {str(dev)!r} here"
        + (
            "; install the CUDA backend (`pip install './plugins/cupy[cuda13]'` from ember's "
            "repository) on a machine with an NVIDIA GPU"
            if dev.type == "cuda"
            else ""
        ),
    )


def _cpu_default() -> str:
    try:
        import numpy  # noqa: F401

        return "numpy"
    except ImportError:  # Pyodide without numpy
        return "python"


def _usable(registry: Registry) -> Iterator[Backend]:
    """Available backends, highest priority first; one that fails to load is passed over."""
    registry.discover()
    for name, _ in sorted(registry.infos.items(), key=lambda kv: -kv[1].priority):
        try:
            yield registry.get(name)
        except Exception:  # noqa: BLE001 - unavailable here (no GPU, missing library): not usable
            continue


class cuda:  # noqa: N801 - a namespace, as torch.cuda
    """``ember.cuda.is_available()``: True when a backend on a CUDA device is usable here."""

    @staticmethod
    def is_available() -> bool:
        """True when some installed backend computes on a CUDA device and can run here.

        >>> import ember
        >>> isinstance(ember.cuda.is_available(), bool)
        True
        """
        from .registry import REGISTRY

        return any(of_backend(b).type == "cuda" for b in _usable(REGISTRY))
