"""Optimizer: parameter groups, per-parameter state, and the state_dict that checkpoints them.

The shape is PyTorch's. An optimizer holds ``param_groups`` (dicts: ``"params"`` plus the
hyperparameters, which a scheduler may change between steps) and ``state`` (a dict from
parameter to its running tensors). ``step()`` runs each parameter's update rule (functional.py)
under ``no_grad`` and writes the result into the parameter's own buffer, so the model, which
holds the same tensors, sees the new values.

A subclass names its hyperparameters and their rules (the ``rules`` table) and either
implements ``_update(param, grad, state, group)``, or names its update rule (``rule =
"adam_step"``, one of ember.optim.functional's) and says which state the rule reads
(``_inputs``) and where its results go (``_store``). The second kind gets multi-tensor steps:
where the backend declares ``"adam_step_foreach"``, ``step()`` updates all of a param group's
parameters with one call (one or two kernel launches) instead of one call per parameter.
"""

from __future__ import annotations

import difflib
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from numbers import Real
from typing import Any, TypeAlias

from .. import dispatch, fused
from ..autodiff import enable_grad, no_grad
from ..errors import EmberError, ShapeError, located
from ..tensor import Tensor
from .functional import run_foreach, run_step

#: What an optimizer takes: tensors, or param groups (dicts with "params" and hyperparameters).
ParamsT: TypeAlias = "Iterable[Tensor] | Iterable[dict[str, Any]]"


class OptimizerError(EmberError, ValueError):
    """A bad optimizer or scheduler argument: a negative lr, an unknown param-group key, a
    tensor that cannot be optimized, a state_dict that does not fit."""


# ----------------------------------------------------------------------------- hyperparameter rules
# A rule returns None when the value is fine, else what the value must be (for the message).
def _real(v: object) -> bool:
    return isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v)


def nonnegative(v: Any) -> str | None:
    return None if _real(v) and v >= 0 else "a finite number >= 0"


def number(v: Any) -> str | None:
    return None if _real(v) else "a finite number"


def unit_interval(v: Any) -> str | None:
    return None if _real(v) and 0 <= v < 1 else "a number in [0, 1)"


def flag(v: Any) -> str | None:
    return None if isinstance(v, bool) else "True or False"


def beta_pair(v: Any) -> str | None:
    ok = isinstance(v, (tuple, list)) and len(v) == 2 and all(unit_interval(b) is None for b in v)
    return None if ok else "a pair of numbers in [0, 1), like (0.9, 0.999)"


#: Group keys that are not hyperparameters: the tensors, their names, and the schedulers'
#: records (the starting lr; OneCycleLR's lr and momentum bounds).
BOOKKEEPING = ("params", "param_names", "initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum")
#: Keys of torch's param groups that mean nothing to ember; dropped when loading a state_dict.
TORCH_ONLY = ("foreach", "capturable", "differentiable", "fused")


def _clean(value: Any) -> Any:
    """Hyperparameters as plain Python values (NumPy scalars become floats), so that a
    state_dict is JSON-able."""
    if isinstance(value, Real) and not isinstance(value, (bool, int)):
        return float(value)
    if isinstance(value, list):
        return tuple(_clean(v) for v in value)
    if isinstance(value, tuple):
        return tuple(_clean(v) for v in value)
    return value


def _describe(t: Any) -> str:
    return f"a tensor of shape {t.shape} and dtype {t.dtype}"


# ----------------------------------------------------------------------------- the base class
class Optimizer:
    """Base class of optimizers: parameter groups, state, ``zero_grad``, ``step`` and
    ``state_dict``.

    ``params`` is an iterable of tensors, of ``(name, tensor)`` pairs, or of dicts (param
    groups) each with ``"params"`` and any hyperparameters that differ from the defaults.

    >>> import ember
    >>> w = ember.tensor([1.0, 2.0], requires_grad=True)
    >>> b = ember.tensor([0.0], requires_grad=True)
    >>> opt = ember.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1)
    >>> [g["lr"] for g in opt.param_groups]
    [0.1, 0.5]
    """

    #: hyperparameter name -> rule (see above); subclasses fill it in.
    rules: dict[str, Any] = {}
    #: The update rule of ember.optim.functional this optimizer runs (``"sgd_step"``), or None
    #: for a subclass that implements ``_update`` itself.
    rule: str | None = None

    def __init__(self, params: ParamsT, defaults: dict[str, Any]) -> None:
        self.defaults = {k: _clean(v) for k, v in defaults.items()}
        self.state: dict[Any, dict[str, Any]] = defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        for group in self._groups(params):
            self.add_param_group(group)

    # -- building and checking groups --------------------------------------------------------------
    def _fail(self, message: str) -> OptimizerError:
        return located(OptimizerError, f"{type(self).__name__}: {message}")

    def _groups(self, params: Any) -> list[dict[str, Any]]:  # Any: it checks what it got
        if isinstance(params, Tensor):
            raise self._fail(
                f"params must be an iterable of tensors or of param-group dicts, got a "
                f"single tensor of shape {params.shape}; wrap it in a list: "
                f"{type(self).__name__}([w], ...)"
            )
        if isinstance(params, (dict, set, frozenset, str)):
            why = (
                " (a set has no order, and the order numbers the state_dict)"
                if isinstance(params, (set, frozenset))
                else ""
            )
            raise self._fail(
                f"params must be a list of tensors or of param-group dicts, got a {type(params).__name__}{why}"
            )
        try:
            items = list(params)
        except TypeError:
            raise self._fail(f"params must be an iterable of tensors, got {type(params).__name__}") from None
        if not items:
            raise self._fail("got an empty parameter list (did the model create its parameters?)")
        dicts = [isinstance(x, dict) for x in items]
        if all(dicts):
            return items
        if any(dicts):
            raise self._fail("params mixes tensors and param-group dicts; put every tensor in a group")
        return [{"params": items}]

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a group of parameters with its own hyperparameters (defaults fill the rest).

        >>> import ember
        >>> opt = ember.optim.SGD([ember.zeros(2, requires_grad=True)], lr=0.1)
        >>> opt.add_param_group({"params": [ember.zeros(3, requires_grad=True)], "momentum": 0.9})
        >>> opt.param_groups[1]["momentum"], opt.param_groups[1]["lr"]
        (0.9, 0.1)
        """
        index = len(self.param_groups)
        if not isinstance(group, dict):
            raise self._fail(f"a param group must be a dict, got {type(group).__name__}")
        if "params" not in group:
            raise self._fail(f"param group {index} has no 'params' entry: {sorted(group)}")
        params = group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, (set, frozenset, dict)):
            raise self._fail(f"param group {index}: 'params' must be a list, got a {type(params).__name__}")
        params = list(params)
        names = group.get("param_names")
        if params and all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) for x in params):
            names, params = [n for n, _ in params], [p for _, p in params]  # from named_parameters()
        self._check_params(params, index)
        self._check_keys(group, index)
        new = {
            "params": params,
            **self.defaults,
            **{k: _clean(v) for k, v in group.items() if k not in ("params", "param_names")},
        }
        if names is not None:
            new["param_names"] = list(names)
        self._check_values(new, index)
        seen = {id(p): (gi, i) for gi, g in enumerate(self.param_groups) for i, p in enumerate(g["params"])}
        for i, p in enumerate(params):
            if id(p) in seen:
                where = "earlier in this group" if seen[id(p)][0] == index else f"in param group {seen[id(p)][0]}"
                raise self._fail(
                    f"parameter {i} of param group {index} ({_describe(p)}) appears twice "
                    f"(also {where}); pass each parameter once"
                )
            seen[id(p)] = (index, i)
        self.param_groups.append(new)

    def _check_params(self, params: Any, index: int) -> None:
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise self._fail(f"parameter {i} of param group {index} is a {type(p).__name__}, not a tensor")
            if p._ctx is not None:  # not a leaf
                raise self._fail(
                    f"parameter {i} of param group {index} ({_describe(p)}) is not a leaf: "
                    f"it was computed by {p._ctx[0]!r}, so stepping it would not change anything "
                    f"the model reads. Optimize the tensor it was computed from, or make a leaf "
                    f"with .detach().requires_grad_()"
                )
            if not p.dtype.is_floating_point:
                raise self._fail(
                    f"parameter {i} of param group {index} has dtype {p.dtype}; only "
                    f"floating-point tensors can be optimized"
                )

    def _check_keys(self, group: dict[str, Any], index: int) -> None:
        allowed = set(self.defaults) | set(BOOKKEEPING)
        for key in group:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise self._fail(
                    f"unknown key {key!r} in param group {index}; {hint}"
                    f"{type(self).__name__} knows {', '.join(sorted(self.defaults))}"
                )

    def _check_values(self, group: dict[str, Any], index: int) -> None:
        for name, rule in self.rules.items():
            why = rule(group[name])
            if why is not None:
                raise self._fail(f"invalid {name}={group[name]!r} in param group {index}: it must be {why}")
        why = self._check_group(group)
        if why is not None:
            raise self._fail(f"param group {index}: {why}")

    def _check_group(self, group: dict[str, Any]) -> str | None:
        """A rule that involves several hyperparameters; the message, or None if fine."""
        return None

    # -- the training-loop API -------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients: ``grad = None`` (default) or zeros.

        >>> import ember
        >>> w = ember.ones(2, requires_grad=True); (w * w).sum().backward()
        >>> opt = ember.optim.SGD([w], lr=0.1); opt.zero_grad(); w.grad is None
        True
        """
        from ..creation import zeros_like

        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    # A new zero tensor, not zero_(): a gradient buffer may be shared with other
                    # leaves or be a read-only broadcast view.
                    p.grad = None if set_to_none else zeros_like(p.grad)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; return ``closure()``'s loss, if given.

        >>> import ember
        >>> w = ember.tensor([3.0], requires_grad=True)
        >>> opt = ember.optim.SGD([w], lr=0.25)
        >>> (w * w).sum().backward(); opt.step(); w.tolist()
        [1.5]
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for gi, group in enumerate(self.param_groups):
                todo = []
                for i, p in enumerate(group["params"]):
                    grad = p.grad
                    if grad is None:
                        continue
                    if grad.shape != p.shape:
                        raise located(
                            ShapeError,
                            f"{type(self).__name__}: parameter {i} of param group {gi} "
                            f"has shape {p.shape} but its .grad has shape {grad.shape}",
                        )
                    todo.append((p, grad))
                for p, grad in self._step_foreach(todo, group):
                    self._update(p, grad, self.state[p], group)
        return loss

    def _step_foreach(self, todo: list[Any], group: dict[str, Any]) -> list[Any]:
        """Update the ``(param, grad)`` pairs of ``todo`` whose backend declares this rule's
        multi-tensor op, one call per backend and set of hyperparameters (Adam's step count is
        one of them: normally all parameters share it); return the pairs left for ``_update``.

        Not while ember.jit traces: the per-parameter rules are recorded then, and the jit
        compiler fuses them itself."""
        name = None if self.rule is None else self.rule + "_foreach"
        if name is None or type(self)._update is not Optimizer._update or not dispatch.interpreter().evaluates:
            return todo
        rest, calls = [], {}  # type: ignore[var-annotated]  # filled below; mypy cannot infer from a tuple
        for p, grad in todo:
            backend = p._backend
            if grad._backend is not backend or name not in fused.declared(backend):
                rest.append((p, grad))
                continue
            states, hyper = self._inputs(p, self.state[p], group)
            key = (backend, tuple(sorted(hyper.items())))
            try:
                calls.setdefault(key, []).append((p, grad, states))
            except TypeError:  # an unhashable hyperparameter value: this parameter alone
                self._store(p, self.state[p], group, run_step(self.rule, p, grad, *states, **hyper))  # type: ignore[arg-type]  # rule is set: name is
        for (_, hyper), members in calls.items():
            params, grads, states = zip(*members)
            out = run_foreach(name, list(params), list(grads), *map(list, zip(*states)), **dict(hyper))
            for k, p in enumerate(params):
                self._store(p, self.state[p], group, tuple(column[k] for column in out))
        return rest

    def _update(self, param: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """One parameter's update: ``rule`` through its fused op (or its reference)."""
        if self.rule is None:
            raise NotImplementedError(f"{type(self).__name__} must implement _update, or name its rule")
        states, hyper = self._inputs(param, state, group)
        self._store(param, state, group, run_step(self.rule, param, grad, *states, **hyper))

    def _inputs(self, param: Tensor, state: dict[str, Any], group: dict[str, Any]) -> tuple[Any, ...]:
        """``(state tensors, keywords)`` for ``rule`` on ``param``: creates missing state and
        counts the step (it is called once per parameter and step)."""
        raise NotImplementedError(f"{type(self).__name__} names rule {self.rule!r} but not its _inputs")

    def _store(self, param: Tensor, state: dict[str, Any], group: dict[str, Any], results: tuple[Any, ...]) -> None:
        """Put ``rule``'s results ``(param, *state)`` into the parameter and its state."""
        raise NotImplementedError(f"{type(self).__name__} names rule {self.rule!r} but not its _store")

    def _assign(self, dst: Tensor, src: Tensor) -> None:
        """Write ``src`` into ``dst``'s own buffer: holders of ``dst`` (the model) see the values."""
        if src._data is dst._data:
            return  # a fused op already updated it in place
        try:
            dst.copy_(src)
        except EmberError:
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. a read-only NumPy buffer
            raise self._fail(
                f"cannot update {_describe(dst)} in place: {type(exc).__name__}: {exc}. "
                f"Parameters must own writable buffers; make one with .clone()"
            ) from exc

    def _keep(self, state: dict[str, Any], key: str, value: Any) -> None:
        """Store new state: in place if the slot exists, else the new tensor becomes the slot."""
        if value is None:
            return
        if key in state and state[key] is not None:
            self._assign(state[key], value)
        else:
            state[key] = value

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A snapshot: ``{"state": {index: {name: value}}, "param_groups": [...]}``.

        Parameters are numbered in group order, as in torch; state tensors are copies (later
        steps do not change the snapshot). ``split_state_dict`` turns it into tensors + JSON.

        >>> import ember
        >>> w = ember.ones(2, requires_grad=True)
        >>> opt = ember.optim.SGD([w], lr=0.1, momentum=0.9)
        >>> (w * w).sum().backward(); opt.step()
        >>> sd = opt.state_dict()
        >>> sorted(sd["state"][0]), sd["param_groups"][0]["params"]
        (['momentum_buffer'], [0])
        """
        index: dict[int, Any] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = [index.setdefault(id(p), len(index)) for p in group["params"]]
            groups.append(packed)
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                entries = self.state.get(p)
                if entries:
                    state[index[id(p)]] = {k: v.clone() if isinstance(v, Tensor) else v for k, v in entries.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a ``state_dict()`` (or torch's layout) onto this optimizer's parameters.

        The groups must have the same sizes. State tensors are copied, cast to their
        parameter's dtype and moved to its backend.
        """
        if not isinstance(state_dict, dict) or not {"state", "param_groups"} <= set(state_dict):
            raise self._fail("load_state_dict needs a dict with 'state' and 'param_groups' (what state_dict() returns)")
        saved = state_dict["param_groups"]
        mine = [len(g["params"]) for g in self.param_groups]
        theirs = [len(g.get("params", ())) for g in saved]
        if mine != theirs:
            raise self._fail(
                f"the state_dict has {len(theirs)} param group(s) of sizes {theirs}, but this "
                f"optimizer has {len(mine)} of sizes {mine}; build the optimizer over the "
                f"same parameters, in the same order"
            )
        by_index: dict[int, Any] = {}
        for group, old in zip(self.param_groups, saved):
            by_index.update(zip(old["params"], group["params"]))
        state: defaultdict[Any, dict[str, Any]] = defaultdict(dict)
        for key, entries in state_dict["state"].items():
            key = int(key)
            if key not in by_index:
                raise self._fail(f"the state_dict has state for parameter {key}, which no param group lists")
            p = by_index[key]
            state[p] = {name: self._restore(p, key, name, v) for name, v in entries.items()}
        groups = []
        for gi, (group, old) in enumerate(zip(self.param_groups, saved)):
            old = {k: v for k, v in old.items() if k not in TORCH_ONLY}
            self._check_keys(old, gi)
            new = {
                "params": group["params"],
                **self.defaults,
                **{k: _clean(v) for k, v in old.items() if k not in ("params", "param_names")},
            }
            if "param_names" in group:
                new["param_names"] = group["param_names"]
            self._check_values(new, gi)
            groups.append(new)
        self.param_groups, self.state = groups, state

    def _restore(self, p: Tensor, key: int, name: str, value: Any) -> Any:
        if name == "step":
            return int(value.item() if isinstance(value, Tensor) else value)
        if not isinstance(value, Tensor):
            return value
        if value.shape != p.shape:
            raise located(
                ShapeError,
                f"{type(self).__name__}.load_state_dict: state {name!r} of parameter "
                f"{key} has shape {value.shape}, but the parameter has shape {p.shape}",
            )
        value = value.to(p._backend)
        if value.dtype.is_floating_point and value.dtype is not p.dtype:
            value = value.to(p.dtype)
        # A copy: later in-place steps must not write into the caller's state_dict.
        return value.detach().clone()

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {group[k]}" for k in sorted(group) if k not in ("params", "param_names")]
        return "\n".join(lines + [")"])
