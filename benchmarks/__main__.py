"""``python -m benchmarks run [--workloads W1,W4] [--backends numpy,torch] [--smoke]``

Runs the workloads on every backend found (or those named), prints the Markdown table, writes
the JSON, and appends the table to docs/performance.md (full runs only).
``python -m benchmarks report RESULTS.json`` prints the table of a saved run again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from . import recording, runner
from .workloads import WORKLOADS


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m benchmarks", description="ember vs PyTorch, side by side.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the benchmarks and report")
    r.add_argument(
        "--workloads", default="", help=f"comma list of {', '.join(WORKLOADS)} or prefixes (W1); default all"
    )
    r.add_argument(
        "--backends",
        default="",
        help="comma list: ember backends (numpy, python, numba, cupy, ...), torch, torch.compile; "
        "default every one known",
    )
    r.add_argument("--smoke", action="store_true", help="a few steps of everything, to check the harness")
    r.add_argument("--rounds", type=int)
    r.add_argument("--steps", type=int, help="measured steps per process, for every workload")
    r.add_argument(
        "--warmup",
        type=int,
        help="warm-up steps per process, for every workload and target alike (default: the workload's, "
        "at least 3 for ember.jit targets)",
    )
    r.add_argument("--batch", type=int)
    r.add_argument("--threads", type=int)
    r.add_argument("--timeout", type=float, help="seconds per process before it is killed")
    r.add_argument("--max-seconds", type=float, help="measured seconds per process before it stops early")
    r.add_argument(
        "--json", help="where to write the JSON (default benchmarks/results/<date>.json; smoke: a temporary file)"
    )
    r.add_argument(
        "--docs",
        default=str(runner.ROOT / "docs" / "performance.md"),
        help="Markdown file the table is appended to (full runs only)",
    )
    r.add_argument("--no-docs", action="store_true", help="do not append to --docs")
    show = sub.add_parser("report", help="print the Markdown table of a saved JSON again")
    show.add_argument("json")
    args = p.parse_args(argv)
    if args.command == "report":
        print(runner.markdown(json.loads(Path(args.json).read_text())))
        return 0

    settings = runner.Settings.smoke() if args.smoke else runner.Settings()
    for name in ("rounds", "steps", "warmup", "batch", "threads", "timeout", "max_seconds"):
        if getattr(args, name) is not None:
            setattr(settings, name, getattr(args, name))
    workloads = runner.select_workloads(args.workloads)
    if args.backends:
        targets, not_run = [runner.parse_target(b) for b in args.backends.split(",") if b.strip()], {}
    else:
        targets, not_run = runner.default_targets(args.smoke)
    for w in workloads:
        for t in targets:
            why = runner.not_applicable(w, t)
            if why:
                not_run[f"{w} {t.label}"] = why

    # the command as the docs show it: a --json or --docs path outside the repository left out
    command = recording.portable_command("python -m benchmarks", argv, ("--json", "--docs"))
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    recording.warn_blas_overrides("python -m benchmarks run")
    log(f"{command}: {len(workloads)} workloads x {', '.join(t.label for t in targets)}, {settings.rounds} round(s)")
    records = runner.run(workloads, targets, settings, not_run, log=log)
    report = runner.report(command, workloads, targets, not_run, settings, records)
    table = runner.markdown(report)

    if args.json:
        path = Path(args.json)
    elif args.smoke:
        path = Path(tempfile.gettempdir()) / f"ember-benchmarks-smoke-{os.getpid()}.json"
    else:
        path = runner.ROOT / "benchmarks" / "results" / f"{datetime.now(UTC):%Y-%m-%d-%H%M}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
    if not (args.smoke or args.no_docs):
        runner.append_docs(args.docs, table)
        log(f"appended the table to {args.docs}")
    print(table)
    log(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
