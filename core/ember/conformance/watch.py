"""Watching a case run: the primitives it applies, their dtypes, and their values.

Tiers 1 and 3-6 run whole computations through ``ember.dispatch``. While one of their tests
runs, the plugin makes a :class:`Watch` the current interpreter: it runs every primitive
exactly as the eager interpreter does and then, for outputs on the backend under test,

- records which primitives the case used (with their output dtypes), and the call that raised
  (a primitive the backend failed to run is the case's culprit): the certificate's
  dependency of a higher-tier failure on a primitive that fails tier 2 (docs/conformance.md,
  "Root cause first");
- checks the output's shape and dtype against the primitive's abstract rule, so a float32 model
  stays float32 end to end: ``exp`` returning float64 fails a layer test with a message naming
  ``exp``, at the first call that did it, not a tolerance failure far downstream;
- checks that ``assign`` (parameter updates) writes a value of the parameter's own dtype;
- on request (:meth:`Watch.keeping`), keeps each output's values, so that two runs of one case
  can be compared primitive by primitive (:func:`first_difference`).

>>> import ember
>>> from ember import dispatch
>>> watch = Watch(ember.get_backend("numpy"))
>>> with dispatch.interpreting(watch):
...     y = (ember.ones(2, 3) * 2).exp().sum(1)
>>> sorted(watch.used)
['exp', 'full', 'mul', 'sum']
"""

from __future__ import annotations

import contextlib

from .. import dispatch, primitives
from ..errors import BackendError


class DisciplineError(AssertionError):
    """A primitive's output broke its abstract rule (shape or dtype), or an in-place write
    changed a tensor's dtype. ``primitive`` names the culprit."""

    def __init__(self, primitive: str, message: str):
        super().__init__(message)
        self.primitive = primitive


def aval(t) -> str:
    """``float32[2, 3]`` for a tensor (or an ``(shape, dtype)`` pair); ``repr`` of a scalar."""
    if isinstance(t, tuple) and len(t) == 2:
        return f"{getattr(t[1], 'name', t[1])}{list(t[0])}"
    tensor_class = dispatch.Tensor
    if tensor_class is not None and isinstance(t, tensor_class):
        return f"{t.dtype.name}{list(t.shape)}"
    return repr(t)


def call(name, args, params=None) -> str:
    """``exp(float32[2, 3])``: a primitive call as the certificate names it.

    >>> call("sum", [((2, 3), "float32")], {"axes": (1,), "keepdims": True})
    'sum(float32[2, 3], axes=(1,), keepdims=True)'
    """
    parts = [aval(a) for a in args] + [f"{k}={v!r}" for k, v in (params or {}).items()]
    return f"{name}({', '.join(parts)})"


class Watch(dispatch.Eager):
    """The eager interpreter, watched (see the module doc). ``backend``: the backend under
    test; ops on other backends (the reference's half of a comparison) run unwatched."""

    def __init__(self, backend):
        self.backend = backend
        self.used: dict[str, set] = {}  # primitive -> output dtypes seen
        self.failing: str | None = None  # the call that raised, if one did
        self.culprit: str | None = None  # the primitive a DisciplineError named
        self.trace: list | None = None  # (call, host array) per output, while keeping

    # -- the primitives: Eager's rules, then the checks ----------------------------------------
    def apply1(self, name, x, params):
        return self._run(name, (x,), params, lambda: dispatch.apply1(name, x, **params))

    def apply2(self, name, a, b):
        return self._run(name, (a, b), {}, lambda: dispatch.apply2(name, a, b))

    def apply(self, name, args, params):
        return self._run(name, args, params, lambda: dispatch.apply(name, *args, **params))

    def create(self, name, backend, params):
        return self._run(name, (), params, lambda: dispatch.create(name, backend, **params))

    def assign(self, dst, src):
        if dst._backend is self.backend and src.dtype != dst.dtype:
            self.culprit = "assign"
            raise DisciplineError(
                "assign",
                f"dtype discipline: an in-place write puts a {aval(src)} value "
                f"into a {aval(dst)} tensor (a parameter keeps its dtype)",
            )
        return super().assign(dst, src)

    def _run(self, name, args, params, run):
        with dispatch.interpreting(dispatch.EAGER):
            try:
                out = run()
            except Exception as exc:
                if self.failing is None:
                    self.failing = call(name, args, params)
                    if isinstance(exc, BackendError):  # the backend failed, not the inputs' rule
                        self.culprit = self.culprit or str(name)
                raise
        if isinstance(out, dispatch.Tensor) and out._backend is self.backend:
            self._check(name, args, params, out)
        return out

    def _check(self, name, args, params, out):
        got = (tuple(out.shape), out.dtype)
        self.used.setdefault(str(name), set()).add(got[1].name)
        avals = [(tuple(a.shape), a.dtype) if isinstance(a, dispatch.Tensor) else a for a in args]
        try:
            want = primitives.abstract_eval(name, *avals, **params)
        except Exception:  # noqa: BLE001 - the rule rejects the inputs: nothing to compare with
            want = None
        if want is not None and (tuple(want[0]), want[1]) != got:
            what = "dtype" if tuple(want[0]) == got[0] else "shape"
            self.culprit = str(name)
            raise DisciplineError(
                str(name),
                f"{what} discipline: {call(name, avals, params)} returned "
                f"{aval(got)} on backend {self.backend.name!r}; the primitive's "
                f"rule says {aval(want)}",
            )
        if self.trace is not None:
            import numpy as np

            self.trace.append((call(name, avals, params), np.array(self.backend.to_numpy(out._data))))

    # -- values, for determinism ---------------------------------------------------------------
    @contextlib.contextmanager
    def keeping(self):
        """Keep every watched output's values for the block; yields the list of
        ``(call, host array)`` pairs, in the order the primitives ran."""
        previous, self.trace = self.trace, []
        try:
            yield self.trace
        finally:
            self.trace = previous


def current() -> Watch | None:
    """The Watch of the running test, or None outside one."""
    interp = dispatch.interpreter()
    return interp if isinstance(interp, Watch) else None


def same(a, b) -> bool:
    """Bitwise equal values (NaN equal to NaN), shapes and dtypes."""
    import numpy as np

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))
    return bool(np.all(a == b))


def first_difference(first: list, second: list) -> tuple[int, str] | None:
    """Where two runs of one case part: ``(index, description)`` of the first primitive call
    whose output differs, or None when every output is bitwise the same.

    >>> import numpy as np
    >>> a = [("exp(float32[2])", np.ones(2, np.float32))]
    >>> first_difference(a, a) is None
    True
    >>> first_difference(a, [("exp(float32[2])", np.array([1, 2], np.float32))])[1]
    'exp(float32[2]) (call 1 of 1): 1 of 2 elements differ; first at index (1,): 1.0 then 2.0'
    """
    import numpy as np

    for i, ((name_a, a), (name_b, b)) in enumerate(zip(first, second)):
        if name_a != name_b:
            return i, f"call {i + 1} is {name_a} in one run and {name_b} in the other"
        if not same(a, b):
            where = f"{name_a} (call {i + 1} of {len(first)})"
            if a.shape != b.shape or a.dtype != b.dtype:
                return i, f"{where}: {aval((a.shape, a.dtype))} then {aval((b.shape, b.dtype))}"
            bad = (a != b) & ~(np.isnan(a) & np.isnan(b)) if a.dtype.kind in "fc" else a != b
            k = tuple(int(j) for j in np.argwhere(bad)[0]) if a.ndim else ()
            return i, (
                f"{where}: {int(bad.sum())} of {a.size} elements differ; first at index {k}: "
                f"{a[k].item()!r} then {b[k].item()!r}"
            )
    if len(first) != len(second):
        return min(len(first), len(second)), f"one run applied {len(first)} primitives, the other {len(second)}"
    return None


class Nondeterminism(DisciplineError):
    """Two runs of one computation differ; ``primitive`` is the first whose outputs did."""


def run_twice(fn, backend):
    """Run ``fn()`` twice, keeping every primitive's output; if the two runs differ anywhere,
    raise :class:`Nondeterminism` naming the first primitive call whose outputs differ.
    Returns the first run's result. ``fn`` must set up its own state (fresh parameters, a
    seeded generator) so that a deterministic backend computes the same thing twice.

    >>> import ember
    >>> run_twice(lambda: (ember.ones(3) * 2).sum().item(), ember.get_backend("numpy"))
    6.0
    """
    watch = current()
    scope = contextlib.nullcontext()
    if watch is None:
        watch = Watch(backend)
        scope = dispatch.interpreting(watch)
    with scope:
        with watch.keeping() as first:
            result = fn()
        with watch.keeping() as second:
            fn()
    diff = first_difference(first, second)
    if diff is not None:
        primitive = first[diff[0]][0].split("(")[0] if diff[0] < len(first) else "?"
        watch.culprit = primitive
        raise Nondeterminism(primitive, f"nondeterministic: two runs of the same computation differ first at {diff[1]}")
    return result
