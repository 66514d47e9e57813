"""ember.autograd.Function (torch's custom-gradient class, on custom_vjp) and ember.inference_mode."""

import numpy as np
import pytest
from references import known

import ember
from ember.errors import GradError


class Cube(ember.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * x * x * scale

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 3 * x * x * ctx.scale, None


class MulAdd(ember.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        assert ctx.needs_input_grad == (True, False)
        return a * b + a

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        return g * (b + 1), g * a


def test_function_records_one_node_and_its_backward_runs():
    x = ember.tensor([1.0, 2.0], requires_grad=True)
    y = Cube.apply(x, 2.0)
    assert y._ctx[0].startswith("autograd.Function:") and y._ctx[0].endswith("Cube")
    y.sum().backward()
    assert x.grad.tolist() == [6.0, 24.0]


def test_function_matches_torch_including_second_order(torch):
    v = np.array([0.5, -1.5, 2.0])

    def torch_grads():
        class TorchCube(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, scale):
                ctx.save_for_backward(x)
                ctx.scale = scale
                return x * x * x * scale

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return g * 3 * x * x * ctx.scale, None

        xt = torch.tensor(v, requires_grad=True)
        (gt,) = torch.autograd.grad(TorchCube.apply(xt, 0.5).sum(), [xt], create_graph=True)
        (ht,) = torch.autograd.grad(gt.sum(), [xt])
        return gt, ht

    x = ember.tensor(v, requires_grad=True)
    (g,) = ember.autograd.grad(Cube.apply(x, 0.5).sum(), [x], create_graph=True)
    (h,) = ember.autograd.grad(g.sum(), [x])
    gt, ht = known(torch_grads)
    assert gt.dtype == ht.dtype == np.float64
    np.testing.assert_allclose(g.numpy(), gt)
    np.testing.assert_allclose(h.numpy(), ht)


def test_inputs_without_grad_get_none_and_mixing_with_ops_works():
    a = ember.tensor([1.0, 2.0], requires_grad=True)
    b = ember.tensor([3.0, 4.0])
    (MulAdd.apply(a * 2, b) ** 2).sum().backward()
    # d/da of ((2a*b + 2a)^2) = 2 * (2ab + 2a) * (2b + 2)
    expect = [2 * (2 * x * y + 2 * x) * (2 * y + 2) for x, y in zip([1.0, 2.0], [3.0, 4.0])]
    assert a.grad.tolist() == expect


def test_without_grad_no_node_is_recorded():
    x = ember.tensor([1.0], requires_grad=True)
    with ember.no_grad():
        assert Cube.apply(x, 1.0)._ctx is None
    assert Cube.apply(ember.tensor([1.0]), 1.0)._ctx is None


def test_a_wrong_backward_is_named():
    class Bad(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g.sum()

    class TwoOut(ember.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x, x

    x = ember.ones(3, requires_grad=True)
    with pytest.raises(GradError, match=r"Bad.backward: gradient 0 has shape \(\) but input 0 has shape \(3,\)"):
        Bad.apply(x).sum().backward()
    with pytest.raises(TypeError, match="TwoOut.forward must return one Tensor"):
        TwoOut.apply(x)


def test_autograd_grad_is_still_there():
    x = ember.tensor(3.0, requires_grad=True)
    assert ember.autograd.grad(x * x, x).item() == 6.0


def test_inference_mode_as_context_decorator_and_switch():
    x = ember.ones(2, requires_grad=True)
    with ember.inference_mode():
        assert not (x * 2).requires_grad
    assert (x * 2).requires_grad

    @ember.inference_mode()
    def predict(t):
        return t * 3

    assert not predict(x).requires_grad
    with ember.inference_mode(False):
        assert (x * 2).requires_grad
    with ember.no_grad(), ember.inference_mode(False):
        assert not (x * 2).requires_grad  # False leaves the mode as it was
    assert ember.is_grad_enabled()


def test_two_classes_of_one_name_keep_their_own_backward():
    def make(factor):
        class Scale(ember.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * factor

            @staticmethod
            def backward(ctx, g):
                return g * factor

        return Scale

    double, triple = make(2.0), make(3.0)
    x = ember.ones(1, requires_grad=True)
    y = double.apply(x)
    triple.apply(x)  # defined after y was recorded
    y.sum().backward()
    assert x.grad.tolist() == [2.0]
