"""The CPU warp's BORDER_CONSTANT shortcut (kernels/warp_fast.py): taken only where every sample
point's taps lie a pixel inside the source, and then bit for bit the BORDER_REPLICATE warp, on
affine and projective maps, uint8 and float32, fixed and fresh random inputs; the corners test
by hand."""
import numpy as np
import pytest

from detaug.kernels import warp as W
from detaug.kernels import warp_fast as WF
from helpers import fresh_seed

FRESH = fresh_seed()


def test_taps_inside_by_hand():
    """A 10 x 10 grid read one pixel in from a 12 x 12 source is inside (centres 1..10, within
    [1, 10]); read from the corner (0..9) it is not; nor is a map whose divide is not positive
    at a corner."""
    shift = np.array([[1.0, 0, 1.0], [0, 1.0, 1.0]])
    assert WF._taps_inside(shift, (10, 10), (12, 12))
    assert not WF._taps_inside(np.array([[1.0, 0, 0.0], [0, 1.0, 0.0]]), (10, 10), (12, 12))
    assert not WF._taps_inside(shift, (11, 10), (12, 12))  # x = 11 > 12 - 1 - 1
    proj = np.array([[1.0, 0, 1.0], [0, 1.0, 1.0], [-0.2, 0, 1.0]])  # divide 1 - 0.2 x < 0 at x = 9
    assert not WF._taps_inside(proj, (10, 10), (12, 12))
    assert WF._taps_inside(np.array([[1.0, 0, 1.0], [0, 1.0, 1.0], [0, 0, 1.0]]), (10, 10), (12, 12))


@pytest.mark.parametrize("seed", [4, FRESH])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_constant_border_is_the_replicate_warp(seed, dtype, monkeypatch):
    import cv2

    if not WF._constant_border_holds():
        pytest.skip("this OpenCV's constant path differs: the shortcut is off")
    rng = np.random.default_rng(seed)
    n = 8
    images = [rng.integers(0, 256, (int(rng.integers(40, 70)), int(rng.integers(40, 70)), 3))
              .astype(dtype) for _ in range(n)]
    mats = []
    for k, im in enumerate(images):
        h, w = im.shape[:2]
        a, s = rng.uniform(-0.3, 0.3), rng.uniform(1.0, 1.6)  # magnified: the grid stays inside
        c = np.array([[1, 0, 15], [0, 1, 15], [0, 0, 1.0]])
        m = c @ np.array([[s * np.cos(a), -s * np.sin(a), 0], [s * np.sin(a), s * np.cos(a), 0],
                          [0, 0, 1]]) @ np.array([[1, 0, -w / 2], [0, 1, -h / 2], [0, 0, 1.0]])
        if k % 2:
            m[2, :2] = rng.uniform(-1e-3, 1e-3, 2)
        if k == n - 1:  # the whole image turned a little: taps at its edge, the replicate warp
            m = np.array([[1, 0, w / 2], [0, 1, h / 2], [0, 0, 1.0]]) @ np.array(
                [[np.cos(0.05), -np.sin(0.05), 0], [np.sin(0.05), np.cos(0.05), 0], [0, 0, 1]]) \
                @ np.array([[1, 0, -w / 2], [0, 1, -h / 2], [0, 0, 1.0]])
        mats.append(m)
    out = np.array([[30, 30]] * (n - 1) + [[images[-1].shape[0], images[-1].shape[1]]])
    borders = []
    for name in ("warpAffine", "warpPerspective"):
        real = getattr(cv2, name)
        monkeypatch.setattr(cv2, name, lambda *a, _r=real, **k: borders.append(k["borderMode"])
                            or _r(*a, **k))
    kw = dict(antialias=False, out_dtype=dtype, fill=3.0)
    fast = W.warp_cv2(images, np.stack(mats), out, **kw)
    assert borders.count(cv2.BORDER_CONSTANT) == n - 1  # the inside ones took the shortcut
    assert borders[-1] == cv2.BORDER_REPLICATE
    monkeypatch.setattr(W, "_constant_border_holds", lambda: False)
    slow = W.warp_cv2(images, np.stack(mats), out, **kw)
    for f, s in zip(fast, slow):
        np.testing.assert_array_equal(f, s)
