"""The eager fast path before and after a change to dispatch, measured side by side.

Every eager step goes through ``dispatch.apply1/apply2``, so their overhead is paid once per
operation. This script times 10^5 small ``add`` + ``mul`` pairs, with and without
``requires_grad``, single small ``exp`` and ``sum`` calls, and the backward walk per node of a
chain of 1,000 adds (W4's shape), on two versions of ember: a git revision (``--base``, default ``main``) and
the working tree. Time is CPU time (waiting for a core on a loaded machine does not count),
in bursts of 5,000 pairs, keeping the fastest burst. Both versions are copied into a temporary
folder laid out as the installed package (``ember`` with ``ember.backends`` inside), and each
timing runs in its own process with the editable install's import hook removed, so each
process imports exactly one version. Rounds alternate which version runs first; the report
gives the ratio (working tree / base) per workload as the median of the rounds with its range.

    python benchmarks/dispatch_overhead.py --base main --rounds 7
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import sys, time
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")
                    and "editable" not in type(f).__module__]
sys.path.insert(0, sys.argv[1])
import ember
assert ember.__file__.startswith(sys.argv[1]), ember.__file__
n = int(sys.argv[2])
for grad in (False, True):
    x = ember.ones(8, requires_grad=grad)
    y = ember.ones(8)
    for _ in range(2000):            # warm up: caches, allocator
        (x + y) * y
    best = float("inf")
    for _ in range(n // 5000):       # the fastest burst: the one the machine's load left alone
        t0 = time.thread_time()
        for _ in range(5000):
            (x + y) * y
        best = min(best, time.thread_time() - t0)
    print(f"{'grad' if grad else 'plain'} {best / (2 * 5000) * 1e9:.1f}")
x = ember.ones(8)
for label, op in (("exp", lambda: x.exp()), ("sum", lambda: x.sum())):
    for _ in range(2000):
        op()
    best = float("inf")
    for _ in range(n // 5000):
        t0 = time.thread_time()
        for _ in range(5000):
            op()
        best = min(best, time.thread_time() - t0)
    print(f"{label} {best / 5000 * 1e9:.1f}")
w, b = ember.ones(1, 1, requires_grad=True), ember.ones(1, 1)
best = float("inf")
for _ in range(max(3, n // 10000)):
    y = w
    for _ in range(1000):
        y = y + b
    loss = y.sum()
    t0 = time.thread_time()
    loss.backward()
    best = min(best, time.thread_time() - t0)
    w.grad = None
print(f"backward {best / 1000 * 1e9:.1f}")
"""


#: where each part of the repository goes in the laid-out package (repository prefix -> folder)
PLACES = {"core/ember/": "ember/", "backends/": "ember/backends/", "plugins/numba/ember_numba/": "ember_numba/"}
#: what a layout copies by default: ember with its built-in backends
TOPS = ("core/ember", "backends")


def _layout(dest, files):
    """Lay out ``files`` (repository path -> bytes) as installed packages, by :data:`PLACES`."""
    for path, data in files.items():
        prefix = next((p for p in PLACES if path.startswith(p)), None)
        if prefix is None:
            continue
        target = os.path.join(dest, PLACES[prefix] + path[len(prefix) :])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)


def _from_git(rev, dest, tops=TOPS):
    blob = subprocess.run(["git", "archive", rev, *tops], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    _layout(dest, files)


def untraced(env):
    """``env`` without coverage.py's subprocess hook (set under ``coverage run``, as in CI): a
    timing process runs untraced, and the copies of ember it imports are deleted before any
    coverage report could read them (which then fails with "No source for code")."""
    return {k: v for k, v in env.items() if k not in ("COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START")}


def _from_tree(dest, tops=TOPS):
    files = {}
    for top in tops:
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                if name.endswith(".pyc"):
                    continue
                full = os.path.join(dirpath, name)
                with open(full, "rb") as f:
                    files[os.path.relpath(full, ROOT)] = f.read()
    _layout(dest, files)


def alternating(rounds, base, work):
    """``(round, base(), work())`` for each round, with the one that runs first swapped every
    other round, so the machine's drift falls on both alike."""
    for r in range(rounds):
        if r % 2:
            w, b = work(), base()
        else:
            b, w = base(), work()
        yield r, b, w


def spread(ratios):
    """``median M (range LO-HI, N rounds)`` of a list of ratios."""
    return f"median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}, {len(ratios)} rounds)"


def _time(tree, n):
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", CHILD, tree, str(n)],
        capture_output=True,
        text=True,
        check=True,
        env=untraced(dict(os.environ, EMBER_BACKEND="numpy")),
    ).stdout
    return {k: float(v) for k, v in (line.split() for line in out.splitlines())}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main", help="git revision to compare against")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("-n", type=int, default=100_000, help="add+mul pairs per timing")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="ember-dispatch-")
    try:
        base, work = os.path.join(tmp, "base"), os.path.join(tmp, "work")
        _from_git(args.base, base)
        _from_tree(work)
        ratios: dict = {}
        for r, b, w in alternating(args.rounds, lambda: _time(base, args.n), lambda: _time(work, args.n)):
            for k in b:
                ratios.setdefault(k, []).append(w[k] / b[k])
            print(f"round {r + 1}: " + "  ".join(f"{k} {b[k]:.0f} -> {w[k]:.0f} ns/op" for k in b))
        for k, rs in ratios.items():
            print(f"{k:6s} working tree / {args.base}: {spread(rs)}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
