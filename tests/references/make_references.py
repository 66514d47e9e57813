"""Write the stored PyTorch answers the tests compare with (tests/references/*.json.gz).

Run from the repository root, with torch installed:

    python tests/references/make_references.py            # every test file that uses known()
    python tests/references/make_references.py tests/nn    # only some

It runs those tests with ``EMBER_WRITE_REFERENCES=1`` (each test's ``known`` values are
computed with torch and stored instead of checked), then records the provenance in
``provenance.json``: torch's and NumPy's versions, the command, the date. The inputs need no
storing: the tests draw them from fixed seeds (``np.random.default_rng(0)``, and
``torch.manual_seed(0)`` for torch's layer initialisations, on one thread).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


USES = re.compile(r"known\(|^def test_\w+\([^)]*\b(twin|torch)\b", re.M)


def users() -> list[str]:
    """The test files that call known(), directly or through the ``twin``/``torch`` fixtures."""
    return [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "tests").rglob("test_*.py"))
        if USES.search(p.read_text(encoding="utf-8"))
    ]


def main(argv: list[str]) -> int:
    import numpy
    import torch

    targets = argv or users()
    env = dict(os.environ, EMBER_WRITE_REFERENCES="1")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-m", "not slow and not torch", *targets]
    rc = subprocess.call(cmd, cwd=ROOT, env=env)
    if rc not in (0, 5):
        print(f"make_references: pytest exited with {rc}; the files written may be incomplete", file=sys.stderr)
        return rc
    provenance = {
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "command": "python tests/references/make_references.py " + " ".join(argv),
        "written": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "files": sorted(p.name for p in HERE.glob("*.json.gz")),
    }
    (HERE / "provenance.json").write_text(json.dumps(provenance, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(provenance, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
