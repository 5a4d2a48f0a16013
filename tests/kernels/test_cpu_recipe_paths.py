"""The CPU backend's fast paths of the YOLO recipe against what they replace: hsv's
float32 transform with its near-.5 values summed again (bit for bit the float64 twin), the warp's
fill tested only on the rows and columns not wholly inside (bit for bit the full test), the mosaic
written straight onto its canvas (bit for bit the tiles composed afterwards, and within one grey
level of the NumPy twin), on fixed and fresh random inputs."""
import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core import backend
from detaug.kernels import color as C
from detaug.kernels import warp as W
from detaug.kernels import warp_region as WR
from detaug.ops import multi
from helpers import fresh_seed
from helpers import random_images, track  # noqa: F401 (close_pipelines: autouse fixture)
from helpers import close_pipelines  # noqa: F401

FRESH = fresh_seed()


def float64_hsv(im, m):
    """The twin's definition: ``(m0 r + m1 g) + m2 b`` in float64, floor(x + 0.5), clamped."""
    x = im.astype(np.float64)
    want = np.stack([(m[i, 0] * x[..., 0] + m[i, 1] * x[..., 1]) + m[i, 2] * x[..., 2]
                     for i in range(3)], -1)
    return np.clip(np.floor(want + 0.5), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("seed", [3, FRESH])
def test_hsv_fast_path_is_the_float64_sum_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    shapes = [(1, 1, 3), (1, 3, 3), (2, 1, 3)] + [
        (int(rng.integers(1, 90)), int(rng.integers(1, 90)), 3) for _ in range(4)]
    batch = random_images(rng, shapes)
    # strong hue and saturation: sums below 0 and above 255 (the clamp) on every size
    h = np.concatenate([rng.uniform(-180, 180, 7)])
    s = rng.uniform(1.5, 2, 7)
    v = rng.uniform(0.8, 2, 7)
    mats = C.hsv_matrices(h, s, v).astype(np.float64)
    for b, (got, im) in enumerate(zip(C.hsv_numpy(batch, h, s, v), batch)):
        np.testing.assert_array_equal(got, float64_hsv(im, mats[b]))
    batch = batch[3:]
    # value 0.5, no hue or saturation change: every odd level lands within rounding of a .5
    h = np.concatenate([[0.0], rng.uniform(-180, 180, 3)])
    s = np.concatenate([[1.0], rng.uniform(0, 2, 3)])
    v = np.concatenate([[0.5], rng.uniform(0, 2, 3)])
    mats = C.hsv_matrices(h, s, v).astype(np.float64)
    got = C.hsv_numpy(batch, h, s, v)
    for b, im in enumerate(batch):
        np.testing.assert_array_equal(got[b], float64_hsv(im, mats[b]))
    # a dense batch, and views that are not contiguous (every other column)
    dense = np.stack(random_images(rng, [(31, 64, 3)] * 4))
    got = C.hsv_numpy(dense[:, :, ::2], h, s, v)
    for b in range(4):
        np.testing.assert_array_equal(got[b], float64_hsv(dense[b, :, ::2], mats[b]))


def test_hsv_fast_path_ties_and_extremes():
    """Levels whose products are exact .5 ties (value 0.5 on a grey ramp: the matrix is 0.5 I up
    to float32 rounding, so 2k + 1 lands within 1e-7 of k + 0.5), the clamp at both ends."""
    ramp = np.repeat(np.arange(256, dtype=np.uint8)[:, None], 3, 1).reshape(16, 16, 3)
    for hue, sat, val in ((0.0, 1.0, 0.5), (0.0, 1.0, 1.5), (90.0, 2.0, 2.0), (10.0, 0.0, 1.0)):
        m = C.hsv_matrices([hue], [sat], [val]).astype(np.float64)[0]
        np.testing.assert_array_equal(C.hsv_numpy([ramp], [hue], [sat], [val])[0],
                                      float64_hsv(ramp, m))
    half = C.hsv_numpy([ramp], [0.0], [1.0], [0.5])[0].astype(int)
    # by hand: floor(v / 2 + 0.5) where the product is not pulled under the tie by rounding
    assert np.abs(half[..., 0].ravel() - np.floor(np.arange(256) / 2 + 0.5)).max() <= 1
    assert (C.hsv_numpy([ramp], [0.0], [1.0], [2.0])[0][8:] == 255).all()  # 128.. doubled


def _projective_case(rng, n):
    sizes = [(int(rng.integers(20, 70)), int(rng.integers(20, 70))) for _ in range(n)]
    images = random_images(rng, [(h, w, 3) for h, w in sizes])
    mats = []
    for h, w in sizes:
        a = np.deg2rad(rng.uniform(-30, 30))
        s = rng.uniform(0.6, 1.4)
        m = np.array([[s * np.cos(a), -s * np.sin(a), rng.uniform(-15, 15)],
                      [s * np.sin(a), s * np.cos(a), rng.uniform(-15, 15)],
                      [rng.uniform(-2e-3, 2e-3), rng.uniform(-2e-3, 2e-3), 1.0]])
        mats.append(m)
    out = np.array([(int(rng.integers(20, 70)), int(rng.integers(20, 70))) for _ in range(n)])
    return images, np.stack(mats), out


@pytest.mark.parametrize("seed", [5, FRESH])
@pytest.mark.parametrize("antialias", [False, True])
def test_warp_fill_on_lines_not_inside_equals_the_full_test(seed, antialias, monkeypatch):
    """Projective and affine warps that reach outside their image: the fill placed by testing
    only the grid's rows and columns not wholly inside is the full point-by-point test's."""
    rng = np.random.default_rng(seed)
    images, mats, out = _projective_case(rng, 6)
    mats[::2, 2] = [0, 0, 1]  # half of them affine
    kw = dict(fill=np.array([114.0, 7.0, 250.0]), antialias=antialias)
    fast = W.warp_cv2(images, mats, out, **kw)
    calls = []
    real = WR._segments_inside

    def none_inside(*a):
        calls.append(1)
        return np.zeros(np.shape(a[1]), bool)

    monkeypatch.setattr(WR, "_segments_inside", none_inside)
    full = W.warp_cv2(images, mats, out, **kw)
    assert calls  # some warp did reach outside
    for f, g in zip(fast, full):
        np.testing.assert_array_equal(f, g)
    monkeypatch.setattr(WR, "_segments_inside", real)


def test_segments_inside_by_hand():
    """An identity map onto a 10 x 10 image: a segment inside is certified, one that touches the
    right edge (x = 10 is outside: [0, 10)) or lies beyond is not."""
    spec = W._prepare([np.zeros((10, 10, 3), np.uint8)], np.eye(3)[None], np.array([[10, 10]]),
                      0.0, False, 8, None, None, np.uint8, "HWC", None)
    inv = np.eye(3)
    got = WR._segments_inside(inv, np.array([0.5, 0.5, 0.5, 10.5]), np.array([0.5, 9.5, 0.5, 3.0]),
                             np.array([9.5, 9.5, 10.0, 12.0]), np.array([0.5, 9.5, 9.5, 3.0]),
                             spec, 0)
    assert got.tolist() == [True, True, False, False]


def _mosaic_pipe(images, seed, partners="batch", batch_size=None):
    n = len(images)

    def src(info):
        im = images[info.idx_in_epoch]
        return im, {"boxes": np.array([[1, 1, im.shape[1] - 1, im.shape[0] - 1]], np.float32),
                    "labels": np.array([info.idx_in_epoch])}

    pipe = track(Pipeline(batch_size=batch_size or n, seed=seed, num_threads=2))
    with pipe:
        img, bx = fn.external_source(source=src, batch=False, num_outputs=2, size=n)
        pipe.set_outputs(*fn.mosaic(img, bx, size=48, antialias=False, partners=partners,
                                    probability=0.8))
    return pipe


@pytest.mark.parametrize("seed", [9, FRESH])
def test_mosaic_on_canvas_equals_tiles_composed(seed, monkeypatch):
    """Random pixels at random sizes (tiles resized up and down, cut by the canvas; partners
    from the batch: an image is a tile of several groups): the tiles written straight onto the
    canvas, each image resized once for all its tiles, are the tiles warped one by one, then
    composed, bit for bit; and
    within one grey level of the NumPy twin (cv2.resize's 11-bit weights)."""
    rng = np.random.default_rng(seed)
    images = random_images(rng, [(int(rng.integers(20, 90)), int(rng.integers(20, 90)), 3)
                                 for _ in range(8)])
    fast, fast_boxes = _mosaic_pipe(images, seed).run()
    one = W._cv2_one
    # each tile resized on its own (no resize shared by an image's tiles), then composed
    monkeypatch.setattr(W, "_cv2_one", lambda *a: one(*a[:13]))
    monkeypatch.setattr(multi, "_mosaic_on_canvas", lambda *a: None)
    composed, composed_boxes = _mosaic_pipe(images, seed).run()
    np.testing.assert_array_equal(np.asarray(fast.data), np.asarray(composed.data))
    monkeypatch.setattr(W, "_cv2_one", one)
    for a, b in zip(fast_boxes.per_sample(), composed_boxes.per_sample()):
        np.testing.assert_array_equal(a["boxes"], b["boxes"])
        np.testing.assert_array_equal(a["labels"], b["labels"])
    backend.set_cpu_warp("reference")
    try:
        twin, _ = _mosaic_pipe(images, seed).run()
    finally:
        backend.set_cpu_warp("opencv")
    d = np.abs(np.asarray(fast.data).astype(int) - np.asarray(twin.data))
    # one level where the 11-bit weights round the other way (on noise: a few % of the values)
    assert d.max() <= 1 and d.mean() < 0.2
    fill = (np.asarray(twin.data) == 114).all(-1)
    assert (np.asarray(fast.data)[fill] == 114).all()  # the canvas where no tile lands: exact


@pytest.mark.parametrize("seed", [13, FRESH])
def test_recipe_chain_fill_equals_the_full_test(seed, monkeypatch):
    """The recipe's chain (mosaic, then affine with perspective, then a crop: a region with its
    slabs) on random pixels: the same output whether the fill is tested on the lines not wholly
    inside or at every point."""
    rng = np.random.default_rng(seed)
    images = random_images(rng, [(int(rng.integers(20, 60)), int(rng.integers(20, 60)), 3)
                                 for _ in range(6)])

    def run():
        def src(info):
            im = images[info.idx_in_epoch]
            return im, {"boxes": np.array([[0, 0, 5, 5]], np.float32), "labels": np.array([0])}

        pipe = track(Pipeline(batch_size=6, seed=seed, num_threads=1))
        with pipe:
            img, bx = fn.external_source(source=src, batch=False, num_outputs=2, size=6)
            img, bx = fn.mosaic(img, bx, size=32, antialias=False, partners="batch")
            u = fn.random.uniform
            img, bx = fn.affine(img, bx, rotate=u(range=(-30, 30)), scale=u(range=(0.5, 1.5)),
                                translate_x=u(range=(-12, 12)), translate_y=u(range=(-12, 12)),
                                perspective_x=u(range=(-2e-3, 2e-3)),
                                perspective_y=u(range=(-2e-3, 2e-3)), fill=114.0, antialias=False)
            img, bx = fn.crop(img, bx, crop=(32, 32), fill=(1.0, 2.0, 3.0))
            pipe.set_outputs(img, bx)
        return np.asarray(pipe.run()[0].data)

    fast = run()
    monkeypatch.setattr(WR, "_segments_inside", lambda *a: np.zeros(np.shape(a[1]), bool))
    np.testing.assert_array_equal(fast, run())


@pytest.mark.parametrize("seed", [21, FRESH])
def test_two_tile_blend_is_the_integer_formula(seed):
    """compose_numpy's float32 path for two whole-canvas tiles (a mixup of equal sizes) against
    the integer definition ``(wa a + wb b + 32768) >> 16``, extreme weights and levels included,
    and against the general path (a third tile of weight 0 takes it)."""
    from detaug.kernels import compose as K

    rng = np.random.default_rng(seed)
    a, b = random_images(rng, [(37, 53, 3), (37, 53, 3)])
    a[0, :4], b[0, :4] = [[0] * 3, [255] * 3, [0] * 3, [255] * 3], [[0] * 3, [255] * 3,
                                                                     [255] * 3, [0] * 3]
    z = np.zeros((1, 1, 3), np.uint8)
    for wa in [0, 1, 32768, 65535, 65536] + rng.integers(0, 65537, 4).tolist():
        wb = 65536 - wa
        want = ((wa * a.astype(np.int64) + wb * b.astype(np.int64) + 32768) >> 16).astype(np.uint8)
        got = K.compose_numpy([a, b], np.zeros((2, 2)), [0, 2], [[37, 53]], 114,
                              weights=[wa, wb], mode="weighted")
        np.testing.assert_array_equal(got[0], want)
        general = K.compose_numpy([a, b, z], np.zeros((3, 2)), [0, 3], [[37, 53]], 114,
                                  weights=[wa, wb, 0], mode="weighted")
        np.testing.assert_array_equal(general[0], want)
