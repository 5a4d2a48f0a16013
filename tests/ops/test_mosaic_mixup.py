"""fn.mosaic and fn.mixup: where each sample's pixels land and which boxes survive (hand-computed
cases and a float64 reference written here from Ultralytics' Mosaic / MixUp), properties on
fresh random data, the compose kernel's source run on the CPU, and determinism (random access in
any order, resume, 1 or N host workers)."""
import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core.rng import SampleRNG
from detaug.kernels import compose as K
from detaug.ops.multi import gamma_draws
from helpers import fresh_seed
from helpers import close_pipelines, track  # noqa: F401 (fixture)
from helpers.cases import random_compose_case

FRESH = fresh_seed()  # this run's (the same in every xdist worker)


def colour(i):
    """A distinct flat colour per record."""
    return np.array([i + 1, (37 * i + 5) % 256, 200 - i], np.uint8)


def flat_source(sizes, extra_boxes=None):
    """Per-sample callable: record i is a flat image of colour(i) with a box over the whole image
    (label i, annotation 10 i) and the extra boxes given (label i, annotation 10 i + k)."""
    def src(info):
        i = info.idx_in_epoch
        h, w = sizes[i]
        img = np.empty((h, w, 3), np.uint8)
        img[...] = colour(i)
        bx = [[0, 0, w, h]] + list(extra_boxes[i] if extra_boxes else [])
        return img, {"boxes": np.asarray(bx, np.float32).reshape(-1, 4),
                     "labels": np.full(len(bx), i), "ann": 10 * i + np.arange(len(bx))}
    return src


def run_pipe(src, n, graph, seed, batch_size=None, **kw):
    pipe = track(Pipeline(batch_size=batch_size or n, seed=seed, **kw))
    with pipe:
        img, bx = fn.external_source(source=src, batch=False, num_outputs=2, size=n)
        pipe.set_outputs(*graph(img, bx))
    return pipe


def op_of(pipe, name):
    return next(op for op in pipe.graph.ops if op.schema.name == name)


# ---- the reference, written from Ultralytics' Mosaic._mosaic4 -----------------------------------
def ref_groups(seed, rng_id, idx, n, p=1.0, pool=None):
    """Members of each output's group, from the definition: draw 0 < p applies the mosaic,
    draws 1..3 are the partners: record floor(u n) (over the epoch), or the batch's sample at
    position floor(u len(pool)) (``pool``: the batch's records); draws 4, 5 the centre."""
    u = SampleRNG(seed, rng_id, 0, idx).uniform(6)
    out = []
    for k, i in enumerate(idx):
        pick = ((lambda v: int(np.floor(v * n))) if pool is None
                else (lambda v: int(pool[int(np.floor(v * len(pool)))])))
        members = [int(i)] + [pick(v) for v in u[k, 1:4]] if u[k, 0] < p else [int(i)]
        out.append((members, u[k, 4:6]))
    return out


def ref_mosaic(images, boxes, members, uc, s, resize, fill=114):
    """Canvas and (label-carrying) boxes of one output, float64, Ultralytics' placement; boxes
    are clipped to their tile (detaug's rule; Ultralytics clips to the canvas only)."""
    x = -s // 2  # Ultralytics' border; int(random.uniform(-x, 2 * s + x)) (odd s included)
    xc, yc = (int(-x + v * ((2 * s + x) - (-x))) for v in uc)
    canvas = np.full((2 * s, 2 * s, 3), fill, np.float64)
    out_boxes = []
    for q, r in enumerate(members):
        img = images[r].astype(np.float64)
        h0, w0 = img.shape[:2]
        if resize:
            ratio = s / max(h0, w0)
            w, h = min(int(np.ceil(w0 * ratio)), s), min(int(np.ceil(h0 * ratio)), s)
        else:
            w, h = w0, h0
        if len(members) == 1:
            cx, cy = (2 * s - w) // 2, (2 * s - h) // 2
            x1a, y1a, x2a, y2a = max(cx, 0), max(cy, 0), min(cx + w, 2 * s), min(cy + h, 2 * s)
            x1b, y1b = x1a - cx, y1a - cy
        elif q == 0:
            x1a, y1a, x2a, y2a = max(xc - w, 0), max(yc - h, 0), xc, yc
            x1b, y1b = w - (x2a - x1a), h - (y2a - y1a)
        elif q == 1:
            x1a, y1a, x2a, y2a = xc, max(yc - h, 0), min(xc + w, 2 * s), yc
            x1b, y1b = 0, h - (y2a - y1a)
        elif q == 2:
            x1a, y1a, x2a, y2a = max(xc - w, 0), yc, xc, min(2 * s, yc + h)
            x1b, y1b = w - (x2a - x1a), 0
        else:
            x1a, y1a, x2a, y2a = xc, yc, min(xc + w, 2 * s), min(2 * s, yc + h)
            x1b, y1b = 0, 0
        if (img == img[0, 0]).all():  # flat: the resized image is the same colour
            canvas[y1a:y2a, x1a:x2a] = img[0, 0]
        elif not resize:
            canvas[y1a:y2a, x1a:x2a] = img[y1b:y1b + y2a - y1a, x1b:x1b + x2a - x1a]
        sx, sy = w / w0, h / h0
        padw, padh = x1a - x1b, y1a - y1b
        for k, b in enumerate(boxes[r]):
            t = np.array([b[0] * sx + padw, b[1] * sy + padh, b[2] * sx + padw, b[3] * sy + padh])
            c = np.array([max(t[0], x1a), max(t[1], y1a), min(t[2], x2a), min(t[3], y2a)])
            area_t = (t[2] - t[0]) * (t[3] - t[1])
            area_c = max(c[2] - c[0], 0) * max(c[3] - c[1], 0)
            vis = area_c / area_t if area_t > 0 else 0.0
            out_boxes.append((r, k, c, vis, c[2] > c[0] and c[3] > c[1]))
    return canvas, out_boxes


def _check_against_reference(pipe, sizes, extra, s, resize, min_vis=0.0, batch=0):
    out_img, out_bx = pipe.run_batch(batch)
    n = len(sizes)
    images = [flat_source(sizes, extra)(type("I", (), {"idx_in_epoch": i})())[0] for i in range(n)]
    boxes = [[[0, 0, w, h]] + list(extra[i] if extra else []) for i, (h, w) in enumerate(sizes)]
    op = op_of(pipe, "mosaic")
    idx = batch * pipe.batch_size + np.arange(len(out_img))
    pool = idx if op.args["partners"] == "batch" else None
    groups = ref_groups(pipe.seed, op.rng_id, idx, n, op.args["probability"], pool)
    per = out_bx.per_sample()
    for k, (members, uc) in enumerate(groups):
        canvas, ref_boxes = ref_mosaic(images, boxes, members, uc, s, resize)
        got = np.asarray(out_img.data[k])
        assert got.shape == (2 * s, 2 * s, 3)
        np.testing.assert_array_equal(got, canvas.astype(np.uint8))
        want = [(r, kk, c) for r, kk, c, vis, alive in ref_boxes if alive and vis >= min_vis]
        d = per[k]
        assert len(d["boxes"]) == len(want)
        for j, (r, kk, c) in enumerate(want):  # in the group's order, each sample's in order
            assert d["labels"][j] == r and d["ann"][j] == 10 * r + kk
            np.testing.assert_allclose(d["boxes"][j], c, atol=1e-3)
    return out_img, out_bx


# ---- hand-computed cases ------------------------------------------------------------------------
def test_mosaic_places_each_sample_in_its_quadrant_unresized():
    """Random pixels (not flat) at their own size: every canvas pixel is the reference's exactly."""
    rng = np.random.default_rng(3)
    sizes = [(9, 13), (12, 7), (20, 22), (5, 6), (17, 11), (14, 14)]
    pics = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]

    def src(info):
        i = info.idx_in_epoch
        h, w = sizes[i]
        return pics[i], {"boxes": np.array([[0, 0, w, h], [1, 1, 4, 3]], np.float32),
                         "labels": np.array([i, i]), "ann": np.array([10 * i, 10 * i + 1])}

    s = 16
    pipe = run_pipe(src, 6, lambda i, b: fn.mosaic(i, b, size=s, resize=False), seed=11)
    out_img, out_bx = pipe.run()
    op = op_of(pipe, "mosaic")
    groups = ref_groups(pipe.seed, op.rng_id, np.arange(6), 6)
    for k, (members, uc) in enumerate(groups):
        boxes = [[[0, 0, w, h], [1, 1, 4, 3]] for h, w in sizes]
        canvas, ref = ref_mosaic(pics, boxes, members, uc, s, False)
        np.testing.assert_array_equal(np.asarray(out_img.data[k]), canvas.astype(np.uint8))
        d = out_bx.per_sample()[k]
        want = [(r, kk, c) for r, kk, c, _, alive in ref if alive]
        assert [(int(a), int(b)) for a, b in zip(d["labels"], d["ann"])] == \
            [(r, 10 * r + kk) for r, kk, _ in want]
        np.testing.assert_allclose(d["boxes"], np.array([c for _, _, c in want]).reshape(-1, 4),
                                   atol=1e-4)


def test_mosaic_hand_case():
    """s = 4 (canvas 8 x 8), centre drawn by the definition; four 3 x 5 (h x w) samples of their
    own size: top-left covers x in [xc - 5, xc) clipped at 0, and so on."""
    sizes = [(3, 5)] * 4
    pipe = run_pipe(flat_source(sizes), 4, lambda i, b: fn.mosaic(i, b, size=4, resize=False),
                    seed=5, batch_size=1)
    img, bx = pipe.run()
    op = op_of(pipe, "mosaic")
    (members, uc), = ref_groups(pipe.seed, op.rng_id, [0], 4)
    xc, yc = (int(np.floor(2 + v * 4)) for v in uc)
    assert 2 <= xc < 6 and 2 <= yc < 6
    got = np.asarray(img.data[0])
    rects = [(max(xc - 5, 0), max(yc - 3, 0), xc, yc), (xc, max(yc - 3, 0), min(xc + 5, 8), yc),
             (max(xc - 5, 0), yc, xc, min(yc + 3, 8)), (xc, yc, min(xc + 5, 8), min(yc + 3, 8))]
    want = np.full((8, 8, 3), 114, np.uint8)
    for r, (x0, y0, x1, y1) in zip(members, rects):
        want[y0:y1, x0:x1] = colour(r)
    np.testing.assert_array_equal(got, want)
    # each whole-image box becomes its tile's rectangle
    d = bx.per_sample()[0]
    np.testing.assert_allclose(d["boxes"], np.array(rects, np.float32))
    assert d["labels"].tolist() == members


@pytest.mark.parametrize("seed", [7, FRESH])
def test_mosaic_resized_flat_against_reference(seed):
    rng = np.random.default_rng(seed)
    n = 7
    sizes = [(int(rng.integers(8, 60)), int(rng.integers(8, 60))) for _ in range(n)]
    extra = []
    for h, w in sizes:
        k = int(rng.integers(0, 4))
        x0, y0 = rng.uniform(0, w - 2, k), rng.uniform(0, h - 2, k)
        extra.append(np.stack([x0, y0, np.minimum(x0 + rng.uniform(1, w, k), w),
                               np.minimum(y0 + rng.uniform(1, h, k), h)], 1).tolist())
    pipe = run_pipe(flat_source(sizes, extra), n,
                    lambda i, b: fn.mosaic(i, b, size=24, min_visibility=0.4), seed=seed)
    _check_against_reference(pipe, sizes, extra, 24, True, min_vis=0.4)


@pytest.mark.parametrize("seed", [8, FRESH])
def test_mosaic_partners_from_the_batch_against_reference(seed):
    """partners='batch': the partners are samples of the output's own batch (the schedule's),
    drawn as over the epoch but within the batch."""
    rng = np.random.default_rng(seed)
    n = 10
    sizes = [(int(rng.integers(8, 60)), int(rng.integers(8, 60))) for _ in range(n)]
    extra = [[[1, 1, 5, 6]] for _ in sizes]
    pipe = run_pipe(flat_source(sizes, extra), n,
                    lambda i, b: fn.mosaic(i, b, size=20, partners="batch", probability=0.7),
                    seed=seed, batch_size=4, last_batch_policy="partial")
    for batch in (2, 0, 1):  # the last batch holds 2 samples: its pool is those 2
        _check_against_reference(pipe, sizes, extra, 20, True, batch=batch)


def test_mosaic_probability_zero_centres_the_sample():
    sizes = [(10, 30), (30, 10)]
    pipe = run_pipe(flat_source(sizes), 2, lambda i, b: fn.mosaic(i, b, size=30, probability=0.0),
                    seed=1)
    img, bx = pipe.run()
    for k, (h, w) in enumerate(sizes):
        got = np.asarray(img.data[k])
        x0, y0 = (60 - w) // 2, (60 - h) // 2
        assert (got[y0:y0 + h, x0:x0 + w] == colour(k)).all()
        assert (got == colour(k)).all(-1).sum() == h * w
        np.testing.assert_allclose(bx.per_sample()[k]["boxes"], [[x0, y0, x0 + w, y0 + h]])


@pytest.mark.parametrize("seed", [2, FRESH])
def test_mosaic_properties(seed):
    """No box outside the canvas; every box covers only pixels of the record it came from."""
    rng = np.random.default_rng(seed)
    n = 9
    sizes = [(int(rng.integers(5, 80)), int(rng.integers(5, 80))) for _ in range(n)]
    extra = []
    for h, w in sizes:
        k = int(rng.integers(1, 5))
        x0, y0 = rng.uniform(-5, w, k), rng.uniform(-5, h, k)
        extra.append(np.stack([np.clip(x0, 0, w - 1), np.clip(y0, 0, h - 1),
                               np.clip(x0 + rng.uniform(1, w, k), 1, w),
                               np.clip(y0 + rng.uniform(1, h, k), 1, h)], 1).tolist())
    pipe = run_pipe(flat_source(sizes, extra), n, lambda i, b: fn.mosaic(i, b, size=32),
                    seed=seed, batch_size=3)
    for _ in range(3):
        img, bx = pipe.run()
        for k, d in enumerate(bx.per_sample()):
            canvas = np.asarray(img.data[k])
            for box, lab in zip(d["boxes"], d["labels"]):
                assert box[0] >= 0 and box[1] >= 0 and box[2] <= 64 and box[3] <= 64
                assert box[2] > box[0] and box[3] > box[1]
                x0, y0 = int(np.ceil(box[0] - 1e-3)), int(np.ceil(box[1] - 1e-3))
                x1, y1 = int(np.floor(box[2] + 1e-3)), int(np.floor(box[3] + 1e-3))
                inner = canvas[y0:y1, x0:x1]
                if inner.size:
                    assert (inner == colour(int(lab))).all()


# ---- mixup --------------------------------------------------------------------------------------
@pytest.mark.parametrize("partners", ["epoch", "batch"])
def test_mixup_hand_case(partners):
    """Batch 1 (records 3..5) of 6: the partner is record floor(u 6) (epoch) or the batch's
    sample at floor(u 3) (batch); pixels blended in integers, boxes of both with r, 1 - r."""
    sizes = [(6, 10), (8, 4), (5, 5), (7, 3), (4, 9), (6, 6)]
    pipe = run_pipe(flat_source(sizes), 6, lambda i, b: fn.mixup(i, b, partners=partners),
                    seed=4, batch_size=3)
    img, bx = pipe.run_batch(1)
    op = op_of(pipe, "mixup")
    records = np.arange(3, 6)
    u = SampleRNG(pipe.seed, op.rng_id, 0, records).uniform(2)
    for j, k in enumerate(records):
        partner = (int(np.floor(u[j, 1] * 6)) if partners == "epoch"
                   else int(records[int(np.floor(u[j, 1] * 3))]))
        d = bx.per_sample()[j]
        r = float(d["mixup_weight"][0])
        weight = round(r * 65536)
        assert abs(weight / 65536 - r) < 1e-7 and 0.2 < r < 0.8
        (ha, wa), (hb, wb) = sizes[k], sizes[partner]
        h, w = max(ha, hb), max(wa, wb)
        a = np.full((h, w, 3), 114, np.int64)
        a[:ha, :wa] = colour(k)
        b = np.full((h, w, 3), 114, np.int64)
        b[:hb, :wb] = colour(partner)
        want = np.floor((weight * a + (65536 - weight) * b) / 65536 + 0.5).astype(np.uint8)
        np.testing.assert_array_equal(np.asarray(img.data[j]), want)
        assert d["labels"].tolist() == [k, partner]
        np.testing.assert_allclose(d["boxes"], [[0, 0, wa, ha], [0, 0, wb, hb]])
        np.testing.assert_allclose(d["mixup_weight"], [r, 1 - r], atol=1e-6)


def test_mixup_probability_zero_keeps_the_sample():
    sizes = [(6, 10), (8, 4)]
    pipe = run_pipe(flat_source(sizes), 2, lambda i, b: fn.mixup(i, b, probability=0.0), seed=4)
    img, bx = pipe.run()
    for k, (h, w) in enumerate(sizes):
        assert (np.asarray(img.data[k]) == colour(k)).all()
        np.testing.assert_array_equal(bx.per_sample()[k]["mixup_weight"], [1.0])


@pytest.mark.parametrize("a", [0.5, 1.0, 32.0])
def test_gamma_draws_match_the_gamma_law(a):
    """Mean a and variance a (Gamma(a, 1)); a one-sample KS distance to numpy's gamma sampler's
    empirical law stays small."""
    rng = SampleRNG(9, 3, 0, np.arange(40000))
    g = gamma_draws(rng, a)
    assert abs(g.mean() - a) < 0.03 * a + 0.01
    assert abs(g.var() - a) < 0.06 * a + 0.01
    ref = np.sort(np.random.default_rng(1).gamma(a, 1.0, 40000))
    grid = np.quantile(ref, np.linspace(0.01, 0.99, 99))
    ks = np.abs(np.searchsorted(np.sort(g), grid) / len(g) - np.linspace(0.01, 0.99, 99)).max()
    assert ks < 0.015


# ---- the kernel ---------------------------------------------------------------------------------
def test_compose_numpy_hand_cases():
    a = np.full((2, 3, 1), 10, np.uint8)
    b = np.full((3, 2, 1), 200, np.uint8)
    out = K.compose_numpy([a, b], [(0, 0), (2, 1)], [0, 2], [(4, 4)], 0)
    want = np.zeros((4, 4), np.uint8)
    want[1:4, 2:4] = 200
    want[0:2, 0:3] = 10  # the first tile wins where they overlap
    np.testing.assert_array_equal(out[0, :, :, 0], want)
    w = K.compose_numpy([a, b], [(0, 0), (0, 0)], [0, 2], [(3, 3)], 50,
                        weights=[16384, 49152], mode="weighted")[0, :, :, 0]
    # 10 * .25 + 200 * .75 = 152.5 -> 153 (halves up); 10 * .25 + 50 * .75 = 40;
    # 50 * .25 + 200 * .75 = 162.5 -> 163; fill alone 50
    np.testing.assert_array_equal(w, [[153, 153, 40], [153, 153, 40], [163, 163, 50]])
    with pytest.raises(ValueError, match="sum to 65536"):
        K.compose_numpy([a, b], [(0, 0), (0, 0)], [0, 2], [(3, 3)], 0, weights=[1, 2],
                        mode="weighted")
    with pytest.raises(ValueError, match="groups"):
        K.compose_numpy([a, b], [(0, 0), (0, 0)], [0, 1], [(3, 3)], 0)


_SHIM = r"""
#include <cstring>
struct Dim3 { unsigned int x, y, z; };
static Dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __restrict__
#include "compose.cu"
extern "C" void emulate(unsigned gx, unsigned gy, unsigned bx, const void* p, const void* tm,
                        const void* om, const void* f, int b, int c, int mode, void* out) {
    blockDim.x = bx; blockDim.y = blockDim.z = 1;
    gridDim.x = gx; gridDim.y = gy; gridDim.z = 1;
    for (unsigned y = 0; y < gy; ++y)
        for (unsigned x = 0; x < gx; ++x)
            for (unsigned t = 0; t < bx; ++t) {
                blockIdx.x = x; blockIdx.y = y; threadIdx.x = t;
                compose_u8((const unsigned long long*)p, (const long long*)tm,
                           (const long long*)om, (const int*)f, b, c, mode, (unsigned char*)out);
            }
}
"""


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ to emulate the CUDA source")
    d = tmp_path_factory.mktemp("compose_cu")
    (d / "shim.cpp").write_text(_SHIM)
    subprocess.run([cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-w",
                    f"-I{os.path.dirname(K.__file__)}", str(d / "shim.cpp"), "-o",
                    str(d / "emu.so")], check=True)
    return ctypes.CDLL(str(d / "emu.so"))


@pytest.mark.parametrize("mode", ["first", "weighted"])
@pytest.mark.parametrize("seed", [0, FRESH])
def test_compose_cuda_source_matches_twin(emulated, mode, seed):
    rng = np.random.default_rng(seed)
    for c in (1, 3):
        tiles, origins, groups, canvas, fill, weights = random_compose_case(rng, c)
        ref = K.compose_numpy(tiles, origins, groups, canvas, fill, weights=weights, mode=mode)
        shapes = np.array([t.shape for t in tiles])
        meta = K.launch_meta(shapes, shapes[:, 1] * c, origins, groups, canvas, fill, weights, mode)
        ptrs = np.array([t.ctypes.data for t in tiles], np.uint64)
        flat = np.zeros(int(meta["offsets"][-1]), np.uint8)
        arrays = [ptrs, meta["tile_meta"], meta["out_meta"], meta["fill"]]
        emulated.emulate(ctypes.c_uint(meta["grid"][0]), ctypes.c_uint(meta["grid"][1]),
                         ctypes.c_uint(meta["block"][0]),
                         *(ctypes.c_void_p(a.ctypes.data) for a in arrays), ctypes.c_int(len(canvas)),
                         ctypes.c_int(c), ctypes.c_int(meta["mode"]), ctypes.c_void_p(flat.ctypes.data))
        o = meta["offsets"]
        for k in range(len(canvas)):
            got = flat[o[k]:o[k + 1]].reshape(int(canvas[k, 0]), int(canvas[k, 1]), c)
            np.testing.assert_array_equal(got, ref[k])


@pytest.mark.parametrize("op,kw,match", [
    ("mosaic", {"size": 1}, "size must be an integer of at least 2"),
    ("mosaic", {"size": 10.5}, "size must be an integer"),
    ("mosaic", {"probability": 1.5}, r"probability must lie in \[0, 1\]"),
    ("mixup", {"alpha": 0.0}, "alpha must be positive"),
    ("mixup", {"beta": -1.0}, "beta must be positive"),
    ("mixup", {"probability": -0.1}, r"probability must lie in \[0, 1\]"),
])
def test_bad_arguments_name_the_op_and_argument(op, kw, match):
    sizes = [(6, 10), (8, 4)]
    (arg,) = kw  # refused by name when traced (detaug/graph/arg_check.py)
    with pytest.raises(ValueError, match=rf"{op}(_\d+: {match}|: argument {arg}=)"):
        pipe = run_pipe(flat_source(sizes), 2, lambda i, b: getattr(fn, op)(i, b, **kw), seed=0)
        pipe.run()
