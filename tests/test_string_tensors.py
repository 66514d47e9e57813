"""String tensors (ember.text, ember.string): creation, movement, equality, and every refusal.

(Named for the dtype: tests/train/test_text.py holds the text-model training tests.)"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import ember
from ember import dtypes as D
from ember.errors import DTypeError, GradError

BACKENDS = ["numpy", "python"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_made_from_lists_and_every_numpy_text_array(backend):
    want = [["a", "bé"], ["", "的"]]
    for data in (
        want,
        np.array(want),  # <U2
        np.array(want, dtype=object),
        np.array([[s.encode() for s in row] for row in want], dtype=object),  # ONNX's bytes
        np.array(want, dtype=np.dtypes.StringDType()),
    ):
        t = ember.tensor(data, backend=backend)
        assert t.dtype is ember.string and t.shape == (2, 2) and t.tolist() == want
        got = t.numpy()
        assert got.dtype == object and got.tolist() == want
    assert ember.tensor("x", backend=backend).shape == ()
    assert ember.as_tensor(np.array(["a", "b"]), backend=backend).tolist() == ["a", "b"]
    assert D.get("string") is D.get("str") is ember.string and repr(ember.string) == "ember.string"


@pytest.mark.parametrize("backend", BACKENDS)
def test_movement_equality_and_selection(backend):
    t = ember.tensor([["a", "b", "c"], ["d", "e", "f"]], backend=backend)
    assert t.T.tolist() == [["a", "d"], ["b", "e"], ["c", "f"]]
    assert t.reshape(3, 2).tolist() == [["a", "b"], ["c", "d"], ["e", "f"]]
    assert t[1, ::-2].tolist() == ["f", "d"] and t.flip(0)[0].tolist() == ["d", "e", "f"]
    assert ember.cat([t, t[:1]]).shape == (3, 3)
    assert t.reshape(-1).take(ember.tensor([2, 0], backend=backend)).tolist() == ["c", "a"]
    assert t[:1].expand(2, 3).tolist() == [["a", "b", "c"]] * 2
    assert (t == "e").tolist() == [[False, False, False], [False, True, False]]
    assert (t != ember.tensor(["a", "x", "c"], backend=backend)).tolist() == [[False, True, False], [True] * 3]
    picked = ember.where(t == "b", t, ember.tensor("-", backend=backend))
    assert picked.tolist() == [["-", "b", "-"], ["-", "-", "-"]]
    assert "dtype=string" in repr(t)


def test_moves_between_the_backends_that_hold_text():
    t = ember.tensor(["x", "yz"])
    p = t.to("python")
    assert p.backend.name == "python" and p.dtype is ember.string and p.to("numpy").tolist() == ["x", "yz"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_arithmetic_no_cast_no_gradient(backend):
    t = ember.tensor(["a", "b"], backend=backend)
    for op, name in [
        (lambda: t + t, "add"),
        (lambda: t * 2, "mul"),
        (lambda: t.maximum(t), "maximum"),
        (lambda: t.sum(), "sum"),
        (lambda: t.max(), "max"),
    ]:
        with pytest.raises(DTypeError, match=rf"^{name}: string tensors have no arithmetic.*test_string_tensors.py"):
            op()
    with pytest.raises(DTypeError, match="^eq: a string tensor compares with text only, got a int"):
        t == 1  # noqa: B015
    with pytest.raises(DTypeError, match="cannot cast string to float32"):
        t.float()
    with pytest.raises(DTypeError, match="cannot cast int64 to string"):
        ember.tensor([1], backend=backend).to(ember.string)
    with pytest.raises(DTypeError, match="no common dtype of string and int64"):
        ember.cat([t, ember.tensor([1], backend=backend)])
    with pytest.raises(GradError, match="only floating-point tensors can require grad, got string"):
        t.requires_grad_()
    with pytest.raises(DTypeError, match="holds str .* got a int"):
        ember.tensor(np.array(["a", 1], dtype=object), backend=backend)


def test_the_abstract_rules_refuse_text_except_movement_and_equality():
    from ember import primitives as P

    aval = ((2,), ember.string)
    assert P.eq.abstract(aval, aval) == ((2,), D.bool_)
    assert P.reshape.abstract(aval, shape=(1, 2)) == ((1, 2), ember.string)
    with pytest.raises(DTypeError, match="^exp: string tensors have no arithmetic"):
        P.exp.abstract(aval)


def test_backends_without_text_refuse_it_naming_dtype_and_backend(lacking_backend):
    t = ember.tensor(["a"])
    for name in (lacking_backend.name,):
        with pytest.raises(
            DTypeError, match=rf"dtype string is not supported by backend '{name}'.*test_string_tensors.py"
        ):
            t.to(name)
        with pytest.raises(DTypeError, match=rf"dtype string is not supported by backend '{name}'"):
            ember.tensor(["a"], backend=name)


def test_safetensors_refuses_text(tmp_path):
    with pytest.raises(ValueError, match="safetensors has no string dtype"):
        ember.save({"labels": ember.tensor(["a", "b"])}, tmp_path / "x.safetensors")


_NO_NUMPY = r"""
import sys, json
sys.modules["numpy"] = None
import ember
t = ember.tensor([["a", "b"], ["c", "d"]])
print(json.dumps({"backend": t.backend.name, "dtype": str(t.dtype), "T": t.T.tolist(),
                  "eq": (t == "c").tolist(), "repr": repr(t[0])}))
"""


def test_python_backend_holds_text_without_numpy():
    env = dict(os.environ, EMBER_STRICT_PLUGINS="0")
    env.pop("EMBER_BACKEND", None)
    proc = subprocess.run([sys.executable, "-c", _NO_NUMPY], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got == {
        "backend": "python",
        "dtype": "string",
        "T": [["a", "c"], ["b", "d"]],
        "eq": [[False, False], [True, False]],
        "repr": "tensor(['a', 'b'], dtype=string, backend='python')",
    }


def test_under_jit_text_moves_and_compares_and_arithmetic_is_refused():
    f = ember.jit(lambda x, y: ember.where(x == y, x, y).T)
    a, b = ember.tensor([["a", "b"], ["c", "d"]]), ember.tensor([["a", "x"], ["c", "y"]])
    for _ in range(3):  # tracing, then the compiled program
        assert f(a, b).tolist() == [["a", "c"], ["x", "y"]]
    with pytest.raises(DTypeError, match="^add: string tensors have no arithmetic"):
        ember.jit(lambda x: x + x)(a)
