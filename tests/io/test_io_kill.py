"""A writer killed with SIGKILL at random moments never leaves the directory unresumable.

Each round starts a process that resumes from the latest checkpoint and writes new ones in a
loop; the test kills it after a random delay and checks that the latest checkpoint loads, is
consistent, and is never older than the one before. (SIGKILL loses no page cache, so this tests
the rename protocol, not fsync; power cuts are beyond a unit test.)
"""

import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from ember.io import CheckpointWarning, latest_checkpoint, read_checkpoint

WRITER = textwrap.dedent("""
    import sys
    from ember.io import TensorBytes, latest_checkpoint, read_checkpoint, write_checkpoint
    directory = sys.argv[1]
    latest = latest_checkpoint(directory)
    step = read_checkpoint(latest)[1]["step"] + 1 if latest else 0
    print("ready", flush=True)
    while True:
        # 400 kB per checkpoint, so that a kill often lands in the middle of a write.
        w = TensorBytes("I64", (50_000,), step.to_bytes(8, "little") * 50_000)
        write_checkpoint(directory, step, {"w": w}, {"data_position": step * 32}, keep_last=2)
        step += 1
""")


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_sigkill_at_random_moments(tmp_path):
    rng = random.Random(20240601)
    deadline = time.monotonic() + 8.0
    previous_step, rounds = -1, 0
    while rounds < 8 and time.monotonic() < deadline:
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert child.stdout.readline().strip() == "ready", child.stderr.read()
            time.sleep(rng.uniform(0.0, 0.25))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
        assert child.returncode == -signal.SIGKILL, child.stderr.read()  # it was still writing
        rounds += 1

        with warnings.catch_warnings():
            warnings.simplefilter("error", CheckpointWarning)  # a kill must not corrupt anything
            latest = latest_checkpoint(tmp_path)
        if latest is None:  # killed before the first commit
            assert previous_step == -1
            continue
        tensors, meta = read_checkpoint(latest)
        step = meta["step"]
        assert bytes(tensors["w"].data) == step.to_bytes(8, "little") * 50_000
        assert meta["data_position"] == step * 32
        assert step >= previous_step
        previous_step = step
    assert rounds >= 3 and previous_step >= 0, "the writer never committed a checkpoint"
