import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ember.data.transforms import Compose, Normalize, RandomCrop, RandomHorizontalFlip, ToFloat


def test_to_float_matches_division_by_255():
    x = np.arange(256, dtype=np.uint8)
    out = ToFloat()(x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, x.astype(np.float32) / np.float32(255))


def test_normalize_per_channel_and_scalar():
    x = np.ones((2, 3, 2, 2), np.float32)
    out = Normalize([0.0, 0.5, 1.0], [1.0, 0.5, 2.0])(x)
    assert out[:, :, 0, 0].tolist() == [[1.0, 1.0, 0.0]] * 2
    assert Normalize(0.5, 0.5)(x).max() == 1.0


def test_normalize_channel_mismatch_names_shapes():
    with pytest.raises(ValueError, match=r"3 means / 3 stds for images with 1 channels"):
        Normalize([0, 0, 0], [1, 1, 1])(np.zeros((4, 1, 2, 2)))


def reference_crop(x, size, padding, rng):
    """One image at a time, drawing offsets in the same order as the vectorised version."""
    p = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    H, W = p.shape[-2:]
    top = rng.integers(0, H - size + 1, size=len(x))
    left = rng.integers(0, W - size + 1, size=len(x))
    return np.stack([p[i, :, t : t + size, l : l + size] for i, (t, l) in enumerate(zip(top, left))])


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 5),
    c=st.integers(1, 3),
    hw=st.integers(1, 8),
    pad=st.integers(0, 3),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_random_crop_matches_reference(n, c, hw, pad, seed, data):
    size = data.draw(st.integers(1, hw + 2 * pad))
    x = np.random.default_rng(seed).integers(0, 255, (n, c, hw, hw), dtype=np.uint8)
    out = RandomCrop(size, padding=pad)(x, np.random.default_rng(seed))
    np.testing.assert_array_equal(out, reference_crop(x, size, pad, np.random.default_rng(seed)))


def test_random_crop_single_image_and_identity():
    x = np.arange(2 * 5 * 5, dtype=np.float32).reshape(2, 5, 5)
    assert RandomCrop(3, padding=1)(x, np.random.default_rng(0)).shape == (2, 3, 3)
    np.testing.assert_array_equal(RandomCrop(5)(x, np.random.default_rng(0)), x)
    with pytest.raises(ValueError, match="larger than the padded image"):
        RandomCrop(8, padding=1)(x, np.random.default_rng(0))


def test_horizontal_flip_probability_and_determinism():
    x = np.arange(100 * 4, dtype=np.int32).reshape(100, 1, 1, 4)
    np.testing.assert_array_equal(RandomHorizontalFlip(0.0)(x, np.random.default_rng(0)), x)
    np.testing.assert_array_equal(RandomHorizontalFlip(1.0)(x, np.random.default_rng(0)), x[..., ::-1])
    a = RandomHorizontalFlip(0.5)(x, np.random.default_rng(3))
    b = RandomHorizontalFlip(0.5)(x, np.random.default_rng(3))
    flipped = (a != x).any(axis=(1, 2, 3))
    np.testing.assert_array_equal(a, b)
    assert 30 < flipped.sum() < 70
    np.testing.assert_array_equal(a[flipped], x[flipped][..., ::-1])


def test_compose_batched_flag_and_order():
    assert Compose([ToFloat(), Normalize(0.5, 0.5)]).batched
    assert not Compose([ToFloat(), lambda x: x]).batched
    x = np.full((1, 1, 2, 2), 255, np.uint8)
    assert Compose([ToFloat(), Normalize(0.5, 0.5), lambda x: x * 2])(x, np.random.default_rng(0)).max() == 2.0
