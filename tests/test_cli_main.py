"""`ember`'s dispatch (cli.py): output cut off by a closed pipe ends a command quietly."""

import os
import subprocess
import sys

import pytest


# (--help needs no case: argparse itself drops help that cannot be written, and exits 0)
@pytest.mark.parametrize(
    "argv", [["backends"], ["backends", "--json"], ["certify", "numpy", "--tiers", "0", "--quiet"]]
)
def test_a_closed_pipe_ends_the_command_with_141_and_no_traceback(argv, tmp_path):
    read, write = os.pipe()
    os.close(read)  # closed before the command starts: its first write meets the closed pipe
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "ember.cli", *argv],
            cwd=tmp_path,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""
