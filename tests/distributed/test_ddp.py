"""Data-parallel training under a real MPI launcher (the venv's own ``mpiexec``).

Every test starts a job with ``mpiexec -n R python -m mpi4py SCRIPT`` (mpi4py's runner turns an
uncaught exception into MPI_Abort, so a failing rank cannot hang the job) and checks the world
size the ranks saw. All traffic stays on this machine.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

pytest.importorskip("mpi4py")
MPIEXEC = pathlib.Path(sys.executable).parent / "mpiexec"
if not MPIEXEC.exists():
    MPIEXEC = shutil.which("mpiexec")
pytestmark = pytest.mark.skipif(
    MPIEXEC is None, reason="no mpiexec next to this Python (pip install 'ember[mpi-local]')"
)

ENV = {
    # Open MPI as root, oversubscribed, loopback only; MPICH ignores these.
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    "OMPI_MCA_btl": "self,sm,tcp",
    "OMPI_MCA_btl_tcp_if_include": "lo",
    "PMIX_MCA_ptl_tcp_if_include": "lo",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
}

TRAIN = """
    import json, sys
    import numpy as np
    import ember
    from ember import nn, optim
    from ember.data import ArrayDataset, DataLoader
    import ember.distributed as dist
    from ember.distributed.sharding import ShardedLoader
    from ember.train import Trainer

    out, steps, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rank, world = dist.rank(), dist.world_size()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, 20)).astype(np.float32)
    y = (x[:, :5].sum(1) > 0).astype(np.int64) + (x[:, 5] > 1).astype(np.int64)
    ember.manual_seed(0)
    model = dist.DistributedDataParallel(nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 3)),
                                         bucket_mb=0.002)
    loader = ShardedLoader(DataLoader(ArrayDataset(x, y), batch_size=batch, shuffle=True, seed=3), rank, world)
    trainer = Trainer(model, optim.SGD(model.parameters(), lr=0.1, momentum=0.9), loader,
                      progress=False, is_main=rank == 0)
    trainer.fit(epochs=100, max_steps=steps)
    if rank == 0:
        np.savez(out, world=world, **{k: v.numpy() for k, v in model.state_dict().items()})
"""


def launch(tmp_path, n, script, *args, timeout=120, env=None):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(script))
    env = {**os.environ, **ENV, **(env or {})}
    return subprocess.run(
        [str(MPIEXEC), "-n", str(n), sys.executable, "-m", "mpi4py", str(path), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def train(tmp_path, n, steps=12, batch=48):
    out = tmp_path / f"params-{n}.npz"
    run = launch(tmp_path, n, TRAIN, out, steps, batch)
    assert run.returncode == 0, run.stderr
    return dict(np.load(out))


@pytest.mark.parametrize("ranks", [2, 3])
def test_data_parallel_equals_single_process(tmp_path, ranks):
    """R ranks with per-rank batch B/R end where 1 rank with batch B ends (same global batches).

    Tolerance: float32 sums in a different order, through 12 momentum steps: rtol 1e-5."""
    single = train(tmp_path, 1)
    multi = train(tmp_path, ranks)
    assert int(single.pop("world")) == 1 and int(multi.pop("world")) == ranks
    assert single.keys() == multi.keys()
    for k in single:
        np.testing.assert_allclose(multi[k], single[k], rtol=1e-5, atol=1e-6, err_msg=k)
    # and training did move the parameters: the comparison is not between two initial states
    ember_init = train(tmp_path, 1, steps=0)
    assert any(not np.allclose(single[k], ember_init[k]) for k in single if k != "world")


FAIL = """
    import os, sys, time
    import numpy as np
    import ember
    from ember import nn, optim
    from ember.data import ArrayDataset, DataLoader
    import ember.distributed as dist
    from ember.distributed.sharding import ShardedLoader
    from ember.train import Trainer

    out = sys.argv[1]
    rank, world = dist.rank(), dist.world_size()
    x = np.random.default_rng(0).standard_normal((400, 8)).astype(np.float32)
    y = (x.sum(1) > 0).astype(np.int64)
    model = dist.DistributedDataParallel(nn.Linear(8, 2))
    loader = ShardedLoader(DataLoader(ArrayDataset(x, y), batch_size=20, shuffle=True), rank, world)
    trainer = Trainer(model, optim.SGD(model.parameters(), lr=0.1), loader, out_dir=out,
                      checkpoint_every=2, progress=False, is_main=rank == 0)

    @trainer.every(1)
    def explode(t):
        if rank == 1 and t.step == 5:
            raise RuntimeError("rank 1 lost its disk at step 5")
    trainer.fit(epochs=50)
"""


def test_a_failing_rank_aborts_the_job(tmp_path):
    from ember.io.checkpoint import latest_checkpoint, read_checkpoint

    out = tmp_path / "run"
    start = time.monotonic()
    run = launch(tmp_path, 2, FAIL, out, timeout=60)
    elapsed = time.monotonic() - start
    assert run.returncode != 0
    assert "rank 1 lost its disk at step 5" in run.stderr
    assert elapsed < 30, f"abort took {elapsed:.1f} s"
    path = latest_checkpoint(out)
    assert path is not None and read_checkpoint(path)[1]["step"] in (2, 4)
    assert leftovers(tmp_path / "script.py") == "", "processes left behind"


def leftovers(script, grace_s=10.0):
    """The pids still running ``script`` once ``grace_s`` has passed: an aborted rank may take
    a moment to exit after mpiexec returns (on a loaded machine, seconds)."""
    deadline = time.monotonic() + grace_s
    while True:
        found = subprocess.run(["pgrep", "-f", str(script)], capture_output=True, text=True).stdout.strip()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_distributed_flag_without_mpi_names_the_extra(tmp_path):
    code = (
        "import sys; sys.modules['mpi4py'] = None\n"
        "from ember.cli import main\n"
        "sys.exit(main(['train', 'synthetic-cifar10', '--distributed', '--out', sys.argv[1]]))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "run")], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 2
    assert "ember[mpi-local]" in run.stderr and "mpi4py" in run.stderr


STOP = """
    import os, signal, sys
    import numpy as np
    from ember import nn, optim
    from ember.data import ArrayDataset, DataLoader
    import ember.distributed as dist
    from ember.distributed.sharding import ShardedLoader
    from ember.train import Trainer

    pids = sys.argv[1]
    rank, world = dist.rank(), dist.world_size()
    with open(f"{pids}.{rank}", "w") as f:
        f.write(str(os.getpid()))
    x = np.random.default_rng(0).standard_normal((4000, 8)).astype(np.float32)
    y = (x.sum(1) > 0).astype(np.int64)
    model = dist.DistributedDataParallel(nn.Linear(8, 2))
    loader = ShardedLoader(DataLoader(ArrayDataset(x, y), batch_size=30, shuffle=True), rank, world)
    trainer = Trainer(model, optim.SGD(model.parameters(), lr=0.1), loader, progress=False, is_main=rank == 0)

    @trainer.every(1)
    def freeze(t):
        if rank == world - 1 and t.step == 5:
            os.kill(os.getpid(), signal.SIGSTOP)      # silent, not dead: no error will ever come
    trainer.fit(epochs=50)
"""


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_silent_rank_times_out_and_is_named(tmp_path, ranks):
    import signal

    pids = tmp_path / "pid"
    start = time.monotonic()
    try:
        run = launch(tmp_path, ranks, STOP, pids, timeout=90, env={"EMBER_DIST_TIMEOUT": "3"})
    finally:
        for r in range(ranks):  # whatever happened, leave no stopped process behind
            try:
                pid = int((tmp_path / f"pid.{r}").read_text())
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pass
    elapsed = time.monotonic() - start
    assert run.returncode != 0
    silent = ranks - 1
    lines = [line for line in run.stderr.splitlines() if line.startswith("ember: error: rank")]
    assert lines, f"exit status {run.returncode}, stderr: {run.stderr[-2000:]!r}"
    assert all(f"silent rank(s): {silent}." in line and "waited 3 s" in line for line in lines), lines
    assert "gradient all-reduce" in lines[0]
    assert elapsed < 60, f"the job took {elapsed:.1f} s to end"


def test_the_timeout_must_be_positive(monkeypatch):
    import ember.distributed as dist

    with pytest.raises(dist.comm.EmberError, match="> 0"):
        dist.set_timeout(0)
    monkeypatch.setenv("EMBER_DIST_TIMEOUT", "soon")
    monkeypatch.setitem(dist.comm._STATE, "timeout", None)
    with pytest.raises(dist.comm.EmberError, match="EMBER_DIST_TIMEOUT='soon'"):
        dist.get_timeout()
