"""Adding a primitive takes one record plus an implementation per backend, and no other core
file: docs/writing-a-backend.md's walkthrough defines a throw-away primitive in a module of
its own, and this test runs it as written, in fresh processes (so the record never joins the
primitive set of this one): eager use, a gradient, and conformance tiers 2 and 3 through
``ember certify``. A wrong VJP rule in the same module must fail tier 3."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "writing-a-backend.md"


def _blocks():
    text = DOC.read_text()
    section = text[text.index("## Adding a primitive") : text.index("## Certify")]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    assert [lang for lang, _ in blocks] == ["python", "python", "bash"], "the walkthrough's shape changed"
    return [code for _, code in blocks]


def _run(args, cwd, **kw):
    env = dict(
        os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""), PYTHONPATH=str(cwd)
    )
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture
def walkthrough(tmp_path):
    record, use, certify = _blocks()
    (tmp_path / "softplus_prim.py").write_text(record)
    return tmp_path, record, use, certify


def test_the_new_primitive_runs_eagerly_and_differentiates(walkthrough):
    tmp, _, use, _ = walkthrough
    proc = _run([sys.executable, "-c", use], tmp)
    assert proc.returncode == 0, proc.stderr
    expected = [line.split("# ", 1)[1].strip() for line in use.splitlines() if line.startswith("print(")]
    assert proc.stdout.splitlines() == expected


def _certificate(tmp, certify_cmd):
    proc = _run(["bash", "-c", certify_cmd], tmp)
    cert = json.loads((tmp / "ember-certificate-numpy" / "certificate.json").read_text())
    return proc, cert


def test_the_conformance_suite_checks_the_new_primitive(walkthrough):
    tmp, _, _, certify = walkthrough
    proc, cert = _certificate(tmp, certify)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert cert["matrix"]["covered_dtypes"] == {"softplus": ["float16", "float32", "float64"]}
    assert set(cert["matrix"]["ops"]["softplus"].values()) - {"n/a"} == {"pass"}
    assert cert["gradients"] == {"softplus": {"order1": "pass"}}
    assert cert["tiers"]["2"]["passed"] == 3 and cert["tiers"]["3"]["passed"] == 1


def test_a_wrong_gradient_rule_fails_tier_3(walkthrough):
    tmp, record, _, certify = walkthrough
    wrong = record.replace("(g * (1 - (-out).exp()),)", "(g * (1 - out.exp()),)")
    assert wrong != record
    (tmp / "softplus_prim.py").write_text(wrong)
    proc, cert = _certificate(tmp, certify)
    assert proc.returncode != 0
    assert cert["gradients"] == {"softplus": {"order1": "fail"}} and cert["tiers"]["2"]["failed"] == 0


def test_the_new_primitive_traces_under_jit(walkthrough):
    # nothing in ember.jit names the primitive: tracing takes the record's abstract rule, and
    # a runner without a kernel for it runs the backend's implementation
    tmp = walkthrough[0]
    script = """
import ember
from softplus_prim import softplus
x = ember.tensor([-1.0, 0.0, 2.0])
f = lambda t: (softplus(t) * 2).sum()
step = ember.jit(ember.grad(f))
print(ember.jit(f)(x).item() == f(x).item(), step(x).tolist() == ember.grad(f)(x).tolist(), step(x).tolist() != [0, 0, 0])
"""
    proc = _run([sys.executable, "-c", script], tmp)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "True"]
