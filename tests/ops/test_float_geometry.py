"""The CPU's geometric chain on float32 images (DALI resizes normalised images): warped in
float, float32 out, no rounding; checked against float64 references written here (bilinear
with pixel centres at +0.5 and edge taps clamped, exact flips and crops), on both CPU warps
(OpenCV and the NumPy twin). Float images on the GPU are refused by name."""
import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core import backend
from detaug.core.batch import ImageBatch


def run(images, build):
    pipe = Pipeline(batch_size=len(images))
    with pipe:
        x = fn.external_source(source=lambda: images, layout="HWC")
        pipe.set_outputs(*build(x))
    pipe.build()
    out = pipe.run()
    pipe.close()
    return [[np.asarray(o.at(i)) for i in range(len(images))] for o in out]


def resize_ref(img, h, w):
    """float64 bilinear upscale: output pixel centre (x + 0.5) maps to x' = (x + 0.5) * W / w
    - 0.5 in input pixel indices, taps clamped to the image."""
    H, W = img.shape[:2]
    src = img.astype(np.float64)
    xs = (np.arange(w) + 0.5) * W / w - 0.5
    ys = (np.arange(h) + 0.5) * H / h - 0.5
    x0, y0 = np.floor(xs).astype(int), np.floor(ys).astype(int)
    fx, fy = (xs - x0)[None, :, None], (ys - y0)[:, None, None]
    xa, xb = np.clip(x0, 0, W - 1), np.clip(x0 + 1, 0, W - 1)
    ya, yb = np.clip(y0, 0, H - 1), np.clip(y0 + 1, 0, H - 1)
    top = src[ya][:, xa] * (1 - fx) + src[ya][:, xb] * fx
    bot = src[yb][:, xa] * (1 - fx) + src[yb][:, xb] * fx
    return top * (1 - fy) + bot * fy


def test_float_resize_flip_crop_match_the_float64_reference(rng, cpu_warp):
    imgs = [rng.uniform(-2.1, 2.6, (int(rng.integers(5, 12)), int(rng.integers(5, 12)), 3))
            .astype(np.float32) for _ in range(3)]
    sizes = [(int(im.shape[0] * 2 + rng.integers(0, 3)), int(im.shape[1] * 2 - rng.integers(0, 3)))
             for im in imgs]
    hs = np.array([s[0] for s in sizes], np.float32)
    ws = np.array([s[1] for s in sizes], np.float32)

    def build(x):
        h = fn.external_source(source=lambda: list(hs[:, None]))
        w = fn.external_source(source=lambda: list(ws[:, None]))
        up = fn.resize(x, resize_x=w, resize_y=h)
        flipped = fn.flip(x, horizontal=1, vertical=1)
        crop = fn.slice(x, [1, 2], [3, 2], normalized_anchor=False, normalized_shape=False,
                        out_of_bounds_policy="pad")
        return up, flipped, crop

    up, flipped, crop = run(imgs, build)
    for im, (h, w), u, f, c in zip(imgs, sizes, up, flipped, crop):
        assert u.dtype == f.dtype == c.dtype == np.float32
        assert u.shape == (h, w, 3)
        np.testing.assert_allclose(u, resize_ref(im, h, w), atol=2e-5)  # float, not rounded
        assert np.abs(u - np.round(u)).max() > 0.01
        np.testing.assert_array_equal(f, im[::-1, ::-1])
        np.testing.assert_array_equal(c, im[2:4, 1:4])


def test_float_shrink_and_rotate_agree_with_the_twin(rng):
    """The OpenCV path against the NumPy twin (float64 inside) on shrinking (antialiased) and
    rotated float images, fill included: OpenCV's warpAffine places taps to 1/32 px."""
    imgs = [rng.uniform(-2, 2, (24, 31, 3)).astype(np.float32) for _ in range(2)]

    def build(x):
        return (fn.resize(x, resize_x=11, resize_y=9),
                fn.rotate(x, angle=30.0, fill_value=0.5, keep_size=True))

    got = {}
    for impl in ("reference", "opencv"):
        before = backend.cpu_warp()
        backend.set_cpu_warp(impl)
        try:
            got[impl] = run(imgs, build)
        finally:
            backend.set_cpu_warp(before)
    for a, b in zip(got["reference"], got["opencv"]):
        for x, y in zip(a, b):
            assert x.dtype == y.dtype == np.float32 and x.shape == y.shape
            assert np.abs(x - y).max() < 0.1 and np.abs(x - y).mean() < 0.01
    rot = got["reference"][1][0]
    assert np.isclose(rot[0, 0], 0.5).all()  # a corner outside the turned image takes the fill


def test_float_images_on_the_gpu_are_refused_by_name():
    b = ImageBatch([np.zeros((4, 4, 3), np.float32)], "gpu", "HWC")
    with pytest.raises(ValueError, match="float32 images run on the CPU only"):
        b.with_geometry(b.pending())
    c = ImageBatch([np.zeros((4, 4, 3), np.float64)], "cpu", "HWC")
    with pytest.raises(ValueError, match=r"uint8 \(or, on the CPU, float32\) HWC images"):
        c.with_geometry(c.pending())


def test_float_border_repeat_warp_matches_the_float64_reference(rng):
    """warp_affine without fill_value (DALI's border repeat): taps clamped to the image, float32
    kept; a shear [[1, 0.25, 0], [0, 1, 0]] (input -> output) written out per pixel here."""
    im = rng.uniform(-2, 2, (7, 9, 3)).astype(np.float32)
    out = run([im], lambda x: (fn.warp_affine(x, matrix=[1, 0.25, 0, 0, 1, 0], inverse_map=False),))
    got = out[0][0]
    assert got.dtype == np.float32 and got.shape == im.shape
    ref = np.zeros(im.shape)
    for y in range(7):
        for x in range(9):
            sx, sy = x + 0.5 - 0.25 * (y + 0.5) - 0.5, y  # the inverse map, less the centre
            x0 = int(np.floor(sx))
            f = sx - x0
            a, b = im[sy, min(max(x0, 0), 8)], im[sy, min(max(x0 + 1, 0), 8)]
            ref[y, x] = a * (1 - f) + b * f
    np.testing.assert_allclose(got, ref, atol=1e-5)
