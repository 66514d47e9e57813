"""The runners: the numpy runner's buffers and donation, and backends that compile groups."""

import numpy as np
import pytest
from jit_helpers import mlp_twins, train_step

import ember
from ember.backends.numpy import jit_runner as numpy_runner
from ember.backends.numpy.backend import IMPLS, NumpyBackend
from ember.jit.graph import Var


# ----------------------------------------------------------------------------- which runner
def test_each_backend_names_its_runner_and_one_that_names_none_gets_the_generic_one():
    from ember.jit.runner import Program

    assert ember.get_backend("numpy").jit_runner() is numpy_runner.NumpyProgram
    assert ember.get_backend("python").jit_runner() is None  # Backend's default: API 1.0 plugins
    f = ember.jit(lambda a: (a * 2 + 1).sum())
    for name, kind in (("numpy", numpy_runner.NumpyProgram), ("python", Program)):
        x = ember.tensor([1.0, 2.0], backend=name)
        assert f(x).item() == 8.0
        assert type(f.lower(x).program) is kind


def test_a_backend_may_bring_its_own_runner():
    from ember.jit.runner import Program

    runs = []

    class Counting(Program):
        def run(self, inputs, captures, rng):
            runs.append(len(inputs))
            return super().run(inputs, captures, rng)

    class Mine(NumpyBackend):
        name = "own_runner"

        def jit_runner(self):
            return Counting

    backend = Mine()
    f = ember.jit(lambda a: a.exp().sum())
    x = ember.tensor([0.0, 0.0], backend=backend)
    assert f(x).item() == 2.0 and f(x).item() == 2.0
    assert type(f.lower(x).program) is Counting and runs == [1, 1]


# ----------------------------------------------------------------------------- numpy runner
@pytest.mark.parametrize("name", sorted(numpy_runner.UFUNCS))
def test_each_ufunc_the_runner_writes_with_is_the_backends_implementation(name, rng):
    """The runner calls ufuncs with out=; they must give the backend's results bit for bit."""
    ufunc = numpy_runner.UFUNCS[name]
    kind = ember.primitives.PRIMITIVES[name].group
    if kind == "logical" or name == "logical_not":
        args = [rng.random((3, 4)) > 0.5 for _ in range(ufunc.nin)]
    else:
        args = [rng.standard_normal((3, 4)).astype(np.float32) + 2.5 for _ in range(ufunc.nin)]
    want = IMPLS[name](*args)
    out = np.empty_like(want)
    got = ufunc(*args, out=out)
    assert got is out and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool", "float16", "uint8"])
def test_where_as_bit_operations_gives_np_where_bits(dtype, rng):
    special = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5])
    a = np.resize(special if dtype.startswith("float") else rng.integers(0, 2, 6), (4, 6)).astype(dtype)
    b = rng.standard_normal((1, 6)).astype(dtype) if dtype != "bool" else np.ones((1, 6), bool)
    c = rng.random((4, 1)) > 0.5
    yes = ember.ones(4, 6, dtype=ember.bool)

    def f(c, a, b, s):  # inner wheres are intermediates: they run as bit operations
        keep = lambda x: ember.where(yes, x, a)  # noqa: E731 - passes x through unchanged
        return keep(ember.where(c, a, b)), keep(ember.where(c, s, a)), keep(ember.where(~c, a, s))

    f = ember.jit(f)
    args = ember.tensor(c), ember.tensor(a), ember.tensor(b), (True if dtype == "bool" else 2)
    for _ in range(2):  # the second call writes through the planned buffers
        for got, want in zip(f(*args), (np.where(c, a, b), np.where(c, args[3], a), np.where(~c, a, args[3]))):
            assert got.numpy().dtype == want.dtype
            np.testing.assert_array_equal(got.numpy().view(np.uint8), want.view(np.uint8))
    program = f.lower(*args).program
    assert sum(program.assignment.get(v.id, ("",))[0] == "pool" for v in program.order if v.op == "where") == 3


@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_where_against_a_zero_gives_np_where_bits(zero, rng):
    # where(c, x, 0) (ReLU, its gradient) takes a two-pass path; -0.0 is no all-zero bit pattern
    x = np.resize(np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5], np.float32), (4, 6))
    c = rng.random((4, 6)) > 0.5
    yes = ember.ones(4, 6, dtype=ember.bool)

    def f(c, x):
        keep = lambda t: ember.where(yes, t, x)  # noqa: E731 - passes t through unchanged
        return keep(ember.where(c, x, zero)), keep(ember.where(c, zero, x))

    f = ember.jit(f)
    for _ in range(2):  # the second call writes through the planned buffers
        for got, want in zip(
            f(ember.tensor(c), ember.tensor(x)), (np.where(c, x, np.float32(zero)), np.where(c, np.float32(zero), x))
        ):
            np.testing.assert_array_equal(got.numpy().view(np.uint32), want.view(np.uint32))


def _mlp_step():
    from ember import models, optim
    from ember.nn import functional as F

    ember.manual_seed(0)
    model = models.MLP(32, (64,), 4)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return model, opt, ember.jit(step), ember.randn(16, 32), ember.randint(0, 4, (16,))


def test_buffers_are_planned_once_and_reused_across_calls():
    model, opt, step, x, y = _mlp_step()
    for _ in range(3):
        step(x, y)
    program = step.lower(x, y).program
    assert program.planned and program.buffers
    before = [id(b) for b in program.buffers]
    pooled = sum(plan[0] == "pool" for plan in program.assignment.values())
    assert pooled > len(program.buffers)  # values share buffers
    step(x, y)
    assert [id(b) for b in program.buffers] == before


def test_the_first_run_frees_each_value_after_its_last_use_and_a_single_run_plans_nothing():
    """The first run notes each result's layout, not the result: a chain of ten 4 MB values
    keeps about two alive at a time, not all ten; and the buffers are planned (allocated)
    when the second run starts, so a program that runs once (a one-shot trace) holds none."""
    import tracemalloc

    def chain(x):
        y = (x * 1.5).exp() + 1.0
        y = (y.log() * 2.0).sqrt() + 3.0
        return ((y.neg() - 1.0) * 0.5).sum()

    step = ember.jit(chain)
    x = ember.ones(1 << 20)
    tracemalloc.start()
    try:
        step(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5 * x.numpy().nbytes, f"the first run peaked at {peak / 2**20:.1f} MiB"
    program = step.lower(x).program
    assert not program.planned and program.buffers == []
    step(x)
    assert program.planned and program.buffers


def test_parameters_are_updated_in_their_own_buffers():
    model, opt, step, x, y = _mlp_step()
    step(x, y)
    step(x, y)
    buffers = [p._data for p in model.parameters()]
    momentum = [opt.state[p]["momentum_buffer"]._data for p in model.parameters()]
    before = [b.copy() for b in buffers]
    step(x, y)
    program = step.lower(x, y).program
    donated = [plan for plan in program.assignment.values() if plan[0] == "donate"]
    assert len(donated) >= len(buffers)  # computed straight into the parameters' memory
    assert all(p._data is b for p, b in zip(model.parameters(), buffers))
    assert all(opt.state[p]["momentum_buffer"]._data is m for p, m in zip(model.parameters(), momentum))
    assert any(not np.array_equal(b, old) for b, old in zip(buffers, before))


def test_pooled_buffers_follow_the_layout_numpy_gives():
    # NumPy lays out the result of an elementwise op on a transposed (Fortran-ordered) view
    # like its input; the buffer planned for it must be laid out the same way, since writing
    # it into a C-ordered buffer is several times slower.
    step = ember.jit(lambda x: ((x.T * 2.0).exp() + 1.0).sum(0))
    x = ember.randn(48, 64)
    want = ((x.T * 2.0).exp() + 1.0).sum(0).numpy()
    for _ in range(2):
        np.testing.assert_array_equal(step(x).numpy(), want)
    program = step.lower(x).program
    assert any(b.flags["F_CONTIGUOUS"] and not b.flags["C_CONTIGUOUS"] for b in program.buffers)


def test_transposed_products_come_out_in_the_layout_they_are_read_in():
    w = ember.randn(64, 48)
    step = ember.jit(lambda x, g: w + (g.T @ x).T * 0.1)
    x, g = ember.randn(8, 64), ember.randn(8, 48)
    compiled = step.lower(x, g)
    (mm,) = [v for v in compiled.graph.nodes if v.op == "matmul"]
    assert [a.op for a in mm.args] == ["permute", "input"]  # x.T @ g, not (g.T @ x).T
    np.testing.assert_allclose(step(x, g).numpy(), (w + (g.T @ x).T * 0.1).numpy(), rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- compile(group)
class FusingNumpy(NumpyBackend):
    """A backend that runs each fusion group as one call (here: its nodes in one Python
    function, the shape a numba or CUDA kernel generator would take)."""

    name = "numpy-fusing-test"

    def __init__(self):
        self.groups = []

    def compile(self, group):
        if not group.fused:
            return None
        self.groups.append(group)
        nodes, inputs, outputs = list(group.nodes), list(group.inputs), list(group.outputs)

        def kernel(*buffers):
            env = {v.id: b for v, b in zip(inputs, buffers)}
            for v in nodes:
                env[v.id] = IMPLS[v.op](*[env[a.id] if isinstance(a, Var) else a for a in v.args], **v.params)
            return tuple(env[o.id] for o in outputs)

        return kernel


@pytest.fixture(scope="module")
def fusing():
    ember.register_backend(ember.BackendInfo(FusingNumpy.name, FusingNumpy))
    return ember.get_backend(FusingNumpy.name)


def test_a_backend_that_compiles_groups_runs_each_group_as_one_call(fusing):
    a, b, c = (
        ember.tensor(np.random.default_rng(i).standard_normal((5, 7)).astype(np.float32), backend=fusing.name)
        for i in range(3)
    )
    f = ember.jit(lambda a, b, c: ((a * b + c).relu().sum(1) + a.exp().amax(1)).log1p())
    out = f(a, b, c)
    want = ((a * b + c).relu().sum(1) + a.exp().amax(1)).log1p()
    np.testing.assert_array_equal(out.numpy(), want.numpy())
    compiled = f.lower(a, b, c)
    stats = compiled.stats()
    assert fusing.groups and compiled.program.compiled == stats["fused"]
    assert stats["calls"] == stats["kernels"] < stats["nodes"]
    for g in fusing.groups:  # the structure a kernel generator reads
        assert g.kind in ("elementwise", "reduce") and g.outputs and g.inputs
        assert all(v.op in ember.jit.passes.ELEMENTWISE | ember.jit.passes.REDUCE for v in g.nodes)


def test_training_step_on_a_group_compiling_backend(fusing):
    ref, model, opts = mlp_twins(fusing.name)
    jstep = ember.jit(train_step)
    x, y = ember.randn(4, 6), ember.tensor([0, 2, 1, 1])
    for _ in range(3):
        le = train_step(ref, opts[0], x, y)
        lj = jstep(model, opts[1], x.to(fusing.name), y.to(fusing.name))
        assert abs(le.item() - lj.item()) < 1e-6
    for p, q in zip(ref.parameters(), model.parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-5, atol=1e-6)


class FusingIntoNumpy(FusingNumpy):
    """Kernels that take destinations (``out=``), as a generated kernel does: a parameter's
    new value is written into the parameter's buffer, other results into planned buffers.
    ``writes=False`` declines them all; ``written`` lists the destinations written."""

    name = "numpy-fusing-into-test"
    writes = True

    def compile(self, group):
        kernel = super().compile(group)
        if kernel is None:
            return None

        def run(*buffers, out=None):
            values = kernel(*buffers)
            if out is None or not self.writes:
                return values
            self.written += [o for o in out if o is not None]
            return tuple(v if o is None else (np.copyto(o, v), o)[1] for v, o in zip(values, out))

        run.accepts_out = True
        return run


def _fusing_into_numpy(writes, monkeypatch):
    """The FusingIntoNumpy backend, registered, its kernels writing into the runner's buffers
    (``writes``) or declining them, with a fresh list of the arrays they wrote into."""
    ember.register_backend(ember.BackendInfo(FusingIntoNumpy.name, FusingIntoNumpy))
    backend = ember.get_backend(FusingIntoNumpy.name)
    monkeypatch.setattr(backend, "writes", writes)
    monkeypatch.setattr(backend, "written", [], raising=False)
    return backend


@pytest.mark.parametrize("writes", [True, False], ids=["writes", "declines"])
def test_compiled_groups_write_updates_into_the_parameters(writes, monkeypatch):
    backend = _fusing_into_numpy(writes, monkeypatch)
    ref, model, opts = mlp_twins(backend.name)
    jstep = ember.jit(train_step)
    x, y = ember.randn(4, 6), ember.tensor([0, 2, 1, 1])
    xb, yb = x.to(backend.name), y.to(backend.name)
    for _ in range(2):
        train_step(ref, opts[0], x, y), jstep(model, opts[1], xb, yb)
    buffers = [p._data for p in model.parameters()]
    copies = []
    monkeypatch.setattr(FusingIntoNumpy, "assign", lambda self, dst, src: copies.append(dst) or np.copyto(dst, src))
    backend.written = []
    le, lj = train_step(ref, opts[0], x, y), jstep(model, opts[1], xb, yb)
    assert abs(le.item() - lj.item()) < 1e-6
    for p, q in zip(ref.parameters(), model.parameters()):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-5, atol=1e-6)
    assert all(p._data is b for p, b in zip(model.parameters(), buffers))
    program = jstep.lower(model, opts[1], xb, yb).program
    donations = program.donations
    assert len(donations) == 2 * len(buffers)  # each parameter and its momentum buffer
    pooled = [o for o in backend.written if any(o is b for b in program.buffers)]
    if writes:
        assert len(backend.written) - len(pooled) == len(donations) and copies == []
        assert pooled  # intermediate results in planned buffers
    else:
        assert backend.written == [] and len(copies) == len(donations)


def test_views_of_pooled_buffers_are_made_once_and_see_each_calls_values():
    # The transpose of a pooled value is a view made when the buffers are planned, not a
    # step, and each call's values show through it; the reshape of that transposed view is a
    # copy (NumPy cannot reshape it in place), so it stays a step.
    step = ember.jit(lambda x: (((x.T * 2.0).exp().T + 1.0) * 3.0).T.reshape(-1).sum(0))
    program = None
    for i in range(4):
        x = ember.randn(48, 64) * (i + 1)
        want = (((x.T * 2.0).exp().T + 1.0) * 3.0).T.reshape(-1).sum(0).numpy()
        np.testing.assert_allclose(step(x).numpy(), want, rtol=1e-5)
        program = step.lower(x).program
    ops = [v.op for v in program.origin]
    assert program.planned and "permute" in ops  # x.T: an input's view stays a step
    assert ops.count("permute") == 1 and ops.count("reshape") == 1


@pytest.mark.parametrize("writes", [True, False], ids=["writes", "declines"])
def test_views_of_compiled_groups_outputs_see_each_calls_values(writes, monkeypatch):
    # A group's output with a planned destination lives there (copied in when the kernel
    # declines it), so its transpose is made once and still reads each call's values.
    backend = _fusing_into_numpy(writes, monkeypatch)
    f = ember.jit(lambda a, b, c: (a * b + 1.0).exp().T @ c)
    rng = np.random.default_rng(0)
    for _ in range(4):
        a, b, c = (
            ember.tensor(rng.standard_normal(s).astype(np.float32), backend=backend.name)
            for s in ((6, 5), (6, 5), (6, 3))
        )
        want = np.exp(a.numpy() * b.numpy() + np.float32(1.0)).T @ c.numpy()
        np.testing.assert_allclose(f(a, b, c).numpy(), want, rtol=1e-5)
    program = f.lower(a, b, c).program
    assert program.planned and program.compiled and "permute" not in [v.op for v in program.origin]
