"""The CPU warp's unit-step maps (a flip, a crop, a paste: the pixels themselves) with a reversed
axis copied by cv2.flip: bit for bit the NumPy twin, horizontal, vertical and both, with integer
offsets, uint8 and float32, one and three channels, into a dense batch and into views."""
import numpy as np
import pytest

from detaug.kernels import warp as W
from helpers import fresh_seed

FRESH = fresh_seed()


def _flip_maps(h, w, rng):
    dx, dy = int(rng.integers(0, 4)), int(rng.integers(0, 4))
    return [np.array([[-1.0, 0, w - dx], [0, 1, -dy], [0, 0, 1]]),    # horizontal
            np.array([[1.0, 0, -dx], [0, -1, h - dy], [0, 0, 1]]),    # vertical
            np.array([[-1.0, 0, w - dx], [0, -1, h - dy], [0, 0, 1]]),  # both
            np.array([[1.0, 0, -dx], [0, 1, -dy], [0, 0, 1]])]        # none: a crop


@pytest.mark.parametrize("seed", [2, FRESH])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("c", [1, 3])
def test_flips_are_the_twins_pixels(seed, dtype, c, monkeypatch):
    import cv2

    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(5, 40)), int(rng.integers(5, 40))
    img = rng.integers(0, 256, (h, w, c)).astype(dtype)
    mats = np.stack(_flip_maps(h, w, rng))
    out = np.array([[h - 4, w - 4]] * 4)
    flips = []
    real = cv2.flip
    monkeypatch.setattr(cv2, "flip", lambda *a, **k: flips.append(a[1]) or real(*a, **k))
    kw = dict(antialias=False, out_dtype=dtype)
    got = W.warp_cv2([img] * 4, mats, out, **kw)
    want = W.warp_numpy([img] * 4, mats, out, **kw)
    for g, r in zip(got, want):
        np.testing.assert_array_equal(g, r)
    assert sorted(flips) == [-1, 0, 1]  # the crop is a plain copy
    # into views of a larger buffer (a canvas's places)
    canvas = np.zeros((4, h + 3, w + 5, c), dtype)
    views = [canvas[k, 1:h - 3, 2:w - 2] for k in range(4)]
    W.warp_cv2([img] * 4, mats, out, out=views, **kw)
    for v, r in zip(views, want):
        np.testing.assert_array_equal(v, r)
    assert not canvas[:, 0].any() and not canvas[:, :, :2].any()  # nothing written outside
