"""The geometries both Winograd test files (the NumPy module's and the numba plugin's) check
against the direct convolution: the edge cases of tiling an output into 2x2 or 4x4 tiles."""

GEOMETRIES = [  # x shape (N, C, H, W), output channels K, padding
    ((2, 5, 7, 6), 3, (1, 1)),  # odd output height: a half edge tile
    ((1, 17, 4, 4), 19, (1, 1)),  # batch 1, C and K multiples of nothing
    ((3, 4, 9, 5), 2, (0, 2)),  # asymmetric padding, odd both ways
    ((2, 3, 3, 3), 4, (0, 0)),  # one output pixel
    ((1, 2, 1, 1), 3, (2, 1)),  # a 1x1 input, padding 2
    ((2, 6, 11, 13), 7, (2, 2)),  # several tiles across, odd edges, the largest padding
    ((5, 3, 6, 6), 2, (1, 1)),  # an odd batch
]
