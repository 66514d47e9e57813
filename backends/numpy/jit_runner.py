"""The runner for backends whose buffers are NumPy arrays: compute into preallocated, reused
buffers with ``out=``.

Elementwise ufuncs, casts, sums/max/min and matmul write into buffers planned by
``passes.plan_buffers``: a value that dies frees its buffer for a later value of the same
shape and dtype, and the buffers are kept from call to call, so a training step allocates
almost nothing. A view (a transpose, a reshape) of a pooled buffer is made once, when the
buffers are planned, and is no step at all: it shows each call's values as they are written. A new parameter value computed by an optimizer step is written straight into
the parameter's own buffer (donation) when nothing reads the old value afterwards.

A backend that compiles fusion groups (numba) gets the same plan: its kernels that take
destinations (``accepts_out``) write their outputs into planned buffers too, and the nodes
it runs one by one are written with NumPy's functions where the backend's own gives the same
values (its impl is the NumPy reference's, or the backend lists the op in
``same_as_numpy``); other nodes run through the backend's impls and allocate.

Before planning, the runner rewrites a few node patterns of convolutional training steps
(ReLU and its gradient, a convolution with its bias and ReLU, ReLU's gradient through a max
pool) as one kernel each (rewrites.py), where the backend runs those nodes with the NumPy
backend's own functions. On the NumPy backend the functions are the very ones it uses, and
the rewritten kernels give the same bits, so results are bit-for-bit those of eager execution,
except that a Linear layer's products with its weight are computed transposed (rewrites.py:
equal to float32 rounding). ``NumpyBackend.jit_runner`` names it: imported only when a graph
runs on a NumPy-array backend.
"""

from __future__ import annotations

import numpy as np

from ember import dtypes as D
from ember.jit.graph import VIEWS, Var
from ember.jit.passes import ELEMENTWISE, plan_buffers
from ember.jit.runner import NO_CALL, Program

from . import backend as nb, rewrites

#: Primitives whose numpy backend implementation (backend.py) is this ufunc (which takes ``out=``).
#: tests/jit/test_jit_runners.py checks each against the backend, bit for bit.
UFUNCS = {
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "sqrt": np.sqrt,
    "abs": np.absolute,
    "sign": np.sign,
    "floor": np.floor,
    "reciprocal": np.reciprocal,
    "logical_not": np.logical_not,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "pow": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}
REDUCERS = {"sum": np.add, "max": np.maximum, "min": np.minimum}


def _writes_into(v) -> bool:
    """Can node ``v`` be computed into a given buffer with bit-identical results?"""
    if v.op in UFUNCS or v.op == "div":
        # Scalars of a higher kind than the output would change NumPy's loop; the front end
        # never makes them, but a hand-built graph could.
        return all(not isinstance(a, float) or v.dtype.kind == "f" or v.dtype.kind == "b" for a in v.args)
    if v.op in ("cast", "where"):
        # a storage dtype's buffer is no NumPy number: its casts are bfloat16.py's, not copyto's
        return v.op == "where" or (v.dtype not in D.STORAGE and v.args[0].dtype not in D.STORAGE)
    if v.op in REDUCERS:
        return bool(v.params["axes"]) and str(v.dtype) != "float16"
    if v.op == "matmul":
        return v.dtype.kind == "f"
    return False


_INT = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


def _select(v, out, scratch):
    """``where(c, a, b)`` as bit operations: ``b ^ ((a ^ b) & -c)`` on the integer view of the
    values. The same bits as ``np.where`` (NaNs and signed zeros included), without its
    per-element branch: about ten times faster on a random condition. With a zero (all bits
    clear) on one side it is one mask and one ``and``."""
    dtype = nb.NP[v.dtype]
    itype = _INT[dtype.itemsize]
    # laid out like the destination: a channels-last output (conv.py) with a C-ordered mask
    # makes every write below a strided scatter
    like = np.empty(v.shape, itype) if out is None else out
    mask = scratch.setdefault((v.shape, itype, like.strides), np.empty_like(like, dtype=itype))

    def bits(x):
        return (x if isinstance(x, np.ndarray) else np.asarray(x, dtype)).view(itype)

    def select(c, a, b, o=out):
        oi, bi = o.view(itype), bits(b)
        if bi.ndim == 0 and not bi:  # where(c, a, +0.0): ReLU and its gradient, two passes
            np.negative(c, dtype=itype, out=mask)
            return np.bitwise_and(bits(a), mask, out=oi).view(o.dtype)
        ai = bits(a)
        if ai.ndim == 0 and not ai:  # where(c, +0.0, b): c - 1 is all ones where c is false
            np.subtract(c, 1, dtype=itype, out=mask)
            return np.bitwise_and(bi, mask, out=oi).view(o.dtype)
        np.negative(c, dtype=itype, out=mask)
        np.bitwise_xor(bits(a), bi, out=oi)
        np.bitwise_and(oi, mask, out=oi)
        np.bitwise_xor(oi, bi, out=oi)
        return o

    return select


def _into(v, out, impl, scratch=None):
    """A function of the argument buffers that writes node ``v`` into ``out`` (a fixed array,
    or None when the destination is the last argument: a donated, captured buffer)."""
    params = v.params
    if v.op in UFUNCS or v.op == "matmul":
        f = UFUNCS.get(v.op, np.matmul)
        if out is None:
            return lambda *b: f(*b[:-1], out=b[-1])
        return lambda *b: f(*b, out=out)
    if v.op == "div":
        dt = nb.NP[v.dtype]
        if out is None:
            return lambda a, b, o: np.true_divide(a, b, out=o, dtype=dt)
        return lambda a, b: np.true_divide(a, b, out=out, dtype=dt)
    if v.op == "where":
        return _select(v, out, scratch)
    if v.op == rewrites.KERNEL:
        kernel, kw = rewrites.KERNELS[params["name"]], params["params"]
        if out is None:
            return lambda *b: kernel(*b[:-1], out=b[-1], **kw)
        return lambda *b: kernel(*b, out=out, **kw)
    if v.op == "cast":
        if out is None:
            return lambda x, o: (np.copyto(o, x, casting="unsafe"), o)[1]
        return lambda x: (np.copyto(out, x, casting="unsafe"), out)[1]
    if v.op in REDUCERS:
        f = REDUCERS[v.op].reduce
        axes, keep = tuple(params["axes"]), params.get("keepdims", False)
        dtype = nb.NP[v.dtype] if v.op == "sum" else None
        if v.op == "sum" and v.args[0].dtype == v.dtype:  # eager's sum: a channels-last view's as one product

            def summed(x, o):
                s = nb.channel_sums(x, axes, keep, out=o)
                return f(x, axis=axes, dtype=dtype, keepdims=keep, out=o) if s is None else s

            return summed if out is None else (lambda x: summed(x, out))
        if out is None:
            return lambda x, o: f(x, axis=axes, dtype=dtype, keepdims=keep, out=o)
        return lambda x: f(x, axis=axes, dtype=dtype, keepdims=keep, out=out)
    raise AssertionError(v.op)


#: Ops that may write over an input (a donated parameter): the elementwise ones but ``where``,
#: whose bit operations (_select) write the output before they have read all of ``b``.
IN_PLACE = ELEMENTWISE - {"where"}


def _in_place(v) -> bool:
    """May node ``v`` write its output over an input it reads (plan_buffers' ``in_place``)?"""
    return v.op in IN_PLACE or (v.op == rewrites.KERNEL and v.params["name"] in rewrites.IN_PLACE)


def _kept_in(i, buffer):
    """Pick result ``i`` of a compiled group given ``buffer`` as its destination, copied into
    it if the kernel wrote elsewhere (it may: numba's write only C-contiguous destinations), so
    the value always lives in ``buffer`` and views made of it once see it."""

    def pick(results):
        r = results[i]
        if r is not buffer:
            np.copyto(buffer, r)
        return buffer

    return pick


def _layout(result):
    """The strides of a NumPy result (None for anything else)."""
    return result.strides if isinstance(result, np.ndarray) else None


def _empty(shape, dtype, strides):
    """An uninitialized array laid out like one with ``strides`` (its axes in the same memory
    order), as ``np.empty_like`` of such an array gives it.

    >>> _empty((2, 3, 4), np.float32, (4, 32, 8)).strides
    (4, 32, 8)
    """
    if strides is None or len(strides) != len(shape):
        return np.empty(shape, dtype)
    order = sorted(range(len(shape)), key=lambda a: -abs(strides[a]))  # outermost first; stable
    return np.empty([shape[a] for a in order], dtype).transpose(np.argsort(order))


class NumpyProgram(Program):
    """A Program whose ``out=``-capable nodes and compiled groups write into planned buffers
    (see module doc).

    The first run goes with the backend allocating as usual, and notes the memory layout
    (strides) of every result: NumPy lays a result out like its inputs, and writing into a
    buffer of another layout (a C-ordered buffer for a transposed gradient) can be ten times
    slower. The buffer plan, made when the second run starts (a program run once, like the
    one-shot trace of an optimizer's first step, allocates no buffers), shares buffers only
    between values of the same shape, dtype and layout, and donates a parameter's buffer only
    to a value laid out like it."""

    def __init__(self, graph, groups, backend):
        self.assignment, self.buffers, self.scratch = {}, [], {}
        self.kernel_group, self.kernel_outputs = {}, set()
        self.planned = False
        self.layouts = None  # what the first run saw, until the plan is made
        same = getattr(backend, "same_as_numpy", frozenset())
        self.numpy_ops = {op for op, impl in backend.impls.items() if impl is nb.IMPLS.get(op) or op in same}
        graph, groups = rewrites.rewrite(graph, groups, backend)  # a few patterns as one kernel each
        super().__init__(graph, groups, backend)

    def lower(self, v):
        if v.op == rewrites.KERNEL:
            kernel, params = self.rewrite_kernel(v), v.params["params"]
            return lambda *bufs: kernel(*bufs, **params)
        return super().lower(v)

    def run(self, inputs, captures, rng):
        if self.planned:
            return super().run(inputs, captures, rng)
        if self.layouts is not None:
            self._plan(*self.layouts)
            self.layouts = None
            return super().run(inputs, captures, rng)
        env = self.start(inputs, captures, rng)
        cap_strides = {var.id: getattr(env[s], "strides", None) for _, s, var in self.captures}
        layout = {}
        i = 0
        try:
            for i, (fn, out, args, free) in enumerate(self.steps):
                env[out] = result = fn(*[env[a] for a in args])
                if not isinstance(result, (tuple, list)):  # not a compiled group's results
                    # the layout only: holding the results would keep every intermediate of
                    # this first run alive to its end, the sum of them all
                    layout[self.origin[i].id] = _layout(result)
                for f in free:
                    env[f] = None
        except Exception as exc:  # noqa: BLE001
            self.failed(i, exc)
        self.layouts = layout, cap_strides
        return [env[s] for s in self.out_slots]

    def rewrite_kernel(self, v):
        """The function of rewritten node ``v``: the backend's own (``rewrite_kernels``) or rewrites.py's."""
        name = v.params["name"]
        return getattr(self.backend, "rewrite_kernels", {}).get(name) or rewrites.KERNELS[name]

    def _writes_into(self, v) -> bool:
        """Can the runner have node ``v`` computed into a planned buffer?"""
        g = self.kernel_group.get(v.id)
        if g is not None:  # in a compiled group: its outputs, given out=
            return v.id in self.kernel_outputs
        if v.op == rewrites.KERNEL:
            # only rewrites.py's own kernels take destinations (a backend's own allocate)
            own = self.rewrite_kernel(v) is rewrites.KERNELS.get(v.params["name"])
            return own and v.params["name"] in rewrites.WRITES_INTO
        return v.op in self.numpy_ops and _writes_into(v)

    def _plan(self, layout, cap_strides):
        def key(v):
            return v.shape, v.dtype, layout[v.id]

        def donatable(v, cap):
            # A compiled group's outputs are donated by passes.group_donations (Program).
            return v.id not in self.kernel_group and layout[v.id] == cap_strides.get(cap.id)

        self.kernel_group, self.kernel_outputs = {}, set()
        together = []
        for g in self.groups:
            kernel = self.kernels[id(g)]
            if kernel is not None:
                together.append(g)
                self.kernel_group.update((v.id, g) for v in g.nodes)
                if getattr(kernel, "accepts_out", False):
                    self.kernel_outputs.update(o.id for o in g.outputs if o.id in layout)
        self.assignment, kinds = plan_buffers(
            self.order,
            self.graph,
            self._writes_into,
            key=key,
            donatable=donatable,
            in_place=_in_place,
            together=together,
        )
        self.buffers = [_empty(shape, nb.NP[dtype], strides) for shape, dtype, strides in kinds]
        self.planned = True
        self.build()

    def destinations(self, g, kernel) -> list:
        into = super().destinations(g, kernel)
        for i, o in enumerate(g.outputs):
            plan = self.assignment.get(o.id)
            if plan is not None and plan[0] == "pool" and into[i] is None:
                into[i] = self.buffers[plan[1]]
        return into

    def _lower(self):
        # Nodes outside compiled groups one by one, each into its planned buffer if it has one.
        fixed: dict = {}  # var id -> the array it always is: a pooled buffer, or a view of one
        for g in self.groups:
            kernel = self.kernels[id(g)]
            if kernel is not None:
                into = self.destinations(g, kernel)
                self.emit_kernel(g, kernel, into)
                first = len(self.steps) - len(g.outputs)  # the steps picking its outputs
                for i, (o, d) in enumerate(zip(g.outputs, into)):
                    if isinstance(d, np.ndarray):
                        fn, out, args, free = self.steps[first + i]
                        self.steps[first + i] = (_kept_in(i, d), out, args, free)
                        fixed[o.id] = d
                continue
            for v in g.nodes:
                plan = self.assignment.get(v.id)
                view = self._fixed_view(v, fixed) if plan is None and v.op in VIEWS else None
                if view is not None:  # made once, here: no step
                    fixed[v.id] = view
                    self.slot[v.id] = self.new_slot(view)
                    continue
                args = [self.arg_slot(a) for a in v.args]
                if plan is not None and plan[0] == "pool":
                    fixed[v.id] = self.buffers[plan[1]]
                if plan is None:
                    self.emit(self.lower(v), v, args)
                elif plan[0] == "pool":
                    self.emit(_into(v, self.buffers[plan[1]], self.impls.get(v.op), self.scratch), v, args)
                else:  # donated: write into the captured tensor
                    self.emit(_into(v, None, self.impls.get(v.op), self.scratch), v, args + [self.slot[plan[1].id]])
                self.calls += v.op not in NO_CALL

    def _fixed_view(self, v, fixed):
        """View node ``v`` made once, if it views a pooled buffer (which every call writes in
        place, a compiled group's output included, so the view sees each call's values) and the backend's impl gives a view, not a
        copy; else None. A training step's transposes and reshapes of its activations and
        gradients cost ~1 µs each as steps (W1: about 20 of them)."""
        base = v.args[0]
        if not isinstance(base, Var) or base.id not in fixed or any(isinstance(a, Var) for a in v.args[1:]):
            return None
        src = fixed[base.id]
        view = self.lower(v)(src, *v.args[1:])
        return view if isinstance(view, np.ndarray) and view.size and np.shares_memory(view, src) else None
