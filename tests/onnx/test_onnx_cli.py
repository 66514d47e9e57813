"""``ember onnx run`` and ``ember onnx test``."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytestmark = pytest.mark.onnx
from onnx import TensorProto, helper

from ember.cli import main


def save(tmp_path, *nodes):
    g = helper.make_graph(
        list(nodes),
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, [2, 3])],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_run_prints_outputs_and_timing(tmp_path, capsys):
    model = save(tmp_path, helper.make_node("Relu", ["x"], ["y"]))
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["onnx", "run", model, "--input", str(tmp_path / "x.npy"), "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    assert "y: shape (2, 3) float32 [0.0, 2.0, 0.0, 4.0, 0.0, 6.0]" in out
    assert "backend numpy: load" in out and "median of 2" in out


def test_run_under_jit_prints_the_same_outputs(tmp_path, capsys):
    model = save(tmp_path, helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"]))
    np.save(tmp_path / "x.npy", np.array([[-1, 2, -3], [4, -5, 6]], np.float32))
    assert main(["onnx", "run", model, "--input", str(tmp_path / "x.npy"), "--repeat", "3", "--jit"]) == 0
    out = capsys.readouterr().out
    assert "y: shape (2, 3) float32 [-0.0, -2.0, -0.0, -4.0, -0.0, -6.0]" in out
    assert "backend numpy under ember.jit: load" in out and "median of 3" in out


def test_run_without_inputs_uses_random_ones_of_the_declared_shape(tmp_path, capsys):
    assert main(["onnx", "run", save(tmp_path, helper.make_node("Neg", ["x"], ["y"])), "--repeat", "0"]) == 0
    assert "y: shape (2, 3) float32" in capsys.readouterr().out


def test_run_lists_every_unsupported_operator_on_one_line(tmp_path, capsys):
    model = save(
        tmp_path, helper.make_node("Frob", ["x"], ["a"], name="n1"), helper.make_node("Blorp", ["a"], ["y"], name="n2")
    )
    assert main(["onnx", "run", model]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ember: error: 2 node(s)")
    assert "'n1' (Frob, opset 17)" in err and "'n2' (Blorp, opset 17)" in err


def test_run_bad_file_and_bad_input_count(tmp_path, capsys):
    (tmp_path / "bad.onnx").write_bytes(b"\x00\x01nonsense")
    assert main(["onnx", "run", str(tmp_path / "bad.onnx")]) == 2
    assert "is not an ONNX model" in capsys.readouterr().err
    model = save(tmp_path, helper.make_node("Relu", ["x"], ["y"]))
    np.save(tmp_path / "x.npy", np.zeros((2, 3), np.float32))
    assert main(["onnx", "run", model, "--input", str(tmp_path / "x.npy"), "--input", str(tmp_path / "x.npy")]) == 2
    assert "takes 1 input(s) (x), got 2 --input file(s)" in capsys.readouterr().err


def test_test_prints_the_pass_table(capsys):
    assert main(["onnx", "test", "--set", "models"]) == 0
    out = capsys.readouterr().out
    assert "| pytorch-operator | 35 | 35 |" in out and "unexpected failure" not in out


def test_test_on_a_backend_that_cannot_run_here_is_one_line(capsys):
    import ember

    names = ["nosuch"]
    try:  # cupy without a CUDA device (this machine, CI): one line too
        ember.get_backend("cupy")
    except ember.BackendError:
        names.append("cupy")
    for name in names:
        assert main(["onnx", "test", "--backend", name, "--set", "models"]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
        assert captured.err.startswith("ember: error: ") and repr(name) in captured.err


def test_without_onnx_the_commands_say_how_to_install_it(tmp_path):
    import subprocess
    import sys

    code = "import sys; sys.modules['onnx'] = None\nfrom ember.cli import main\nsys.exit(main(sys.argv[1:]))"
    for args in (["onnx", "test"], ["onnx", "run", str(tmp_path / "m.onnx")]):
        out = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, check=False
        )
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip() == "ember: error: ember.onnx needs the onnx package: pip install 'ember[onnx]'"


def _string_model(tmp_path):
    """StringSplit on a string input, and ZipMap-like outputs aside: a sequence output too."""
    g = helper.make_graph(
        [
            helper.make_node("StringSplit", ["x"], ["parts", "n"], delimiter=","),
            helper.make_node("SplitToSequence", ["n"], ["seq"], keepdims=0),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
        [
            helper.make_tensor_value_info("parts", TensorProto.STRING, None),
            helper.make_tensor_sequence_value_info("seq", TensorProto.INT64, None),
        ],
    )
    path = tmp_path / "s.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), path)
    return str(path)


def test_run_prints_string_and_sequence_outputs(tmp_path, capsys):
    model = _string_model(tmp_path)
    assert main(["onnx", "run", model, "--repeat", "0"]) == 0  # random input: the word "text"
    out = capsys.readouterr().out
    assert "parts: shape (2, 1) string ['text', 'text']" in out
    assert "seq: a sequence of 2, the first shape () int64 [1]" in out


def test_run_on_a_backend_without_strings_is_one_error_line(tmp_path, capsys, lacking_backend):
    import ember

    before = ember.get_backend()
    assert main(["onnx", "run", _string_model(tmp_path), "--backend", lacking_backend.name]) == 2
    assert ember.get_backend() is before  # --backend lasts for the command only
    err = capsys.readouterr().err
    assert err.startswith("ember: error: dtype string is not supported by backend 'python-lacking'")  # making the input
    assert err.count("\n") == 1


def test_failed_narrow_casts_name_an_old_ml_dtypes(monkeypatch):
    import ml_dtypes

    from ember.onnx.cli import _ml_dtypes_note

    failed = ["test_cast_FLOAT_to_INT4", "test_castlike_FLOAT16_to_UINT2_expanded", "test_abs"]
    assert _ml_dtypes_note(failed) is None  # the installed ml_dtypes is 0.7 or later (the onnx extra)
    monkeypatch.setattr(ml_dtypes, "__version__", "0.6.0")
    note = _ml_dtypes_note(failed)
    assert note.startswith("note: 2 of these cast to 4- or 2-bit integers") and "ml_dtypes 0.6.0" in note
    assert _ml_dtypes_note(["test_abs"]) is None
