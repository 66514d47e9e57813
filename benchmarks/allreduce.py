"""Data-parallel costs on this machine: all-reduce time for the gradients of W1 (MLP) and W3
(ResNet-18), and 2-rank vs 1-rank training throughput of W1 on the NumPy backend.

    mpiexec -n 2 python -m mpi4py -m benchmarks.allreduce      # prints one JSON object (rank 0)
    python -m benchmarks.allreduce --report                     # runs 1 and 2 ranks, prints Markdown

The all-reduce is ember.distributed's path: float32 host buffers, MPI_IN_PLACE, SUM.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

SIZES = {"W1 MLP 784-512-512-10": 669_706, "W3 ResNet-18 (CIFAR)": 11_173_962}


def _allreduce_ms(comm, n, repeats=15):
    import numpy as np
    from mpi4py import MPI

    buf = np.ones(n, dtype=np.float32)
    for _ in range(3):
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    times = []
    for _ in range(repeats):
        comm.Barrier()
        t = time.perf_counter()
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def _train_samples_per_s(steps=30, global_batch=128):
    import numpy as np

    import ember
    import ember.distributed as dist
    from ember import optim
    from ember.data import ArrayDataset, DataLoader
    from ember.distributed.sharding import ShardedLoader
    from ember.train import Trainer

    rank, world = dist.rank(), dist.world_size()
    rng = np.random.default_rng(0)
    x = rng.random((global_batch * (steps + 5), 784), dtype=np.float32)
    y = rng.integers(0, 10, len(x))
    ember.manual_seed(0)
    model = ember.models.get("mlp", in_features=784, num_classes=10)
    if world > 1:
        model = dist.DistributedDataParallel(model)
    loader = DataLoader(ArrayDataset(x, y), batch_size=global_batch, shuffle=False, prefetch=0)
    if world > 1:
        loader = ShardedLoader(loader, rank, world)
    trainer = Trainer(
        model,
        optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
        loader,
        progress=False,
        is_main=rank == 0,
        jit=False,
    )
    trainer.fit(epochs=1, max_steps=5)  # warm-up
    if world > 1:
        dist.barrier()
    t = time.perf_counter()
    trainer.fit(epochs=2, max_steps=5 + steps)
    if world > 1:
        dist.barrier()
    return steps * global_batch / (time.perf_counter() - t)


def main():
    import ember.distributed as dist

    comm = dist.init()
    result = {"world": comm.Get_size(), "threads": os.environ.get("OPENBLAS_NUM_THREADS", "default")}
    if comm.Get_size() > 1:
        result["allreduce_ms"] = {name: round(_allreduce_ms(comm, n), 3) for name, n in SIZES.items()}
    result["w1_train_samples_per_s"] = round(_train_samples_per_s(), 1)
    if comm.Get_rank() == 0:
        print(json.dumps(result))


def report():
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    runs = {}
    for n in (1, 2):
        out = subprocess.run(
            [mpiexec, "-n", str(n), sys.executable, "-m", "mpi4py", "-m", "benchmarks.allreduce"],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        runs[n] = json.loads(out.stdout.strip().splitlines()[-1])
    load = os.getloadavg()[0]
    print(f"load average before: {load:.2f}; BLAS threads per rank: 1\n")
    print(
        "| gradients | floats | MB | all-reduce, 2 ranks, shared memory (ms) | ring estimate at 10 / 100 Gbit/s, many ranks (ms) |"
    )
    print("|---|---|---|---|---|")
    for name, n in SIZES.items():
        mb = n * 4 / 1e6
        ring = [2 * mb / (gbit / 8 * 1e3) * 1e3 for gbit in (10, 100)]  # 2(R-1)/R * bytes / bandwidth
        print(f"| {name} | {n:,} | {mb:.1f} | {runs[2]['allreduce_ms'][name]:.2f} | {ring[0]:.0f} / {ring[1]:.1f} |")
    one, two = runs[1]["w1_train_samples_per_s"], runs[2]["w1_train_samples_per_s"]
    print(
        f"\nW1 training, global batch 128, eager NumPy: 1 rank {one:,.0f} samples/s, 2 ranks {two:,.0f} "
        f"samples/s ({two / one:.2f}x)"
    )


if __name__ == "__main__":
    report() if "--report" in sys.argv else main()
