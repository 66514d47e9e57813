"""ember's benchmarks: the same workloads in ember and PyTorch, side by side, in one run.

    python -m benchmarks run                      # everything found; appends to docs/performance.md
    python -m benchmarks run --workloads W1 --backends numpy,torch
    python -m benchmarks run --smoke              # a few steps of each: checks the harness (CI)

Modules, in the order a run flows: ``__main__`` (the command line) → ``runner`` (plan, rounds,
statistics, report) → ``child`` (one measurement per process) → ``workloads`` (the models and
steps, one function for both frameworks). ``parity`` trains the same MLP in both and compares
test accuracy. torch is a benchmark-only dependency; docs/performance.md explains the method.
"""
