"""A state_dict as tensors + JSON: how a checkpoint stores an optimizer.

``split_state_dict`` takes every tensor out of an optimizer's state_dict into a flat
``{name: Tensor}`` (for safetensors), leaving a JSON-able dict (hyperparameters, step counts);
``join_state_dict`` puts them back together. Tensor names are ``state.<index>.<key>``.
"""

from __future__ import annotations

from typing import Any

from ..errors import located
from ..tensor import Tensor
from .optimizer import OptimizerError

_LISTS = ("params", "param_names")  # group entries that are lists; every other list was a tuple


def split_state_dict(state_dict: dict[str, Any], prefix: str = "") -> tuple[dict[str, Tensor], dict[str, Any]]:
    """``(tensors, meta)``: the state tensors by name, and everything else as plain JSON data.

    >>> import ember, json
    >>> w = ember.ones(2, requires_grad=True)
    >>> opt = ember.optim.Adam([w]); (w * w).sum().backward(); opt.step()
    >>> tensors, meta = split_state_dict(opt.state_dict(), prefix="optim.")
    >>> sorted(tensors)
    ['optim.state.0.exp_avg', 'optim.state.0.exp_avg_sq']
    >>> meta["state"], meta["param_groups"][0]["betas"]
    ({'0': {'step': 1}}, [0.9, 0.999])
    >>> state_dict = join_state_dict(tensors, json.loads(json.dumps(meta)), prefix="optim.")
    >>> state_dict["state"][0]["step"], state_dict["param_groups"][0]["betas"]
    (1, (0.9, 0.999))
    """
    tensors, state = {}, {}
    for index, entries in state_dict["state"].items():
        kept = {}
        for key, value in entries.items():
            if isinstance(value, Tensor):
                tensors[f"{prefix}state.{int(index)}.{key}"] = value
            else:
                kept[key] = value
        state[str(int(index))] = kept
    groups = [{k: list(v) if isinstance(v, tuple) else v for k, v in g.items()} for g in state_dict["param_groups"]]
    return tensors, {"state": state, "param_groups": groups}


def join_state_dict(tensors: dict[str, Tensor], meta: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """The inverse of :func:`split_state_dict`. Names that do not start with
    ``prefix + "state."`` are ignored, so one safetensors file can hold the model too."""
    state = {int(i): dict(entries) for i, entries in meta["state"].items()}
    head = prefix + "state."
    for name, value in tensors.items():
        if not name.startswith(head):
            continue
        index, dot, key = name[len(head) :].partition(".")
        if not dot or not index.isdigit() or not key:
            raise located(
                OptimizerError, f"join_state_dict: tensor name {name!r} is not of the form '{head}<index>.<key>'"
            )
        state.setdefault(int(index), {})[key] = value
    groups = [
        {k: tuple(v) if isinstance(v, list) and k not in _LISTS else v for k, v in g.items()}
        for g in meta["param_groups"]
    ]
    return {"state": state, "param_groups": groups}
