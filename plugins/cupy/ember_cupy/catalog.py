"""Every kernel the plugin can emit, and a check that each compiles for a GPU architecture.

``library_kernels()`` lists the hand-written kernels (kernels/) in every variant the
backend can ask for: each dtype, each optimizer option set, each layer-norm form.
``model_kernels()`` runs jitted training steps (an MLP and a small ResNet-style CNN with
batch norm, residual adds, pooling) on the host harness and returns the fusion-group kernels
they launched, with the strides they really had. ``check()`` compiles kernels with
``nvcc --cubin -arch=sm_XX -Xptxas -v`` and reports registers and spills; no GPU is needed.

    python -m ember_cupy.catalog --arch sm_90 [--models] [--exhaustive]
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from . import kernels
from .fused_ops import adam_constants, rmsprop_constants, sgd_constants

FLOATS = ("float32", "float64")


def _optimizer_flags(exhaustive: bool) -> list:
    """(rule, flags) for each option set ember.optim's conformance cases use (or every
    combination of the flags, with ``exhaustive``)."""
    out = []
    if exhaustive:
        adam = ("amsgrad", "maximize", "weight_decay", "decoupled", "big_lerp")
        rmsprop = ("maximize", "weight_decay", "momentum", "centered", "big_lerp")
        for bits in itertools.product((False, True), repeat=5):
            out.append(("adam_step", dict(zip(adam, bits))))
            out.append(("rmsprop_step", dict(zip(rmsprop, bits))))
        for bits in itertools.product((False, True), repeat=6):
            f = dict(zip(("maximize", "weight_decay", "momentum", "dampening", "nesterov", "first"), bits))
            if (f["nesterov"] or f["first"] or f["dampening"]) and not f["momentum"]:
                continue
            out.append(("sgd_step", f))
        return out
    from ember.conformance.optimizers import CASES

    for hyper in CASES["adam_step"]:
        h = dict(
            dict(
                beta1=0.9,
                beta2=0.999,
                eps=1e-8,
                weight_decay=0.0,
                amsgrad=False,
                maximize=False,
                decoupled_weight_decay=False,
            ),
            **hyper,
        )
        out.append(("adam_step", adam_constants(step=1, **h)[0]))
    for hyper in CASES["sgd_step"]:
        h = dict(dict(momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0, maximize=False), **hyper)
        for first in (False, True) if h["momentum"] else (False,):
            out.append(("sgd_step", sgd_constants(first=first, **h)[0]))
    for hyper in CASES["rmsprop_step"]:
        h = dict(dict(alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False, maximize=False), **hyper)
        out.append(("rmsprop_step", rmsprop_constants(**h)[0]))
    return out


def library_kernels(exhaustive: bool = False) -> list:
    """The hand-written kernels in every variant the backend uses (deduplicated by source)."""
    ks = [kernels.random_bits_kernel()]
    for dt in FLOATS:
        ks.append(kernels.unary_kernel("erf", dt))
        ks += [kernels.gelu_kernel(dt, a) for a in ("none", "tanh")]
        ks += [kernels.softmax_kernel(dt, log) for log in (False, True)]
        ks += [kernels.cross_entropy_kernel(dt, it) for it in ("int32", "int64")]
        ks += [kernels.layer_norm_kernel(dt, w, b) for w in (False, True) for b in (False, True)]
        ks += [kernels.gelu_backward_kernel(dt, a) for a in ("none", "tanh")]
        ks += [kernels.softmax_backward_kernel(dt, log) for log in (False, True)]
        ks += [kernels.cross_entropy_backward_kernel(dt, it) for it in ("int32", "int64")]
        ks += [kernels.layer_norm_backward_kernel(dt, w) for w in (False, True)]
        ks.append(kernels.layer_norm_params_kernel(dt))
        ks += [kernels.max_pool_kernel(dt), kernels.max_pool_backward_kernel(dt)]
        ks += [kernels.batch_norm_kernel(dt, w, b) for w in (False, True) for b in (False, True)]
        ks += [kernels.batch_norm_backward_kernel(dt, w) for w in (False, True)]
        for rule, flags in _optimizer_flags(exhaustive):
            ks.append(kernels.step_kernel(rule, dt, **flags))
        ks.append(
            kernels.multi_step_kernel(
                "adam_step",
                dt,
                [3, 1000, 7, 1 << 20],
                amsgrad=False,
                maximize=False,
                weight_decay=0.0,
                decoupled=False,
                big_lerp=False,
            )
        )
        ks.append(
            kernels.multi_step_kernel(
                "sgd_step",
                dt,
                [5] * 62,
                maximize=False,
                weight_decay=0.0,
                momentum=0.9,
                dampening=0.0,
                nesterov=False,
                first=False,
            )
        )
        # the other multi-tensor forms Optimizer.step launches: SGD's first momentum step, RMSprop
        ks.append(
            kernels.multi_step_kernel(
                "sgd_step",
                dt,
                [5, 7],
                maximize=False,
                weight_decay=0.0,
                momentum=0.9,
                dampening=0.0,
                nesterov=False,
                first=True,
            )
        )
        ks.append(
            kernels.multi_step_kernel(
                "rmsprop_step",
                dt,
                [5, 7, 1 << 16],
                maximize=False,
                weight_decay=0.0,
                momentum=True,
                centered=True,
                big_lerp=False,
            )
        )
    for dt in ("float32", "float64", "int32", "int64"):
        ks.append(kernels.col2im_kernel(dt))
    for dt in ("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        ks.append(kernels.remainder_kernel(dt))
    return list({k.key: k for k in ks}.values())


# ----------------------------------------------------------------------------- model steps
def _mlp(nn):
    from ember.models import MLP

    return MLP(784, (128, 128), 10)


def _cnn(nn):
    """A small ResNet-style network: the layer kinds of ResNet-18 (conv, batch norm, ReLU,
    residual add with a projection shortcut — ember.models' own BasicBlock —, max pool,
    global average pool, linear)."""
    from ember.models.resnet import BasicBlock

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2)
            )
            self.block = BasicBlock(8, 16, 2)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            return self.fc(self.block(self.stem(x)).mean((2, 3)))

    return Net()


def training_step(model, opt):
    """A jitted training step: forward, cross-entropy, backward, optimizer step."""
    import ember
    import ember.nn.functional as F

    @ember.jit
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step


def run_model(name: str, backend: str, steps: int = 2, seed: int = 0):
    """Train model ``name`` ("mlp" or "cnn") for ``steps`` jitted steps on ``backend``; returns
    (losses, parameters as NumPy arrays). Same seed, same numbers on every backend."""
    import numpy as np

    import ember
    import ember.nn as nn

    with ember.backend(backend):
        ember.manual_seed(seed)
        model = _mlp(nn) if name == "mlp" else _cnn(nn)
        model.train()
        opt = (
            ember.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            if name == "mlp"
            else ember.optim.Adam(model.parameters(), lr=1e-3)
        )
        rng = np.random.default_rng(seed)
        shape = (32, 784) if name == "mlp" else (4, 3, 16, 16)
        x = ember.tensor(rng.standard_normal(shape).astype(np.float32))
        y = ember.tensor(rng.integers(0, 10, shape[0]))
        step = training_step(model, opt)
        losses = [step(x, y).item() for _ in range(steps)]
        return losses, [p.numpy() for p in model.parameters()]


def model_kernels(backend: str = "cupy-host") -> list:
    """The fusion-group kernels that jitted MLP and CNN training steps launch on ``backend``
    (registered first if it is the host harness)."""
    import ember

    if backend == "cupy-host":
        from .host import ember_backends

        if "cupy-host" not in ember.registry.REGISTRY.infos:
            ember.register_backend(ember_backends()[0])
    b = ember.get_backend(backend)
    before = dict(b.rt.calls)
    for name in ("mlp", "cnn"):
        run_model(name, backend)
    return [
        k
        for key, k in b.rt.seen.items()
        if b.rt.calls.get(key, 0) > before.get(key, 0) and k.name.startswith("ember_fused_")
    ]


# ----------------------------------------------------------------------------- nvcc
DEVICE_FLAGS = ("--cubin", "-Xptxas", "-v", "-std=c++17")


def _stats(log: str) -> dict:
    """Per entry function: registers and spilled bytes, from ``-Xptxas -v`` output."""
    stats, current = {}, None
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            current = stats.setdefault(m.group(1), {"registers": 0, "spill_bytes": 0})
            continue
        if current is None:
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            current["spill_bytes"] = max(current["spill_bytes"], int(m.group(1)) + int(m.group(2)))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            current["registers"] = max(current["registers"], int(m.group(1)))
    return stats


def compile_for_device(kernel_list, arch: str = "sm_90") -> list:
    """Compile kernels with ``nvcc --cubin -arch=ARCH -Xptxas -v`` (all in one translation
    unit; on failure, one by one to name the culprits). Cached by source hash. Returns one
    {name, ok, registers, spill_bytes, log} per kernel."""
    from .host import BuildError, build, combined

    flags = (*DEVICE_FLAGS, f"-arch={arch}")
    source, key, unique = combined(kernel_list)
    try:
        out = build(source, key, flags=flags, suffix=f".{arch}.cubin")
        stats = _stats(Path(out + ".log").read_text())
        return [
            {"name": k.name, "ok": True, "log": "", **stats.get(k.name, {"registers": None, "spill_bytes": None})}
            for k in unique
        ]
    except BuildError:
        pass
    results = []
    for k in unique:
        try:
            out = build(k.source, k.key, flags=flags, suffix=f".{arch}.cubin")
            st = _stats(Path(out + ".log").read_text()).get(k.name, {})
            results.append(
                {
                    "name": k.name,
                    "ok": True,
                    "log": "",
                    "registers": st.get("registers"),
                    "spill_bytes": st.get("spill_bytes"),
                }
            )
        except BuildError as exc:
            results.append({"name": k.name, "ok": False, "log": str(exc), "registers": None, "spill_bytes": None})
    return results


def nvrtc_available() -> tuple:
    """(True, "") when NVRTC can be loaded in-process (CuPy's binding; the library comes with the
    CUDA toolkit or the ``cuda-toolkit[nvrtc]`` wheel), else (False, why)."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as exc:  # noqa: BLE001 - no CuPy, or no libnvrtc
        return False, f"NVRTC not loadable: {type(exc).__name__}: {exc}"
    return True, ""


def check_nvrtc(kernel_list, arch: str = "compute_90") -> list:
    """Compile kernels to PTX with NVRTC, as ``cupy.RawModule`` does on the GPU (no device is
    needed for this step). All in one program; on failure, one by one. One result per kernel."""
    from cupy_backends.cuda.libs import nvrtc

    from .host import combined

    def compile_one(source):
        prog = nvrtc.createProgram(source, "ember.cu", [], [])
        try:
            nvrtc.compileProgram(prog, [f"-arch={arch}", "-std=c++17"])
            return True, nvrtc.getProgramLog(prog)
        except Exception as exc:  # noqa: BLE001 - NVRTCError carries the log
            return False, f"{exc}\n{nvrtc.getProgramLog(prog)}"
        finally:
            nvrtc.destroyProgram(prog)

    source, _, unique = combined(kernel_list)
    ok, _ = compile_one(source)
    if ok:
        return [{"name": k.name, "ok": True, "log": ""} for k in unique]
    return [{"name": k.name, **dict(zip(("ok", "log"), compile_one(k.source)))} for k in unique]


def check(kernel_list, arch: str = "sm_90") -> list:
    """Alias of :func:`compile_for_device` (the name the docs use)."""
    return compile_for_device(kernel_list, arch)


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m ember_cupy.catalog", description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--models", action="store_true", help="also the fusion groups of jitted model steps (slow)")
    p.add_argument("--exhaustive", action="store_true", help="every optimizer flag combination")
    args = p.parse_args(argv)
    ks = library_kernels(args.exhaustive) + (model_kernels() if args.models else [])
    results = check(ks, args.arch)
    bad = [r for r in results if not r["ok"]]
    for r in results:
        print(f"{'ok ' if r['ok'] else 'BAD'} {r['name']:60} regs={r['registers']} spill={r['spill_bytes']}")
    print(f"{len(results) - len(bad)}/{len(results)} kernels compile for {args.arch}")
    for r in bad:
        print(r["log"])
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
