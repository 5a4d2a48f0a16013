"""Which filter a resize takes in a pipeline: DALI's form (``fn.resize(images)`` / ``ops.Resize``,
images alone, or any of DALI's filter arguments) DALI's triangle (kernels/resample.py), checked
against a float64 model of DALI's filter; detaug's box-aware form (``fn.resize(images, boxes)``)
detaug's warp, unchanged; ``antialias=False`` one bilinear sample, unchanged; both CPU warps;
the GPU pipeline against the CPU one."""
from __future__ import annotations

import numpy as np
import pytest

import detaug.fn as fn
import detaug.ops as ops
import detaug.types as types
from detaug import pipeline_def
from detaug.core import backend
from detaug.kernels import warp as W
from helpers import fresh_seed, run_graph, to_np
from helpers.dali_refs import assert_rounded, dali_resize, dali_u8


def _scale(ih, iw, oh, ow):
    return np.diag([ow / iw, oh / ih, 1.0])[None]


def _images(rng, n=3):
    return [rng.integers(0, 256, (int(h), int(w), 3), dtype=np.uint8)
            for h, w in rng.integers(20, 70, (n, 2))]


def test_dali_form_takes_dalis_filter(cpu_warp):
    """fn.resize(images) at about half size; resize_shorter=9 (a fractional longer side: DALI's
    subpixel_scale, its default, keeps the scale 9 / shorter and moves the input region about
    its centre); subpixel_scale=False scales the image onto the rounded size."""
    rng = np.random.default_rng(fresh_seed())
    imgs = _images(rng)
    boxes = [np.zeros((0, 4))] * len(imgs)
    half, short, plain = run_graph(imgs, boxes, lambda i, b: (
        fn.resize(i, size=(17, 23)), fn.resize(i, resize_shorter=9),
        fn.resize(i, resize_shorter=9, subpixel_scale=False)))
    for k, img in enumerate(imgs):
        assert_rounded(np.asarray(half.at(k)), dali_resize(img, 17, 23))
        h, w = img.shape[:2]
        s = 9 / min(h, w)
        req = (h * s, w * s)
        oh, ow = (int(v) for v in np.round(req))
        got = np.asarray(short.at(k))
        assert got.shape == (oh, ow, 3)
        assert_rounded(got, dali_resize(img, oh, ow, req))
        assert_rounded(np.asarray(plain.at(k)), dali_resize(img, oh, ow))


def test_class_api_and_filter_arguments(cpu_warp):
    """ops.Resize (DALI's older API) and fn.resize(images, boxes, interp_type=INTERP_LINEAR) (a
    DALI filter argument given) take DALI's filter too."""
    rng = np.random.default_rng(fresh_seed())
    imgs = _images(rng, 2)
    boxes = [np.array([[1.0, 2.0, 10.0, 12.0]])] * 2
    resize = ops.Resize(resize_x=11, resize_y=13)
    a, b, _ = run_graph(imgs, boxes, lambda i, bx: (
        resize(i), *fn.resize(i, bx, size=(13, 11), interp_type=types.INTERP_LINEAR)))
    for k, img in enumerate(imgs):
        ref = dali_resize(img, 13, 11)
        assert_rounded(np.asarray(a.at(k)), ref)
        assert_rounded(np.asarray(b.at(k)), ref)


def test_detaug_form_and_antialias_false_keep_the_warp():
    """fn.resize(images, boxes) is detaug's box-aware op: detaug's warp (the mean of bilinear
    samples), as before; antialias=False (either form) samples once, as before."""
    rng = np.random.default_rng(fresh_seed())
    imgs = [rng.integers(0, 256, (30, 44, 3), dtype=np.uint8) for _ in range(2)]
    boxes = [np.array([[3.0, 4.0, 20.0, 25.0]])] * 2
    before = backend.cpu_warp()
    backend.set_cpu_warp("reference")
    try:
        own, _, plain = run_graph(imgs, boxes, lambda i, b: (
            *fn.resize(i, b, size=(13, 17)), fn.resize(i, size=(13, 17), antialias=False)))
    finally:
        backend.set_cpu_warp(before)
    m = _scale(30, 44, 13, 17)
    for k, img in enumerate(imgs):
        np.testing.assert_array_equal(np.asarray(own.at(k)), W.warp_numpy([img], m, [[13, 17]])[0])
        np.testing.assert_array_equal(np.asarray(plain.at(k)),
                                      W.warp_numpy([img], m, [[13, 17]], antialias=False)[0])
    assert not np.array_equal(np.asarray(own.at(0)),
                              dali_u8(dali_resize(imgs[0], 13, 17)))


def test_random_resized_crop_of_images_alone():
    """fn.random_resized_crop of images alone (DALI's form) resamples its window with DALI's
    filter; given boxes, detaug's warp. A window forced to the whole image (area 1, the image's
    own aspect) makes it a plain resize."""
    rng = np.random.default_rng(fresh_seed())
    img = rng.integers(0, 256, (32, 48, 3), dtype=np.uint8)
    boxes = [np.array([[2.0, 2.0, 30.0, 20.0]])]
    kw = dict(size=(11, 13), random_area=(1.0, 1.0), random_aspect_ratio=(1.5, 1.5))
    before = backend.cpu_warp()
    backend.set_cpu_warp("reference")
    try:
        alone, own, _ = run_graph([img], boxes, lambda i, b: (
            fn.random_resized_crop(i, **kw), *fn.random_resized_crop(i, b, **kw)))
    finally:
        backend.set_cpu_warp(before)
    assert_rounded(np.asarray(alone.at(0)), dali_resize(img, 11, 13))
    np.testing.assert_array_equal(np.asarray(own.at(0)),
                                  W.warp_numpy([img], _scale(32, 48, 11, 13), [[11, 13]])[0])


def _window_axis(n_in, x0, cw, n_out, clamp_to_window=False):
    """(n_out, n_in): DALI's triangle over the window [x0, x0 + cw) resized to n_out, taps
    clamped to the image (DALI's region of interest) or to the window."""
    s = cw / n_out
    r = max(1.0, s)
    lo, hi = (x0, x0 + cw - 1) if clamp_to_window else (0, n_in - 1)
    w = np.zeros((n_out, n_in))
    for i in range(n_out):
        t = x0 + (i + 0.5) * s
        ps = np.arange(int(np.floor(t - 0.5 - r)), int(np.ceil(t - 0.5 + r)) + 1)
        k = np.maximum(0.0, 1.0 - np.abs(ps + 0.5 - t) / r)
        np.add.at(w[i], np.clip(ps, lo, hi), k / k.sum())
    return w


def test_random_resized_crop_window_reads_beyond_it():
    """random_resized_crop of images alone resamples its window as DALI's resize of a region of
    interest: taps beyond the window's edge read the image there (not the window's edge
    replicated). The window (a quarter of the area, the image's aspect) is found among all its
    places by the output."""
    rng = np.random.default_rng(fresh_seed())
    img = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
    (out,) = run_graph([img], [np.zeros((0, 4))], lambda i, b: (fn.random_resized_crop(
        i, size=(5, 7), random_area=(0.25, 0.25), random_aspect_ratio=(4 / 3, 4 / 3)),))
    got = np.asarray(out.at(0)).astype(np.float64)
    x = img.astype(np.float64)

    def model(x0, y0, clamp):
        return np.einsum("ij,jkc,lk->ilc", _window_axis(24, y0, 12, 5, clamp), x,
                         _window_axis(32, x0, 16, 7, clamp))

    places = [(x0, y0) for x0 in range(17) for y0 in range(13)]
    found = [p for p in places if np.abs(got - model(*p, False)).max() <= 0.5 + 1e-3]
    assert len(found) == 1
    # the window is smaller than the image: some edge has pixels beyond it, which it read
    assert np.abs(got - model(*found[0], True)).max() > 1


def test_resize_then_mirror_normalize_float():
    """The filter joins the fused chain: resize, then crop_mirror_normalize (crop, mirror,
    normalise to float) gives the triangle's value mirrored and normalised (not rounded)."""
    rng = np.random.default_rng(fresh_seed())
    img = rng.integers(0, 256, (41, 33, 3), dtype=np.uint8)

    @pipeline_def(batch_size=1, num_threads=1, device_id=None, seed=3)
    def pipe():
        i = fn.external_source(source=lambda: [img], layout="HWC")
        r = fn.resize(i, resize_x=15, resize_y=19)
        return fn.crop_mirror_normalize(r, crop=(19, 15), mirror=1, mean=[1.0, 2.0, 3.0],
                                        std=[2.0, 2.0, 2.0], output_layout="HWC",
                                        dtype=types.FLOAT)

    p = pipe()
    p.build()
    (out,) = p.run()
    want = (dali_resize(img, 19, 15)[:, ::-1] - [1.0, 2.0, 3.0]) / 2.0
    np.testing.assert_allclose(np.asarray(out.at(0)), want, atol=1e-3)


@pytest.mark.gpu
def test_gpu_pipeline_equals_cpu():
    """The DALI form on the GPU (resample.cu, one launch) = the CPU pipeline: the unrounded
    values (crop_mirror_normalize to float) within 1e-3, the uint8 ones rounded from them but
    next to a half (float32 sums)."""
    rng = np.random.default_rng(fresh_seed())
    imgs = _images(rng, 4)
    boxes = [np.array([[1.0, 1.0, 9.0, 9.0]])] * 4

    def graph(i, b):
        a = fn.resize(i, size=(21, 19))
        c = fn.flip(fn.resize(i, resize_shorter=12), horizontal=1)
        return a, c, fn.crop_mirror_normalize(a, mean=0.0, std=1.0, dtype=types.FLOAT,
                                              output_layout="HWC")

    cpu = run_graph(imgs, boxes, graph)
    gpu = run_graph(imgs, boxes, graph, device="gpu")
    for k in range(len(imgs)):
        f = np.asarray(cpu[2].at(k), np.float64)
        np.testing.assert_allclose(to_np(gpu[2].at(k)), f, atol=1e-3)
        for out in (cpu[0], gpu[0]):
            assert_rounded(np.asarray(to_np(out.at(k)), np.float64), f)
        d = np.abs(to_np(gpu[1].at(k)).astype(int) - np.asarray(cpu[1].at(k)).astype(int))
        assert d.max() <= 1 and (d > 0).mean() < 0.05
