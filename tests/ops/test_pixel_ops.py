"""The pixel ops in pipelines (CPU backend): gaussian_blur's argument rules (DALI's and
torchvision's), noise, jitter, JPEG compression (Pillow round trip, quality bounds, CPU only),
random_erasing (torchvision's get_params, written out here) and DALI's erase (its documented
examples), with boxes dropped or flagged by their visible fraction. On the GPU (``gpu``-marked):
each kernel and a pipeline against the CPU path running the twins."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from detaug import Pipeline, fn
from detaug.core.rng import SampleRNG
from detaug.kernels import blur as KB
from detaug.kernels import noise as KN
from detaug.kernels.launch import reset_launch_counts, total_launches
from detaug.ops import erase as E
from helpers import close_pipelines, fresh_seed, random_images, run_graph, to_np, track  # noqa: F401 (fixture)
from helpers import cupy as cp  # imported on first use: by a gpu test, where there is a GPU
from helpers.cases import tv_gaussian_blur


def _imgs(rng, n=3, h=(20, 50), w=(20, 60)):
    return [rng.integers(0, 256, (int(rng.integers(*h)), int(rng.integers(*w)), 3), dtype=np.uint8)
            for _ in range(n)]


def _images_only(imgs, graph, seed=0):
    return run_graph(imgs, [np.zeros((0, 4))] * len(imgs), lambda i, b: graph(i), seed=seed)[0]


# ---- gaussian_blur ----------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [3, fresh_seed()])
def test_blur_sigma_range_draws_per_sample_and_matches_torchvision(seed):
    rng = np.random.default_rng(seed)
    imgs = _imgs(rng, 4)
    out = _images_only(imgs, lambda i: fn.gaussian_blur(i, kernel_size=7, sigma_range=(0.5, 2.5)), seed)
    # the draw: the op's keyed stream (seed, op 1 after the source, epoch 0, sample k)
    u = SampleRNG(seed, 1, 0, np.arange(4)).uniform(2)[:, 0]
    sig = 0.5 + 2.0 * u
    assert len(set(np.round(sig, 6))) == 4
    for k, img in enumerate(imgs):
        ref = tv_gaussian_blur(img, (7, 7), (sig[k], sig[k]))
        assert np.abs(out.data[k].astype(np.float64) - ref).max() <= 1


def test_blur_dali_arguments():
    rng = np.random.default_rng(5)
    imgs = _imgs(rng, 2)
    # sigma only: window 2 ceil(3 sigma) + 1 = 11 for 1.5; per axis (sigma_h, sigma_w)
    out = _images_only(imgs, lambda i: fn.gaussian_blur(i, sigma=(1.5, 0.7)))
    for k, img in enumerate(imgs):
        ref = tv_gaussian_blur(img, (2 * 3 + 1, 11), (0.7, 1.5))  # torchvision's (x, y) order
        assert np.abs(out.data[k].astype(np.float64) - ref).max() <= 1
    # window only: sigma = 0.3 ((w - 1) / 2 - 1) + 0.8
    out = _images_only(imgs, lambda i: fn.gaussian_blur(i, window_size=9))
    for k, img in enumerate(imgs):
        assert np.abs(out.data[k].astype(np.float64) - tv_gaussian_blur(img, (9, 9), (1.7, 1.7))).max() <= 1
    # probability 0: copied exactly
    same = _images_only(imgs, lambda i: fn.gaussian_blur(i, sigma=3.0, probability=0.0))
    assert all(np.array_equal(a, b) for a, b in zip(same.data, imgs))
    # a per-sample sigma
    out = _images_only(imgs, lambda i: fn.gaussian_blur(i, sigma=fn.random.uniform(range=(1.0, 1.0))))
    for k, img in enumerate(imgs):
        assert np.abs(out.data[k].astype(np.float64) - tv_gaussian_blur(img, (7, 7), (1.0, 1.0))).max() <= 1


def test_blur_axis_orders_and_odd_rule():
    img = np.zeros((20, 20, 3), np.uint8)
    img[10:] = 255                                    # a horizontal edge: only a vertical blur moves it
    def run(**kw):
        return _images_only([img], lambda i: fn.gaussian_blur(i, **kw)).data[0]
    assert np.array_equal(run(kernel_size=(5, 1)), img)        # torchvision: (kx, ky)
    assert not np.array_equal(run(kernel_size=(1, 5)), img)
    assert np.array_equal(run(window_size=(1, 5)), img)        # DALI: (h, w)
    assert not np.array_equal(run(window_size=(5, 1)), img)
    for bad, name in (({"kernel_size": 4}, "kernel_size"), ({"window_size": (3, 0)}, "window_size"),
                      ({"kernel_size": 3, "window_size": 3}, "window_size"),
                      ({"sigma": 1.0, "sigma_range": (1, 2)}, "sigma_range"),
                      ({"sigma_range": (0.0, 1.0)}, "sigma_range"), ({"sigma": -1.0}, "sigma"),
                      ({}, "sigma")):
        with pytest.raises(ValueError, match=name):
            run(**bad)


# ---- noise and jitter --------------------------------------------------------------------------
def test_noise_probability_ranges_and_dali_names():
    rng = np.random.default_rng(6)
    imgs = _imgs(rng, 3)
    same = _images_only(imgs, lambda i: fn.noise(i, std=30.0, probability=0.0))
    assert all(np.array_equal(a, b) for a, b in zip(same.data, imgs))
    out = _images_only(imgs, lambda i: fn.noise(i, std=(5.0, 40.0)))
    assert all(not np.array_equal(a, b) for a, b in zip(out.data, imgs))
    sp = _images_only([np.full((100, 100, 3), 128, np.uint8)],
                      lambda i: fn.noise.salt_and_pepper(i, prob=0.3, salt_val=200, pepper_val=10))
    assert set(np.unique(sp.data[0]).tolist()) == {10, 128, 200}
    assert abs((sp.data[0] != 128).all(-1).mean() - 0.3) < 0.05
    g = _images_only([np.full((100, 100, 3), 100, np.uint8)], lambda i: fn.noise.gaussian(i, mean=5, stddev=3))
    assert abs(g.data[0].mean() - 105) < 0.2 and abs(g.data[0].std() - 3) < 0.2
    for bad, name in (({"mode": "speckle"}, "mode"), ({"mode": "salt_and_pepper", "amount": 1.5}, "amount"),
                      ({"probability": 2.0}, "probability"), ({"std": (3.0, 1.0)}, "std"),
                      ({"mode": "salt_and_pepper", "std": 5.0}, "std"), ({"amount": 0.2}, "amount")):
        with pytest.raises(ValueError, match=name):
            _images_only(imgs, lambda i: fn.noise(i, **bad))


def test_noise_is_keyed_by_sample():
    rng = np.random.default_rng(7)
    imgs = [rng.integers(0, 256, (30, 30, 3), dtype=np.uint8)] * 2   # the same image twice
    out = _images_only(imgs, lambda i: fn.noise(i, std=20.0), seed=11)
    again = _images_only(imgs, lambda i: fn.noise(i, std=20.0), seed=11)
    assert not np.array_equal(out.data[0], out.data[1])              # sample index is in the key
    assert np.array_equal(out.data[0], again.data[0])


def test_jitter_op():
    rng = np.random.default_rng(8)
    imgs = _imgs(rng, 2)
    assert all(np.array_equal(a, b) for a, b in zip(_images_only(imgs, lambda i: fn.jitter(i, nDegree=1)).data, imgs))
    masked = _images_only(imgs, lambda i: fn.jitter(i, nDegree=4, mask=fn.random.coin_flip(probability=0.0)))
    assert all(np.array_equal(a, b) for a, b in zip(masked.data, imgs))
    with pytest.raises(NotImplementedError, match="interp_type"):
        _images_only(imgs, lambda i: fn.jitter(i, interp_type="linear"))


# ---- JPEG --------------------------------------------------------------------------------------
def pil_roundtrip(img, q):
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=q)
    return np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))


def test_jpeg_compression_is_pillows_round_trip_at_the_drawn_quality():
    rng = np.random.default_rng(9)
    imgs = _imgs(rng, 12)
    out = _images_only(imgs, lambda i: fn.jpeg_compression(i, quality=37))
    assert all(np.array_equal(o, pil_roundtrip(im, 37)) for o, im in zip(out.data, imgs))
    out = _images_only(imgs, lambda i: fn.jpeg_compression_distortion(i, quality=(5, 6)))
    used = []
    for o, im in zip(out.data, imgs):
        hit = [q for q in (5, 6) if np.array_equal(o, pil_roundtrip(im, q))]
        assert hit, "not a round trip at quality 5 or 6"
        used += hit
    assert set(used) == {5, 6}                                       # both ends are drawn
    same = _images_only(imgs, lambda i: fn.jpeg_compression(i, quality=5, probability=0.0))
    assert all(np.array_equal(a, b) for a, b in zip(same.data, imgs))
    for q in (1, 100, (100, 100)):
        _images_only(imgs[:1], lambda i: fn.jpeg_compression(i, quality=q))
    for q in (0, 101, 50.5, (10, 5), (0, 10)):
        with pytest.raises(ValueError, match="quality"):
            _images_only(imgs[:1], lambda i: fn.jpeg_compression(i, quality=q))


def test_jpeg_compression_on_the_gpu_is_refused_by_name():
    pipe = track(Pipeline(batch_size=1))
    with pipe:
        img = fn.external_source(source=[[np.zeros((4, 4, 3), np.uint8)]])
        for name in ("jpeg_compression", "jpeg_compression_distortion"):
            with pytest.raises(NotImplementedError, match="jpeg_compression.*CPU only.*device='cpu'"):
                getattr(fn, name)(img, device="gpu")
            with pytest.raises(NotImplementedError, match="input is on the GPU"):
                getattr(fn, name)(img.gpu())


# ---- random_erasing ----------------------------------------------------------------------------
def tv_get_params(u, h_img, w_img, scale, ratio):
    """torchvision RandomErasing.get_params with its random draws replaced by ``u`` (per attempt:
    area, log-ratio, row, column), written as torchvision writes it."""
    import math

    area = h_img * w_img
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for t in range(10):
        ua, ur, ui, uj = u[4 * t:4 * t + 4]
        erase_area = area * (scale[0] + (scale[1] - scale[0]) * ua)
        aspect_ratio = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * ur)
        h = int(round(math.sqrt(erase_area * aspect_ratio)))
        w = int(round(math.sqrt(erase_area / aspect_ratio)))
        if not (h < h_img and w < w_img):
            continue
        i = int(ui * (h_img - h + 1))
        j = int(uj * (w_img - w + 1))
        return i, j, h, w
    return None


@pytest.mark.parametrize("seed", [10, fresh_seed()])
def test_erasing_rects_equal_torchvisions_get_params(seed):
    rng = np.random.default_rng(seed)
    b = 200
    sizes = rng.integers(1, 80, (b, 2))
    u = rng.random((b, 41))
    for scale, ratio in (((0.02, 0.33), (0.3, 3.3)), ((0.3, 0.9), (0.1, 10.0))):
        rects, found = E.erasing_rects(u, sizes, scale, ratio)
        for k in range(b):
            ref = tv_get_params(u[k, 1:], int(sizes[k, 0]), int(sizes[k, 1]), scale, ratio)
            assert found[k] == (ref is not None)
            if ref is not None:
                i, j, h, w = ref
                assert rects[k].tolist() == [i, j, i + h, j + w], (seed, k)


def test_erasing_rect_rounding_halves_to_even():
    sizes = np.array([[10, 10]])
    u = np.full((1, 41), 0.5)
    # area 100 * 0.0625 = 6.25, ratio 1: h = w = round(2.5) = 2; 0.1225: round(3.5) = 4
    for s, side in ((0.0625, 2), (0.1225, 4)):
        rects, found = E.erasing_rects(u, sizes, (s, s), (1.0, 1.0))
        assert found[0] and rects[0, 2] - rects[0, 0] == side and rects[0, 3] - rects[0, 1] == side
    # nothing fits (h must be < H): the image is left as it is
    assert not E.erasing_rects(u, sizes, (1.0, 1.0), (1.0, 1.0))[1][0]


def test_random_erasing_op_fills_and_probability():
    rng = np.random.default_rng(12)
    imgs = _imgs(rng, 6, h=(30, 40), w=(30, 40))
    out = _images_only(imgs, lambda i: fn.random_erasing(i, probability=1.0, value=(1, 2, 3),
                                                         scale=(0.1, 0.2)))
    for o, im in zip(out.data, imgs):
        changed = (o != im).any(-1)
        ys, xs = np.nonzero(changed)
        assert len(ys)
        # one rectangle of (1, 2, 3), the rest untouched
        box = o[ys.min():ys.max() + 1, xs.min():xs.max() + 1]
        assert (box == [1, 2, 3]).all()
        assert 0.05 < box.shape[0] * box.shape[1] / changed.size < 0.25
    none = _images_only(imgs, lambda i: fn.random_erasing(i, probability=0.0))
    assert all(np.array_equal(a, b) for a, b in zip(none.data, imgs))
    rnd = _images_only(imgs, lambda i: fn.random_erasing(i, probability=1.0, value="random"))
    assert all((a != b).any() for a, b in zip(rnd.data, imgs))
    with pytest.raises(ValueError, match="value"):
        _images_only(imgs, lambda i: fn.random_erasing(i, value="noise"))


# ---- DALI's erase and the box policy -----------------------------------------------------------
def _erased_mask(out, img):
    return (out != img).any(-1)


def test_erase_dali_documented_examples():
    img = np.full((300, 300, 3), 9, np.uint8)
    (out,) = (_images_only([img], lambda i: fn.erase(i, anchor=(10, 20), shape=(190, 200), axis_names="HW")),)
    want = np.zeros((300, 300), bool)
    want[10:200, 20:220] = True                     # 10 <= y < 200, 20 <= x < 220
    assert np.array_equal(_erased_mask(out.data[0], img), want)
    out = _images_only([img], lambda i: fn.erase(i, anchor=(20, 10), shape=(200, 190), axis_names="WH"))
    assert np.array_equal(_erased_mask(out.data[0], img), want)
    out = _images_only([img], lambda i: fn.erase(i, anchor=(10, 250), shape=(20, 30), axis_names="HW",
                                                 fill_value=(118, 185, 0)))
    assert (out.data[0][10:30, 250:280] == [118, 185, 0]).all() and (out.data[0][30:] == 9).all()
    out = _images_only([img], lambda i: fn.erase(i, anchor=(15,), shape=(10,), axis_names="H"))
    want = np.zeros((300, 300), bool)
    want[15:25] = True                               # the axis not given spans the image
    assert np.array_equal(_erased_mask(out.data[0], img), want)
    # two regions, normalised, centred
    small = np.full((40, 60, 3), 9, np.uint8)
    out = _images_only([small], lambda i: fn.erase(i, anchor=(0.5, 0.5, 0.0, 0.0), shape=(0.5, 0.5, 0.1, 0.1),
                                                   normalized=True, centered_anchor=True))
    want = np.zeros((40, 60), bool)
    want[10:30, 15:45] = True                        # centre (20, 30), 20 x 30
    want[0:2, 0:3] = True                            # centre (0, 0), 4 x 6: the part inside
    assert np.array_equal(_erased_mask(out.data[0], small), want)


def test_erase_rounding_takes_pixels_whose_centre_is_inside():
    img = np.full((20, 20, 1), 9, np.uint8)
    for a, first in ((10.5, 10), (10.6, 11), (10.4, 10), (9.4, 9)):
        out = _images_only([img], lambda i: fn.erase(i, anchor=(a, 0), shape=(2, 20)))
        rows = np.nonzero(_erased_mask(out.data[0], img).any(1))[0]
        assert rows.min() == first, (a, rows)


BOX = np.array([[0.0, 0.0, 10.0, 10.0], [12.0, 12.0, 18.0, 18.0]])


def _box_run(graph, fields=None):
    img = np.full((20, 20, 3), 50, np.uint8)
    return run_graph([img], [BOX], graph, labels=[np.array([3, 4])],
                     fields=fields or [{"annotation_id": np.array([101, 102])}])


def test_box_exactly_at_the_threshold_is_kept():
    # rows 0..9, columns 0..4 erased: the first box keeps [5, 10] x [0, 10], half of it
    def erase(mv, policy="drop"):
        return lambda i, b: fn.erase(i, b, anchor=(0, 0), shape=(10, 5), min_visibility=mv,
                                     box_policy=policy)
    kept = _box_run(erase(0.5))[1].per_sample()[0]
    assert kept["labels"].tolist() == [3, 4] and kept["annotation_id"].tolist() == [101, 102]
    dropped = _box_run(erase(0.5000001))[1].per_sample()[0]
    assert dropped["labels"].tolist() == [4] and dropped["annotation_id"].tolist() == [102]
    np.testing.assert_array_equal(dropped["boxes"], BOX[1:].astype(np.float32))
    flagged = _box_run(erase(0.5000001, "flag"))[1].per_sample()[0]
    assert flagged["labels"].tolist() == [3, 4]
    assert flagged["occluded"].tolist() == [1, 0]
    np.testing.assert_allclose(flagged["visibility"], [0.5, 1.0])


def test_overlapping_rectangles_count_once():
    # rows 0..4 x all columns, and all rows x columns 0..4: 50 + 50 - 25 of the first box's 100
    out = _box_run(lambda i, b: fn.erase(i, b, anchor=(0, 0, 0, 0), shape=(5, 20, 20, 5),
                                         box_policy="flag"))[1].per_sample()[0]
    np.testing.assert_allclose(out["visibility"], [0.25, 1.0 - 0.0])
    assert out["occluded"].tolist() == [0, 0]            # min_visibility 0: nothing under it
    # a second erase ORs its flag in and writes its own fraction
    def twice(i, b):
        i, b = fn.erase(i, b, anchor=(0, 0), shape=(10, 5), min_visibility=0.9, box_policy="flag")
        return fn.erase(i, b, anchor=(15, 15), shape=(1, 1), min_visibility=0.9, box_policy="flag")
    out = _box_run(twice)[1].per_sample()[0]
    assert out["occluded"].tolist() == [1, 0]
    np.testing.assert_allclose(out["visibility"], [1.0, 35 / 36])


@pytest.mark.parametrize("seed", [13, fresh_seed()])
def test_visible_fractions_against_rasterised_reference(seed):
    rng = np.random.default_rng(seed)
    ij = np.sort(rng.integers(0, 24, (4, 2, 2)), axis=1)            # [rect, (lo, hi), (i, j)]
    rects = np.stack([ij[:, 0, 0], ij[:, 0, 1], ij[:, 1, 0], ij[:, 1, 1]], 1)  # i0, j0, i1, j1
    xy = np.sort(rng.integers(0, 96, (30, 2, 2)) / 4, axis=1)       # [box, (lo, hi), (x, y)]
    boxes = xy.reshape(30, 4)                                       # x0, y0, x1, y1
    got = E.visible_fractions(boxes, rects)
    # reference: a 1/8-pixel grid of cell centres
    g = (np.arange(24 * 8) + 0.5) / 8
    cov = np.zeros((len(g), len(g)), bool)                 # [y, x]
    for i0, j0, i1, j1 in rects:
        cov[(g[:, None] > i0) & (g[:, None] < i1) & (g[None, :] > j0) & (g[None, :] < j1)] = True
    for (x0, y0, x1, y1), v in zip(boxes, got):
        inside = (g[:, None] > y0) & (g[:, None] < y1) & (g[None, :] > x0) & (g[None, :] < x1)
        if (x1 - x0) * (y1 - y0) == 0:
            assert v == 1.0
            continue
        assert abs(v - (1 - (inside & cov).sum() / inside.sum())) < 1e-9


def test_random_erasing_drops_boxes_with_their_fields():
    rng = np.random.default_rng(14)
    imgs = _imgs(rng, 8, h=(40, 50), w=(40, 50))
    boxes = [np.array([[0, 0, im.shape[1], im.shape[0]], [1, 1, 6, 6]], np.float32) for im in imgs]
    fields = [{"annotation_id": np.array([2 * k, 2 * k + 1])} for k in range(8)]
    out_i, out_b = run_graph(imgs, boxes, lambda i, b: fn.random_erasing(
        i, b, probability=1.0, scale=(0.2, 0.3), min_visibility=0.5), fields=fields)
    for k, d in enumerate(out_b.per_sample()):
        erased = (out_i.data[k] != imgs[k]).any(-1)
        # the whole-image box is always at least 70% visible; the small one is dropped where
        # the rectangle covers more than half of it
        assert 2 * k in d["annotation_id"].tolist()
        small_vis = 1 - erased[1:6, 1:6].mean()
        assert (2 * k + 1 in d["annotation_id"].tolist()) == (small_vis >= 0.5)
        assert len(d["labels"]) == len(d["annotation_id"]) == len(d["boxes"])
    with pytest.raises(ValueError, match="box_policy"):
        run_graph(imgs, boxes, lambda i, b: fn.random_erasing(i, b, box_policy="hide"))


def test_run_batch_in_any_order_gives_the_same_erasing():
    rng = np.random.default_rng(15)
    imgs = _imgs(rng, 4, h=(30, 31), w=(30, 31))

    def pipe():
        p = track(Pipeline(batch_size=2, num_threads=1, seed=21))
        with p:
            i = fn.external_source(source=lambda info: imgs[info.idx_in_epoch], batch=False, size=4)
            p.set_outputs(fn.noise(fn.random_erasing(i, probability=1.0, value="random"), std=(1, 9)))
        return p
    a = pipe()
    first = [a.run_batch(1)[0].data, a.run_batch(0)[0].data]
    b = pipe()
    second = [b.run_batch(0)[0].data, b.run_batch(1)[0].data]
    for x, y in zip(first[::-1], second):
        assert all(np.array_equal(p, q) for p, q in zip(x, y))


def test_erase_after_a_pending_flip_measures_the_flipped_boxes():
    """The boxes' visible fraction is taken where the boxes are now (the flip is still pending
    on them): a box flipped out from under the region stays visible."""
    img = np.full((20, 20, 3), 50, np.uint8)
    out_i, out_b = run_graph([img], [BOX], lambda i, b: fn.erase(
        *fn.flip(i, b, horizontal=1), anchor=(0, 0), shape=(10, 5), box_policy="flag"))
    d = out_b.per_sample()[0]
    np.testing.assert_allclose(d["boxes"], [[10, 0, 20, 10], [2, 12, 8, 18]])
    np.testing.assert_allclose(d["visibility"], [1.0, 1.0])
    out_i, out_b = run_graph([img], [BOX], lambda i, b: fn.erase(
        *fn.flip(i, b, horizontal=1), anchor=(0, 15), shape=(10, 5), box_policy="flag"))
    np.testing.assert_allclose(out_b.per_sample()[0]["visibility"], [0.5, 1.0])


def test_erase_takes_per_sample_regions():
    imgs = [np.full((20, 30, 3), 9, np.uint8), np.full((25, 20, 3), 9, np.uint8)]
    anchors = [np.array([2.0, 3.0], np.float32), np.array([10.0, 0.0], np.float32)]
    shapes = [np.array([4.0, 5.0], np.float32), np.array([1.0, 20.0], np.float32)]
    pipe = track(Pipeline(batch_size=2, num_threads=1, seed=0))
    with pipe:
        i, a, s = fn.external_source(source=lambda info: (imgs[info.idx_in_epoch], anchors[info.idx_in_epoch],
                                                          shapes[info.idx_in_epoch]),
                                     batch=False, num_outputs=3, size=2)
        pipe.set_outputs(fn.erase(i, anchor=a, shape=s, fill_value=0))
    (out,) = pipe.run()
    m1 = (out.data[1] == 0).all(-1)
    want0 = np.zeros((20, 30), bool)
    want0[2:6, 3:8] = True
    want1 = np.zeros((25, 20), bool)
    want1[10:11, :] = True
    assert np.array_equal((out.data[0] == 0).all(-1), want0) and np.array_equal(m1, want1)


def test_pixel_ops_refuse_normalised_images_by_name():
    img = np.zeros((8, 8, 3), np.uint8)
    for name, kw in (("gaussian_blur", {"sigma": 1.0}), ("noise", {}), ("erase", {"anchor": (0, 0), "shape": (2, 2)})):
        with pytest.raises(ValueError, match=f"{name}.*uint8 HWC"):
            _images_only([img], lambda i: getattr(fn, name)(fn.normalize(i, mean=0, std=1), **kw))


# ------------------------------------------------- GPU (against the CPU path running the twins)
@pytest.fixture
def reference_cpu_path():
    from detaug.core import backend

    backend.set_cpu_warp("reference")  # the CPU blur runs the twin, not OpenCV
    yield
    backend.set_cpu_warp("opencv")


def _batches(rng):
    ragged = random_images(rng, [(37, 53, 3), (1, 1, 3), (0, 4, 3), (64, 17, 3), (130, 200, 3), (9, 300, 1)])
    dense = np.stack(random_images(rng, [(33, 45, 3)] * 4))
    return ragged, dense


def _assert_same(got, want, loose=False):
    assert isinstance(got, list) == isinstance(want, list)
    for g, w in zip(got, want):
        g = to_np(g)
        assert g.shape == w.shape and g.dtype == w.dtype
        if loose and w.size:  # one level, at a rounding tie of a last-bit difference: rare
            d = np.abs(g.astype(int) - w)
            assert d.max() <= 1 and (d > 0).mean() < 1e-5
        else:
            np.testing.assert_array_equal(g, w)


@pytest.mark.gpu
@pytest.mark.usefixtures("reference_cpu_path")
def test_blur_parity(rng):
    for batch in _batches(rng):
        b = len(batch)
        sig = rng.uniform(0.2, 8.0, (b, 2))
        wy = [KB.gaussian_weights(int(2 * np.ceil(3 * s[0]) + 1), s[0]) for s in sig]
        wx = [KB.gaussian_weights(int(2 * np.ceil(3 * s[1]) + 1), s[1]) for s in sig]
        d = cp.asarray(batch) if isinstance(batch, np.ndarray) else [cp.asarray(x) for x in batch]
        _assert_same(KB.gaussian_blur_cupy(d, wx, wy), KB.gaussian_blur_numpy(batch, wx, wy))
        for x, y in zip(d, batch):                                           # not mutated
            np.testing.assert_array_equal(to_np(x), y)
    # the tallest kernel the GPU takes
    img = random_images(rng, [(400, 50, 3)])
    w = [KB.gaussian_weights(2 * KB.MAX_RADIUS_Y + 1, 50.0)]
    _assert_same(KB.gaussian_blur_cupy([cp.asarray(img[0])], w, w), KB.gaussian_blur_numpy(img, w, w))


@pytest.mark.gpu
@pytest.mark.usefixtures("reference_cpu_path")
@pytest.mark.parametrize("mode", ["gaussian", "salt_and_pepper", "shot"])
@pytest.mark.parametrize("per_channel", [True, False])
def test_noise_parity(rng, mode, per_channel):
    for batch in _batches(rng):
        b = len(batch)
        keys = rng.integers(0, 2**63, b, dtype=np.uint64)
        params = np.stack([rng.uniform(0, 0.5, b), rng.uniform(0, 30, b), np.full(b, 240.0), np.full(b, 9.0)], 1)
        if mode == "shot":
            params[:, 0] = rng.choice([0.0, 0.25, 3.0, 20.0], b)
        d = cp.asarray(batch) if isinstance(batch, np.ndarray) else [cp.asarray(x) for x in batch]
        _assert_same(KN.noise_cupy(d, keys, mode, params, per_channel),
                     KN.noise_numpy(batch, keys, mode, params, per_channel), loose=mode != "salt_and_pepper")


@pytest.mark.gpu
@pytest.mark.usefixtures("reference_cpu_path")
def test_erase_and_jitter_parity(rng):
    for batch in _batches(rng):
        b = len(batch)
        counts = rng.integers(0, 4, b)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        rects = np.sort(rng.integers(-5, 150, (int(offsets[-1]), 2, 2)), axis=1)
        rects = np.stack([rects[:, 0, 0], rects[:, 0, 1], rects[:, 1, 0], rects[:, 1, 1]], 1)
        fills = rng.integers(0, 256, (b, 3), dtype=np.uint8)
        random = rng.random(b) < 0.5
        keys = rng.integers(0, 2**63, b, dtype=np.uint64)
        d = cp.asarray(batch) if isinstance(batch, np.ndarray) else [cp.asarray(x) for x in batch]
        _assert_same(KN.erase_cupy(d, rects, offsets, fills, random, keys),
                     KN.erase_numpy(batch, rects, offsets, fills, random, keys))
        masks = (rng.random(b) < 0.8).astype(int)
        for nd in (1, 2, 7):
            _assert_same(KN.jitter_cupy(d, keys, nd, masks, fills), KN.jitter_numpy(batch, keys, nd, masks, fills))


@pytest.mark.gpu
@pytest.mark.usefixtures("reference_cpu_path")
def test_one_launch_per_call_for_any_batch_size(rng):
    for b in (1, 64):
        imgs = [cp.asarray(x) for x in random_images(rng, [(8 + i % 5, 9 + i % 3, 3) for i in range(b)])]
        keys = np.arange(b, dtype=np.uint64)
        w = [KB.gaussian_weights(5, 1.0)] * b
        calls = [lambda: KB.gaussian_blur_cupy(imgs, w, w),
                 lambda: KN.noise_cupy(imgs, keys, "gaussian", np.tile([0, 5.0, 0, 0], (b, 1))),
                 lambda: KN.erase_cupy(imgs, np.tile([[1, 1, 4, 4]], (b, 1)), np.arange(b + 1),
                                       np.zeros((b, 3)), np.zeros(b, bool), keys),
                 lambda: KN.jitter_cupy(imgs, keys, 3, np.ones(b), np.zeros((b, 3)))]
        for call in calls:
            reset_launch_counts()
            call()
            assert total_launches() == 1
    cp.cuda.get_current_stream().synchronize()


R = fn.random


OPS = {
    "gaussian_blur": lambda i, b: (fn.gaussian_blur(i, sigma_range=(0.3, 3.0), kernel_size=9), b),
    "gaussian_blur_dali": lambda i, b: (fn.gaussian_blur(i, sigma=R.uniform(range=(0.5, 4.0))), b),
    "noise": lambda i, b: (fn.noise(i, std=(2.0, 30.0), probability=0.7), b),
    "noise_sp": lambda i, b: (fn.noise(i, mode="salt_and_pepper", amount=(0.01, 0.2)), b),
    "noise.gaussian": lambda i, b: (fn.noise.gaussian(i, stddev=R.uniform(range=(1, 20))), b),
    "noise.salt_and_pepper": lambda i, b: (fn.noise.salt_and_pepper(i, prob=0.2, per_channel=True), b),
    "noise.shot": lambda i, b: (fn.noise.shot(i, factor=R.uniform(range=(1, 30))), b),
    "jitter": lambda i, b: (fn.jitter(i, nDegree=3, fill_value=(1, 2, 3), mask=R.coin_flip()), b),
    "random_erasing": lambda i, b: fn.random_erasing(i, b, probability=0.8, value="random", min_visibility=0.6),
    "random_erasing_flag": lambda i, b: fn.random_erasing(*fn.flip(i, b, horizontal=R.coin_flip()),
                                                          probability=1.0, value=(9, 8, 7), min_visibility=0.6,
                                                          box_policy="flag"),
    "erase": lambda i, b: fn.erase(i, b, anchor=(0.1, 0.2, 0.5, 0.5), shape=(0.3, 0.3, 0.2, 0.4),
                                   normalized=True, fill_value=50, min_visibility=0.7),
}


@pytest.mark.gpu
@pytest.mark.usefixtures("reference_cpu_path")
@pytest.mark.parametrize("name", sorted(OPS))
def test_pipeline_gpu_equals_cpu(name):
    rng = np.random.default_rng(31)
    imgs = [rng.integers(0, 256, (int(rng.integers(30, 70)), int(rng.integers(30, 90)), 3), dtype=np.uint8)
            for _ in range(6)]
    boxes = []
    for im in imgs:
        h, w = im.shape[:2]
        xy = rng.uniform(0, [w - 2, h - 2], (4, 2))
        boxes.append(np.concatenate([xy, xy + rng.uniform(1, [w / 2, h / 2], (4, 2))], 1))
    fields = [{"annotation_id": np.arange(4) + 10 * k} for k in range(6)]
    cpu = run_graph(imgs, boxes, OPS[name], fields=fields, seed=5)
    gpu = run_graph(imgs, boxes, OPS[name], fields=fields, seed=5, device="gpu")
    loose = name in ("noise", "noise.gaussian", "noise.shot")
    assert gpu[0].device == "gpu"
    _assert_same(list(gpu[0].data), [np.asarray(x) for x in cpu[0].data], loose=loose)
    for a, b in zip(cpu[1].per_sample(), gpu[1].per_sample()):
        assert set(a) == set(b)
        for k in a:
            np.testing.assert_allclose(b[k], a[k], atol=1e-3 if k == "boxes" else 0, err_msg=f"{name}: {k}")


@pytest.mark.gpu
@pytest.mark.usefixtures("reference_cpu_path")
def test_jpeg_compression_refuses_gpu_images():
    pipe = track(Pipeline(batch_size=1, device_id=0))
    with pipe:
        img = fn.external_source(source=[[np.zeros((4, 4, 3), np.uint8)]])
        with pytest.raises(NotImplementedError, match="jpeg_compression.*CPU only"):
            fn.jpeg_compression(img.gpu())
