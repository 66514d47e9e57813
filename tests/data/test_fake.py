"""FakeData: torchvision's random stand-in dataset, the same sample for the same index."""

import numpy as np
import pytest

from ember.data import DataLoader, FakeData, transforms


def test_samples_are_fixed_by_their_index_and_shaped_like_images():
    ds = FakeData(size=5, image_size=(3, 6, 4), num_classes=3)
    image, label = ds[2]
    assert image.shape == (6, 4, 3) and image.dtype == np.uint8 and 0 <= label < 3
    assert np.array_equal(ds[2][0], image) and not np.array_equal(ds[1][0], image)
    assert np.array_equal(ds[-3][0], image)
    assert FakeData(size=5, image_size=(1, 6, 4))[0][0].shape == (6, 4)  # one channel: H, W
    shifted = FakeData(size=5, image_size=(3, 6, 4), num_classes=3, random_offset=1)
    assert np.array_equal(shifted[1][0], image)
    labels = {int(FakeData(200, (1, 2, 2), num_classes=4)[i][1]) for i in range(200)}
    assert labels == {0, 1, 2, 3}


def test_to_tensor_and_the_loader_make_model_batches():
    ds = FakeData(
        size=10,
        image_size=(3, 8, 8),
        num_classes=10,
        transform=transforms.ToTensor(),
        target_transform=lambda y: y + 100,
    )
    x, y = next(iter(DataLoader(ds, batch_size=4)))
    assert x.shape == (4, 3, 8, 8) and str(x.dtype) == "float32" and y.shape == (4,)
    assert float(x.max().item()) <= 1.0 and int(y.min().item()) >= 100


@pytest.mark.parametrize(
    "kwargs, words",
    [({"size": -1}, "size"), ({"image_size": (3, 8)}, "image_size"), ({"image_size": (3, 0, 8)}, "image_size")],
)
def test_bad_arguments(kwargs, words):
    with pytest.raises(ValueError, match=words):
        FakeData(**kwargs)


def test_out_of_range():
    with pytest.raises(IndexError, match="out of range"):
        FakeData(size=2)[2]
