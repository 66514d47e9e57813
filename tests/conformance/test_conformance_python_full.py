"""End to end: the pure-Python backend certifies on the inference and gradient tiers.

Tier 6 (training on 2,000 MNIST images) is left out: in pure Python it takes tens of minutes,
and the certificate in docs/certificates/python says so."""

import json

import pytest

from ember.conformance import certify


@pytest.mark.slow
def test_certify_python_tiers_0_to_5(tmp_path):
    rc = certify.main(["python", "--tiers", "0,1,2,3,4,5", "--max-examples", "25", "--out", str(tmp_path), "--quiet"])
    cert = json.loads((tmp_path / "certificate.json").read_text())
    assert rc == 0, cert["failures"]
    assert cert["certified_tiers"] == [0, 1, 2, 3, 4, 5]
