"""The NumPy runner's graph rewrites (backends/numpy/rewrites.py): each pattern is found in
the training steps it was made for, and the rewritten step gives eager execution's values bit
for bit, ties, zeros, infinities and NaN included."""

import numpy as np
import pytest

import ember
import ember.nn.functional as F
from ember import nn, optim
from ember.backends.numpy import conv, fused as numpy_fused, rewrites
from ember.backends.numpy.backend import IMPLS, NumpyBackend

POOL = {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0), "dilation": (1, 1), "ceil_mode": False}


def _bits(a):
    a = np.asarray(a)
    return a.view({4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def _lenet(channels=4):
    return nn.Sequential(
        nn.Conv2d(1, channels, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(channels, 2 * channels, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * channels * 2 * 2, 10),
    )


def _mlp():
    return nn.Sequential(
        nn.Flatten(), nn.Linear(14 * 15, 16), nn.ReLU(), nn.Linear(16, 12), nn.ReLU(), nn.Linear(12, 10)
    )


def _block():
    """conv -> batch norm -> relu, twice, with a residual sum before the last relu (ResNet's block)."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(3, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
            self.conv2, self.bn2 = nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)
            self.fc = nn.Linear(4, 10)

        def forward(self, x):
            h = self.bn1(self.conv1(x)).relu()
            h = (self.bn2(self.conv2(h)) + h).relu()
            return self.fc(h.mean((2, 3)))

    return Block()


def _conv_tanh():
    """A convolution's bias with no ReLU after it (ResNet's downsample layers have a sum there)."""
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.Tanh(), nn.Flatten(), nn.Linear(3 * 12 * 13, 10))


def _downsample():
    """ResNet's downsampling block: the shortcut's batch norm is computed after the main one,
    so the kernel that takes the main one's place must wait for it."""

    class Down(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(4)
            self.short, self.short_bn = nn.Conv2d(3, 4, 1, stride=2, bias=False), nn.BatchNorm2d(4)
            self.fc = nn.Linear(4, 10)

        def forward(self, x):
            h = (self.bn(self.conv(x)) + self.short_bn(self.short(x))).relu()
            return self.fc(h.mean((2, 3)))

    return Down()


def _grads(build, x, y, compiled):
    ember.manual_seed(0)
    model = build()
    opt = optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        return loss

    run = ember.jit(step) if compiled else step
    for _ in range(3):  # the jit traces twice, then runs its planned program
        loss = run(x, y)
    grads = [loss.numpy()] + [p.grad.numpy().copy() for p in model.parameters()]
    return grads, (run.lower(x, y).program if compiled else None)


def _kernels(program):
    """The program's kernel nodes by name; ReLU's gradient with a residual sum in it as
    ``relu_backward+add``."""
    kernels = [v for v in program.graph.nodes if v.op == rewrites.KERNEL]
    return sorted(
        v.params["name"] + ("+add" if v.params["name"] == "relu_backward" and len(v.args) == 3 else "") for v in kernels
    )


@pytest.mark.parametrize(
    "build,shape,kernels,rounded",
    [
        (
            _lenet,
            (5, 1, 14, 15),
            ["conv2d_bias_relu"] * 2
            + ["relu_max_pool2d_backward", "relu_max_pool2d_conv_grads", "relu_pool_bias_grad"],
            (1, 2, 4),  # the first layer's gradients, the second's bias: other orders of the same sums
        ),
        (_mlp, (5, 1, 14, 15), ["matmul_bias_relu"] * 2 + ["relu_backward"] * 2, ()),
        (_block, (3, 3, 6, 6), ["batch_norm_relu"] * 2 + ["relu_backward", "relu_backward+add"], ()),
        (_downsample, (3, 3, 6, 6), ["batch_norm_relu", "relu_backward"], ()),
        (_conv_tanh, (5, 1, 14, 15), ["conv2d_bias"], ()),
    ],
)
def test_rewritten_training_steps_give_eagers_gradients_bit_for_bit(build, shape, kernels, rounded):
    rng = np.random.RandomState(0)
    # small integers: exact ties inside pooling windows, and exact zeros before the relus
    x = ember.tensor(rng.randint(-2, 3, size=shape).astype(np.float32))
    y = ember.tensor(rng.randint(0, 10, size=shape[0]))
    want, _ = _grads(build, x, y, compiled=False)
    got, program = _grads(build, x, y, compiled=True)
    assert _kernels(program) == kernels
    for i, (g, w) in enumerate(zip(got, want)):
        if i in rounded:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6 * np.abs(w).max())
        else:
            np.testing.assert_array_equal(_bits(g), _bits(w))


@pytest.mark.parametrize(
    "build,shape,kernels,rounded",
    [
        (
            _lenet,
            (5, 1, 14, 15),
            # the first layer's pool taken as its convolution makes its output; its gradients from positions
            ["conv2d_bias_relu", "conv2d_bias_relu_max_pool2d", "pooled_conv_grads"]
            + ["relu_max_pool2d_backward", "relu_pool_bias_grad"],
            (1, 2, 4),
        ),
        (_block, (3, 3, 6, 6), ["batch_norm_relu"] * 2 + ["relu_backward", "relu_backward+add"], ()),
        (_downsample, (3, 3, 6, 6), ["batch_norm_relu", "relu_backward"], ()),
        # its groups fuse the ReLUs with the bias and the bias gradient's sum: no rewrite (rewrite_when)
        (_mlp, (5, 1, 14, 15), [], ()),
    ],
)
def test_a_backend_with_its_own_rewrite_kernels_gets_the_rewrites(build, shape, kernels, rounded, monkeypatch):
    """numba compiles groups, but names its own kernels for some rewrites (rewrite_kernels), and
    ReLU's gradient only after batch norm (rewrite_when): a compiled step takes them, and its
    gradients are eager numba's, bit for bit."""
    pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")
    from ember_numba import conv, launch

    monkeypatch.setattr(launch, "HOT", 1)  # numba's kernels from the first call, however small
    monkeypatch.setattr(conv, "MIN_SIZE", 0)
    rng = np.random.RandomState(0)
    x = ember.tensor(rng.randint(-2, 3, size=shape).astype(np.float32), backend="numba")
    y = ember.tensor(rng.randint(0, 10, size=shape[0]), backend="numba")
    want, _ = _grads(lambda: build().to("numba"), x, y, compiled=False)
    got, program = _grads(lambda: build().to("numba"), x, y, compiled=True)
    assert _kernels(program) == kernels
    for i, (g, w) in enumerate(zip(got, want)):
        if i in rounded:  # the first layer's weight and bias gradients: other orders of the same sums
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6 * np.abs(w).max())
        else:
            np.testing.assert_array_equal(_bits(g), _bits(w))


def test_a_guard_keeps_a_rules_matches_to_those_it_accepts():
    """``rewrite_when``: ReLU's gradient after batch norm is rewritten, after a product not (and
    the product's bias and ReLU then stay nodes: the gradient still reads their mask)."""

    class Guarded(NumpyBackend):
        name = "guarded"
        rewrite_when = {"relu_backward": rewrites.gates_batch_norm}

    be = Guarded()
    for build, shape, kernels in (
        (_block, (3, 3, 6, 6), ["batch_norm_relu"] * 2 + ["relu_backward", "relu_backward+add"]),
        (_mlp, (5, 1, 14, 15), []),
    ):
        x = ember.tensor(np.zeros(shape, np.float32), backend=be)
        y = ember.tensor(np.zeros(shape[0], np.int64), backend=be)
        _, program = _grads(lambda: build().to(be), x, y, compiled=True)
        assert _kernels(program) == kernels


def test_no_rewrite_where_the_backend_runs_a_node_with_its_own_function():
    class OwnWhere(NumpyBackend):
        name = "own_where"
        impls = {**IMPLS, "where": lambda c, a, b: np.where(c, a, b)}

    be, rng = OwnWhere(), np.random.RandomState(1)
    x = ember.tensor(rng.standard_normal((2, 1, 8, 8)).astype(np.float32), backend=be)
    w = ember.tensor(rng.standard_normal((3, 1, 3, 3)).astype(np.float32), backend=be, requires_grad=True)
    b = ember.tensor(rng.standard_normal(3).astype(np.float32), backend=be, requires_grad=True)

    def step(x):
        loss = F.max_pool2d(F.conv2d(x, w, b).relu(), 2).sum()
        loss.backward()
        return loss

    run = ember.jit(step)
    for _ in range(3):
        run(x)
    # only the bias add, whose nodes (conv2d, reshape, add) are all NumPy's: no rule with a where
    assert _kernels(run.lower(x).program) == ["conv2d_bias"]


def test_no_rewrite_on_a_backend_that_compiles_groups():
    class Compiling(NumpyBackend):
        name = "compiling"

        def compile(self, group):
            return None  # declines every group, but could take them: its graphs stay as traced

    be = Compiling()
    x = ember.tensor(np.random.RandomState(1).standard_normal((2, 3)).astype(np.float32), backend=be)
    step = ember.jit(lambda x: x.relu().sum())
    step(x)
    assert _kernels(step.lower(x).program) == []
    assert _kernels(ember.jit(lambda x: x.relu().sum()).lower(ember.tensor(x.numpy())).program) == ["relu"]


def _relu_input(rng, shape, dtype=np.float32):
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    flat[::5] = 0.0
    flat[1::7] = -0.0
    flat[2::11] = np.nan
    flat[3::13] = np.inf
    flat[4::17] = -np.inf
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["C", "channels last", "strided"])
def test_relu_kernels_give_wheres_bits(dtype, layout, monkeypatch):
    monkeypatch.setattr(rewrites, "CHUNK_BYTES", 64)  # many chunks, and a short last one
    rng = np.random.RandomState(2)
    x, g = _relu_input(rng, (3, 4, 5, 6), dtype), _relu_input(rng, (3, 4, 5, 6), dtype)
    if layout == "channels last":
        x, g = (np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2) for a in (x, g))
    elif layout == "strided":
        x, g = x[:, :, ::2], g[:, :, ::2]
    r = rewrites.relu(x)
    np.testing.assert_array_equal(_bits(r), _bits(np.where(x > 0, x, 0)))
    assert r.strides == np.empty_like(x).strides
    out = np.empty_like(g)
    assert rewrites.relu_backward(g, r, out=out) is out
    np.testing.assert_array_equal(_bits(out), _bits(np.where(x > 0, g, 0)))
    h = _relu_input(rng, g.shape, dtype)  # a residual block's other gradient, in C order
    with np.errstate(invalid="ignore"):  # inf + -inf, as the add node warns
        np.testing.assert_array_equal(_bits(rewrites.relu_backward(g, r, h)), _bits(np.where(x > 0, g + h, 0)))


@pytest.mark.parametrize("hw", [(8, 8), (11, 9)])  # covered by the windows / a row and column left over
@pytest.mark.parametrize("given", [True, False])
@pytest.mark.parametrize("chunks", ["whole", "two images at a time"])
def test_relu_pool_backward_is_the_relu_gradient_of_the_pool_backward(hw, given, chunks, monkeypatch):
    rng = np.random.RandomState(3)
    y = rng.randint(-2, 3, size=(5, 3, *hw)).astype(np.float32)  # ties and zeros
    y = np.ascontiguousarray(y.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)  # channels last, as conv.py's
    r = np.where(y > 0, y, 0).astype(np.float32)
    best = numpy_fused.max_pool2d(r, **POOL)
    g = _relu_input(rng, best.shape)
    want = np.where(y > 0, numpy_fused.max_pool2d_backward(g, r, **POOL), 0)  # whole arrays
    if chunks != "whole":  # chunks of 2, 2 and 1 images
        monkeypatch.setattr(numpy_fused, "POOLED_BYTES", 2 * best[0].nbytes)
    got = rewrites.relu_max_pool2d_backward(g, r, best if given else None, **POOL)
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("blocks", ["whole batch", "one image at a time"])
def test_conv_bias_relu_is_the_three_nodes(bias, blocks, monkeypatch):
    monkeypatch.setattr(rewrites, "CHUNK_BYTES", 256)
    if blocks != "whole batch":  # the epilogue runs on each block of the convolution's output
        monkeypatch.setattr(conv, "BLOCK_BYTES", 1)
        monkeypatch.setattr(conv, "MIN_ROWS", 1)
    rng = np.random.RandomState(4)
    x, w = rng.standard_normal((3, 2, 7, 6)).astype(np.float32), rng.standard_normal((5, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32) if bias else None
    kw = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
    a = IMPLS["conv2d"](x, w, **kw)
    np.testing.assert_array_equal(_bits(rewrites.conv2d_bias(x, w, np.zeros(5, np.float32), **kw)), _bits(a + 0))
    if bias:
        np.testing.assert_array_equal(_bits(rewrites.conv2d_bias(x, w, b, **kw)), _bits(a + b.reshape(1, -1, 1, 1)))
        a = a + b.reshape(1, -1, 1, 1)
    np.testing.assert_array_equal(_bits(rewrites.conv2d_bias_relu(x, w, b, **kw)), _bits(np.where(a > 0, a, 0)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_bias_relu_is_the_three_nodes(dtype, monkeypatch):
    monkeypatch.setattr(rewrites, "CHUNK_BYTES", 256)  # many chunks, and a short last one
    rng = np.random.RandomState(7)
    x, w = _relu_input(rng, (37, 9), dtype), rng.standard_normal((9, 11)).astype(dtype)
    b = _relu_input(rng, (11,), dtype)
    with np.errstate(invalid="ignore"):  # infinities and NaN in the inputs
        a = IMPLS["add"](IMPLS["matmul"](x, w), b)
        got = rewrites.matmul_bias_relu(x, w, b)
    np.testing.assert_array_equal(_bits(got), _bits(np.where(a > 0, a, 0)))


def test_disjoint_pool_backward_without_nan_matches_the_search_for_maxima():
    rng = np.random.RandomState(5)
    x = rng.randint(-3, 3, size=(2, 3, 9, 10)).astype(np.float32)  # many ties
    g = _relu_input(rng, (2, 3, 4, 5))
    got = numpy_fused.max_pool2d_backward(g, x, **POOL)
    x_nan = x.copy()
    x_nan[1, 2, 8, 9] = np.nan  # outside every window: changes no maximum, but takes the other path
    np.testing.assert_array_equal(_bits(got), _bits(numpy_fused.max_pool2d_backward(g, x_nan, **POOL)))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_one_by_one_convolutions_as_products_take_the_pointwise_kernels(backend):
    """ember.onnx lowers a 1x1 convolution as ``reshape(w @ x) + bias``: with a ReLU (a
    bottleneck's first layer), with a residual and a ReLU (its last), and alone (a shortcut's)
    each becomes one kernel, whose output is eager execution's to the bit."""
    if backend == "numba":
        pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")
    rng = np.random.RandomState(9)
    n, c, h, w_ = 2, 8, 5, 6
    t = {k: ember.tensor(v, backend=backend) for k, v in _pointwise_arrays(rng, n, c, h, w_).items()}

    def conv1x1(x, w, b):
        y = w.reshape(w.shape[0], c) @ x.reshape(n, c, h * w_)
        return y.reshape(n, w.shape[0], h, w_) + b.reshape(1, -1, 1, 1)

    def block(x):
        first = conv1x1(x, t["w1"], t["b1"]).relu()
        return (conv1x1(first, t["w2"], t["b2"]) + conv1x1(x, t["w3"], t["b3"]).tanh()).relu()

    with ember.backend(backend), ember.no_grad():
        want = block(t["x"]).numpy()
        run = ember.jit(block)
        for _ in range(3):
            got = run(t["x"]).numpy()
        kernels = _kernels(run.lower(t["x"]).program)
    assert sorted(kernels) == ["pointwise_bias", "pointwise_bias_relu", "pointwise_bias_relu"]
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _pointwise_arrays(rng, n, c, h, w):
    x = rng.randint(-2, 3, size=(n, c, h, w)).astype(np.float32)  # exact zeros before the ReLUs
    arrays = {"x": x}
    for i in (1, 2, 3):
        arrays[f"w{i}"] = rng.randint(-2, 3, size=(c, c, 1, 1)).astype(np.float32)
        arrays[f"b{i}"] = rng.randint(-2, 3, size=c).astype(np.float32)
    return arrays


def _wide_mlp():
    """Layers of at least rewrites.TRANSPOSE_MIN features: their products are computed transposed."""
    return nn.Sequential(nn.Linear(200, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def _trained(backend, compiled, steps=3, zero_grad_after=False):
    """A wide MLP after ``steps`` SGD steps (jit'd or eager) on ``backend``: its parameters,
    gradients (None where zeroed after the step) and the compiled program."""
    ember.manual_seed(0)
    model = _wide_mlp().to(backend)
    opt = optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.RandomState(0)
    x = ember.tensor(rng.standard_normal((160, 200)).astype(np.float32), backend=backend)
    y = ember.tensor(rng.randint(0, 10, size=160), backend=backend)

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        if not zero_grad_after:
            opt.zero_grad()
        loss.backward()
        opt.step()
        if zero_grad_after:
            opt.zero_grad()
        return loss

    run = ember.jit(step) if compiled else step
    for _ in range(steps):  # the jit traces twice, then runs its planned program
        run(x, y)
    params = [p.numpy().copy() for p in model.parameters()]
    grads = [None if p.grad is None else p.grad.numpy().copy() for p in model.parameters()]
    return params, grads, (run.lower(x, y).program if compiled else None)


def _close(got, want):
    """Equal to float32 rounding: the products and sums add the same numbers in another layout."""
    scale = max(float(np.abs(want).max()), 1e-30)
    assert float(np.abs(got - want).max()) <= 2e-6 * scale


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_weight_products_run_transposed_and_give_eagers_values(backend):
    """A Linear layer's products with its weight are computed as ``(w.mT @ x.mT).mT`` and the
    activations after them in that layout (rules _weight_product, _transposed_layout): no
    activation is copied between layouts, and training gives eager execution's values to
    float32 rounding."""
    if backend == "numba":
        pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")
    want_p, want_g, _ = _trained(backend, compiled=False)
    got_p, got_g, program = _trained(backend, compiled=True)
    for g, w in zip(got_p + got_g, want_p + want_g):
        _close(g, w)
    nodes = program.graph.nodes
    # the transposed products: two forward ones (numpy: in their bias-ReLU kernels), the input
    # gradients of the last two layers
    products = [v for v in nodes if v.op == "matmul" or (v.op == rewrites.KERNEL and "matmul" in v.params["name"])]
    assert sum(v.shape == (128, 160) for v in products) == 4
    # ReLU's masks, gradients and the bias gradients' sums in the transposed layout, never the batch-major one
    assert not [v for v in nodes if v.shape == (160, 128) and v.op not in ("permute", "reshape", "matmul")]
    # (numpy: one BLAS product with a column of ones each; numba: its sums, fused with their ReLU gradients)
    sums = "row_sums" if backend == "numpy" else "sum"
    named = [v.params["name"] if v.op == rewrites.KERNEL else v.op for v in nodes]
    assert [v.shape for v, n in zip(nodes, named) if n == sums and v.shape[:1] == (128,)] == [(128, 1)] * 2


def test_sgd_updates_are_one_pass_in_the_parameters_buffers(monkeypatch):
    """A weight's SGD update ``p + g * -lr`` (at least AXPY_MIN elements) is one axpy kernel
    written into the parameter's own buffer; the values are eager execution's to float32
    rounding (axpy rounds each element once)."""
    monkeypatch.setattr(rewrites, "AXPY_MIN", 128 * 128)  # the test's weights, smaller than W1's
    want_p, _, _ = _trained("numpy", compiled=False)
    got_p, _, program = _trained("numpy", compiled=True)
    for g, w in zip(got_p, want_p):
        _close(g, w)
    updates = [v for v in program.graph.nodes if v.op == rewrites.KERNEL and v.params["name"] == "axpy"]
    assert sorted(v.shape for v in updates) == [(128, 128), (128, 200)]  # the biases stay two ufuncs
    assert [program.assignment[v.id][0] for v in updates] == ["donate", "donate"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_axpy_is_the_two_nodes_to_one_rounding(dtype):
    rng = np.random.RandomState(3)
    x, y = (rng.standard_normal((300, 70)).astype(dtype) for _ in range(2))
    a = np.array(-0.1, dtype)
    want = x + y * a
    into = x.copy()
    assert rewrites.axpy(into, y, a, out=into) is into
    ulp = np.spacing(np.abs(want)) + np.spacing(np.abs(y * a))  # the sum's rounding and the product's
    for got in (rewrites.axpy(x, y, a), into):
        assert np.all(np.abs(got - want) <= ulp)
    # the same bits whatever the layouts and the destination (a run resumed from a checkpoint
    # plans other destinations than one never stopped): read-only, transposed, the result
    # written over y (Adam's second moment, donated into its own buffer)
    y.flags.writeable = False
    np.testing.assert_array_equal(_bits(rewrites.axpy(x, y, a)), _bits(into))
    xt, yt = np.ascontiguousarray(x.T), np.ascontiguousarray(y.T)  # BLAS's own order: C order of the shape
    np.testing.assert_array_equal(_bits(rewrites.axpy(x.T, y.T, a)), _bits(rewrites.axpy(xt, yt, a)))
    np.testing.assert_array_equal(
        _bits(rewrites.axpy(x, y.T.copy().T, a, out=np.empty_like(x).T.copy().T)), _bits(into)
    )
    over = y.copy()
    assert rewrites.axpy(x, over, a, out=over) is over
    np.testing.assert_array_equal(_bits(over), _bits(into))


def test_small_products_keep_their_layout():
    """Below TRANSPOSE_MIN (a layer's logits, the small MLP above) nothing changes."""
    _, _, program = _trained("numpy", compiled=True)
    logits = [v for v in program.graph.nodes if v.op == "matmul" and 10 in v.shape]
    assert logits and all(v.shape in ((160, 10), (10, 128)) for v in logits)


def test_a_product_read_as_another_shape_keeps_its_layout():
    """An input gradient reshaped to the activation it came from (LeNet's flattened features)
    stays batch-major: transposed, the reshape would copy it back. The forward product, read
    by its bias and ReLU, is transposed; the values are eager execution's to float32 rounding."""
    rng = np.random.RandomState(12)
    w = ember.tensor(rng.standard_normal((128, 200)).astype(np.float32), requires_grad=True)
    x = ember.tensor(rng.standard_normal((160, 8, 25)).astype(np.float32), requires_grad=True)

    def step(x):
        loss = (x.reshape(160, 200) @ w.T).relu().sum()
        loss.backward()
        return loss, x.grad.clone()

    want = step(x)[1].numpy()
    x.grad, w.grad = None, None
    run = ember.jit(step)
    for _ in range(3):
        x.grad, w.grad = None, None
        got = run(x)[1].numpy()
    _close(got, want)
    products = [v for v in run.lower(x).program.graph.nodes if v.op == "matmul"]
    assert sorted(v.shape for v in products) == [(128, 160), (128, 200), (160, 200)]


def _first_layer(rng, x_shape, w_shape, conv_kw, pool, dtype=np.float32, ints=False):
    """A first layer's forward (ReLU'd convolution, its pooled maxima) and a pooled gradient."""
    draw = (lambda shape: rng.randint(-2, 3, size=shape)) if ints else rng.standard_normal
    x, w = draw(x_shape).astype(dtype), draw(w_shape).astype(dtype)
    r = rewrites.conv2d_bias_relu(x, w, draw(w_shape[:1]).astype(dtype), **conv_kw)
    best = numpy_fused.max_pool2d(r, **pool)
    g = draw(best.shape).astype(dtype)
    return x, r, best, g


def _nodes_grads(x, r, best, g, w_shape, conv_kw, pool):
    """What the nodes the kernel replaces give: the full-size gradient, its convolution and sum."""
    dr = rewrites.relu_max_pool2d_backward(g, r, best, **pool)
    return conv.conv2d_grad_weight(x, dr, w_shape, **conv_kw), dr.sum((0, 2, 3), keepdims=True)


@pytest.mark.parametrize(
    "x_shape,w_shape,conv_kw,pool",
    [
        ((5, 1, 14, 15), (4, 1, 3, 3), {}, POOL),  # LeNet's first layer; 12x13 leaves a column out
        ((3, 3, 11, 12), (6, 3, 3, 3), {"padding": (1, 1)}, POOL),  # RGB, padded
        ((2, 2, 17, 17), (3, 2, 5, 5), {"stride": (2, 2)}, POOL),
        ((4, 1, 13, 13), (2, 1, 2, 2), {"dilation": (2, 2)}, {**POOL, "kernel_size": (3, 3), "stride": (3, 3)}),
        ((3, 1, 12, 12), (2, 1, 3, 3), {}, {**POOL, "stride": (3, 3), "dilation": (1, 1)}),  # gaps between windows
    ],
)
@pytest.mark.parametrize("images", [1, 2, 12])
def test_pooled_conv_grads_are_the_nodes_gradients(x_shape, w_shape, conv_kw, pool, images, monkeypatch):
    """The first layer's weight and bias gradients from the pooled gradient equal the full-size
    gradient's convolution and sum: bit for bit on small integers (every sum exact, ties in the
    windows), to float32 rounding on random values; in chunks of any number of images."""
    monkeypatch.setattr(rewrites, "CONV_GRADS_IMAGES", images)
    kw = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), **conv_kw}
    params = {"pool": pool, "conv_params": {"weight_shape": w_shape, "groups": 1, **kw}}
    for ints in (True, False):
        x, r, best, g = _first_layer(np.random.RandomState(1), x_shape, w_shape, kw, pool, ints=ints)
        want = _nodes_grads(x, r, best, g, w_shape, kw, pool)
        got = rewrites.relu_max_pool2d_conv_grads(x, g, r, best, **params, bias=True)
        alone = rewrites.relu_max_pool2d_conv_grads(x, g, r, None, **params, bias=False)
        assert len(alone) == 1 and [a.shape for a in got] == [w.shape for w in want]
        for a, b in zip(got, want):
            if ints:
                np.testing.assert_array_equal(a, b)
            else:
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * np.abs(b).max())
        np.testing.assert_array_equal(alone[0], got[0])


def test_pooled_conv_grads_of_an_input_with_inf_or_nan_go_the_long_way():
    """``0 * inf`` is NaN in the full-size product: an input that is not finite gets the nodes'
    values, NaN included."""
    kw = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1)}
    x, r, best, g = _first_layer(np.random.RandomState(2), (2, 1, 9, 9), (3, 1, 3, 3), kw, POOL)
    x[0, 0, 8, 8], x[1, 0, 2, 3] = np.inf, np.nan  # one pixel no window reads, one that some do
    params = {"pool": POOL, "conv_params": {"weight_shape": (3, 1, 3, 3), "groups": 1, **kw}}
    with np.errstate(invalid="ignore"):  # 0 * inf in the products
        want = _nodes_grads(x, r, best, g, (3, 1, 3, 3), kw, POOL)
        got = rewrites.relu_max_pool2d_conv_grads(x, g, r, best, **params, bias=True)
    assert np.isnan(want[0]).any()
    for a, b in zip(got, want):
        np.testing.assert_array_equal(_bits(a), _bits(b))


def test_a_layer_whose_input_needs_its_gradient_keeps_the_full_size_gradient():
    """LeNet's second layer: its full-size gradient feeds its input gradient, so it stays."""
    program = _grads(_lenet, ember.tensor(np.ones((2, 1, 14, 15), np.float32)), ember.tensor([1, 2]), True)[1]
    names = [v.params["name"] for v in program.graph.nodes if v.op == rewrites.KERNEL]
    assert names.count("relu_max_pool2d_backward") == 1 and names.count("relu_max_pool2d_conv_grads") == 1
    convs = [v for v in program.graph.nodes if v.op == "conv2d_grad_weight"]
    assert [v.params["weight_shape"] for v in convs] == [(8, 4, 3, 3)]


@pytest.mark.parametrize(
    "pool",
    [POOL, {**POOL, "padding": (1, 1)}, {**POOL, "kernel_size": (3, 3), "stride": (3, 3)}, {**POOL, "ceil_mode": True}],
)
def test_a_bias_gradient_through_relu_and_pool_is_the_gated_pooled_gradients_sum(pool):
    """Each window's gradient lands once in the full-size gradient, where ReLU passes it: the
    sum of the gated pooled gradient is the full-size gradient's sum, to the bit on small
    integers (ties, zeros, a row and a column no window covers, padding, ceil_mode's last
    windows), to float32 rounding on random values; NaN where a NaN passes."""
    rng = np.random.RandomState(5)
    y = rng.randint(-2, 3, size=(4, 3, 11, 11)).astype(np.float32)
    r = np.where(y > 0, y, 0)
    best = numpy_fused.max_pool2d(r, **pool)
    for ints in (True, False):
        g = (rng.randint(-3, 4, size=best.shape) if ints else rng.standard_normal(best.shape)).astype(np.float32)
        for layout in (g, np.ascontiguousarray(g.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)):  # planes, rows
            want = rewrites.relu_max_pool2d_backward(layout, r, best, **pool).sum((0, 2, 3), keepdims=True)
            got = rewrites.relu_pool_bias_grad(layout, best)
            assert got.shape == want.shape and got.dtype == want.dtype
            if ints:
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    g[1, 2, 0, 0], best[1, 2, 0, 0] = np.nan, 1.0
    assert np.isnan(rewrites.relu_pool_bias_grad(g, best)[0, 2, 0, 0])
