"""NumPy twins of detaug/kernels/color.py against hand values and an independent float64
YIQ reference (convert, rotate the IQ plane as a complex number, convert back by solving)."""
import numpy as np
import pytest

from detaug.kernels.color import RGB_TO_YIQ, brightness_contrast_numpy, hsv_numpy
from helpers import random_images


def reference_hsv(img, hue, sat, val):
    rgb = img.astype(np.float64).reshape(-1, 3).T                 # (3, P)
    y, i, q = RGB_TO_YIQ @ rgb
    # DALI's hue_mat: I' = cos h I + sin h Q, Q' = -sin h I + cos h Q, i.e. (I + iQ) * e^{-ih}
    iq = (i + 1j * q) * np.exp(-1j * np.deg2rad(hue)) * sat
    yiq = np.stack([y, iq.real, iq.imag]) * val
    out = np.linalg.solve(RGB_TO_YIQ, yiq).T.reshape(img.shape)
    return np.clip(np.floor(out + 0.5), 0, 255).astype(np.uint8)


def test_brightness_contrast_hand_values():
    img = np.array([[[100, 101, 200], [0, 128, 255]]], np.uint8)        # (1, 2, 3)
    batch = np.stack([img, img, img])
    out = brightness_contrast_numpy(batch, [1.5, 0.5, 1.0], [1.0, 1.0, 2.0])
    np.testing.assert_array_equal(out[0], [[[150, 152, 255], [0, 192, 255]]])  # 151.5 -> 152
    np.testing.assert_array_equal(out[1], [[[50, 51, 100], [0, 64, 128]]])     # 50.5 -> 51
    # contrast 2 around 128: 128 + 2 (v - 128), clamped
    np.testing.assert_array_equal(out[2], [[[72, 74, 255], [0, 128, 255]]])
    out = brightness_contrast_numpy(batch[:1], 1.0, 0.0, contrast_center=10.0)
    assert (out == 10).all()


def test_identity_is_exact():
    rng = np.random.default_rng(0)
    batch = random_images(rng, [(7, 9, 3), (1, 1, 3), (16, 5, 3)])
    for out in (brightness_contrast_numpy(batch, np.ones(3), np.ones(3)),
                hsv_numpy(batch, np.zeros(3), np.ones(3), np.ones(3))):
        for o, i in zip(out, batch):
            np.testing.assert_array_equal(o, i)


def test_hsv_against_independent_reference():
    rng = np.random.default_rng(1)
    batch = random_images(rng, [(6, 8, 3), (9, 4, 3), (5, 5, 3)])
    hue, sat, val = np.array([37.0, -120.0, 200.0]), np.array([0.3, 1.7, 1.0]), np.array([1.2, 0.6, 0.9])
    out = hsv_numpy(batch, hue, sat, val)
    for b in range(3):
        ref = reference_hsv(batch[b], hue[b], sat[b], val[b])
        assert np.abs(out[b].astype(int) - ref).max() <= 1
        assert (out[b] != batch[b]).any()


def test_hsv_grey_hue_360_value():
    rng = np.random.default_rng(2)
    img = rng.integers(0, 256, (1, 20, 20, 3), dtype=np.uint8)
    grey = hsv_numpy(img, [45.0], [0.0], [1.0]).astype(int)
    assert (grey.max(-1) - grey.min(-1)).max() <= 1
    luma = img[0].astype(float) @ RGB_TO_YIQ[0]
    assert np.abs(grey[0, ..., 0] - luma).max() <= 1.5
    full = hsv_numpy(img, [360.0], [1.0], [1.0]).astype(int)
    assert np.abs(full - img).max() <= 1
    half = hsv_numpy(img, [0.0], [1.0], [0.5]).astype(int)
    assert np.abs(half - np.floor(img * 0.5 + 0.5)).max() <= 1


def test_ragged_equals_per_sample_and_dense_equals_list():
    rng = np.random.default_rng(3)
    batch = random_images(rng, [(3, 4, 3), (10, 2, 3), (1, 1, 3), (0, 5, 3)])
    br, ct = rng.uniform(0.5, 1.5, 4), rng.uniform(0.5, 1.5, 4)
    h, s, v = rng.uniform(-180, 180, 4), rng.uniform(0, 2, 4), rng.uniform(0.5, 1.5, 4)
    bc = brightness_contrast_numpy(batch, br, ct)
    hs = hsv_numpy(batch, h, s, v)
    assert isinstance(bc, list) and isinstance(hs, list)
    for i, im in enumerate(batch):
        np.testing.assert_array_equal(bc[i], brightness_contrast_numpy([im], br[i:i + 1], ct[i:i + 1])[0])
        np.testing.assert_array_equal(hs[i], hsv_numpy([im], h[i:i + 1], s[i:i + 1], v[i:i + 1])[0])
        assert bc[i].shape == im.shape and bc[i].dtype == np.uint8
    dense = np.stack(random_images(rng, [(4, 6, 3)] * 3))
    out = hsv_numpy(dense, h[:3], s[:3], v[:3])
    assert isinstance(out, np.ndarray) and out.shape == dense.shape
    np.testing.assert_array_equal(out, np.stack(hsv_numpy(list(dense), h[:3], s[:3], v[:3])))


def test_empty_not_mutated_and_checks():
    assert brightness_contrast_numpy([], [], []) == []
    assert hsv_numpy([], [], [], []) == []
    empty = np.zeros((0, 4, 4, 3), np.uint8)
    assert hsv_numpy(empty, [], [], []).shape == (0, 4, 4, 3)
    assert brightness_contrast_numpy(empty, 1.0, 1.0).shape == (0, 4, 4, 3)
    rng = np.random.default_rng(4)
    batch = random_images(rng, [(5, 5, 3), (2, 3, 3)])
    copies = [b.copy() for b in batch]
    out = brightness_contrast_numpy(batch, [2.0, 2.0], [1.0, 1.0])
    hsv_numpy(batch, [90.0, 90.0], [0.5, 0.5], [1.0, 1.0])
    for b, c in zip(batch, copies):
        np.testing.assert_array_equal(b, c)
    assert all(o is not b for o, b in zip(out, batch))
    # brightness_contrast works on any channel count, hsv needs RGB
    assert brightness_contrast_numpy([np.zeros((2, 2, 1), np.uint8)], 1.0, 1.0)[0].shape == (2, 2, 1)
    with pytest.raises(ValueError):
        hsv_numpy([np.zeros((2, 2, 4), np.uint8)], 0.0, 1.0, 1.0)
    with pytest.raises(ValueError):
        brightness_contrast_numpy([np.zeros((2, 2, 3), np.float32)], 1.0, 1.0)
    with pytest.raises(ValueError):
        brightness_contrast_numpy(batch, [1.0, 1.0, 1.0], 1.0)


def test_hsv_twin_is_the_float64_sum_bit_for_bit(rng):
    """hsv_numpy's per-pixel product (OpenCV's double transform) is exactly the float64 sum
    (m[i, 0] r + m[i, 1] g) + m[i, 2] b of the former einsum path, then floor(x + 0.5) clamped:
    on fresh random images and parameters, dense and ragged, including the 0 / 255 extremes."""
    from detaug.kernels.color import hsv_matrices

    shapes = [(int(rng.integers(1, 40)), int(rng.integers(1, 40)), 3) for _ in range(5)]
    batch = random_images(rng, shapes)
    batch[0][0, 0] = (255, 255, 255)
    batch[0][-1, -1] = (0, 0, 0)
    h, s, v = rng.uniform(-180, 180, 5), rng.uniform(0, 2, 5), rng.uniform(0, 2, 5)
    mats = hsv_matrices(h, s, v).astype(np.float64)
    got = hsv_numpy(batch, h, s, v)
    for b, im in enumerate(batch):
        x = im.astype(np.float64)
        m = mats[b]
        want = np.stack([(m[i, 0] * x[..., 0] + m[i, 1] * x[..., 1]) + m[i, 2] * x[..., 2]
                         for i in range(3)], -1)
        want = np.clip(np.floor(want + 0.5), 0, 255).astype(np.uint8)
        np.testing.assert_array_equal(got[b], want)
        np.testing.assert_array_equal(
            want, np.clip(np.floor(np.einsum("ij,hwj->hwi", m, x) + 0.5), 0, 255).astype(np.uint8))
    dense = np.stack(random_images(rng, [(17, 23, 3)] * 3))
    np.testing.assert_array_equal(hsv_numpy(dense, h[:3], s[:3], v[:3]),
                                  np.stack(hsv_numpy(list(dense), h[:3], s[:3], v[:3])))
