"""The `ember train / eval / checkpoints` commands of the README and the docs pages, run in the
order a reader meets them (README first, then the pages by name) in one working directory,
each training on a small slice so the whole walk stays short: none may fail, so no page relies
on a run directory another page's command has already taken. Commands that need what this
machine may lack (MPI, a GPU, the network for CIFAR-10) are left out, each with its reason."""

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
SMALL = {"train": ["--limit-train", "128", "--limit-test", "64", "--no-progress"]}
# what a command needs -> why it is left out here
NEEDS = {
    "mpiexec": "needs an MPI launch",
    "cupy": "needs a GPU",
    "cifar10 ": "needs CIFAR-10's download",
    "ember certify": "certifies a backend (tests/conformance)",
}


def shell_lines(page):
    """``[(line number, text)]`` of the lines inside the page's sh/bash/console/plain fences."""
    out, lang = [], None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        fence = re.match(r"\s*```(\S*)", line)
        if fence:
            lang = None if lang is not None else fence.group(1)
        elif lang in ("sh", "bash", "console", ""):
            out.append((number, line))
    return out


def commands():
    """``[(page:line, the command as written, env, argv)]`` of the ember commands in the pages'
    shell blocks (a line may chain several with ``&&``)."""
    found = []
    for page in PAGES:
        for number, line in shell_lines(page):
            for part in line.split("#")[0].split("&&"):
                try:
                    words = shlex.split(part)
                except ValueError:
                    continue  # not shell
                env = {}
                while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                    key, value = words.pop(0).split("=", 1)
                    env[key] = value
                if words[:1] != ["ember"] or len(words) < 2 or words[1] not in ("train", "eval", "checkpoints"):
                    continue
                if any(ch in part for ch in "[]|") or re.search(r"\b[A-Z][A-Z_]+\b", " ".join(words)):
                    continue  # a synopsis (ember train mnist|cifar10 [--epochs N]), not a command
                found.append((f"{page.name}:{number}", part.strip(), env, words[1:]))
    return found


def test_the_docs_have_commands_to_run():
    names = [argv[0] for _, _, _, argv in commands()]
    assert names.count("train") >= 5 and "eval" in names


def test_docs_commands_run_in_order(tmp_path):
    (tmp_path / "book.txt").write_text("It was the best of times, it was the worst of times. " * 60)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    ran, left_out = [], []
    for where, line, extra, argv in commands():
        why = next((reason for key, reason in NEEDS.items() if key in line + " "), None)
        if why:
            left_out.append(f"{where} {line}: {why}")
            continue
        proc = subprocess.run(
            [sys.executable, "-m", "ember.cli", *argv, *SMALL.get(argv[0], [])],
            capture_output=True,
            text=True,
            timeout=900,
            cwd=tmp_path,
            env={**env, **extra},
            check=False,
        )
        assert proc.returncode == 0, f"{where}: `{line}` failed after {ran}:\n{proc.stderr[-2000:]}"
        ran.append(where)
    print("\nran:", ", ".join(ran), "\nleft out:\n  " + "\n  ".join(left_out))
    runs = sorted(os.listdir(tmp_path / "runs"))
    assert "mnist-mlp" in runs and "mnist-mlp-2" in runs  # the second run did not collide
