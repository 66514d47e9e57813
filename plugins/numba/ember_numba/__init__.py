"""ember-numba: ember's CPU backend compiled with Numba.

Buffers are NumPy arrays, so everything the NumPy reference does well (BLAS matrix products,
views, copies) is reused as is; Numba kernels replace the primitives where NumPy is weak
(large elementwise work on two cores, reductions over several axes, padding, convolution
lowering, scatter-add, random bits) and run ember's fused ops and ``ember.jit`` fusion groups
as single parallel loops. Importing this package is cheap: numba loads only when the backend
is first used (see plugin.py).

The modules, in the order a call meets them: plugin.py (the entry point) → threads.py (the
threading layer and thread count, set before numba loads) → backend.py (the primitive table)
→ render.py (elementwise programs to kernel source) → launch.py (plans, when to compile, how
many threads) → cache.py (source to cached module) → background.py (compiling ahead in a
forked worker) → blas.py (matrix products) → kernels.py
(hand-written kernels) → fused/ (fused ops, one module per family) → jit.py (``compile(group)``). docs/numba.md
describes them.
"""

__version__ = "0.1.0"
