"""bfloat16 as a storage dtype: rounding equal to torch's, values that move keep bfloat16,
arithmetic computes in float32 (eager, under ember.jit, on numba), gradients of bf16 weights."""

import numpy as np
import pytest
from references import known

import ember
import ember.nn.functional as F
from ember import nn

# round-to-nearest-even ties, the largest finite values, subnormals, inf, nan, signed zero
TRICKY = np.array(
    [
        1.0,
        1.00390625,
        1.01171875,
        1.0078125,
        -3.0078125,
        3.3895314e38,
        3.4e38,
        1e-40,
        -1e-45,
        np.inf,
        -np.inf,
        np.nan,
        -0.0,
        0.1,
        65504.0,
        1e-3,
    ],
    np.float32,
)


def bits(t):
    return np.frombuffer(t.backend.to_bytes(t._data), "<u2")


def test_rounding_equals_torch(torch):
    b = ember.tensor(TRICKY).to(ember.bfloat16)
    assert b.dtype is ember.bfloat16 and b.dtype.itemsize == 2
    want = known(lambda: torch.tensor(TRICKY).to(torch.bfloat16).view(torch.int16).numpy())
    got = bits(b).view(np.int16)
    nan = np.isnan(TRICKY)
    np.testing.assert_array_equal(got[~nan], want[~nan])
    assert np.isnan(b.float().numpy()[nan]).all()
    back = known(lambda: torch.tensor(TRICKY).to(torch.bfloat16).float().numpy())
    np.testing.assert_array_equal(b.float().numpy(), back)


def test_storage_ops_keep_bfloat16_and_arithmetic_is_float32(torch):
    x = ember.tensor(np.arange(12, dtype=np.float32).reshape(3, 4) / 7).to(ember.bfloat16)
    for y in (
        x.T,
        x.reshape(4, 3),
        x[1:, ::2],
        ember.cat([x, x]),
        x.flip(0),
        x.unsqueeze(0).expand(2, 3, 4),
        F.pad(x, (1, 1)),
        x.take(ember.tensor([2, 0]), 0),
        ember.where(x.float() > 0.5, x, x),
    ):
        assert y.dtype is ember.bfloat16
    for y in (x + x, x * 2, x.exp(), x.sum(), x @ x.T, -x, x > 0.5):
        assert y.dtype in (ember.float32, ember.bool_)
    xt = torch.tensor(np.arange(12, dtype=np.float32).reshape(3, 4) / 7).to(torch.bfloat16)
    # torch rounds its bf16 results to bf16; ember keeps the float32 result of the bf16 inputs
    np.testing.assert_allclose((x @ x.T).numpy(), known(lambda: (xt.float() @ xt.float().T).numpy()), rtol=1e-6)
    np.testing.assert_allclose(
        (x @ x.T).to(ember.bfloat16).float().numpy(), known(lambda: (xt @ xt.T).float().numpy()), rtol=1e-2
    )
    assert ember.zeros(2, dtype="bfloat16").tolist() == [0.0, 0.0]
    assert ember.tensor([1.5, 2.0], dtype=ember.bfloat16).tolist() == [1.5, 2.0]
    assert ember.promote_types(ember.float16, ember.bfloat16) is ember.float32


def test_max_pool_pads_a_bfloat16_input_with_its_own_minus_inf():
    x = ember.tensor([[[[1.0, -2.0], [3.0, 0.5]]]]).to(ember.bfloat16)
    assert F.max_pool2d(x, 2, padding=1).tolist() == [[[[1.0, -2.0], [3.0, 0.5]]]]


def bf16_model():
    ember.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).to(ember.bfloat16)


def test_module_to_bfloat16_trains_with_bf16_weights_and_grads():
    model = bf16_model()
    assert all(p.dtype is ember.bfloat16 for p in model.parameters())
    opt = ember.optim.SGD(model.parameters(), lr=0.1)
    x, y = ember.randn(16, 4), ember.randint(0, 3, (16,))
    losses = []
    for _ in range(5):
        loss = F.cross_entropy(model(x), y)
        assert loss.dtype is ember.float32
        opt.zero_grad()
        loss.backward()
        assert all(p.grad.dtype is ember.bfloat16 for p in model.parameters())
        opt.step()
        assert all(p.dtype is ember.bfloat16 for p in model.parameters())
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_jit_computes_like_eager():
    model = bf16_model()
    x = ember.randn(5, 4)
    step = ember.jit(lambda m, x: m(x).sum())
    eager = model(x).sum()
    assert step(model, x).item() == eager.item() == step(model, x).item()
    g = ember.jit(lambda m, x: (m(x) ** 2).sum().backward())
    g(model, x)
    jit_grads = [p.grad.float().numpy().copy() for p in model.parameters()]
    model.zero_grad()
    (model(x) ** 2).sum().backward()
    for a, p in zip(jit_grads, model.parameters()):
        np.testing.assert_allclose(a, p.grad.float().numpy(), rtol=1e-2, atol=1e-3)


def test_numba_backend_stores_bfloat16():
    pytest.importorskip("ember_numba", reason="ember-numba is not installed: pip install ./plugins/numba")
    model = bf16_model()
    ref = model(ember.ones(3, 4)).numpy()
    with ember.backend("numba"):
        m2 = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).to(ember.bfloat16)
    m2.load_state_dict(model.state_dict())
    out = m2(ember.ones(3, 4, backend="numba"))
    assert m2[0].weight.dtype is ember.bfloat16 and out.backend.name == "numba"
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6)
    # under jit the bf16 casts stay out of numba's fused kernels
    f = ember.jit(lambda m, x: (m(x) * 2 + 1).relu().sum())
    x = ember.ones(300, 4, backend="numba")
    want = (m2(x) * 2 + 1).relu().sum().item()
    assert f(m2, x).item() == want == f(m2, x).item()


def test_numpy_exchange_goes_through_ml_dtypes():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.array([1.5, -0.25], dtype=ml_dtypes.bfloat16)
    t = ember.tensor(a)
    assert t.dtype is ember.bfloat16 and t.tolist() == [1.5, -0.25]
    assert t.numpy().dtype == ml_dtypes.bfloat16
    assert ember.tensor([1.0, 3.0]).to(ember.bfloat16).numpy().astype(np.float32).tolist() == [1.0, 3.0]


def test_a_backend_that_does_not_list_bfloat16_refuses_it(lacking_backend):
    with pytest.raises(
        ember.DTypeError, match=r"dtype bfloat16 is not supported by backend 'python-lacking'.*\.float\(\)"
    ):
        ember.tensor([1.0], backend=lacking_backend).to(ember.bfloat16)


def test_numpy_exchange_without_ml_dtypes_names_the_fix(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(ember.DTypeError, match=r"pip install ml_dtypes.*test_bfloat16.py"):
        ember.ones(2).to(ember.bfloat16).numpy()
