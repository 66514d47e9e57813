"""The official ONNX backend test cases, run on an ember backend.

The pinned ``onnx`` wheel builds its 1,884 single-node cases in memory
(``onnx.backend.test.case.node.collect_testcases``) and ships three model sets with data
(``onnx/backend/test/data/{pytorch-converted,pytorch-operator,simple}``). Each case runs through
:func:`ember.onnx.load` and is compared with ONNX's reference outputs at the case's own
tolerances; the output dtype must match too.
"""

from __future__ import annotations

import glob
import os
import time
import warnings

# The "plain-tensor" dtypes: float, uint8, int32, int64, bool, float16, double (the
# 1,524 cases it counts; fixed, so the count stays comparable as ember gains dtypes).
PLAIN = {1, 2, 6, 7, 9, 10, 11}

MODEL_SETS = ("pytorch-converted", "pytorch-operator", "simple")


class Case:
    """One test: a name, a model, data sets of (inputs, expected outputs), tolerances."""

    def __init__(self, name, model, data_sets, rtol=1e-3, atol=1e-7, kind="node"):
        self.name, self.model, self.data_sets = name, model, data_sets
        self.rtol, self.atol, self.kind = rtol, atol, kind

    @property
    def plain(self) -> bool:
        """Only tensor inputs and outputs of dtypes ember has (the 1,524 of the issue)."""
        g = self.model.graph
        for v in list(g.input) + list(g.output):
            t = v.type
            if t.WhichOneof("value") != "tensor_type" or t.tensor_type.elem_type not in PLAIN:
                return False
        return True

    @property
    def category(self) -> str:
        ops = {n.op_type for n in self.model.graph.node}
        if self.kind != "node":
            return self.kind
        if len(ops) != 1 or self.name.endswith("_expanded"):
            return "expanded functions"
        from .ops import FAMILY

        return FAMILY.get(ops.pop(), "unsupported ops")


def node_cases() -> list:
    """The official single-node cases of the pinned onnx, built in memory."""
    import numpy as np
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        raw = collect_testcases(None)
    return [Case(c.name, c.model, c.data_sets, c.rtol, c.atol) for c in raw]


def model_cases() -> list:
    """The model sets shipped in the onnx wheel, each model with its test_data_set_*."""
    import onnx

    root = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
    out = []
    for kind in MODEL_SETS:
        for d in sorted(glob.glob(os.path.join(root, kind, "test_*"))):
            model = onnx.load(os.path.join(d, "model.onnx"))
            sets = [
                (_tensors(ds, "input_*.pb"), _tensors(ds, "output_*.pb"))
                for ds in sorted(glob.glob(os.path.join(d, "test_data_set_*")))
            ]
            out.append(Case(os.path.basename(d), model, sets, kind=kind))
    return out


def _tensors(directory, pattern):
    import onnx
    from onnx import numpy_helper

    return [
        numpy_helper.to_array(onnx.load_tensor(p))
        for p in sorted(glob.glob(os.path.join(directory, pattern)), key=_index)
    ]


def _index(path):
    return int(os.path.basename(path).split("_")[1].split(".")[0])


def run_case(case, backend="numpy"):
    """None if the case passes on ``backend``, else a one-line reason."""
    import numpy as np

    from .. import backend as using, tensor
    from .graph import OnnxModule

    try:
        with using(backend), np.errstate(all="ignore"):
            m = OnnxModule(case.model)
            for inputs, expected in case.data_sets:
                inputs, expected = _arrays(inputs), _arrays(expected)
                if not all(_plain(a) for a in list(inputs) + list(expected)):
                    return "inputs or outputs are not tensors or lists of tensors"
                args = [
                    [tensor(np.asarray(t)) for t in a]
                    if isinstance(a, list)
                    else None
                    if a is None
                    else tensor(np.asarray(a))
                    for a in inputs
                ]
                reason = check_outputs(expected, m(*args), lambda i, w, g: _compare(case, i, np.asarray(w), g.numpy()))
                if reason:
                    return reason
    except AssertionError as e:
        return "values differ: " + " ".join(str(e).split())[:200]
    except Exception as e:  # noqa: BLE001 - any failure of a case is that case's result
        return f"{type(e).__name__}: " + " ".join(str(e).split())[:300]
    return None


def check_outputs(expected: list, outs, compare) -> str | None:
    """Why a run's outputs (a value, or a tuple of several) differ from ``expected``, or None.
    Empty optionals (None) and sequences (lists) are matched here; ``compare(i, want, got)``
    judges each pair of tensors of output ``i``."""
    outs = outs if isinstance(outs, tuple) else (outs,)
    for i, (want, got) in enumerate(zip(expected, outs)):
        if want is None or got is None:
            if want is not got:
                return f"output {i}: {'an empty optional' if want is None else 'a value'} expected"
            continue
        if isinstance(want, list) != isinstance(got, list) or isinstance(want, list) and len(want) != len(got):
            return f"output {i}: a sequence of {len(want)}" if isinstance(want, list) else f"output {i}: not a tensor"
        for w, g in zip(want, got) if isinstance(want, list) else [(want, got)]:
            reason = compare(i, w, g)
            if reason:
                return reason
    return None


def _plain(a):
    import numpy as np

    if a is None:  # an empty optional
        return True
    if isinstance(a, list):
        return all(isinstance(t, (np.ndarray, np.generic)) for t in a)
    return isinstance(a, (np.ndarray, np.generic))


def _compare(case, i, want, got):
    import numpy as np

    if got.dtype != want.dtype:
        return f"output {i}: dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"output {i}: shape {got.shape}, expected {want.shape}"
    if want.dtype.kind == "V":  # ml_dtypes' bfloat16 and float8 arrays: compared by their float32 values
        want, got = want.astype(np.float32), got.astype(np.float32)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)
    elif not np.array_equal(got, want):
        return f"output {i}: values differ"
    return None


def _arrays(values):
    from onnx import TensorProto, numpy_helper

    one = lambda v: numpy_helper.to_array(v) if isinstance(v, TensorProto) else v  # noqa: E731
    return [[one(t) for t in v] if isinstance(v, list) else one(v) for v in values]


def run_suite(cases, backend="numpy", progress=None) -> dict:
    """name → (category, plain, failure reason or None, seconds)."""
    results = {}
    for case in cases:
        t = time.perf_counter()
        reason = run_case(case, backend)
        results[case.name] = (case.category, case.plain, reason, time.perf_counter() - t)
        if progress:
            progress(case.name, reason)
    return results


PLACES = ("gpu", "mixed", "host", "none")  # where a webgpu case's primitives ran (ember.wasm.onnx_browser)


def table(results, placements=None) -> str:
    """A Markdown pass table: per category, then totals over all and over plain-tensor cases.
    With ``placements`` (name → gpu, mixed, host or none: webgpu's runs), the passing cases are
    also split by where their primitives ran."""
    rows: dict = {}
    for name, (cat, plain, reason, _) in results.items():
        for key in (cat, "**all**") + (("plain-tensor cases",) if plain else ()):
            r = rows.setdefault(key, [0, 0] + [0] * len(PLACES))
            r[1] += 1
            if reason is None:
                r[0] += 1
                if placements and placements.get(name) in PLACES:
                    r[2 + PLACES.index(placements[name])] += 1
    head, rule = "| category | passed | cases |", "|---|---:|---:|"
    if placements:
        head = "| category | passed | all on GPU | mixed | all on host | none ran | cases |"
        rule = "|---|---:|---:|---:|---:|---:|---:|"
    lines = [head, rule]
    for cat in sorted(k for k in rows if k not in ("**all**", "plain-tensor cases")) + [
        "**all**",
        "plain-tensor cases",
    ]:
        r = rows.get(cat, [0, 0] + [0] * len(PLACES))
        cells = [r[0]] + (r[2:] if placements else []) + [r[1]]
        lines.append(f"| {cat} | " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)
