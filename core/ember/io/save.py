"""``ember.save`` / ``ember.load``: tensors and nested containers of them, without pickle.

One call writes one safetensors file. Every tensor becomes a named entry in it (named by its
path in the object, so ``save(model.state_dict(), p)`` gives the usual ``weight``/``bias``
names other safetensors readers see); the shape of the object around them (dicts, lists,
tuples, numbers, strings) is JSON in the file's ``__metadata__``. Loading reads data and JSON
only, so a hostile file can at worst raise a ``CheckpointError``; it never runs code.

The JSON tree, one rule per kind of value (``$``-keys mark what plain JSON cannot say):

| Python value | JSON |
|---|---|
| ``Tensor`` | ``{"$tensor": name, "requires_grad": bool}`` |
| NumPy array | ``{"$ndarray": name}`` |
| dict with str keys (none starting with ``$``) | a JSON object |
| any other dict | ``{"$dict": [[key, value], ...]}`` (optimizer state is keyed by int) |
| list / tuple | a JSON array / ``{"$tuple": [...]}`` |
| int, str, bool, None, finite float | itself |
| nan, inf, -inf | ``{"$float": "nan"}`` ... |

A safetensors file written by anything else loads as ``{name: Tensor}``.
"""

from __future__ import annotations

import json
import math
import os
from typing import IO, Any

from .errors import CheckpointError
from .numpy_io import from_numpy, tensor_bytes, tensor_from_bytes, to_numpy
from .safetensors import load_bytes, load_file, save_bytes, save_file

FORMAT = "ember.save"
FORMAT_VERSION = "1"
_SCALARS = (int, str, bool, type(None))


# ---------------------------------------------------------------------------------------------
# Writing


def save(obj: Any, f: str | os.PathLike[str] | IO[bytes]) -> None:
    """Save a tensor, a state dict, or nested dicts/lists/tuples of them to ``f``.

    ``f`` is a path (written atomically) or a binary file object. Numbers, strings, booleans
    and None may sit anywhere in the structure; anything else is refused with its place named.

    >>> import ember, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
    >>> model = ember.nn.Linear(3, 2)
    >>> ember.save({"model": model.state_dict(), "epoch": 3}, path)
    >>> loaded = ember.load(path)
    >>> loaded["epoch"], sorted(loaded["model"])
    (3, ['bias', 'weight'])
    """
    tensors: dict[str, Any] = {}
    structure = _encode(obj, (), tensors)
    metadata = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "structure": json.dumps(structure, allow_nan=False, separators=(",", ":")),
    }
    if hasattr(f, "write"):
        f.write(save_bytes(tensors, metadata))
    else:
        save_file(tensors, f, metadata)


def _where(path: tuple[Any, ...]) -> str:
    return "obj" + "".join(f"[{k!r}]" for k in path)


def _name(path: tuple[Any, ...], tensors: dict[str, Any]) -> str:
    name = ".".join(str(k) for k in path) or "tensor"
    return name if name not in tensors else f"{name}#{len(tensors)}"


def _encode(obj: Any, path: tuple[Any, ...], tensors: dict[str, Any]) -> Any:
    from ..tensor import Tensor

    if isinstance(obj, Tensor):
        name = _name(path, tensors)
        tensors[name] = tensor_bytes(obj)
        return {"$tensor": name, "requires_grad": bool(obj.requires_grad)}
    if type(obj).__module__ == "numpy" and hasattr(obj, "__array_interface__"):
        name = _name(path, tensors)
        tensors[name] = from_numpy(obj)
        return {"$ndarray": name}
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else {"$float": repr(obj)}
    if isinstance(obj, _SCALARS):
        return obj
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in obj):
            return {k: _encode(v, path + (k,), tensors) for k, v in obj.items()}
        return {"$dict": [[_encode_key(k, path), _encode(v, path + (k,), tensors)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        items = [_encode(v, path + (i,), tensors) for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else {"$tuple": items}
    raise TypeError(
        f"ember.save: cannot store {type(obj).__name__} at {_where(path)}; ember.save stores "
        "tensors, NumPy arrays, numbers, strings, None and dicts/lists/tuples of them "
        "(no pickle: save a module's state_dict(), not the module)"
    )


def _encode_key(key: Any, path: tuple[Any, ...]) -> Any:
    if isinstance(key, (*_SCALARS, float)) or (isinstance(key, tuple) and all(isinstance(k, _SCALARS) for k in key)):
        return _encode(key, path, {})
    raise TypeError(
        f"ember.save: the dict at {_where(path)} has a key of type {type(key).__name__}; keys "
        "must be strings, numbers, booleans, None or tuples of them"
    )


# ---------------------------------------------------------------------------------------------
# Reading


def load(f: str | os.PathLike[str] | IO[bytes], map_location: Any = None, *, weights_only: bool = True) -> Any:
    """Load what :func:`save` wrote (or any safetensors file, as ``{name: Tensor}``).

    ``map_location`` is a device (``"cpu"``, ``ember.device("cuda")``) or a backend name for
    the tensors; by default they go to the current backend. ``weights_only`` is accepted for
    torch's sake: ember files never hold code, so it is always true.

    >>> import ember, io
    >>> buf = io.BytesIO(); ember.save([ember.ones(2), (1, 2.5, float("inf"))], buf)
    >>> ember.load(io.BytesIO(buf.getvalue()))
    [tensor([1., 1.]), (1, 2.5, inf)]
    """
    if weights_only is not True:
        raise ValueError("ember.load: weights_only=False is not supported; ember files hold no code to run")
    try:
        if hasattr(f, "read"):
            source = getattr(f, "name", "<file>")
            tensors, metadata = load_bytes(f.read(), source=source)
        else:
            source = os.fspath(f)
            tensors, metadata = load_file(source)
    except CheckpointError as e:
        raise _explained(e, f) from None
    backend = _target_backend(map_location)
    if not metadata or metadata.get("format") != FORMAT:  # a plain safetensors file
        return {name: tensor_from_bytes(tb, backend) for name, tb in tensors.items()}
    if metadata.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            source,
            f"written by a newer ember (ember.save format "
            f"{metadata.get('format_version')!r}; this ember reads {FORMAT_VERSION!r})",
        )
    try:
        structure = json.loads(metadata.get("structure", "null"))
    except (ValueError, RecursionError) as e:
        raise CheckpointError(source, f"the structure in __metadata__ is not valid JSON ({e})") from None
    try:
        return _decode(structure, tensors, backend)
    except RecursionError:
        raise CheckpointError(source, "the structure in __metadata__ is nested too deeply") from None
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(source, f"the structure in __metadata__ is malformed: {e}") from None


#: The first bytes of files that users hand to ember.load by habit, and what they are.
_FOREIGN = {b"PK\x03\x04": "a zip archive, as torch.save writes", b"\x80": "a Python pickle"}


def _explained(error: CheckpointError, f: Any) -> CheckpointError:
    """``error``, with what the file is if it is one of the usual foreign formats."""
    try:
        if hasattr(f, "seek"):
            f.seek(0)
            head = f.read(4)
        else:
            with open(f, "rb") as fh:
                head = fh.read(4)
    except OSError:
        return error
    for magic, what in _FOREIGN.items():
        if head.startswith(magic):
            return CheckpointError(
                error.path,
                f"this is {what}, not a safetensors file; ember never unpickles. "
                "Load it where it was made (torch.load) and write its state_dict with "
                "safetensors (safetensors.torch.save_file) or ember.save",
            )
    return error


def _target_backend(map_location: Any) -> Any:
    from ..devices import backend_for
    from ..registry import get_backend

    return get_backend() if map_location is None else backend_for(map_location)


def _decode(node: Any, tensors: dict[str, Any], backend: Any) -> Any:
    if isinstance(node, list):
        return [_decode(v, tensors, backend) for v in node]
    if not isinstance(node, dict):
        return node
    if "$tensor" in node:
        t = tensor_from_bytes(tensors[node["$tensor"]], backend)
        return t.requires_grad_() if node.get("requires_grad") else t
    if "$ndarray" in node:
        return to_numpy(tensors[node["$ndarray"]]).copy()
    if "$float" in node:
        value = node["$float"]
        if value not in ("nan", "inf", "-inf"):
            raise ValueError(f"$float {value!r} is not nan, inf or -inf")
        return float(value)
    if "$tuple" in node:
        return tuple(_decode(v, tensors, backend) for v in node["$tuple"])
    if "$dict" in node:
        return {_hashable(_decode(k, tensors, backend)): _decode(v, tensors, backend) for k, v in node["$dict"]}
    return {k: _decode(v, tensors, backend) for k, v in node.items()}


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        raise TypeError("a dict key decodes to a list")
    return key


__all__ = ["save", "load", "tensor_bytes", "tensor_from_bytes"]
