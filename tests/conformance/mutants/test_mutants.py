"""The mutation score: every mutant backend (mutant_backends.py, the NumPy reference with one
planted bug) is caught by tier 2, its failures name only the mutated primitive, and each
failure message is of the kind the mutant declares (so docs/conformance.md's table, made from
those declarations, says what was measured). Each mutant is a real ``ember certify`` of tiers
0-2 in a child process, on its own primitive's cases; that a bug fails no other primitive's
tests is checked with the bugs in groups (``mb.GROUPS``), each group one certification of
every primitive."""

import json
import os
import pathlib

import mutant_backends as mb
import pytest

from ember import dtypes as D
from ember.conformance import certify

HERE = pathlib.Path(__file__).parent
MODULE = str(HERE / "mutant_backends.py")
DOC = HERE.parents[2] / "docs" / "conformance.md"


def certify_mutant(name, tmp_path, *args):
    out = tmp_path / name
    rc = certify.main([f"mutant_{name}", "--backend-module", MODULE, "--out", str(out), "--quiet", *args])
    return rc, json.loads((out / "certificate.json").read_text())


def test_there_are_at_least_30_mutants_each_breaking_a_primitive():
    from ember.primitives import PRIMITIVES

    assert len(mb.MUTANTS) >= 30 and len(mb.BY_NAME) == len(mb.MUTANTS)
    assert all(m.primitive in PRIMITIVES and m.caught_by in mb.KINDS for m in mb.MUTANTS)
    assert {"add", "sum", "conv2d", "argmax", "exp", "matmul"} <= {m.primitive for m in mb.MUTANTS}


def test_the_docs_table_is_the_mutants_table():
    assert mb.table() in DOC.read_text(), "regenerate docs/conformance.md's mutation table from mutant_backends.table()"


def test_a_tiled_add_fails_at_the_default_example_count(tmp_path):
    """Issue 19's first finding: found by structure, not by luck (hypothesis alone needed 400 examples)."""
    rc, cert = certify_mutant("tiled_add", tmp_path, "--tiers", "2", "--ops", "add,sub")
    assert rc == 1 and cert["run"]["max_examples"] == certify.DEFAULT_MAX_EXAMPLES
    assert {f["op"] for f in cert["failures"]} == {"add"}
    assert {f["dtype"] for f in cert["failures"]} == {
        "uint8",
        "int8",
        "int16",
        "uint16",
        "uint64",
        "uint32",
        "int32",
        "int64",
        "float16",
        "float32",
        "float64",
    }


def certify_tiers_0_to_2(name, tmp_path, *args):
    """``certify_mutant`` at tiers 0-2, ``EMBER_MUTANT_EXAMPLES`` examples (default 10), on the
    contract's dtypes only: the optional integers would double the run and every mutant is
    caught on these (test_a_tiled_add... checks that a planted bug reaches them all)."""
    examples = os.environ.get("EMBER_MUTANT_EXAMPLES", "10")
    contract = ",".join(d.name for d in D.ALL)
    return certify_mutant(name, tmp_path, "--tiers", "0,1,2", "--max-examples", examples, "--dtypes", contract, *args)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(mb.BY_NAME))
def test_mutant_is_caught_at_tier_2_naming_its_primitive(name, tmp_path):
    """Its own primitive's cases only: that no other primitive's tests fail is the groups' check."""
    m = mb.BY_NAME[name]
    rc, cert = certify_tiers_0_to_2(name, tmp_path, "--ops", m.primitive)
    assert rc == 1 and cert["verdict"] == "fail"
    tier2 = [f for f in cert["failures"] if f["tier"] == 2]
    assert tier2, f"{name} was not caught by tier 2: {cert['failures']}"
    assert {f["op"] for f in cert["failures"] if f["op"]} == {m.primitive}, cert["failures"]
    assert all(m.primitive in f["message"] for f in tier2), tier2
    assert any(mb.KINDS[m.caught_by] in f["message"] for f in tier2), [f["message"] for f in tier2]
    assert cert["tiers"]["0"]["failed"] == 0, cert["failures"]


def test_the_groups_hold_every_mutant_once_with_distinct_primitives():
    assert sorted(m.name for g in mb.GROUPS for m in g) == sorted(mb.BY_NAME)
    assert all(len({m.primitive for m in g}) == len(g) for g in mb.GROUPS)


@pytest.mark.slow
@pytest.mark.parametrize("k", range(len(mb.GROUPS)))
def test_a_group_of_bugs_fails_exactly_their_primitives_in_every_primitives_run(k, tmp_path):
    """All of a group's bugs at once, every primitive's cases run: the failing tests name exactly
    the mutated primitives, each caught by tier 2, and nothing else fails."""
    group = mb.GROUPS[k]
    rc, cert = certify_tiers_0_to_2(f"group_{k}", tmp_path)
    assert rc == 1 and cert["verdict"] == "fail"
    assert cert["run"]["ops"] is None  # every primitive ran
    assert {f["op"] for f in cert["failures"] if f["op"]} == {m.primitive for m in group}, cert["failures"]
    assert {f["op"] for f in cert["failures"] if f["tier"] == 2} == {m.primitive for m in group}
    assert cert["tiers"]["0"]["failed"] == 0, cert["failures"]
