"""detaug.ops.pixel's argument rules, called directly: a parameter drawn per sample from a
(lo, hi) range, per-axis values, the blur plan from DALI's and torchvision's arguments (window
from sigma, sigma from window, a sigma of 0 given by the window), fill bytes, the JPEG round trip
against Pillow's own; and each refusal naming the op and the argument. (The ops in pipelines:
tests/ops/test_pixel_ops.py.)"""
import io

import numpy as np
import pytest
from PIL import Image

from detaug.kernels import blur as kbl
from detaug.ops import pixel as P


class Op:
    name = "blur_3"


BLUR = {"kernel_size": None, "window_size": None, "sigma": None, "sigma_range": None}


def plan(u=None, b=3, **kw):
    return P.blur_plan(Op, {**BLUR, **kw}, b, np.zeros(b) if u is None else u)


def test_drawn_ranges_numbers_and_per_sample_inputs(rng):
    u = rng.uniform(0, 1, 5)
    np.testing.assert_allclose(P.drawn(Op, "std", (2.0, 6.0), u), 2 + 4 * u)
    np.testing.assert_array_equal(P.drawn(Op, "std", 3.0, u), [3.0] * 5)
    np.testing.assert_array_equal(P.drawn(Op, "std", np.arange(5.0), u), np.arange(5.0))
    with pytest.raises(ValueError, match=r"blur_3: std range \(6.0, 2.0\) needs lo <= hi"):
        P.drawn(Op, "std", (6.0, 2.0), u)
    with pytest.raises(ValueError, match=r"blur_3: std takes a number or a \(lo, hi\) range"):
        P.drawn(Op, "std", [1, 2, 3], u)


def test_per_axis_values():
    np.testing.assert_array_equal(P._per_axis(Op, "sigma", 2.0, 2), [[2, 2], [2, 2]])
    np.testing.assert_array_equal(P._per_axis(Op, "sigma", (1.0, 3.0), 2), [[1, 3], [1, 3]])
    np.testing.assert_array_equal(P._per_axis(Op, "sigma", np.array([1.0, 2.0]), 2), [[1, 1], [2, 2]])
    with pytest.raises(ValueError, match=r"blur_3: sigma takes one value or one per axis \(2\)"):
        P._per_axis(Op, "sigma", (1.0, 2.0, 3.0), 2)


def test_blur_plan_follows_dali_and_torchvision():
    win, sigma = plan(window_size=(3, 5))  # DALI's (h, w); sigma from the window
    np.testing.assert_array_equal(win, [[3, 5]] * 3)
    np.testing.assert_allclose(sigma, kbl.sigma_from_window(np.array([[3, 5]] * 3)))
    win, _ = plan(kernel_size=(5, 3))  # torchvision's (kx, ky): the same window as (h, w) = (3, 5)
    np.testing.assert_array_equal(win, [[3, 5]] * 3)
    win, sigma = plan(sigma=(1.0, 2.0))  # window from sigma
    np.testing.assert_array_equal(win, kbl.window_from_sigma(np.array([[1.0, 2.0]] * 3)))
    assert np.all(win % 2 == 1)
    win, sigma = plan(window_size=7, sigma=(0.0, 1.5))  # DALI: a sigma of 0 comes from the window
    np.testing.assert_allclose(sigma[:, 0], kbl.sigma_from_window(np.array([[7, 7]]))[0, 0])
    np.testing.assert_allclose(sigma[:, 1], 1.5)
    u = np.array([0.0, 0.5, 1.0])
    _, sigma = plan(u=u, sigma_range=(1.0, 3.0))  # drawn per sample, the same on both axes
    np.testing.assert_allclose(sigma, [[1, 1], [2, 2], [3, 3]])


@pytest.mark.parametrize("kw,match", [
    ({"kernel_size": 3, "window_size": 3}, "give kernel_size .* or window_size .*, not both"),
    ({"sigma": 1.0, "sigma_range": (1, 2)}, "give sigma .* or sigma_range .*, not both"),
    ({"window_size": 4}, r"window_size must be odd and positive, got 4"),
    ({"kernel_size": (3, -1)}, r"kernel_size must be odd and positive"),
    ({"sigma_range": (2.0, 1.0)}, r"sigma_range \(2.0, 1.0\) needs 0 < min <= max"),
    ({"sigma": 0.0}, "sigma must be positive"),
    ({}, "give sigma, sigma_range, window_size or kernel_size"),
])
def test_blur_plan_refusals(kw, match):
    with pytest.raises(ValueError, match="blur_3: " + match):
        plan(**kw)


def test_fill_bytes_round_half_up_and_clamp():
    np.testing.assert_array_equal(P.fill_bytes(Op, "fill", 2.5, 2, 3), [[3, 3, 3]] * 2)
    np.testing.assert_array_equal(P.fill_bytes(Op, "fill", [300, -4, 1.49], 2, 3), [[255, 0, 1]] * 2)
    np.testing.assert_array_equal(P.fill_bytes(Op, "fill", np.array([7.0, 9.0]), 2, 3),
                                  [[7, 7, 7], [9, 9, 9]])  # per sample
    with pytest.raises(ValueError, match=r"blur_3: fill takes one value or one per channel \(3\)"):
        P.fill_bytes(Op, "fill", [1, 2], 4, 3)


@pytest.mark.parametrize("channels", [1, 3])
def test_jpeg_roundtrip_is_pillows(rng, channels):
    img = rng.integers(0, 256, (23, 31, channels), dtype=np.uint8)
    q = int(rng.integers(10, 95))
    buf = io.BytesIO()
    Image.fromarray(img[..., 0] if channels == 1 else img).save(buf, format="JPEG", quality=q)
    want = np.asarray(Image.open(io.BytesIO(buf.getvalue())))
    got = P.jpeg_roundtrip(img, q)
    assert got.shape == img.shape and got.dtype == np.uint8
    np.testing.assert_array_equal(got, want.reshape(img.shape))
    assert not np.array_equal(got, img)  # lossy: random pixels do not survive
