"""The suite proves itself: deliberately broken backends (broken_backends.py) fail in the
tiers that cover what is broken, and only there. Each run is a real ``ember certify`` (the
suite in a child pytest process), with few hypothesis examples to stay fast."""
import json
import os


from ember.conformance import certify

BROKEN = os.path.join(os.path.dirname(__file__), "broken_backends.py")


def run(name, tmp_path, *args):
    out = tmp_path / name
    rc = certify.main([name, "--backend-module", BROKEN, "--out", str(out), "--quiet", "--max-examples", "3", *args])
    cert = json.loads((out / "certificate.json").read_text()) if (out / "certificate.json").exists() else None
    return rc, cert


def failed(cert, tier):
    return {(f["op"], f["dtype"]) for f in cert["failures"] if f["tier"] == tier}


def test_wrong_sign_fails_that_primitive_and_the_gradients_using_it(tmp_path):
    rc, cert = run("broken_sin", tmp_path, "--tiers", "0,1,2,3,5")
    assert rc == 1 and cert["verdict"] == "fail"
    assert failed(cert, 2) == {("sin", "float16"), ("sin", "float32"), ("sin", "float64")}
    assert {op for op, _ in failed(cert, 3)} == {"sin", "cos"}          # cos' VJP is -g * sin(x)
    for tier in ("0", "1", "5"):
        assert cert["tiers"][tier]["failed"] == 0 and cert["tiers"][tier]["passed"] > 0
    matrix = cert["matrix"]["ops"]
    assert matrix["sin"]["float32"] == "fail" and matrix["cos"]["float32"] == "pass"
    assert matrix["sin"]["int64"] == "n/a"
    assert cert["certified_tiers"] == [0, 1]
    assert "sin[float32]" in cert["declared_but_failing"]
    md = (tmp_path / "broken_sin" / "certificate.md").read_text()
    assert "| sin | · | · | · | · | · | ✗ | ✗ | ✗ |" in md and "got " in md


def test_wrong_fused_op_fails_tier4_only(tmp_path):
    rc, cert = run("broken_fused", tmp_path, "--tiers", "0,1,4")
    assert rc == 1
    assert failed(cert, 4) == {("softmax", "float32"), ("softmax", "float64")}
    assert cert["fused"]["gelu"] == {"float32": "pass", "float64": "pass"}
    assert cert["fused"]["layer_norm"]["float32"] == "undeclared"
    assert cert["tiers"]["0"]["failed"] == cert["tiers"]["1"]["failed"] == 0
    assert "differs from the decomposition" in cert["failures"][0]["message"]


def test_right_fused_ops_pass_every_tier4_case(tmp_path):
    from ember.conformance import fused_ops
    FUSED = fused_ops()
    rc, cert = run("all_fused", tmp_path, "--tiers", "4")
    assert rc == 0, cert["failures"]
    assert cert["fused"] == {op: {"float32": "pass", "float64": "pass"} for op in FUSED}


def test_wrong_conv_gradient_primitive_fails_tiers_2_and_3(tmp_path):
    ops = "conv2d,conv2d_grad_input,conv2d_grad_weight,matmul,windows,Conv2d,Linear"
    rc, cert = run("broken_conv_grad", tmp_path, "--tiers", "2,3,5", "--ops", ops)
    assert rc == 1
    assert {op for op, _ in failed(cert, 2)} == {"conv2d_grad_input"}
    assert {op for op, _ in failed(cert, 3)} >= {"conv2d", "conv2d_grad_input"}
    assert {op for op, _ in failed(cert, 3)} <= {"conv2d", "conv2d_grad_input", "conv2d_grad_weight"}
    assert cert["gradients"]["matmul"] == {"order1": "pass", "order2": "pass"}
    assert cert["layers"] == {"Conv2d": "pass", "Linear": "pass"}   # a layer's own step never uses it
    assert cert["run"]["ops"] == sorted(ops.split(","))


def test_unavailable_backend_is_a_skip_with_its_reason_or_a_failure_on_request(tmp_path):
    rc, cert = run("no_device", tmp_path, "--tiers", "0,1")
    assert rc == 0 and cert["verdict"] == "unavailable" and not cert["available"]
    assert cert["certified_tiers"] == []
    assert cert["tiers"]["1"]["skip_reasons"] == {"unavailable": cert["tiers"]["1"]["skipped"]}
    assert "no accelerator on this machine" in cert["unavailable_reason"]
    rc, cert = run("no_device", tmp_path, "--tiers", "0,1", "--require-available")
    assert rc == 1 and cert["verdict"] == "fail"
    assert all("no accelerator on this machine" in f["message"] for f in cert["failures"])


def test_undeclared_but_implemented_is_reported_and_required_ops_must_be_declared(tmp_path):
    rc, cert = run("underdeclared", tmp_path, "--tiers", "0,2", "--ops", "erf,flip,add")
    assert rc == 1
    assert cert["implemented_but_undeclared"]["primitives"] == ["erf", "flip"]
    [missing] = [f for f in cert["failures"] if f["test"] == "test_required_primitives_declared"]
    assert "erf" in missing["message"] and "flip" in missing["message"]
    assert cert["matrix"]["ops"]["erf"]["float32"] == "undeclared"
    assert cert["matrix"]["ops"]["add"]["float32"] == "pass"
    assert failed(cert, 2) == set()


def test_float32_only_backend_gets_float32_gradient_checks(tmp_path):
    rc, cert = run("float32_only", tmp_path, "--tiers", "0,3")
    assert rc == 0, cert["failures"]
    assert cert["run"]["gradient_dtype"] == "float32" and cert["tiers"]["3"]["passed"] > 50


def test_usage_errors(tmp_path, capsys):
    assert certify.main(["no_such_backend", "--out", str(tmp_path)]) == 2
    assert "unknown backend 'no_such_backend'" in capsys.readouterr().err
    assert certify.main(["numpy", "--tiers", "0,9", "--out", str(tmp_path)]) == 2
    assert certify.main(["numpy", "--tiers", "x", "--out", str(tmp_path)]) == 2
    assert certify.main(["--help"]) == 0
    assert not (tmp_path / "certificate.json").exists()


def test_a_kernel_that_ignores_strides_is_caught_by_the_view_layouts(tmp_path):
    rc, cert = run("ignores_strides", tmp_path, "--tiers", "2", "--ops", "add,mul", "--max-examples", "2")
    assert rc == 1
    assert {op for op, _ in failed(cert, 2)} == {"add"}
    assert all(v == "fail" for v in cert["matrix"]["ops"]["add"].values() if v != "n/a")
    assert "(permuted)" in cert["failures"][0]["message"] or "(sliced)" in cert["failures"][0]["message"]
