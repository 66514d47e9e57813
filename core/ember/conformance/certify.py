"""``ember certify NAME``: run the conformance suite on a backend and write its certificate.

The suite runs in a child process (``python -m pytest`` with only the conformance plugin
loaded), which writes one JSON record per test; this module turns those records into
``certificate.json`` and ``certificate.md``: what was certified (backend, its distribution and
version, ember and API versions, date, machine, seed, tier 6's data and its SHA-256), per tier
pass/fail/skip counts, the op x dtype matrix of tier 2, gradients, fused ops, layers and
determinism, the tolerances used, the failures with their root causes first (triage.py), and
what the backend implements without declaring it.

Exit status: 0 when nothing failed, 1 when something did (or, with ``--require-available``, the
backend cannot run here), 2 for a usage error such as an unknown backend.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from ember import dtypes as D
from ember.conformance import TIERS
from ember.conformance.triage import cell, triage

SYMBOL = {"pass": "✓", "fail": "✗", "undeclared": "u", "skip": "s", "n/a": "·"}
DEFAULT_MAX_EXAMPLES = 25


class UsageError(Exception):
    """A mistake in the command line: reported as one ``ember: error:`` line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse, whose errors become :class:`UsageError` (one line, not the usage text)."""

    def error(self, message):
        raise UsageError(message)


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="ember certify",
        description="Run the conformance suite on a backend and write certificate.json and certificate.md.",
    )
    p.add_argument("name", help="backend name (as in `ember backends`)")
    p.add_argument(
        "--tiers", default=",".join(map(str, TIERS)), help="comma-separated tiers to run (default: all, 0-6)"
    )
    p.add_argument("--out", default=None, help="directory for the certificate (default: ./ember-certificate-NAME)")
    p.add_argument(
        "--require-available",
        action="store_true",
        help="fail when the backend cannot run here, instead of skipping (for CI; default: skip)",
    )
    p.add_argument(
        "--max-examples",
        type=int,
        default=DEFAULT_MAX_EXAMPLES,
        help=f"hypothesis examples per (primitive, dtype) in tier 2 (default: {DEFAULT_MAX_EXAMPLES})",
    )
    p.add_argument(
        "--ops", default=None, help="only these primitives / fused ops / layers (comma-separated; default: all)"
    )
    p.add_argument(
        "--dtypes",
        default=None,
        help="only cases of these dtypes (comma-separated; cases without a dtype always run; default: all)",
    )
    p.add_argument(
        "--backend-module",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE (dotted name or .py path) first and register its ember_backends(): "
        "certify a backend that is not installed (repeatable; default: none)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="added to the seeds of tiers 3, 5 and 6's inputs and weights (default: 0)"
    )
    p.add_argument("--quiet", action="store_true", help="do not show pytest's progress (default: show it)")
    return p


def main(argv=None) -> int:
    """Entry point of ``ember certify``; returns the exit status. Every usage error (an unknown
    backend, a ``--backend-module`` that registers none, a bad tier) is one line and status 2,
    before the suite starts.

    >>> main(["--help"])  # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
    usage: ember certify ...
    0
    >>> main(["numpy", "--tiers", "0,9"])
    2
    """
    try:
        args, tiers = _arguments(argv)
        problem = _check_setup(args)
        if problem:
            raise UsageError(problem)
        _check_backend(args)
    except UsageError as err:
        print(f"ember: error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    out = os.path.abspath(args.out or f"ember-certificate-{args.name}")
    report = run_suite(args, tiers)
    if report is None:
        return 2
    os.makedirs(out, exist_ok=True)
    cert = certificate(report, tiers, command=["ember", "certify", *(argv if argv is not None else sys.argv[1:])])
    with open(os.path.join(out, "certificate.json"), "w", encoding="utf-8") as f:
        json.dump(cert, f, indent=1, sort_keys=False)
        f.write("\n")
    with open(os.path.join(out, "certificate.md"), "w", encoding="utf-8") as f:
        f.write(markdown(cert))
    print(summary(cert, out))
    return 0 if cert["verdict"] in ("pass", "unavailable") else 1


def _arguments(argv):
    args = parser().parse_args(argv)
    try:
        tiers = sorted({int(t) for t in args.tiers.split(",") if t.strip()})
    except ValueError:
        raise UsageError(f"--tiers takes comma-separated numbers 0-6, got {args.tiers!r}") from None
    if not tiers or not set(tiers) <= set(TIERS):
        raise UsageError(f"--tiers {args.tiers}: tiers are 0-6")
    if args.max_examples < 1:
        raise UsageError(f"--max-examples must be at least 1, got {args.max_examples}")
    if args.dtypes is not None:
        known = [d.name for d in D.ALL + D.OPTIONAL]
        names = [d.strip() for d in args.dtypes.split(",") if d.strip()]
        unknown = [d for d in names if d not in known]
        if not names or unknown:
            raise UsageError(
                f"--dtypes {args.dtypes}: unknown dtype {', '.join(unknown) or '(none given)'}; "
                f"ember's dtypes are {', '.join(known)}"
            )
    return args, tiers


def _check_setup(args) -> str | None:
    """A missing tool or ``--backend-module`` file, in one line, or None."""
    for module in ("pytest", "hypothesis", "numpy"):
        try:
            __import__(module)
        except ImportError:
            return f"the conformance suite needs {module}: pip install 'ember[certify]'"
    for spec in args.backend_module:
        if (spec.endswith(".py") or os.sep in spec) and not os.path.exists(spec):
            return f"--backend-module {spec!r}: no such file"
    return None


def _check_backend(args) -> None:
    """Raise UsageError for a --backend-module that cannot be imported or brings nothing (no
    backend, no primitive), or an unknown backend name. Which backends exist is asked of a
    child process: its registry sees plugins installed after this process started, and the
    backend modules are not imported into the command's own process."""
    modules = [os.path.abspath(m) if os.path.exists(m) else m for m in args.backend_module]
    code = (
        "import sys, json; from ember.conformance.certify import probe; "
        "print(json.dumps(probe(json.loads(sys.argv[1]))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(modules)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONWARNINGS="ignore"),
        check=False,
    )
    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise UsageError(f"cannot list the installed backends: {proc.stderr.strip()[-500:]}") from None
    for spec, problem in zip(args.backend_module, found["modules"]):
        if problem:
            raise UsageError(f"--backend-module {spec}: {problem}")
    if args.name not in found["backends"]:
        why = f": {found['problems'][args.name]}" if args.name in found["problems"] else ""
        raise UsageError(
            f"unknown backend {args.name!r}{why} (installed: {', '.join(found['backends']) or 'none'}); "
            f"install its plugin, or load it with --backend-module"
        )


def probe(modules) -> dict:
    """The backends this Python sees after importing ``modules`` (``--backend-module``
    arguments): ``{"backends": names, "problems": {name: why}, "modules": [problem or None]}``."""
    from ember.conformance.plugin import import_backend_module
    from ember.primitives import PRIMITIVES
    from ember.registry import REGISTRY

    REGISTRY.discover()
    problems: list[str | None] = []
    for spec in modules:
        before = (set(REGISTRY.infos), len(PRIMITIVES))
        try:
            module = import_backend_module(spec)
        except BaseException as exc:  # noqa: BLE001 - reported as the user's mistake, in one line
            problems.append(f"importing it raised {type(exc).__name__}: {exc}")
            continue
        hook = getattr(module, "ember_backends", None)
        if (callable(hook) and list(hook())) or (set(REGISTRY.infos), len(PRIMITIVES)) != before:
            problems.append(None)  # a backend, or a primitive to test
        elif callable(hook):
            problems.append("its ember_backends() returned no backend")
        else:
            problems.append(
                "it registers no backend (no ember_backends() returning BackendInfo records) and defines no primitive"
            )
    return {"backends": sorted(REGISTRY.infos), "problems": dict(REGISTRY.problems), "modules": problems}


def run_suite(args, tiers) -> dict | None:
    """Run pytest on the suite in a child process; return the plugin's JSON report."""
    with tempfile.TemporaryDirectory(prefix="ember-certify-") as work:
        report_path = os.path.join(work, "results.json")
        ini = os.path.join(work, "pytest.ini")
        with open(ini, "w", encoding="utf-8") as f:
            f.write("[pytest]\n")  # the user's own pytest configuration does not apply
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "ember.conformance.plugin",
            "-p",
            "no:cacheprovider",
            "-c",
            ini,
            "--rootdir",
            work,
            "--pyargs",
            "ember.conformance",
            "--ember-backend",
            args.name,
            "--ember-report",
            report_path,
            "--ember-tiers",
            ",".join(map(str, tiers)),
            "--ember-max-examples",
            str(args.max_examples),
            "-q",
            "--tb=no",
            "-o",
            "console_output_style=count",
        ]
        if args.require_available:
            cmd.append("--ember-require-available")
        if args.ops:
            cmd += ["--ember-ops", args.ops]
        if args.dtypes:
            cmd += ["--ember-dtypes", args.dtypes]
        if args.seed:
            cmd += ["--ember-seed", str(args.seed)]
        for spec in args.backend_module:
            cmd += ["--ember-backend-module", os.path.abspath(spec) if os.path.exists(spec) else spec]
        env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
        env.pop("PYTEST_ADDOPTS", None)
        proc = subprocess.run(
            cmd,
            cwd=work,
            env=env,
            text=True,
            stdout=subprocess.PIPE if args.quiet else None,
            stderr=subprocess.STDOUT if args.quiet else None,
        )
        if not os.path.exists(report_path):
            tail = (proc.stdout or "")[-3000:] if args.quiet else ""
            print(
                f"ember certify: the suite did not run (pytest exit status {proc.returncode}).\n{tail}", file=sys.stderr
            )
            return None
        with open(report_path, encoding="utf-8") as f:
            return json.load(f)


# ----------------------------------------------------------------------------- the certificate
def _status(rec) -> str:
    if rec["outcome"] == "passed":
        return "pass"
    if rec["outcome"] == "failed":
        return "fail"
    return "undeclared" if rec["message"].startswith("[undeclared]") else "skip"


def _skip_kind(message: str) -> str:
    if message.startswith("[") and "]" in message:
        return message[1 : message.index("]")]
    return "other"


def certificate(report: dict, tiers, command=()) -> dict:
    """The certificate (a plain dict) from the plugin's report."""
    meta, tests = report["meta"], report["tests"]
    per_tier = {}
    for t in tiers:
        recs = [r for r in tests if r["tier"] == t]
        skips: dict = {}
        for r in recs:
            if r["outcome"] == "skipped":
                kind = _skip_kind(r["message"])
                skips[kind] = skips.get(kind, 0) + 1
        per_tier[str(t)] = {
            "name": TIERS[t],
            "passed": sum(r["outcome"] == "passed" for r in recs),
            "failed": sum(r["outcome"] == "failed" for r in recs),
            "skipped": sum(r["outcome"] == "skipped" for r in recs),
            "skip_reasons": skips,
        }
    # certified: tiers 0, 1, ... in order, each run without a failure, on a backend that ran here
    certified = []
    for t in sorted(TIERS):
        row = per_tier.get(str(t))
        if row is None or row["failed"] or not meta.get("available"):
            break
        certified.append(t)

    dtypes = [d.name for d in D.ALL + D.OPTIONAL]  # the contract's eight, then the optional integers
    matrix: dict[str, dict[str, str]] = {}
    covered: dict[str, list[str]] = {}  # covered: the dtypes tier 2 has cases for (the primitive's record)
    for r in (r for r in tests if r["tier"] == 2):
        matrix.setdefault(r["op"], dict.fromkeys(dtypes, "n/a"))[r["dtype"]] = _status(r)
        covered.setdefault(r["op"], []).append(r["dtype"])
    gradients: dict[str, Any] = {}
    fused: dict[str, Any] = {}
    layers: dict[str, Any] = {}
    determinism: dict[str, Any] = {}
    for r in tests:
        if "deterministic" in r["test"]:
            determinism[r["op"] or r["test"]] = _status(r)
        elif r["tier"] == 3:
            gradients.setdefault(r["op"], {})[f"order{r.get('order', 1)}"] = _status(r)
        elif r["tier"] == 4:
            fused.setdefault(r["op"], {})[r["dtype"]] = _status(r)
        elif r["tier"] == 5:
            layers[r["op"]] = _status(r)
    failures = [
        {
            k: r.get(k)
            for k in (
                "tier",
                "op",
                "dtype",
                "order",
                "test",
                "nodeid",
                "message",
                "failing_call",
                "culprit",
                "primitives",
            )
        }
        for r in tests
        if r["outcome"] == "failed"
    ]
    causes = triage(failures)
    # root causes first (their tier-2 cells, or the primitive a higher tier named), then the rest
    first = [c for root in causes["root_causes"] for c in (root["cells"] or [root["primitive"]])]
    declared_failing = list(dict.fromkeys(first + sorted({cell(f) for f in failures if f["op"]})))
    unavailable = not meta.get("available") and not meta.get("load_error")
    verdict = "fail" if failures else ("unavailable" if unavailable else "pass")
    return {
        "certificate_version": 2,
        "backend": {
            "name": meta["backend"],
            "version": meta.get("backend_version"),
            "api_version": meta.get("backend_api_version"),
            "class": meta.get("backend_class"),
            "device": meta.get("device"),
            "devices": meta.get("devices"),
            "declared_dtypes": meta.get("declared_dtypes"),
            "declared_fused": meta.get("declared_fused"),
            "declared_ops": len(meta.get("declared_ops") or []),
            "notes": meta.get("notes"),
        },
        "distribution": meta.get("distribution"),
        "ember": {"version": meta["ember_version"], "api_version": meta["api_version"]},
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": meta["machine"],
        "run": {
            "command": " ".join(command),
            "tiers": list(tiers),
            "max_examples": meta.get("max_examples"),
            "ops": meta.get("ops_selected") or None,
            "dtypes": meta.get("dtypes_selected") or None,
            "require_available": meta.get("require_available"),
            "seconds": meta.get("seconds"),
            "cpu_seconds": meta.get("cpu_seconds"),
            "gradient_dtype": meta.get("grad_dtype"),
            "seed": meta.get("seed", 0),
        },
        "dataset": meta.get("dataset"),
        "available": bool(meta.get("available")),
        "unavailable_reason": meta.get("unavailable_reason") or "",
        "load_error": meta.get("load_error"),
        "verdict": verdict,
        "certified_tiers": certified,
        "level": certified[-1] if certified else None,
        "tiers": per_tier,
        "matrix": {"dtypes": dtypes, "ops": {op: matrix[op] for op in matrix}, "covered_dtypes": covered},
        "gradients": gradients,
        "fused": fused,
        "layers": layers,
        "determinism": determinism,
        "tolerances": meta.get("tolerances"),
        "root_causes": causes["root_causes"],
        "independent_failures": causes["independent"],
        "declared_but_failing": declared_failing,
        "implemented_but_undeclared": {
            "primitives": meta.get("undeclared_implemented", []),
            "fused": meta.get("undeclared_implemented_fused", []),
        },
        "failures": failures,
    }


def _level(cert: dict) -> str:
    """``tiers 0, 1, 2``, or why none: a level counts tiers from 0 up, so a passing run of
    ``--tiers 2,3`` alone certifies no level (the tiers it skipped are not known to pass)."""
    if cert["level"] is not None:
        return f"tiers {', '.join(map(str, cert['certified_tiers']))}"
    ran = sorted(int(t) for t in cert["tiers"])
    if cert["verdict"] == "pass" and ran and ran[0] != 0:
        return "no level: a level counts tiers from 0 up, and tier 0 did not run"
    return "none"


def markdown(cert: dict) -> str:
    """The certificate as a Markdown page."""
    b, m = cert["backend"], cert["machine"]
    level = _level(cert)
    lines = [
        f"# ember conformance certificate: `{b['name']}`",
        "",
        f"**Verdict: {cert['verdict'].upper()}** — certified {level}.",
        "",
        "| | |",
        "|---|---|",
        f"| backend | `{b['name']}` {b['version']} (`{b['class']}`), device {b['device']} |",
        f"| backend API | {b['api_version']} (ember speaks {cert['ember']['api_version']}) |",
        f"| distribution | {_distribution(cert['distribution'])} |",
        f"| ember | {cert['ember']['version']} |",
        f"| date | {cert['date']} |",
        f"| machine | {m.get('platform')}, {m.get('cpu_count')} CPUs, Python {m.get('python')}"
        f"{', numpy ' + m['numpy'] if m.get('numpy') else ''} |",
        f"| run | `{cert['run']['command']}` ({cert['run']['seconds']:.0f} s wall, "
        f"{cert['run']['cpu_seconds']:.0f} s CPU; {cert['run']['max_examples']} hypothesis examples per "
        f"primitive and dtype; gradients in {cert['run']['gradient_dtype']}; seed {cert['run']['seed']}) |",
        f"| tier-6 data | {_dataset(cert['dataset'])} |",
        f"| declared | {b['declared_ops']} primitives; dtypes {', '.join(b['declared_dtypes'] or [])}; "
        f"fused {', '.join(b['declared_fused'] or []) or 'none'} |",
        "",
    ]
    if not cert["available"]:
        lines += [f"Backend unavailable here: {cert['unavailable_reason'] or cert['load_error']}", ""]
    lines += ["## Tiers", "", "| tier | | passed | failed | skipped | skip reasons |", "|---|---|---|---|---|---|"]
    for t, row in cert["tiers"].items():
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(row["skip_reasons"].items())) or ""
        lines.append(f"| {t} | {row['name']} | {row['passed']} | {row['failed']} | {row['skipped']} | {reasons} |")
    not_run = [f"{t} ({name})" for t, name in TIERS.items() if str(t) not in cert["tiers"]]
    if not_run:
        lines += ["", f"Not run: tier {', '.join(not_run)}."]
    if cert["matrix"]["ops"]:
        dts = cert["matrix"]["dtypes"]
        lines += [
            "",
            "## Primitives × dtypes (tier 2)",
            "",
            "✓ pass · ✗ fail · u undeclared (op or dtype) · s skipped · `·` not applicable",
            "",
            "| primitive | " + " | ".join(dts) + " |",
            "|---|" + "---|" * len(dts),
        ]
        for op, row in cert["matrix"]["ops"].items():
            lines.append(f"| {op} | " + " | ".join(SYMBOL[row[d]] for d in dts) + " |")
    if cert["gradients"]:
        lines += ["", "## Gradients (tier 3)", "", "| primitive | first order | second order |", "|---|---|---|"]
        for op, row in cert["gradients"].items():
            lines.append(f"| {op} | {SYMBOL[row.get('order1', 'n/a')]} | {SYMBOL[row.get('order2', 'n/a')]} |")
    if cert["fused"]:
        lines += ["", "## Fused ops (tier 4)", "", "| fused op | float32 | float64 |", "|---|---|---|"]
        for op, row in cert["fused"].items():
            lines.append(f"| {op} | {SYMBOL[row.get('float32', 'n/a')]} | {SYMBOL[row.get('float64', 'n/a')]} |")
    if cert["layers"]:
        lines += ["", "## Layers (tier 5)", "", "| layer | |", "|---|---|"]
        lines += [f"| {name} | {SYMBOL[s]} |" for name, s in cert["layers"].items()]
    if cert["determinism"]:
        lines += [
            "",
            "## Determinism (tiers 5 and 6)",
            "",
            "Each case twice (every primitive's output equal bit for bit) and under ember.jit once more.",
            "",
            "| case | |",
            "|---|---|",
        ]
        lines += [f"| {name} | {SYMBOL[s]} |" for name, s in cert["determinism"].items()]
    tol = cert["tolerances"] or {}
    if tol:
        lines += ["", "## Tolerances", "", "| dtype | rtol | atol | eps |", "|---|---|---|---|"]
        lines += [f"| {d} | {v['rtol']:g} | {v['atol']:g} | {v['eps']:.3g} |" for d, v in tol["elementwise"].items()]
        lines += [
            "",
            f"Accumulating ops: {tol['accumulation']}. Integers and bool: {tol['integers_and_bool']}.",
            "Gradients: "
            + "; ".join(
                f"{d}: rtol {v['rtol_vs_reference']:g} vs the reference, "
                f"{v['rtol_vs_finite_differences']:g} vs finite differences "
                f"(step {v['fd_step']:g})"
                for d, v in tol["gradients"].items()
            )
            + ".",
        ]
    undeclared = cert["implemented_but_undeclared"]
    lines += [
        "",
        "## Implemented but not declared (reported, not failures)",
        "",
        f"- primitives: {', '.join(undeclared['primitives']) or 'none'}",
        f"- fused ops: {', '.join(undeclared['fused']) or 'none'}",
    ]
    lines += ["", "## Declared but failing", ""]
    if not cert["failures"]:
        lines.append("None.")
    else:
        lines += _causes(cert) + ["", "### Every failure", ""]
    for f in cert["failures"]:
        what = f"{f['op']} [{f['dtype']}]" if f["dtype"] else (f["op"] or f["test"])
        msg = " ".join(str(f["message"]).split())
        during = f" (while running `{f['failing_call']}`)" if f.get("failing_call") else ""
        lines.append(
            f"- tier {f['tier']}, **{what}** (`{f['nodeid'].split('::')[-1]}`){during}: "
            f"{msg[:400] + (' ...' if len(msg) > 400 else '')}"
        )
    return "\n".join(lines) + "\n"


def _short(message: str, n: int = 300) -> str:
    text = " ".join(str(message).split())
    return text[:n] + (" ..." if len(text) > n else "")


def _causes(cert: dict) -> list:
    """Markdown lines: the root causes, each with its consequences, then independent failures."""
    lines = []
    if cert["root_causes"]:
        lines += [
            "### Root causes",
            "",
            "Primitives that fail on their own; the failures listed under each "
            "applied that primitive (recorded while they ran), so they are its consequences.",
            "",
        ]
    for k, root in enumerate(cert["root_causes"], 1):
        lines.append(f"{k}. **{root['primitive']}** ({_found(root)}): {_short(root['message'])}")
        if root["consequences"]:
            lines.append(
                f"   - consequences of {root['primitive']} ({len(root['consequences'])}): "
                + "; ".join(c["label"] for c in root["consequences"])
            )
    if cert["independent_failures"]:
        lines += ["", "### Other failures (no failing primitive explains them)", ""]
        lines += [f"- {f['label']}: {_short(f['message'])}" for f in cert["independent_failures"]]
    return lines


def _found(root) -> str:
    """``tier 2: sum[float32], sum[float64]`` or ``found by tier 5 Linear (test_layer)``."""
    if root["cells"]:
        return f"tier 2: {', '.join(root['cells'])}"
    return "found by " + "; ".join(root["found_in"])


def _distribution(dist) -> str:
    if not dist:
        return "unknown"
    if dist.get("name"):
        return f"{dist['name']} {dist['version']}"
    return f"not installed (loaded from `{dist.get('source')}`)"


def _dataset(data) -> str:
    if not data:
        return "not used"
    checked = "pinned SHA-256 matched" if data["pinned"] else "**does not match ember's pinned SHA-256**"
    return (
        f"{data['name']} from {data['source']} ({'already in the cache' if data['from_cache'] else 'not from the cache'}; "
        f"{checked}; " + ", ".join(f"{n} {h}" for n, h in data["files"].items()) + ")"
    )


def summary(cert: dict, out: str) -> str:
    rows = [
        f"  tier {t} {row['name']:<24} {row['passed']:4d} passed {row['failed']:4d} failed {row['skipped']:4d} skipped"
        for t, row in cert["tiers"].items()
    ]
    level = _level(cert)
    extra = ""
    for root in cert["root_causes"]:
        tiers = sorted({c["tier"] for c in root["consequences"]})
        extra += f"\n  root cause: {root['primitive']} ({_found(root)})" + (
            f"; {len(root['consequences'])} failures in tier {', '.join(map(str, tiers))} are its consequences"
            if tiers
            else ""
        )
    if cert["declared_but_failing"]:
        extra += f"\n  declared but failing: {', '.join(cert['declared_but_failing'][:20])}" + (
            " ..." if len(cert["declared_but_failing"]) > 20 else ""
        )
    undeclared = cert["implemented_but_undeclared"]["primitives"] + cert["implemented_but_undeclared"]["fused"]
    if undeclared:
        extra += f"\n  implemented but undeclared: {', '.join(undeclared)}"
    return (
        f"ember certify {cert['backend']['name']}: {cert['verdict'].upper()} (certified {level})\n"
        + "\n".join(rows)
        + extra
        + f"\n  certificate: {os.path.join(out, 'certificate.md')}"
    )


if __name__ == "__main__":
    sys.exit(main())
