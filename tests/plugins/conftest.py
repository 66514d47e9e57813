"""Shared by the plugins' tests: this folder is on ``sys.path`` for them through this conftest
(pytest's default import mode), so ``foreach_helpers`` imports by name from numba's and cupy's
test files alike."""
