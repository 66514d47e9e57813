"""The runner: plans the runs, starts one child process each, and reports.

A run is ``rounds`` rounds; each round runs every workload on every backend, one after the
other (ember, torch, ember, torch, ...), each in a fresh process (benchmarks/child.py), so slow
drift of the machine (heat, other load) falls on all of them alike. A backend's speed is then
compared with PyTorch eager *of the same round*, and with the faster of PyTorch eager and
torch.compile of that round ("best PyTorch"), and each ratio's spread is reported with it.

Nothing is dropped: warm-up steps, runs on a busy machine, unavailable backends, failures and
timeouts all stay in the JSON, and the Markdown table says how many of each.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .child import COLD_CACHE_VARIABLES, THREAD_VARIABLES
from .recording import BLAS_OVERRIDES
from .workloads import FIRST_STEPS, WORKLOADS, flops_per_sample

ROOT = Path(__file__).resolve().parent.parent
KNOWN_EMBER_BACKENDS = ("numpy", "python", "numba", "cupy")
JIT_WARMUP = 3  # warm-up steps at least for NAME+jit targets and COMPILES_ON_REPEAT (see child_command)
#: ember backends that compile a kernel when its shapes come for the third time (ember-numba's
#: EMBER_NUMBA_HOT): eagerly, too, their third step pays for compiling.
COMPILES_ON_REPEAT = ("numba",)
RECORDED_ENV = (*BLAS_OVERRIDES, "OMP_WAIT_POLICY")  # change BLAS kernels / thread waiting
BUSY = 0.25  # CPU busy fraction (all cores) before a run above which the run is flagged

# metric -> (label, higher is better)
METRICS = {
    "samples_per_s": ("samples/s", True),
    "fwd_us_per_op": ("µs/op forward", False),
    "bwd_us_per_op": ("µs/op backward", False),
    "launch_to_first_step_s": ("s, launch to end of step 1", False),
    "launch_to_step3_s": (f"s, launch to end of step {FIRST_STEPS}", False),
    "gflops": ("GFLOP/s", True),
}


@dataclass(frozen=True)
class Target:
    """What runs a workload: a framework and its backend (ember/numpy, torch/eager, ...)."""

    framework: str
    backend: str

    @property
    def label(self):
        return f"{self.framework}/{self.backend}"


REFERENCE = Target("torch", "eager")
COMPILED_TORCH = Target("torch", "compile")
GEMM_TARGETS = (Target("gemm", "numpy"), Target("gemm", "torch"))


@dataclass
class Settings:
    rounds: int = 5
    batch: int = 128
    threads: int = 2
    steps: int | None = None  # None: each workload's own (workloads.WORKLOADS)
    warmup: int | None = None
    chain: int = 10_000
    gemm_n: int = 2048
    gemm_reps: int = 10
    max_seconds: float = 20.0  # measured seconds per process before a slow backend stops early
    timeout: float = 300.0  # seconds per process before it is killed (and reported);
    #                                 torch.compile processes get 3x: compiling happens inside them
    w5_warmup_process: bool = True  # W5 is "cold process, warm cache": one process first fills the cache
    #: ... and every steady-state workload on a backend with a disk cache of compiled kernels
    #: (COMPILES_ON_REPEAT) too: a process that finds it cold compiles longer than its warm-up
    #: (at most half of --max-seconds) and its rate counts the compiling (after a change to
    #: ember-numba, W2-train's first round read 0.32x PyTorch eager against 1.57-1.73x).
    cache_warmup_process: bool = True

    @classmethod
    def smoke(cls):
        """A few steps of everything: checks the harness, measures nothing worth keeping."""
        return cls(
            rounds=1,
            batch=16,
            steps=2,
            warmup=1,
            chain=1000,
            gemm_n=256,
            gemm_reps=2,
            max_seconds=10.0,
            timeout=120.0,
            w5_warmup_process=False,
            cache_warmup_process=False,
        )


# ------------------------------------------------------------------------------------ the plan
def parse_target(name):
    """'numpy' or 'ember/numpy' -> ember on numpy; 'torch' -> torch/eager; 'torch.compile' too."""
    name = name.strip()
    if name in ("torch", "torch/eager", "eager"):
        return REFERENCE
    if name in ("torch.compile", "torch/compile", "compile"):
        return Target("torch", "compile")
    return Target("ember", name.split("/", 1)[1] if name.startswith("ember/") else name)


def default_targets(smoke):
    """Every ember backend known or installed, then PyTorch eager and torch.compile.

    Returns (targets, notes): torch.compile is left out of smoke runs, with a note saying so."""
    names = list(KNOWN_EMBER_BACKENDS)
    names += [n for n in installed_backends() if n not in names]
    # Each ember backend eager, then with ember.jit (what the Trainer runs), except the
    # pure-Python one, whose jit has no compiler of its own to show.
    targets = [Target("ember", n) for n in names]
    targets += [Target("ember", n + "+jit") for n in names if n != "python"]
    targets += [REFERENCE, Target("torch", "compile")]
    notes = {}
    if smoke:
        notes["torch/compile"] = "left out of --smoke (compiling takes minutes); name it in --backends to include it"
    return targets, notes


def installed_backends():
    """The names of the ember backends installed, asked in a process of its own: loading a
    plugin may set variables (the numba plugin sets OMP_WAIT_POLICY) that would otherwise
    pass from this process to every child, torch's included."""
    code = "import json, ember; print(json.dumps([row['name'] for row in ember.list_backends()]))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:  # each child will then say why ember is unavailable
        print(f"ember backends could not be listed: {proc.stderr.strip()[-300:]}", file=sys.stderr)
        return []
    return json.loads(proc.stdout.splitlines()[-1])


def select_workloads(spec):
    """'W1,W4' -> every workload whose name starts with W1 or W4, in table order."""
    if not spec:
        return list(WORKLOADS)
    wanted = [w.strip() for w in spec.split(",") if w.strip()]
    chosen = [name for name in WORKLOADS if any(name == w or name.startswith(w + "-") for w in wanted)]
    unknown = [w for w in wanted if not any(name == w or name.startswith(w + "-") for name in WORKLOADS)]
    if unknown:
        raise SystemExit(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}")
    return chosen


def not_applicable(workload, target):
    if workload == "W4-overhead" and (target.backend == "compile" or target.backend.endswith("+jit")):
        return "does not apply: W4 measures eager dispatch, which a compiler removes"
    return None


# ------------------------------------------------------------------------------------ the machine
def cpu_busy(interval=0.5):
    """Fraction of all CPU time spent busy over ``interval`` s (Linux /proc/stat), else None."""

    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait

    try:
        t0, i0 = sample()
        time.sleep(interval)
        t1, i1 = sample()
    except OSError:
        return None
    return round(1 - (i1 - i0) / max(t1 - t0, 1), 3)


def machine(settings):
    def version(dist):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    cpu = platform.processor()
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "threads": settings.threads,
        "versions": {d: version(d) for d in ("ember", "numpy", "torch", "threadpoolctl")},
        "env": {k: os.environ.get(k) for k in RECORDED_ENV},
        "loadavg_at_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }


# ------------------------------------------------------------------------------------ one run
def child_command(workload, target, s: Settings):
    if workload == "gemm":
        args = ["--framework", "gemm", "--backend", target.backend, "--steps", s.gemm_reps, "--gemm-n", s.gemm_n]
    else:
        w = WORKLOADS[workload]
        steps, warmup = s.steps or w.steps, w.warmup if s.warmup is None else s.warmup
        if s.warmup is None and (
            target.backend.endswith("+jit") or (target.framework == "ember" and target.backend in COMPILES_ON_REPEAT)
        ):
            # ember.jit traces the first two calls and compiles its kernels during the third,
            # and ember-numba compiles an eager kernel at the third call with the same shapes:
            # one-time costs (W5 measures them), kept out of the steady-state rate.
            warmup = max(warmup, JIT_WARMUP)
        if w.kind == "first-step":  # W5 measures the first steps themselves: no warm-up
            steps, warmup = FIRST_STEPS, 0
        args = [
            "--workload",
            workload,
            "--framework",
            target.framework,
            "--backend",
            target.backend,
            "--steps",
            steps,
            "--warmup",
            warmup,
            "--batch",
            w.batch or s.batch,
            "--chain",
            s.chain,
            "--max-seconds",
            s.max_seconds,
        ]
    return [sys.executable, "-m", "benchmarks.child", *map(str, args), "--threads", str(s.threads)]


def run_one(workload, target, s: Settings):
    """Start the child, wait, and return its record plus the conditions it ran under."""
    cmd = child_command(workload, target, s)
    env = dict(os.environ, **{v: str(s.threads) for v in THREAD_VARIABLES})
    timeout = s.timeout * (3 if target.backend == "compile" else 1)
    conditions = {"loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None, "cpu_busy": cpu_busy()}
    cold = workload in WORKLOADS and WORKLOADS[workload].cold
    if cold:  # every compile cache empty, and removed afterwards
        scratch = tempfile.mkdtemp(prefix="ember-bench-cold-")
        env.update({v: os.path.join(scratch, v.lower()) for v in COLD_CACHE_VARIABLES})
    env["EMBER_BENCH_LAUNCH"] = repr(time.monotonic())
    t0 = time.monotonic()
    # A session of its own, so a timeout also ends the helpers it started (torch.compile's workers).
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        record = (
            json.loads(lines[-1])
            if lines
            else {"status": "failed", "reason": f"child exited with {proc.returncode} and printed no result"}
        )
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        record = {"status": "timeout", "reason": f"killed after {timeout:.0f} s"}
    finally:
        if cold:
            shutil.rmtree(scratch, ignore_errors=True)
    record["returncode"] = proc.returncode
    if record["status"] != "ok":
        record["stderr_tail"] = stderr[-2000:]
    record.update(
        workload=workload,
        target=target.label,
        wall_s=round(time.monotonic() - t0, 3),
        command=shlex.join(["python", *cmd[1:]]),
        **conditions,
    )
    record["busy"] = conditions["cpu_busy"] is not None and conditions["cpu_busy"] > BUSY
    return record


def describe(record):
    if record["status"] != "ok":
        return f"{record['status']}: {record.get('reason', '')[:160]}"
    text = ", ".join(f"{v:.4g} {METRICS[k][0]}" for k, v in record["metrics"].items() if k in METRICS)
    return f"{text} (busy {record['cpu_busy']})"


def fills_cache(target) -> bool:
    """Does ``target`` compile kernels into a disk cache that its next process reads (an ember
    backend of COMPILES_ON_REPEAT, eager or jit)?"""
    return target.framework == "ember" and target.backend.partition("+")[0] in COMPILES_ON_REPEAT


def skipped(not_run, workload, target):
    return not_run.get(f"{workload} {target.label}") or not_run.get(target.label)


#: The packages whose bytecode W5's processes load (ember's, the plugins', the harness's).
BYTECODE_PACKAGES = ("ember", "ember.backends", "ember_numba", "ember_cupy", "benchmarks")


def byte_compile(packages=None):
    """Write the bytecode of ``packages`` (default :data:`BYTECODE_PACKAGES`; those importable),
    as ``pip install`` does: W5 times a launch as an installed ember starts. From a checkout
    where ``PYTHONDONTWRITEBYTECODE=1`` every process would compile ember's ~130 modules from
    source, 0.17-0.19 s of its start (warm numba+jit W5 0.573 s against 0.386 s with bytecode,
    the same tree). Returns the folders compiled.

    >>> byte_compile(("no_such_package",))
    []
    """
    import compileall
    import importlib.util

    folders = []
    for name in BYTECODE_PACKAGES if packages is None else packages:
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:  # a parent package is not there (ember.backends without ember)
            spec = None
        for folder in (spec and spec.submodule_search_locations) or ():
            compileall.compile_dir(folder, quiet=1)
            folders.append(folder)
    return folders


def run(workloads, targets, s: Settings, not_run, log=print):
    """Every round, every workload, every target not in ``not_run``; returns the child records."""
    records, given_up, missing = [], set(), set()
    plan = [("gemm", t) for t in GEMM_TARGETS] + [
        (w, t) for w in workloads for t in targets if not skipped(not_run, w, t)
    ]
    if any(w != "gemm" and WORKLOADS[w].kind == "first-step" for w, _ in plan):
        byte_compile()
    # round 0: warm-up processes, kept in the records: W5's ("cold process, warm cache"), and
    # one for each steady-state pair whose kernels go to a disk cache (Settings)
    warm_first = [w for w, k in WORKLOADS.items() if k.kind == "first-step" and not k.cold]
    warmups = [(w, t) for w, t in plan if w in warm_first] if s.w5_warmup_process else []
    if s.cache_warmup_process:
        warmups += [(w, t) for w, t in plan if w != "gemm" and WORKLOADS[w].kind != "first-step" and fills_cache(t)]
    for r, pairs in [(0, warmups)] + [(r, plan) for r in range(1, s.rounds + 1)]:
        for workload, target in pairs:
            if (workload, target) in given_up or target in missing:
                continue
            rec = run_one(workload, target, s)
            rec.update(round=r, warmup=r == 0)
            records.append(rec)
            log(f"[{f'round {r}/{s.rounds}' if r else 'warm-up'}] {workload} {target.label}: {describe(rec)}")
            if rec["status"] != "ok":  # the same cause would recur: report it once, run it no more
                given_up.add((workload, target))
                if rec.get("scope") == "backend":
                    missing.add(target)
    return records


def status_matrix(records, workloads, targets, not_run):
    """{workload: {target: "ok" | "<status>: <reason>"}} for every pair asked for: a pair that
    did not run says why (its own failure, its backend's, or not applicable)."""
    first_problem = {}
    for r in records:
        if r["status"] != "ok":
            first_problem.setdefault((r["workload"], r["target"]), r)
            if r.get("scope") == "backend":
                first_problem.setdefault(("*", r["target"]), r)
    matrix = {}
    for w, ts in [("gemm", GEMM_TARGETS)] + [(w, targets) for w in workloads]:
        row = matrix[w] = {}
        for t in ts:
            why = skipped(not_run, w, t)
            problem = first_problem.get((w, t.label)) or first_problem.get(("*", t.label))
            if why:
                row[t.label] = f"not run: {why}"
            elif problem:
                row[t.label] = f"{problem['status']}: {problem.get('reason', '')}"
            elif any(r["status"] == "ok" and r["workload"] == w and r["target"] == t.label for r in records):
                row[t.label] = "ok"
            else:
                row[t.label] = "not run: no record (interrupted?)"
    return matrix


# ------------------------------------------------------------------------------------ the summary
def _spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def best_torch(value, workload, metric, rnd, higher):
    """The faster of PyTorch eager and torch.compile on ``workload`` in round ``rnd``, or
    None unless both ran in that round: a ratio to whichever happened to run would mix the two.

    >>> v = {("W1-train", "torch/eager", 1): {"samples_per_s": 100.0},
    ...      ("W1-train", "torch/compile", 1): {"samples_per_s": 150.0}}
    >>> best_torch(v, "W1-train", "samples_per_s", 1, True), best_torch(v, "W1-train", "samples_per_s", 2, True)
    (150.0, None)
    """
    both = [value.get((workload, t.label, rnd), {}).get(metric) for t in (REFERENCE, COMPILED_TORCH)]
    if not all(both):
        return None
    return max(both) if higher else min(both)


def summarize(records, workloads, targets):
    """One row per (workload, target, metric) with the statistics over rounds."""
    ok = [r for r in records if r["status"] == "ok" and not r.get("warmup")]
    value = {(r["workload"], r["target"], r["round"]): r["metrics"] for r in ok}
    gemm = {
        t: _spread([r["metrics"]["gflops"] for r in ok if r["workload"] == "gemm" and r["target"] == t])
        for t in ("gemm/numpy", "gemm/torch")
        if any(r["target"] == t for r in ok)
    }
    peak = max((g["median"] for g in gemm.values()), default=None)
    # the host's speed round by round (a shared machine's GEMM rate moves from minute to
    # minute): shown beside each round's ratios, so a slow round reads as one
    gemm_by_round = {
        t: {str(r["round"]): r["metrics"]["gflops"] for r in ok if r["workload"] == "gemm" and r["target"] == t}
        for t in gemm
    }
    rows = []
    for workload in workloads:
        for target in targets:
            mine = [r for r in ok if r["workload"] == workload and r["target"] == target.label]
            if not mine:
                continue
            for metric, (label, higher) in METRICS.items():
                values = [r["metrics"][metric] for r in mine if metric in r["metrics"]]
                if not values:
                    continue
                row = {
                    "workload": workload,
                    "target": target.label,
                    "metric": metric,
                    "unit": label,
                    **_spread(values),
                    "busy": sum(r["busy"] for r in mine),
                    "cut_short": sum(r.get("steps_run", 0) < r.get("steps_asked", 0) for r in mine),
                    "maxrss_mib": max(r["maxrss_mib"] for r in mine),
                }
                # Ratios within each round: >1 is faster, for rates and times alike.
                ratios, to_best, by_round = [], [], {}
                for r in mine:
                    mine_v = r["metrics"].get(metric)
                    if mine_v is None:
                        continue
                    ref = value.get((workload, REFERENCE.label, r["round"]), {}).get(metric)
                    best = best_torch(value, workload, metric, r["round"], higher)
                    for base, into in ((ref, ratios), (best, to_best)):
                        if base:
                            into.append(mine_v / base if higher else base / mine_v)
                    if ref:
                        by_round[str(r["round"])] = ratios[-1]
                if ratios:
                    row["speed_vs_torch_eager"] = _spread(ratios)
                    row["speed_vs_torch_eager_by_round"] = by_round
                if to_best:
                    row["speed_vs_best_torch"] = _spread(to_best)
                flops = flops_per_sample(workload)
                if flops and peak and metric == "samples_per_s":
                    row["gflops"] = row["median"] * flops / 1e9
                    row["fraction_of_gemm_peak"] = row["gflops"] / peak
                if WORKLOADS[workload].kind == "first-step":
                    row["parts"] = {
                        k: statistics.median(r["metrics"][k] for r in mine)
                        for k in ("import_s", "build_s", *(f"step{i + 1}_s" for i in range(FIRST_STEPS)))
                        if all(k in r["metrics"] for r in mine)
                    }
                rows.append(row)
    return {"gemm": gemm, "gemm_peak_gflops": peak, "gemm_by_round": gemm_by_round, "rows": rows}


# ------------------------------------------------------------------------------------ the report
def fmt(v):
    if v >= 10_000:
        return f"{v / 1000:.1f}k"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}" if v >= 0.01 else f"{v:.2g}"


def fmt_ratio(v):
    return f"{v:.2f}×" if v >= 0.1 else f"{v:.2g}×"


def _range(s, f=fmt):
    return f"{f(s['median'])} ({f(s['min'])}–{f(s['max'])})"


def blas_line(records):
    """Which BLAS each library used, as the children saw it."""
    seen = []
    for r in records:
        for pool in r.get("threadpools") or []:
            if pool.get("internal_api") in ("openblas", "mkl", "blis", "accelerate"):
                arch = f", {pool['architecture']}" if pool.get("architecture") else ""
                seen.append(
                    f"numpy: {pool['internal_api']} {pool.get('version') or ''} "
                    f"({pool.get('threading_layer')}{arch}, {pool['num_threads']} threads)"
                )
        if "torch_build" in r:
            b = r["torch_build"]
            seen.append(f"torch: {b['blas']} ({b['cpu_capability']}, {b['threads']} threads)")
    return "; ".join(dict.fromkeys(seen)) or "unknown (threadpoolctl missing?)"


#: W5's parts, as the notes column names them (older reports: first_step_s, second_step_s)
PARTS = {
    "import_s": "import",
    "first_step_s": "step 1",
    "second_step_s": "step 2",
    **{f"step{i + 1}_s": f"step {i + 1}" for i in range(FIRST_STEPS)},
}


def by_round(summary):
    """Lines of the per-round table: each round's GEMM rate (the host's speed then), and beside
    it each row's speed vs torch eager in that round. Empty for reports without them (older ones)."""
    gemm = summary.get("gemm_by_round") or {}
    if not gemm:
        return []
    rows = [r for r in summary["rows"] if r.get("speed_vs_torch_eager_by_round") and r["target"] != REFERENCE.label]
    rounds = sorted(
        {int(k) for g in gemm.values() for k in g} | {int(k) for r in rows for k in r["speed_vs_torch_eager_by_round"]}
    )
    cells = lambda values, f: " | ".join(f(values[str(k)]) if str(k) in values else "–" for k in rounds)  # noqa: E731
    out = [
        "",
        "Per round: the float32 GEMM rate measured at the round's start (GFLOP/s: the host's speed "
        "then), and each row's speed vs torch eager in that round.",
        "",
        "| | " + " | ".join(f"round {k}" for k in rounds) + " |",
        "|---|" + "---|" * len(rounds),
    ]
    out += [f"| GEMM {t.split('/')[1]} GFLOP/s | {cells(g, fmt)} |" for t, g in gemm.items()]
    out += [
        f"| {r['workload']} {r['target']} ({r['unit']}) | {cells(r['speed_vs_torch_eager_by_round'], fmt_ratio)} |"
        for r in rows
    ]
    return out


def markdown(report):
    m, summary, records = report["machine"], report["summary"], report["records"]
    s = report["settings"]
    busy = [r for r in records if r["busy"]]
    out = [
        f"### {report['date']} — `{report['command']}`",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['platform']}, Python {m['python']}; "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
        + ".",
        f"Threads: {s['threads']} for every pool. BLAS: {blas_line(records)}. "
        + ", ".join(f"{k}={v or '(unset)'}" for k, v in m["env"].items())
        + ".",
        f"{s['rounds']} round(s), batch {s['batch']}, float32, backends interleaved within each round; "
        f"{len(records)} processes, {len(busy)} of them started with the CPUs more than "
        f"{BUSY:.0%} busy (1-min load average at start: {m['loadavg_at_start'][0] if m['loadavg_at_start'] else '?':.2f}).",
        "",
    ]
    gemm = summary["gemm"]
    if gemm:
        out += [
            "float32 GEMM "
            f"{s['gemm_n']}³, best of {s['gemm_reps']} per process, GFLOP/s: "
            + "; ".join(f"{t.split('/')[1]} {_range(g)}" for t, g in gemm.items())
            + f" → peak {fmt(summary['gemm_peak_gflops'])} GFLOP/s.",
            "",
        ]
    out += [
        "| workload | backend | metric | median (min–max) | speed vs torch eager | vs best PyTorch "
        "| % GEMM peak | peak RSS MiB | notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in summary["rows"]:
        ratio = row.get("speed_vs_torch_eager")
        ratio = "1 (reference)" if row["target"] == REFERENCE.label else (_range(ratio, fmt_ratio) if ratio else "–")
        best = row.get("speed_vs_best_torch")
        best = _range(best, fmt_ratio) if best else "–"
        share = row.get("fraction_of_gemm_peak")
        peak = "–" if share is None else f"{share:.0%}" if share >= 0.01 else f"{share * 100:.1g}%"
        notes = [f"runs: {row['n']}"]
        if row["busy"]:
            notes.append(f"{row['busy']} busy")
        if row["cut_short"]:
            notes.append(f"{row['cut_short']} cut at {s['max_seconds']:.0f} s")
        if "parts" in row:
            notes.append(", ".join(f"{PARTS.get(k, k)} {fmt(v)} s" for k, v in row["parts"].items() if k in PARTS))
        out.append(
            f"| {row['workload']} | {row['target']} | {row['unit']} | {_range(row)} | {ratio} | {best} | {peak} "
            f"| {row['maxrss_mib']:.0f} | {', '.join(notes)} |"
        )
    out += by_round(summary)
    problems = {}  # reason -> pairs, so a missing backend is one line, not one per workload
    for w, row in report["status"].items():
        for t, status in row.items():
            if status != "ok":
                short = status.split(" (at ")[0].splitlines()[0][:300]  # ember's "(at file:line)" tail
                problems.setdefault((t, short), []).append(w)
    if problems:
        out += ["", "Not measured:"]
        for (t, why), ws in problems.items():
            every = len(ws) == len(report["workloads"]) and "gemm" not in ws
            out.append(f"- {t}, {'every workload' if every else ', '.join(ws)}: {why}")
    out += [
        "",
        "Speed vs torch eager: ratio to PyTorch eager in the same round (>1 is faster), median "
        "(min–max) over rounds. Vs best PyTorch: ratio to the faster of PyTorch eager and torch.compile "
        "in the same round, over the rounds where both ran. % GEMM peak: matrix-product FLOPs the workload "
        "achieved over the best GEMM rate above. Warm-up steps and the warm-up processes (W5's, and one a pair on a backend with a disk cache of kernels) are in the JSON, "
        "not in the statistics. W5-cold starts each process with empty compile caches.",
        "",
    ]
    return "\n".join(out)


#: What a report says for a cold run's cache folder (see :func:`_portable`).
SCRATCH = "(a new temporary folder, removed after the run)"


def _portable(record):
    """``record`` with the scratch cache folders of a cold run (W5-cold: new folders under the
    temporary directory, removed after the run) named as such, not by their machine paths, so a
    saved report can be committed; the records :func:`run_one` returns keep the paths."""
    scratch = Path(tempfile.gettempdir())
    dirs = record.get("cache_dirs")
    if not dirs:
        return record
    named = {k: SCRATCH if v and Path(v).is_relative_to(scratch) else v for k, v in dirs.items()}
    return {**record, "cache_dirs": named}


def report(command, workloads, targets, not_run, s: Settings, records):
    records = [_portable(r) for r in records]
    return {
        "command": command,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "settings": s.__dict__,
        "machine": machine(s),
        "workloads": workloads,
        "targets": [t.label for t in targets],
        "not_run": not_run,
        "records": records,
        "status": status_matrix(records, workloads, targets, not_run),
        "summary": summarize(records, workloads, targets),
    }


DOCS_HEADER = "# Performance\n\n(see benchmarks/; results are appended below, newest last)\n\n## Results\n"


def append_docs(path, text):
    path = Path(path)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(DOCS_HEADER)
    with path.open("a") as f:
        f.write("\n" + text)
