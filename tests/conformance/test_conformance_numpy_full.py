"""End to end: the default `ember certify numpy` (every tier, default example count) passes."""

import json

import pytest

from ember.conformance import certify


@pytest.mark.slow
def test_certify_numpy_all_tiers(tmp_path):
    rc = certify.main(["numpy", "--out", str(tmp_path), "--quiet"])
    cert = json.loads((tmp_path / "certificate.json").read_text())
    assert rc == 0, cert["failures"]
    assert cert["certified_tiers"] == [0, 1, 2, 3, 4, 5, 6]
    assert cert["tiers"]["6"]["passed"] == 2, "MNIST must be available offline for the full certificate"
    assert cert["determinism"]["small_mlp"] == "pass" and set(cert["determinism"]) > {"Linear", "LSTM"}
    data = cert["dataset"]
    assert data["name"] == "MNIST" and data["pinned"] and len(data["files"]) == 4
    assert cert["distribution"]["name"] == "ember" and cert["run"]["seed"] == 0
    md = (tmp_path / "certificate.md").read_text()
    assert md.startswith("# ember conformance certificate: `numpy`") and "Verdict: PASS" in md
