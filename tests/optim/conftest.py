"""Fixtures of the ember.optim tests: torch (the reference) and the numpy backend."""

import pytest

import ember


@pytest.fixture(autouse=True)
def _numpy_backend():
    with ember.backend("numpy"):
        yield
