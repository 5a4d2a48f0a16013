"""detaug.ops.color (normalize, crop_mirror_normalize, brightness_contrast, hsv) in pipelines against
float64 references written from the ops' documented rules, on fresh random images: normalize with
given statistics ((x - mean) / std * scale + shift, HWC or CHW, float32 or float16) and without
(DALI's per-sample, per-channel or batch standardisation with ddof and epsilon); DALI's crop +
mirror + normalize with the boxes following; the colour ops' per-sample rules; and the refusals,
each naming the op and the fault."""
import numpy as np
import pytest

from detaug import fn
from detaug.ops import color as C
from helpers import boxes_of, close_pipelines, images_of, random_images, run_graph  # noqa: F401


def shapes(rng, n, c=3):
    return [(int(rng.integers(3, 20)), int(rng.integers(3, 20)), c) for _ in range(n)]


def no_boxes(n):
    return [np.zeros((0, 4), np.float32)] * n


@pytest.mark.parametrize("layout,dtype,tol", [("HWC", "float32", 1e-4), ("CHW", "float32", 1e-4),
                                              ("HWC", "float16", 2e-3)])
def test_normalize_with_given_statistics(rng, layout, dtype, tol):
    imgs = random_images(rng, shapes(rng, 4))
    mean, std = rng.uniform(50, 200, 3), rng.uniform(20, 80, 3)
    scale, shift = float(rng.uniform(0.5, 2)), float(rng.uniform(-1, 1))
    (out,) = run_graph(imgs, no_boxes(4), lambda i, b: fn.normalize(
        i, mean=mean.tolist(), std=std.tolist(), scale=scale, shift=shift, output_layout=layout,
        dtype=dtype))
    for got, x in zip(images_of(out), imgs, strict=True):
        want = (x.astype(np.float64) - mean) / std * scale + shift
        want = want.transpose(2, 0, 1) if layout == "CHW" else want
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float64), want, atol=tol, rtol=tol)


@pytest.mark.parametrize("kw", [{}, {"axis_names": "HW"}, {"batch": True}, {"ddof": 1, "epsilon": 4.0},
                                {"mean": 100.0}, {"stddev": 30.0, "scale": 2.0, "shift": 1.0}])
def test_normalize_standardises_as_dali_where_statistics_are_left_out(rng, kw):
    imgs = random_images(rng, [(7, 9, 3)] * 3)
    (out,) = run_graph(imgs, no_boxes(3), lambda i, b: fn.normalize(i, **kw))
    axes = (0, 1) if kw.get("axis_names") == "HW" else (0, 1, 2)
    xs = [x.astype(np.float64) for x in imgs]
    everything = np.stack(xs)
    for got, x in zip(images_of(out), xs, strict=True):
        src = everything if kw.get("batch") else x[None]
        red = (0, *(a + 1 for a in axes))
        n = np.prod([src.shape[a] for a in red])
        m = src.mean(axis=red, keepdims=True)[0]
        var = ((src - m) ** 2).sum(axis=red, keepdims=True)[0] / (n - kw.get("ddof", 0))
        if "mean" in kw:
            m = kw["mean"]
        inv = 1 / kw["stddev"] if "stddev" in kw else 1 / np.sqrt(var + kw.get("epsilon", 0.0))
        want = (x - m) * inv * kw.get("scale", 1.0) + kw.get("shift", 0.0)
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_normalize_standardises_a_constant_sample_to_zero():
    (out,) = run_graph([np.full((4, 5, 3), 77, np.uint8)], no_boxes(1), lambda i, b: fn.normalize(i))
    np.testing.assert_array_equal(images_of(out)[0], np.zeros((4, 5, 3), np.float32))


@pytest.mark.parametrize("kw,match", [
    ({"mean": 1.0, "std": 1.0, "stddev": 1.0}, "give std or stddev"),
    ({"mean": 1.0, "std": 1.0, "dtype": "int8"}, r"normalize_\d+: dtype 'int8' is not available"),
    ({"mean": 1.0, "std": [1.0, 0.0, 1.0]}, r"normalize: argument std=\[1.0, 0.0, 1.0\] is out of range"),
    ({"mean": 1.0, "std": 1.0, "scale": 0.0}, r"normalize_\d+: scale must be non-zero"),
    ({"axis_names": "HX"}, r"normalize_\d+: axis_names 'HX': images have axes H, W, C"),
])
def test_normalize_refusals_name_the_fault(rng, kw, match):
    with pytest.raises(Exception, match=match):
        run_graph(random_images(rng, [(4, 4, 3)]), no_boxes(1), lambda i, b: fn.normalize(i, **kw))


def test_dtype_names_and_types_map_to_numpy():
    class Op:
        name = "op"

    assert C._dtype(Op, "float16") is np.float16 and C._dtype(Op, np.uint8) is np.uint8
    with pytest.raises(ValueError, match="op: dtype 'float64' is not available"):
        C._dtype(Op, "float64")


@pytest.mark.parametrize("mirror", [0, 1])
def test_crop_mirror_normalize_crops_mirrors_and_normalises_with_the_boxes(rng, mirror):
    h, w, ch, cw = 12, 17, 6, 8
    img = random_images(rng, [(h, w, 3)])[0]
    box = np.array([[3, 4, 9, 7]], np.float32)
    pos_x, pos_y = float(rng.uniform(0, 1)), float(rng.uniform(0, 1))
    out, bx = run_graph([img], [box], lambda i, b: fn.crop_mirror_normalize(
        i, b, crop=(ch, cw), crop_pos_x=pos_x, crop_pos_y=pos_y, mirror=mirror,
        mean=[10.0, 20.0, 30.0], std=[2.0, 4.0, 8.0]))
    x0 = int(np.floor(pos_x * (w - cw) + 0.5))  # DALI's anchor: round, halves up
    y0 = int(np.floor(pos_y * (h - ch) + 0.5))
    window = img[y0:y0 + ch, x0:x0 + cw].astype(np.float64)
    if mirror:
        window = window[:, ::-1]
    want = ((window - [10, 20, 30]) / [2, 4, 8]).transpose(2, 0, 1)  # CHW by default
    np.testing.assert_allclose(images_of(out)[0], want, atol=1e-4)
    moved = box - [x0, y0, x0, y0]
    if mirror:
        moved = np.array([[cw - moved[0, 2], moved[0, 1], cw - moved[0, 0], moved[0, 3]]])
    np.testing.assert_allclose(boxes_of(bx)[0]["boxes"], np.clip(moved, 0, [cw, ch, cw, ch]), atol=1e-4)


@pytest.mark.parametrize("kw,match", [({"pad_output": True}, "pad_output=True"),
                                      ({"out_of_bounds_policy": "error"}, "out_of_bounds_policy='error'")])
def test_crop_mirror_normalize_refuses_what_it_does_not_implement(rng, kw, match):
    with pytest.raises(NotImplementedError, match=match):
        run_graph(random_images(rng, [(4, 4, 3)]), no_boxes(1),
                  lambda i, b: fn.crop_mirror_normalize(i, **kw))


def test_brightness_contrast_per_sample(rng):
    imgs = random_images(rng, shapes(rng, 3))
    br, co = rng.uniform(0.5, 1.5, 3), rng.uniform(0.5, 1.5, 3)
    it = iter(zip(br, co))
    draws = [next(it) for _ in range(3)]
    (out,) = run_graph(imgs, no_boxes(3), lambda i, b: fn.brightness_contrast(
        i, brightness=fn.external_source(source=lambda info: np.float32(draws[info.idx_in_epoch][0]),
                                         batch=False, size=3),
        contrast=fn.external_source(source=lambda info: np.float32(draws[info.idx_in_epoch][1]),
                                    batch=False, size=3), contrast_center=100.0))
    for got, x, (b, c) in zip(images_of(out), imgs, draws, strict=True):
        want = np.clip(np.floor(np.float32(b) * (100 + np.float32(c) * (x.astype(np.float64) - 100)) + 0.5), 0, 255)
        assert got.dtype == np.uint8
        np.testing.assert_array_equal(got, want)


def test_hsv_identity_value_and_saturation_rules(rng):
    imgs = random_images(rng, shapes(rng, 2))
    same, half, grey = (run_graph(imgs, no_boxes(2), lambda i, b, kw=kw: fn.hsv(i, **kw))[0]
                        for kw in ({}, {"value": 0.5}, {"saturation": 0.0}))
    for x, s, h, g in zip(imgs, images_of(same), images_of(half), images_of(grey), strict=True):
        x = x.astype(np.float64)
        assert np.abs(s - x).max() <= 1  # identity, up to the YIQ round trip's rounding
        assert np.abs(h - np.clip(np.floor(x * 0.5 + 0.5), 0, 255)).max() <= 1
        y = x @ [0.299, 0.587, 0.114]  # YIQ's luma: saturation 0 keeps only it
        assert np.abs(g - np.clip(np.floor(y + 0.5), 0, 255)[..., None]).max() <= 1


def test_colour_ops_take_three_channel_images(rng):
    with pytest.raises(ValueError, match=r"hsv_\d+: colour ops take 3-channel images"):
        run_graph(random_images(rng, [(4, 4, 1)]), no_boxes(1), lambda i, b: fn.hsv(i, hue=10.0))
