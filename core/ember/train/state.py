"""Saving and restoring a whole training run, so that a resumed run continues bit for bit.

What a run is: model parameters and buffers, optimizer state, LR schedule, the random stream
(dropout, augmentation), the data loader's position, and the step counter. Tensors go into
the checkpoint's safetensors file; everything else into its JSON sidecar (ember.io.checkpoint
writes both atomically). No pickle anywhere.
"""

from __future__ import annotations

from ..errors import EmberError
from ..io.checkpoint import read_checkpoint, write_checkpoint
from ..io.errors import CheckpointError
from ..io.save import tensor_bytes, tensor_from_bytes
from ..random import default_generator
from ..tensor import Tensor


def _split(obj, prefix, tensors):
    """Replace every Tensor inside nested dicts/lists by a reference, collecting the tensors."""
    if isinstance(obj, Tensor):
        tensors[prefix] = tensor_bytes(obj)
        return {"__tensor__": prefix}
    if isinstance(obj, dict):
        return {str(k): _split(v, f"{prefix}/{k}", tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_split(v, f"{prefix}/{i}", tensors) for i, v in enumerate(obj)]
    return obj


def _join(obj, tensors, backend):
    if isinstance(obj, dict):
        if set(obj) == {"__tensor__"}:
            return tensor_from_bytes(tensors[obj["__tensor__"]], backend)
        return {_key(k): _join(v, tensors, backend) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_join(v, tensors, backend) for v in obj]
    return obj


def _key(k):
    return int(k) if k.isdigit() else k  # optimizer state is keyed by parameter index


def save_training_state(
    directory, step, model, optimizer=None, scheduler=None, loader=None, config=None, extra=None, keep_last=3
) -> str:
    """Write checkpoint ``step`` of a run into ``directory``; returns its path."""
    tensors = {f"model/{k}": tensor_bytes(v) for k, v in model.state_dict().items()}
    meta = {"config": config or {}, "rng": default_generator.get_state(), "extra": extra or {}}
    if optimizer is not None:
        meta["optimizer"] = _split(optimizer.state_dict(), "optimizer", tensors)
    if scheduler is not None:
        meta["scheduler"] = scheduler.state_dict()
    if loader is not None:
        meta["loader"] = loader.state_dict()
    return write_checkpoint(directory, step, tensors, meta, keep_last=keep_last)


# The sidecar's schema: each field, the JSON type it must have, and for numbers the least value.
# A checkpoint that breaks a row is refused before anything is restored.
SCHEMA = {
    "config": (dict, None),
    "rng": (dict, None),
    "extra": (dict, None),
    "optimizer": (dict, None),
    "scheduler": (dict, None),
    "loader": (dict, None),
}
RNG_SCHEMA = {"seed": (int, 0), "offset": (int, 0)}
LOADER_SCHEMA = {"epoch": (int, 0), "batch": (int, 0)}
TRAINER_SCHEMA = {
    "epoch": (int, 0),
    "batch": (int, 0),
    "skipped_steps": (int, 0),
    "history": (list, None),
    "meters": (dict, None),
}


def check_fields(path, where: str, record, schema: dict, required=None) -> None:
    """Raise ``CheckpointError`` unless ``record`` has each ``required`` field of ``schema``
    (default: all) with the right type, and no number below its least value.

    >>> check_fields("ckpt", "extra", {"epoch": -1}, {"epoch": (int, 0)})
    Traceback (most recent call last):
    ...
    ember.io.errors.CheckpointError: ckpt: sidecar field extra.epoch must be an int >= 0, got -1
    """
    if not isinstance(record, dict):
        raise CheckpointError(path, f"sidecar field {where} must be an object, got {record!r:.60}")
    for key in schema if required is None else required:
        if key not in record:
            raise CheckpointError(
                path, f"sidecar field {where}.{key} is missing (the checkpoint would restart that state silently)"
            )
    for key, value in record.items():
        if key not in schema:
            continue
        kind, least = schema[key]
        ok = isinstance(value, kind) and not isinstance(value, bool) and (least is None or value >= least)
        if not ok:
            bound = "" if least is None else f" >= {least}"
            raise CheckpointError(
                path,
                f"sidecar field {where}.{key} must be a{'n' if kind is int else ''} "
                f"{_JSON_NAMES[kind]}{bound}, got {value!r:.60}",
            )


_JSON_NAMES = {dict: "object", list: "list", int: "int"}


def load_training_state(path, model, optimizer=None, scheduler=None, loader=None) -> dict:
    """Restore what :func:`save_training_state` wrote; returns the sidecar meta (with step).

    The model is checked before anything is changed: a checkpoint of another model raises
    an error listing the missing, unexpected and mis-shaped names, and the model is untouched.
    The sidecar is checked against ``SCHEMA`` first: state it lacks for an optimizer,
    scheduler or loader that was passed is an error, not a silent restart.
    """
    tensors, meta = read_checkpoint(path)
    wanted = ["rng"] + [
        k for k, v in (("optimizer", optimizer), ("scheduler", scheduler), ("loader", loader)) if v is not None
    ]
    check_fields(path, "meta", meta, SCHEMA, required=wanted)
    check_fields(path, "rng", meta["rng"], RNG_SCHEMA)
    if loader is not None:
        check_fields(path, "loader", meta["loader"], LOADER_SCHEMA)
    backend = next(iter(model.parameters())).backend
    state = {k[len("model/") :]: tensor_from_bytes(v, backend) for k, v in tensors.items() if k.startswith("model/")}
    if not state:
        raise EmberError(f"{path}: this checkpoint holds no model tensors (not written by ember train?)")
    model.load_state_dict(state)
    steps = [
        ("optimizer", lambda: optimizer.load_state_dict(_join(meta["optimizer"], tensors, backend))),
        ("scheduler", lambda: scheduler.load_state_dict(meta["scheduler"])),
        ("loader", lambda: loader.load_state_dict(meta["loader"])),
    ]
    for name, restore in steps:
        if name in wanted:
            try:
                restore()
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
                raise CheckpointError(path, f"sidecar field {name} does not fit this {name}: {e}") from None
    default_generator.set_state(meta["rng"])
    return meta
