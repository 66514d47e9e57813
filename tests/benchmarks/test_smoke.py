"""The benchmark harness: `python -m benchmarks run --smoke` runs every workload and reports each
one for ember/numpy and torch, measured or with the reason it was not; the FLOP counts behind
"% of GEMM peak" match the models; the speed ratio points the right way for times and rates."""

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks` is a top-level folder of the repository, not installed

from references import known  # noqa: E402

from benchmarks import runner  # noqa: E402
from benchmarks.child import COLD_CACHE_VARIABLES  # noqa: E402
from benchmarks.workloads import WORKLOADS, _forward_macs, flops_per_sample  # noqa: E402

HAS_TORCH = importlib.util.find_spec("torch") is not None


def run_benchmarks(*args, timeout=400):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "run", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def test_smoke_reports_every_workload_for_numpy_and_torch(tmp_path):
    docs = ROOT / "docs" / "performance.md"
    docs_before = docs.read_text() if docs.exists() else None
    out = tmp_path / "smoke.json"
    # numpy (eager and jit) and torch only: the pure-Python backend needs minutes for one ResNet-18 step
    proc = run_benchmarks("--smoke", "--backends", "numpy,numpy+jit,torch", "--json", str(out))
    report = json.loads(out.read_text())

    assert list(report["status"]) == ["gemm", *WORKLOADS]
    assert report["status"]["gemm"]["gemm/numpy"] == "ok"
    assert report["status"]["gemm"]["gemm/torch"] == "ok" or not HAS_TORCH
    for workload, row in list(report["status"].items())[1:]:
        for target in ("ember/numpy", "torch/eager"):
            status = row[target]
            # measured, or unavailable with its reason; a crash of the harness or of ember fails here
            assert status == "ok" or (status.startswith("unavailable: ") and len(status) > 20), (
                workload,
                target,
                status,
            )
        if HAS_TORCH:
            assert row["torch/eager"] == "ok", (workload, row["torch/eager"])
        # the whole step through ember.jit runs everywhere but W4, which measures eager dispatch
        expected = "not run: does not apply" if workload == "W4-overhead" else "ok"
        assert row["ember/numpy+jit"].startswith(expected), (workload, row["ember/numpy+jit"])

    for r in report["records"]:
        if r["status"] == "ok":
            assert all(math.isfinite(v) and v > 0 for v in r["metrics"].values()), r
            assert r["maxrss_mib"] > 0 and r["env"]["OMP_NUM_THREADS"] == "2"
            if "loss_first_last" in r:
                assert all(math.isfinite(v) for v in r["loss_first_last"]), r

    # the table is printed, names the machine, and smoke results stay out of the docs
    assert "| W1-train | torch/eager |" in proc.stdout or not HAS_TORCH
    assert "Threads: 2 for every pool" in proc.stdout
    assert (docs.read_text() if docs.exists() else None) == docs_before
    # the JSON holds all the table needs: `report` prints the same table again
    again = subprocess.run(
        [sys.executable, "-m", "benchmarks", "report", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and again.stdout == proc.stdout


def test_unknown_backend_is_reported_not_dropped(tmp_path):
    out = tmp_path / "r.json"
    proc = run_benchmarks("--smoke", "--workloads", "W4", "--backends", "no_such_backend", "--json", str(out))
    report = json.loads(out.read_text())
    status = report["status"]["W4-overhead"]["ember/no_such_backend"]
    assert status.startswith("unavailable: BackendError") and "no_such_backend" in status
    assert "ember/no_such_backend, every workload: unavailable" in proc.stdout


def test_flop_counts_match_the_torch_models(torch):
    """The analytic multiply-add counts equal what torch's layers actually compute."""
    from benchmarks.workloads import lenet, mlp, resnet18

    def torch_macs(build, shape):
        macs = []

        def count(module, inputs, output):
            if isinstance(module, torch.nn.Conv2d):
                k = module.weight[0].numel()  # cin/groups * kh * kw per output element
                macs.append(output[0].numel() * k)
            else:
                macs.append(module.in_features * module.out_features)

        model = build(torch.nn)
        for m in model.modules():
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
                m.register_forward_hook(count)
        with torch.no_grad():
            model.eval()(torch.zeros(1, *shape))
        return sum(macs)

    for workload, build, shape in (
        ("W1-train", mlp, (784,)),
        ("W2-train", lenet, (1, 28, 28)),
        ("W3-train", resnet18, (3, 32, 32)),
    ):
        assert known(lambda: torch_macs(build, shape)) == _forward_macs(workload), workload


def test_speed_ratio_is_faster_above_one_for_rates_and_times():
    ember, torch_ = runner.Target("ember", "numpy"), runner.REFERENCE
    records = []
    for rnd, (rate, fwd) in enumerate([(200.0, 2.0), (100.0, 4.0)], start=1):
        for target, scale in ((ember, 1.0), (torch_, 2.0)):  # torch: twice the rate, twice the time
            records.append(
                {
                    "status": "ok",
                    "workload": "W1-train",
                    "target": target.label,
                    "round": rnd,
                    "busy": False,
                    "maxrss_mib": 10.0,
                    "metrics": {"samples_per_s": rate * scale},
                }
            )
            records.append(
                {
                    "status": "ok",
                    "workload": "W4-overhead",
                    "target": target.label,
                    "round": rnd,
                    "busy": rnd == 2,
                    "maxrss_mib": 10.0,
                    "metrics": {"fwd_us_per_op": fwd * scale, "bwd_us_per_op": fwd},
                }
            )
    rows = {
        (r["workload"], r["target"], r["metric"]): r
        for r in runner.summarize(records, ["W1-train", "W4-overhead"], [ember, torch_])["rows"]
    }
    assert rows["W1-train", "ember/numpy", "samples_per_s"]["speed_vs_torch_eager"]["median"] == 0.5
    assert rows["W4-overhead", "ember/numpy", "fwd_us_per_op"]["speed_vs_torch_eager"]["median"] == 2.0
    assert rows["W4-overhead", "ember/numpy", "bwd_us_per_op"]["speed_vs_torch_eager"]["median"] == 1.0
    assert rows["W1-train", "ember/numpy", "samples_per_s"]["median"] == 150.0
    assert rows["W4-overhead", "torch/eager", "fwd_us_per_op"]["busy"] == 1


def test_default_backends_list_every_known_one_and_say_what_smoke_leaves_out():
    targets, not_run = runner.default_targets(smoke=True)
    assert {runner.Target("ember", n) for n in runner.KNOWN_EMBER_BACKENDS} <= set(targets)
    assert runner.Target("ember", "numba+jit") in targets and runner.Target("ember", "python+jit") not in targets
    assert runner.REFERENCE in targets and runner.Target("torch", "compile") in targets
    assert "smoke" in not_run["torch/compile"]
    assert runner.default_targets(smoke=False)[1] == {}


def test_workload_selection_by_prefix():
    assert runner.select_workloads("W1,W4") == ["W1-train", "W1-infer", "W4-overhead"]
    assert runner.parse_target("torch.compile") == runner.Target("torch", "compile")
    assert runner.parse_target("ember/numba") == runner.parse_target("numba") == runner.Target("ember", "numba")
    with pytest.raises(SystemExit, match="W9"):
        runner.select_workloads("W9")


def test_targets_that_compile_in_their_third_step_warm_up_past_it():
    """+jit targets and eager numba compile at the third call with the same shapes; W3's own
    single warm-up step would leave that step among the three measured."""
    s = runner.Settings()

    def warmup(backend, framework="ember"):
        cmd = runner.child_command("W3-train", runner.Target(framework, backend), s)
        return int(cmd[cmd.index("--warmup") + 1])

    assert WORKLOADS["W3-train"].warmup < runner.JIT_WARMUP
    assert warmup("numba") == warmup("numba+jit") == warmup("numpy+jit") == runner.JIT_WARMUP
    assert warmup("numpy") == warmup("eager", "torch") == WORKLOADS["W3-train"].warmup
    s.warmup = 4  # --warmup: every target alike, torch.compile's settling steps too
    assert warmup("numba+jit") == warmup("compile", "torch") == warmup("eager", "torch") == 4


def test_the_warmup_flag_reaches_the_settings(monkeypatch):
    """``python -m benchmarks run --warmup N`` sets the run's warm-up for every target."""
    from benchmarks import __main__ as cli

    class Ran(Exception):
        pass

    def run(workloads, targets, settings, not_run, log=print):
        raise Ran(settings)

    monkeypatch.setattr(runner, "run", run)
    with pytest.raises(Ran) as ran:
        cli.main(["run", "--workloads", "W3-train", "--backends", "torch", "--warmup", "4", "--no-docs"])
    assert ran.value.args[0].warmup == 4


def _record(workload, target, rnd, metrics):
    return {
        "status": "ok",
        "workload": workload,
        "target": target,
        "round": rnd,
        "busy": False,
        "maxrss_mib": 10.0,
        "metrics": metrics,
    }


def test_vs_best_pytorch_takes_the_faster_of_eager_and_compile_in_the_same_round():
    ember, compiled = runner.Target("ember", "numba+jit"), runner.COMPILED_TORCH
    rate, first = "samples_per_s", "launch_to_first_step_s"
    records = [
        # round 1: compile is the faster torch for rates, eager for times
        _record("W1-train", "ember/numba+jit", 1, {rate: 300.0}),
        _record("W1-train", "torch/eager", 1, {rate: 100.0}),
        _record("W1-train", "torch/compile", 1, {rate: 150.0}),
        _record("W5-first-step", "ember/numba+jit", 1, {first: 1.0}),
        _record("W5-first-step", "torch/eager", 1, {first: 2.0}),
        _record("W5-first-step", "torch/compile", 1, {first: 4.0}),
        # round 2: torch.compile did not run, so the round has no best PyTorch
        _record("W1-train", "ember/numba+jit", 2, {rate: 300.0}),
        _record("W1-train", "torch/eager", 2, {rate: 200.0}),
    ]
    targets = [ember, runner.REFERENCE, compiled]
    summary = runner.summarize(records, ["W1-train", "W5-first-step"], targets)
    rows = {(r["workload"], r["target"]): r for r in summary["rows"]}
    w1 = rows["W1-train", "ember/numba+jit"]
    assert w1["speed_vs_best_torch"] == {"median": 2.0, "min": 2.0, "max": 2.0, "n": 1}
    assert w1["speed_vs_torch_eager"]["median"] == 2.25  # rounds 1 and 2: 3.0 and 1.5
    assert rows["W5-first-step", "ember/numba+jit"]["speed_vs_best_torch"]["median"] == 2.0  # 2 s vs 1 s
    assert rows["W1-train", "torch/eager"]["speed_vs_best_torch"]["median"] == 100.0 / 150.0
    assert rows["W1-train", "torch/compile"]["speed_vs_best_torch"]["median"] == 1.0

    report = {
        "command": "test",
        "date": "today",
        "settings": runner.Settings().__dict__,
        "machine": runner.machine(runner.Settings()),
        "workloads": ["W1-train", "W5-first-step"],
        "records": records,
        "status": {},
        "summary": summary,
    }
    table = runner.markdown(report).splitlines()
    header = next(line for line in table if line.startswith("| workload"))
    cells = [c.strip() for c in header.split("|")]
    assert cells.index("vs best PyTorch") == cells.index("speed vs torch eager") + 1
    line = next(line for line in table if line.startswith("| W1-train | ember/numba+jit"))
    assert [c.strip() for c in line.split("|")][cells.index("vs best PyTorch")] == "2.00× (2.00×–2.00×)"


def test_w3_inference_runs_at_batch_1_and_at_the_runs_batch():
    s = runner.Settings(batch=128)

    def arg(workload, name):
        cmd = runner.child_command(workload, runner.Target("ember", "numba+jit"), s)
        return cmd[cmd.index(name) + 1]

    assert arg("W3-infer-b1", "--batch") == "1" and arg("W3-infer", "--batch") == arg("W3-train", "--batch") == "128"
    assert runner.select_workloads("W3") == ["W3-train", "W3-infer", "W3-infer-b1"]
    # forward only: a third of a training step's products
    assert 3 * flops_per_sample("W3-infer") == 3 * flops_per_sample("W3-infer-b1") == flops_per_sample("W3-train")


def test_w5_times_three_steps_and_the_cold_variant_starts_with_empty_caches():
    """W5-cold's process sees compile caches that are fresh, its own, and gone afterwards;
    both W5 variants time steps 1 to 3 (the third is the first compiled one)."""
    s = runner.Settings.smoke()
    assert WORKLOADS["W5-cold"].cold and not WORKLOADS["W5-first-step"].cold
    records = [runner.run_one("W5-cold", runner.Target("ember", "numpy+jit"), s) for _ in range(2)]
    dirs = []
    for rec in records:
        assert rec["status"] == "ok", rec
        assert set(rec["metrics"]) >= {"launch_to_first_step_s", "launch_to_step3_s", "step3_s"}
        assert rec["metrics"]["launch_to_step3_s"] >= rec["metrics"]["launch_to_first_step_s"]
        cache = rec["cache_dirs"]
        assert all(cache[v] for v in COLD_CACHE_VARIABLES)
        assert not any(Path(d).exists() for d in cache.values())  # removed after the run
        dirs.append(cache["EMBER_CACHE"])
    assert dirs[0] != dirs[1]
    warm = runner.run_one("W5-first-step", runner.Target("ember", "numpy+jit"), s)
    assert warm["status"] == "ok" and warm["cache_dirs"]["EMBER_CACHE"] != dirs[0]
    # the saved report names the scratch folders as such: no machine path in a committed JSON
    rounds = [dict(rec, round=1) for rec in records]  # as runner.run numbers them
    saved = runner.report("python -m benchmarks run", ["W5-cold"], [], {}, s, rounds)["records"]
    assert all(rec["cache_dirs"] == dict.fromkeys(COLD_CACHE_VARIABLES, runner.SCRATCH) for rec in saved)
    assert records[0]["cache_dirs"]["EMBER_CACHE"] == dirs[0]  # what run_one returned is left as it was


def test_each_rounds_gemm_rate_stands_beside_that_rounds_ratios():
    """The host's speed moves between rounds: the table shows each round's GEMM rate and each
    row's ratio to torch eager of the same round, so a slow round reads as one."""
    ember = runner.Target("ember", "numba+jit")
    records = [
        _record("gemm", "gemm/numpy", 1, {"gflops": 400.0}),
        _record("gemm", "gemm/numpy", 2, {"gflops": 250.0}),  # the host slowed in round 2
        _record("gemm", "gemm/torch", 1, {"gflops": 300.0}),  # torch's GEMM failed in round 2
        _record("W1-train", "ember/numba+jit", 1, {"samples_per_s": 300.0}),
        _record("W1-train", "torch/eager", 1, {"samples_per_s": 100.0}),
        _record("W1-train", "ember/numba+jit", 2, {"samples_per_s": 150.0}),
        _record("W1-train", "torch/eager", 2, {"samples_per_s": 100.0}),
        _record("W1-train", "ember/numba+jit", 3, {"samples_per_s": 100.0}),  # no torch: no ratio, no column
    ]
    summary = runner.summarize(records, ["W1-train"], [ember, runner.REFERENCE])
    assert summary["gemm_by_round"] == {"gemm/numpy": {"1": 400.0, "2": 250.0}, "gemm/torch": {"1": 300.0}}
    row = next(r for r in summary["rows"] if r["target"] == "ember/numba+jit")
    assert row["speed_vs_torch_eager_by_round"] == {"1": 3.0, "2": 1.5}
    report = {
        "command": "test",
        "date": "today",
        "settings": runner.Settings().__dict__,
        "machine": runner.machine(runner.Settings()),
        "workloads": ["W1-train"],
        "records": records,
        "status": {},
        "summary": summary,
    }
    table = runner.markdown(report)
    assert "| | round 1 | round 2 |" in table
    assert "| GEMM numpy GFLOP/s | 400 | 250 |" in table and "| GEMM torch GFLOP/s | 300 | – |" in table
    assert "| W1-train ember/numba+jit (samples/s) | 3.00× | 1.50× |" in table
    assert "| W1-train torch/eager (samples/s) |" not in table  # the reference's ratio is 1 by definition
    # a report saved before the per-round table still prints, without it
    old = {**report, "summary": {k: v for k, v in summary.items() if k != "gemm_by_round"}}
    assert "round 1" not in runner.markdown(json.loads(json.dumps(old)))
    # and a saved report prints the same table as the run did (the round keys survive JSON)
    assert runner.markdown(json.loads(json.dumps(report))) == table


def test_a_run_of_two_rounds_shows_both_rounds_gemm_rates(tmp_path):
    out = tmp_path / "r.json"
    proc = run_benchmarks("--smoke", "--rounds", "2", "--workloads", "W4", "--backends", "numpy", "--json", str(out))
    gemm = json.loads(out.read_text())["summary"]["gemm_by_round"]["gemm/numpy"]
    assert sorted(gemm) == ["1", "2"] and all(v > 0 for v in gemm.values())
    line = next(x for x in proc.stdout.splitlines() if x.startswith("| GEMM numpy GFLOP/s |"))
    assert [c.strip() for c in line.split("|")[2:4]] == [runner.fmt(gemm["1"]), runner.fmt(gemm["2"])]


def test_backends_with_a_disk_cache_of_kernels_get_a_warm_up_process_first(monkeypatch):
    """Round 0 runs each steady-state pair on ember-numba (eager or jit) once, unmeasured, so a
    cold kernel cache is filled before round 1; other targets and W5 measure as before."""
    ran = []
    monkeypatch.setattr(runner, "run_one", lambda w, t, s: ran.append((w, t.label)) or {"status": "ok"})
    monkeypatch.setattr(runner, "describe", str)
    targets = [runner.Target("ember", b) for b in ("numba+jit", "numba", "numpy+jit")] + [runner.REFERENCE]
    records = runner.run(["W1-train", "W5-cold"], targets, runner.Settings(rounds=1), {}, log=lambda _: None)
    warm = [(w, t) for (w, t), r in zip(ran, records) if r["round"] == 0]
    assert warm == [("W1-train", "ember/numba+jit"), ("W1-train", "ember/numba")]
    assert all(r["warmup"] == (r["round"] == 0) for r in records)
    ran.clear()
    runner.run(["W1-train"], targets, runner.Settings(rounds=1, cache_warmup_process=False), {}, log=lambda _: None)
    assert ("W1-train", "ember/numba+jit") in ran and len(ran) == len(runner.GEMM_TARGETS) + len(targets)


def test_a_run_with_w5_starts_from_bytecode_as_an_installed_ember_does(tmp_path, monkeypatch):
    """Before a run with W5, the harness writes the bytecode of ember's packages (pip does at
    install), even where PYTHONDONTWRITEBYTECODE is set; a run without W5 writes none."""
    pkg = tmp_path / "bytepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(runner, "BYTECODE_PACKAGES", ("bytepkg", "no_such_package"))
    monkeypatch.setattr(runner, "run_one", lambda w, t, s: {"status": "ok"})
    monkeypatch.setattr(runner, "describe", str)
    cached = Path(importlib.util.cache_from_source(str(pkg / "mod.py")))
    runner.run(["W1-train"], [runner.REFERENCE], runner.Settings(rounds=1), {}, log=lambda _: None)
    assert not cached.exists()
    runner.run(["W5-first-step"], [runner.REFERENCE], runner.Settings(rounds=1), {}, log=lambda _: None)
    assert cached.exists()
