"""detaug.ops.photometric's host plans and DALI's linear ops: the staged kernel's parameters of
photometric_distort and grayscale from given draws (flags, factors, permutation index) computed
by hand, the argument refusals naming the op and argument, and brightness / contrast against
DALI's formula (values not rescaled between dtypes) on fresh images. The pixel maths of the
kernels is tests/ops/test_photometric.py's."""
from types import SimpleNamespace

import numpy as np
import pytest

from detaug import fn, types
from detaug.kernels import photometric as KP
from detaug.ops import photometric as P

from helpers import images_of, random_images, run_graph

OP = SimpleNamespace(name="photometric_distort")
DISTORT = {"brightness": (0.8, 1.2), "contrast": (0.5, 1.5), "saturation": (0.0, 2.0),
           "hue": (-0.1, 0.1), "p": 0.5}


def draws(**u):
    return {k: np.asarray(v, np.float64).reshape(-1, 1) for k, v in u.items()}


def test_distort_plan_from_given_draws():
    d = draws(apply_brightness=[0.1, 0.9], brightness=[0.5, 0.0], apply_contrast=[0.1, 0.9],
              contrast=[0.25, 0.0], apply_saturation=[0.1, 0.9], saturation=[0.75, 0.0],
              apply_hue=[0.1, 0.9], hue=[0.0, 0.5], contrast_first=[0.2, 0.7],
              apply_permute=[0.3, 0.5], permutation=[0.99, 0.0])
    ip, fp = P._distort_plan(OP, DISTORT, d, 2)
    assert ip.tolist() == [[KP.BRIGHTNESS | KP.CONTRAST | KP.SATURATION | KP.HUE
                            | KP.CONTRAST_FIRST | KP.PERMUTE, 5, 3, 0], [0, 0, 3, 0]]
    np.testing.assert_allclose(fp[:, :6], [[1.0, 0.75, 0.25, 1.5, -0.5, -0.1],
                                           [0.8, 0.5, 0.5, 0.0, 1.0, 0.0]], rtol=1e-6)
    ip, _ = P._distort_plan(OP, {**DISTORT, "p": np.array([0.0, 1.0])}, d, 2)
    assert ip[:, 0].tolist() == [KP.CONTRAST_FIRST, KP.BRIGHTNESS | KP.CONTRAST | KP.SATURATION
                                 | KP.HUE | KP.PERMUTE]


@pytest.mark.parametrize("change,message", [
    ({"brightness": (1.2, 0.8)}, "photometric_distort: brightness (1.2, 0.8) must satisfy 0.0 <= min <= max"),
    ({"contrast": (-0.5, 1.0)}, "photometric_distort: contrast (-0.5, 1.0) must satisfy 0.0 <= min"),
    ({"hue": (-0.6, 0.0)}, "photometric_distort: hue (-0.6, 0.0) must satisfy -0.5 <= min <= max <= 0.5"),
    ({"saturation": (1, 2, 3)}, "photometric_distort: saturation must be a (min, max) pair"),
    ({"p": 1.5}, "photometric_distort: p must be in [0, 1], got 1.5"),
    ({"p": float("nan")}, "photometric_distort: p must be in [0, 1]"),
])
def test_distort_plan_refusals(change, message):
    d = {k: np.zeros((2, 1)) for k in ("apply_brightness", "brightness", "apply_contrast",
                                       "contrast", "apply_saturation", "saturation", "apply_hue",
                                       "hue", "contrast_first", "apply_permute", "permutation")}
    with pytest.raises(ValueError) as e:
        P._distort_plan(OP, {**DISTORT, **change}, d, 2)
    assert str(e.value).startswith(message)


def test_grayscale_plan():
    op = SimpleNamespace(name="grayscale")
    ip, _ = P._grayscale_plan(op, {"p": np.array([0.3, 0.8]), "num_output_channels": 3},
                              draws(apply=[0.5, 0.5]), 2)
    assert ip[:, 0].tolist() == [0, KP.GRAY] and ip[:, 2].tolist() == [3, 3]
    ip, _ = P._grayscale_plan(op, {"p": 1.0, "num_output_channels": 1}, draws(apply=[0.9, 0.0]), 2)
    assert ip[:, 0].tolist() == [KP.GRAY, KP.GRAY] and ip[:, 2].tolist() == [1, 1]
    with pytest.raises(ValueError, match=r"grayscale: num_output_channels=1 needs p=1"):
        P._grayscale_plan(op, {"p": 0.5, "num_output_channels": 1}, draws(apply=[0.9, 0.0]), 2)
    with pytest.raises(ValueError, match=r"grayscale: num_output_channels must be 1 or 3, got 2"):
        P._grayscale_plan(op, {"p": 1.0, "num_output_channels": 2}, draws(apply=[0.0]), 1)


def test_dali_brightness_and_contrast_follow_dalis_formula(rng):
    imgs = random_images(rng, [(5, 7, 3), (4, 6, 3)])
    sh = float(rng.uniform(-0.3, 0.3))

    def graph(i, b):
        br = fn.random.uniform(range=(0.2, 2.0))  # per sample
        return (fn.brightness(i, brightness=br, brightness_shift=sh),
                fn.contrast(i, contrast=0.5, contrast_center=100.0, dtype=types.FLOAT), br)
    b_out, c_out, br = run_graph(imgs, [np.zeros((0, 4))] * 2, graph,
                                 seed=int(rng.integers(1 << 31)))
    br = np.asarray(br, np.float64)
    for k, (x, gb, gc) in enumerate(zip(imgs, images_of(b_out), images_of(c_out), strict=True)):
        x = x.astype(np.float64)
        want = np.clip(np.round(sh * 255 + br[k] * x), 0, 255)
        assert gb.dtype == np.uint8 and np.abs(gb.astype(np.float64) - want).max() <= 1
        assert gc.dtype == np.float32  # values kept in 0..255, no input-range factor (DALI)
        np.testing.assert_allclose(gc, 100 + 0.5 * (x - 100), atol=1e-3)


def test_dali_ops_refuse_by_name():
    imgs = [np.zeros((2, 2, 3), np.uint8)]
    with pytest.raises(ValueError, match=r"hue\w*: image_type .* is not supported: detaug's colour "
                                         r"ops take RGB images"):
        run_graph(imgs, [np.zeros((0, 4))], lambda i, b: fn.hue(i, hue=10.0, image_type=types.BGR))
    # a negative factor, constant or per sample, is refused by the op's declared range
    with pytest.raises(ValueError, match=r"saturation\w*: argument saturation=.* is out of range: "
                                         r"it takes a number >= 0"):
        run_graph(imgs, [np.zeros((0, 4))], lambda i, b: fn.saturation(
            i, saturation=fn.random.uniform(range=(-2.0, -1.0))))
