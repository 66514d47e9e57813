"""The NumPy backend's jit runner (backends/numpy/jit_runner.py) beyond what tests/jit checks
of every runner: the memory of its first, unplanned run."""

import tracemalloc

import ember
from ember.backends.numpy import jit_runner


def test_the_first_run_keeps_no_intermediate_alive():
    """The first run notes each result's layout, not the result: its peak memory is the
    planned runs' (it was the sum of every intermediate)."""

    def chain(x):
        for i in range(12):
            x = (x * 1.0001 + i).exp().log()
        return x.sum()

    step = ember.jit(chain)
    x = ember.ones(256, 1024)  # 1 MiB a value, 36 values
    tracemalloc.start()
    try:
        step(x)  # traces, then runs the program once unplanned, noting the layouts
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 * x.numpy().nbytes, peak  # holding them all: 49 MiB
    program = step.lower(x).program
    assert isinstance(program, jit_runner.NumpyProgram) and not program.planned  # a one-shot program plans nothing
    step(x)  # the second run plans the buffers from the first run's layouts
    assert program.planned
