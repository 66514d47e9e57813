"""Deliberately broken backends: the conformance suite must catch each of them, in the right
tier and nowhere else. Loaded into the suite's process with ``--backend-module`` (this file's
path), which registers what ``ember_backends()`` returns, exactly as an installed plugin would.

Each is the NumPy reference with one thing changed; two are right in an unusual way
(``all_fused`` declares every fused op, ``float32_only`` no float64) and must pass.
"""

import math

import numpy as np

from ember import dtypes as D
from ember.backend import BackendInfo
from ember.backends.numpy.backend import IMPLS, NumpyBackend, _erf


class WrongSign(NumpyBackend):
    """sin(x) computes -sin(x): tier 2 must fail exactly the sin cells, tier 3 the gradients
    that use sin (sin itself, and cos, whose VJP is -g * sin(x)); every other tier passes."""

    name = "broken_sin"
    impls = {**IMPLS, "sin": lambda x: np.negative(np.sin(x))}


def _softmax_wrong_axis(x, dim=-1):
    e = np.exp(x - x.max())
    return e / e.sum()  # normalizes over the whole array, not along dim


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return (0.5 * x * (1 + _erf(x / np.asarray(math.sqrt(2), dtype=x.dtype)))).astype(x.dtype)


class WrongFused(NumpyBackend):
    """Declares fused softmax (wrong: normalized over everything) and gelu (right): tier 4
    must fail softmax and pass gelu; every other tier passes."""

    name = "broken_fused"
    fused_impls = {"softmax": _softmax_wrong_axis, "gelu": _gelu}

    def capabilities(self):
        caps = super().capabilities()
        caps.fused = frozenset(self.fused_impls)
        return caps


class WrongConvGrad(NumpyBackend):
    """conv2d_grad_input is off by a factor of 2: tier 2 must fail that primitive and tier 3
    the gradients that go through it (conv2d, and the second-order ones)."""

    name = "broken_conv_grad"
    impls = {**IMPLS, "conv2d_grad_input": lambda *a, **k: IMPLS["conv2d_grad_input"](*a, **k) * 2}


def _add_assuming_contiguous(a, b):
    if isinstance(a, np.ndarray) and a.ndim and not a.flags.c_contiguous:
        # read the view's memory as if it were packed row-major, like a kernel that ignores strides
        a = np.lib.stride_tricks.as_strided(a, a.shape, np.empty(a.shape, a.dtype).strides, writeable=False)
    return np.add(a, b)


class IgnoresStrides(NumpyBackend):
    """add reads a strided view as if it were contiguous: tier 2 must catch it through the
    permuted / sliced / offset layouts (every other op is right)."""

    name = "ignores_strides"
    impls = {**IMPLS, "add": _add_assuming_contiguous}


def _through_reference(name):
    """A fused kernel that is right by construction: the decomposition, run on NumPy tensors."""

    def kernel(*bufs, **params):
        import ember
        from ember.conformance import fused_ops

        FUSED = fused_ops()

        def tensor(b):  # a buffer, or a list of them (a multi-tensor op's argument)
            return [tensor(x) for x in b] if isinstance(b, list) else None if b is None else ember.as_tensor(b)

        def array(t):
            return [array(x) for x in t] if isinstance(t, list) else None if t is None else t.numpy()

        with ember.no_grad():
            out = FUSED[name](*(tensor(b) for b in bufs), **params)
        if isinstance(out, tuple):
            return tuple(array(t) for t in out)
        return array(out)

    return kernel


class AllFused(NumpyBackend):
    """Not broken: declares every fused op, each computing the decomposition. Tier 4 runs all of
    its cases (tuples, None state, keyword options) and must pass."""

    name = "all_fused"

    def __init__(self):
        from ember.conformance import fused_ops

        FUSED = fused_ops()
        self.fused_impls = {name: _through_reference(name) for name in FUSED}

    def capabilities(self):
        caps = super().capabilities()
        caps.fused = frozenset(self.fused_impls)
        return caps


class NoDevice(NumpyBackend):
    """Installed but unable to run here, like cupy without a GPU."""

    name = "no_device"

    def available(self):
        return False, "no accelerator on this machine (test backend); install a driver"


class UnderDeclared(NumpyBackend):
    """Implements everything but declares neither erf nor flip (both required)."""

    name = "underdeclared"

    def capabilities(self):
        caps = super().capabilities()
        caps.ops = frozenset(caps.ops) - {"erf", "flip"}
        return caps


class Float32Only(NumpyBackend):
    """Declares no float64 (like many GPUs): gradients are checked in float32."""

    name = "float32_only"

    def capabilities(self):
        caps = super().capabilities()
        caps.dtypes = frozenset(caps.dtypes) - {D.float64, D.float16}
        return caps


class WidensExp(NumpyBackend):
    """exp of float32 returns float64 (values right): tier 2 fails exp's float32 cell, and the
    watch fails every higher-tier case that calls exp, naming exp, instead of carrying float64
    through a whole model."""

    name = "exp_float64"
    impls = {**IMPLS, "exp": lambda x: np.exp(x.astype(np.float64) if x.dtype == np.float32 else x)}


class IgnoresKeepdims(NumpyBackend):
    """sum drops the reduced dims even when asked to keep them: tier 2 fails sum, and tiers 3, 5
    and 6 fail too, each a consequence of sum in the certificate."""

    name = "sum_no_keepdims"
    impls = {**IMPLS, "sum": lambda x, axes, keepdims=False: IMPLS["sum"](x, axes, False)}


class FlakyMatmul(NumpyBackend):
    """Every 50th matmul adds 1e-3 to one element: two runs of one computation differ, and the
    determinism checks name matmul."""

    name = "flaky_matmul"

    def __init__(self):
        self.calls = 0

        def matmul(a, b):
            out = np.matmul(a, b)
            self.calls += 1
            if self.calls % 50 == 0 and out.size:
                out = out.copy()
                out.reshape(-1)[0] += out.dtype.type(1e-3)
            return out

        self.impls = {**IMPLS, "matmul": matmul}


def _kernel_fails(x):
    raise RuntimeError("kernel launch failed (test backend)")


class RaisingTanh(NumpyBackend):
    """tanh raises: the failures name the call that raised (tanh, its dtype and shape) and the
    line of the conformance test that made it, not pytest's frame."""

    name = "raises_tanh"
    impls = {**IMPLS, "tanh": _kernel_fails}


def ember_backends():
    return [
        BackendInfo(cls.name, cls, description=cls.__doc__.split(":")[0])
        for cls in (
            WrongSign,
            WrongFused,
            WrongConvGrad,
            IgnoresStrides,
            AllFused,
            NoDevice,
            UnderDeclared,
            Float32Only,
            WidensExp,
            IgnoresKeepdims,
            FlakyMatmul,
            RaisingTanh,
        )
    ]
