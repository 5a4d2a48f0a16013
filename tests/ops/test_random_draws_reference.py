"""Random perspective and mosaic centres drawn exactly as torchvision and Ultralytics draw them,
and every random perspective draw rendered (once wrong: the top-left corner's y was drawn in the
width's range; a draw folding a canvas corner through the horizon raised ValueError and stopped
the pipeline; mosaic's centre for an odd size was one pixel off)."""
import math

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core import backend
from detaug.core.rng import SampleRNG
from detaug.ops.multi import mosaic_centres
from detaug.ops.recipes_geometry import random_perspective_points

from helpers import boxes_of, close_pipelines, images_of, track  # noqa: F401 (fixture)


def tv_get_params(width, height, distortion_scale, u):
    """torchvision ``RandomPerspective.get_params``, transcribed; ``torch.randint(lo, hi)`` is
    ``lo + floor(u (hi - lo))`` on the uniforms ``u`` (8 per call, in torchvision's order)."""
    def randint(lo, hi, v):
        return lo + math.floor(v * (hi - lo))

    half_height, half_width = height // 2, width // 2
    dw, dh = int(distortion_scale * half_width), int(distortion_scale * half_height)
    topleft = [randint(0, dw + 1, u[0]), randint(0, dh + 1, u[1])]
    topright = [randint(width - dw - 1, width, u[2]), randint(0, dh + 1, u[3])]
    botright = [randint(width - dw - 1, width, u[4]), randint(height - dh - 1, height, u[5])]
    botleft = [randint(0, dw + 1, u[6]), randint(height - dh - 1, height, u[7])]
    startpoints = [[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]]
    return startpoints, [topleft, topright, botright, botleft]


def test_perspective_points_are_torchvisions_on_fresh_draws(rng):
    n = 400
    sizes = np.stack([rng.integers(2, 400, n), rng.integers(2, 400, n)], 1)
    ds = rng.uniform(0, 1, n)
    ds[:8] = [0, 1, 0.5, 0.25, 1, 0.5, 0.75, 1e-9]
    u = rng.uniform(0, 1, (n, 8))
    u[:4] = np.array([0.0, 0.999999, 0.5, 1 - 1e-12])[:, None]
    start, end = random_perspective_points(u, sizes, ds)
    for k in range(n):
        s, e = tv_get_params(int(sizes[k, 1]), int(sizes[k, 0]), float(ds[k]), u[k])
        np.testing.assert_array_equal(start[k], s, err_msg=f"sample {k}")
        np.testing.assert_array_equal(end[k], e, err_msg=f"sample {k}")


def test_top_left_y_is_bounded_by_the_height():
    """60 x 100 at 0.5: torchvision's bound for y is int(0.5 * 30) + 1 = 16 (y <= 15); the width's
    would be 26."""
    u = np.full((1, 8), 0.999999)
    _, end = random_perspective_points(u, np.array([[60, 100]]), 0.5)
    assert end[0, 0].tolist() == [25, 15]


def _reference(img, start, end):
    """torchvision's rendering, float64: each output pixel centre through the least-squares map
    end -> start (torchvision's ``_get_perspective_coeffs``), divided whatever the sign of its
    denominator (``_perspective_grid``), bilinear, 0 outside."""
    a = np.zeros((8, 8))
    for i, (p1, p2) in enumerate(zip(end, start)):
        a[2 * i] = [p1[0], p1[1], 1, 0, 0, 0, -p2[0] * p1[0], -p2[0] * p1[1]]
        a[2 * i + 1] = [0, 0, 0, p1[0], p1[1], 1, -p2[1] * p1[0], -p2[1] * p1[1]]
    c = np.linalg.lstsq(a, np.asarray(start, np.float64).reshape(8), rcond=None)[0]
    h, w = img.shape[:2]
    ox, oy = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    den = c[6] * ox + c[7] * oy + 1
    x, y = (c[0] * ox + c[1] * oy + c[2]) / den, (c[3] * ox + c[4] * oy + c[5]) / den
    inside = (x >= 0) & (x < w) & (y >= 0) & (y < h)
    u0, v0 = np.floor(np.where(inside, x, 0.5) - 0.5), np.floor(np.where(inside, y, 0.5) - 0.5)
    fu, fv = np.where(inside, x, 0.5) - 0.5 - u0, np.where(inside, y, 0.5) - 0.5 - v0
    val = 0.0
    for dv, wv in ((0, 1 - fv), (1, fv)):
        for du, wu in ((0, 1 - fu), (1, fu)):
            xc = np.clip(u0 + du, 0, w - 1).astype(int)
            yc = np.clip(v0 + dv, 0, h - 1).astype(int)
            val = val + (wu * wv)[..., None] * img[yc, xc]
    return np.where(inside[..., None], val, 0.0), den


def test_every_random_draw_is_rendered_as_torchvision_renders_it():
    """300 samples at distortion 0.6..1.0 (about one in ten of torchvision's own draws sends a
    canvas corner through the horizon): none raises, and each image is torchvision's rendering
    of its draw (the draws read back from the op's keyed stream)."""
    n, h, w = 300, 30, 50
    rng = np.random.default_rng(41)
    imgs = [rng.integers(0, 256, (h, w, 3), np.uint8) for _ in range(n)]
    ds = np.round(rng.uniform(0.6, 1.0, n), 3)

    def src(info):
        i = info.idx_in_epoch
        return imgs[i], np.float32(ds[i])

    backend.set_cpu_warp("reference")
    try:
        pipe = track(Pipeline(batch_size=50, num_threads=1, seed=7))
        with pipe:
            x, d = fn.external_source(source=src, batch=False, num_outputs=2, size=n)
            pipe.set_outputs(fn.perspective(x, distortion_scale=d, p=1.0, antialias=False))
        outs = [images_of(pipe.run_batch(b, epoch=0)[0]) for b in range(n // 50)]
    finally:
        backend.set_cpu_warp("opencv")
    got = [im for batch in outs for im in batch]
    op = next(o for o in pipe.graph.ops if o.schema.name == "perspective")
    u = SampleRNG(7, op.rng_id, 0, np.arange(n)).uniform(9)
    folded = 0
    for k in range(n):
        s, e = tv_get_params(w, h, float(np.float32(ds[k])), u[k, :8])
        want, den = _reference(imgs[k].astype(np.float64), s, e)
        folded += not (den > 0).all()
        diff = np.abs(got[k].astype(np.float64) - np.clip(np.floor(want + 0.5), 0, 255))
        # off the horizon's neighbourhood (where a hair of the divide moves a sample anywhere)
        calm = np.abs(den) > 0.05
        assert (diff[calm] <= 1).mean() > 0.99, f"sample {k}"
    assert folded >= 10, folded  # the test exercises what it is for


def test_mosaic_centre_is_ultralytics_for_odd_and_even_sizes():
    """``yc, xc = (int(random.uniform(-x, 2 * s + x)) for x in border)``, border = (-s // 2,) * 2."""
    for s in (5, 7, 31, 32, 640, 641):
        r = SampleRNG(3, 1, 0, np.arange(2000))
        u = SampleRNG(3, 1, 0, np.arange(2000)).uniform(6)[:, 4:6]
        got = mosaic_centres(r, s)
        x = -s // 2
        want = np.floor(-x + u * ((2 * s + x) - (-x))).astype(np.int64)
        np.testing.assert_array_equal(got, want)
        assert got.min() >= -x and got.max() < 2 * s + x
        if s % 2:  # the range's ends are reached: ceil(s / 2) .. 2s - ceil(s / 2) - 1
            assert got.min() == (s + 1) // 2 and got.max() == 2 * s - (s + 1) // 2 - 1


def test_random_draws_on_tiny_images_never_raise():
    """On 2..4-pixel sides three drawn corners often fall on a line (no homography): such a
    sample is left as it is; no draw stops the pipeline."""
    rng = np.random.default_rng(5)
    imgs = [rng.integers(0, 256, (int(rng.integers(1, 5)), int(rng.integers(1, 5)), 3), np.uint8)
            for _ in range(200)]
    pipe = track(Pipeline(batch_size=50, num_threads=1, seed=1))
    with pipe:
        x = fn.external_source(source=lambda info: imgs[info.idx_in_epoch], batch=False, size=200)
        pipe.set_outputs(fn.perspective(x, distortion_scale=1.0, p=1.0))
    got = [im for b in range(4) for im in images_of(pipe.run_batch(b, epoch=0)[0])]
    assert [g.shape for g in got] == [i.shape for i in imgs]
    assert sum(np.array_equal(g, i) for g, i in zip(got, imgs)) < 200  # most are transformed


@pytest.mark.gpu
def test_gpu_renders_folded_draws_as_the_cpu():
    """The GPU warp gets the same planned matrices, folds through the horizon included: the same
    boxes, and pixels within two grey levels of the CPU's NumPy twin (but near the horizon)."""
    from helpers import run_graph

    rng = np.random.default_rng(8)
    n = 64
    imgs = [rng.integers(0, 256, (30, 50, 3), np.uint8) for _ in range(n)]
    boxes = [np.array([[2, 3, 40, 25], [10, 10, 20, 20]], np.float32)] * n

    def graph(i, b):
        return fn.perspective(i, b, distortion_scale=1.0, p=1.0, antialias=False)

    backend.set_cpu_warp("reference")
    try:
        ci, cb = run_graph(imgs, boxes, graph, seed=3)
        gi, gb = run_graph(imgs, boxes, graph, seed=3, device="gpu")
    finally:
        backend.set_cpu_warp("opencv")
    for c, g in zip(boxes_of(cb), boxes_of(gb)):
        np.testing.assert_allclose(g["boxes"], c["boxes"], atol=1e-3)
    close = [np.mean(np.abs(a.astype(int) - b.astype(int)) <= 2)
             for a, b in zip(images_of(ci), images_of(gi))]
    assert min(close) > 0.98, min(close)
