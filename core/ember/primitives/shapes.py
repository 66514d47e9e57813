"""Shape arithmetic the abstract rules share: broadcasting, axes, convolution sizes."""

from __future__ import annotations

from ..errors import ShapeError


# ----------------------------------------------------------------------------- shape helpers
def broadcast_shapes(*shapes: tuple) -> tuple:
    """NumPy broadcasting: align right, each pair of sizes equal or one of them 1.

    >>> broadcast_shapes((3, 1), (4,))
    (3, 4)
    """
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-ndim, 0):
        sizes = {s[i] for s in shapes if len(s) >= -i} - {1}
        if len(sizes) > 1:
            raise ShapeError(
                f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast "
                f"(sizes {' vs '.join(map(str, sorted(sizes)))} at dim {i})"
            )
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def normalize_axis(axis: int, ndim: int) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ShapeError(f"dim {axis} is out of range for a tensor with {ndim} dims")
    return axis % max(ndim, 1)


def aval(a):
    """(shape, dtype) of an abstract input; a Python scalar is a 0-d weak value."""
    return ((), None) if isinstance(a, (int, float, bool)) else a


def prod(xs):
    n = 1
    for x in xs:
        n *= x
    return n


def conv_out_size(size, k, stride, pad, dilation):
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1
