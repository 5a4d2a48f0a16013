"""The instance-shape kernels (detaug/kernels/shapes.cu: keypoints, oriented boxes, polygons through
a chain; shaped-field padding) against their NumPy twins (core/instances.py), on fixed cases and
fresh random batches: compiled with g++ and run on the CPU (tests/helpers/cuda_emulation.py)
through shapes.py's own ``*_cupy`` host code, and on the GPU in the ``gpu``-marked tests. Each
check is written once and given the backend: ``to_dev`` (host -> device array) and ``to_host``."""
import numpy as np
import pytest

from detaug.core import instances as I
from detaug.kernels import shapes as ks
from detaug.kernels.launch import reset_launch_counts, launch_counts
from helpers import cuda_emulation as emu
from helpers import cupy as cp  # imported on first use: by a gpu test, where there is a GPU
from helpers import fresh_seed

SEEDS = [3, fresh_seed()]


@pytest.fixture(scope="module")
def shapes_cu(tmp_path_factory):
    return emu.build(tmp_path_factory.mktemp("shapes_cu"), "shapes.cu")


@pytest.fixture
def emulated(shapes_cu, monkeypatch):
    shapes_cu.calls.clear()
    emu.install_fake_cupy(monkeypatch, shapes_cu, ks)
    return emu.dev, np.asarray


def _on_gpu():
    return cp.asarray, cp.asnumpy


BACKENDS = ["emulated", pytest.param("gpu", marks=pytest.mark.gpu)]


@pytest.fixture
def backend(request):
    """(to_dev, to_host) of the emulated kernels or of the GPU, for the hand-computed cases."""
    return request.getfixturevalue("emulated") if request.param == "emulated" else _on_gpu()


# ----------------------------------------------------------------------------- inputs
def _chain(rng, b, k, *, shear=True, perspective=True):
    """k ops for b samples: rotations, flips, anisotropic scales, shears and mild perspectives
    (w stays positive on the points used) about the canvas centre, canvases 30..90 px."""
    mats = np.tile(np.eye(3), (k, b, 1, 1))
    sizes = rng.integers(30, 90, (k, b, 2))
    for s in range(k):
        a = rng.uniform(-np.pi, np.pi, b) * (rng.random(b) < 0.6)
        sc = rng.uniform(0.6, 1.6, (b, 2)) * np.where(rng.random((b, 2)) < 0.25, -1, 1)
        c, si = np.cos(a), np.sin(a)
        lin = np.stack([np.stack([c, -si], -1), np.stack([si, c], -1)], -2) * sc[:, None, :]
        if shear:
            sh = rng.uniform(-0.4, 0.4, b) * (rng.random(b) < 0.3)
            lin = lin @ np.stack([np.stack([np.ones(b), sh], -1),
                                  np.stack([np.zeros(b), np.ones(b)], -1)], -2)
        mats[s, :, :2, :2] = lin
        c_in = sizes[s - 1, :, ::-1] / 2 if s else np.full((b, 2), 40.0)
        c_out = sizes[s, :, ::-1] / 2 + rng.uniform(-8, 8, (b, 2))
        mats[s, :, :2, 2] = c_out - np.einsum("bij,bj->bi", lin, c_in)
        if perspective:
            mats[s, :, 2, :2] = rng.uniform(-2e-3, 2e-3, (b, 2)) * (rng.random((b, 1)) < 0.3)
    return mats, sizes


def _keypoints(rng, n, k):
    kp = np.zeros((n, k, 3), np.float32)
    kp[..., :2] = rng.uniform(-10, 90, (n, k, 2))
    kp[..., 2] = rng.integers(0, 3, (n, k))
    kp[kp[..., 2] == 0] = 0
    return kp


def _polygon(rng, n, centre, radius):
    """A star-shaped polygon: n points at random radii around ``centre`` (non-convex)."""
    t = np.sort(rng.uniform(0, 2 * np.pi, n))
    r = radius * rng.uniform(0.3, 1.0, n)
    return centre + np.stack([r * np.cos(t), r * np.sin(t)], 1)


def _zigzag(x0, y0, teeth, depth, pitch=3.0):
    """A comb whose teeth cross the line x = x0 ``teeth`` times: each clip adds points."""
    pts = [(x0 + depth, y0)]
    for i in range(teeth):
        pts += [(x0 - depth, y0 + pitch * (i + 0.25)), (x0 + depth, y0 + pitch * (i + 0.5))]
    pts += [(x0 + depth, y0 + pitch * teeth), (x0 + 3 * depth, y0 + pitch * teeth),
            (x0 + 3 * depth, y0)]
    return np.array(pts, np.float64)


def _polygon_rows(rng, n):
    boxes = []
    for i in range(n):
        q = int(rng.integers(0, 4))
        polys = [_polygon(rng, int(rng.integers(3, 14)), rng.uniform(-10, 90, 2),
                          rng.uniform(5, 40)) for _ in range(q)]
        if i % 7 == 3:
            polys.append(_zigzag(rng.uniform(-5, 30), rng.uniform(-5, 30), 6, 4.0))
        boxes.append(polys)
    pts = [p for ps in boxes for p in ps]
    off = np.concatenate([[0], np.cumsum([len(p) for p in pts])]).astype(np.int64)
    boff = np.concatenate([[0], np.cumsum([len(ps) for ps in boxes])]).astype(np.int64)
    flat = np.concatenate(pts) if pts else np.zeros((0, 2))
    return I.dense_polygons(flat, off, boff)


# ----------------------------------------------------------------------------- checks
def _check_keypoints(to_dev, to_host, rng, b=5, n=30, k=6, stages=3):
    mats, sizes = _chain(rng, b, stages)
    mats[0, 0, 0] *= -1  # sample 0 mirrored (an x flip before the chain's first op)
    sample = rng.integers(0, b, n).astype(np.int32)
    sample[:3] = 0
    kp = _keypoints(rng, n, k)
    fi = np.tile(np.array([0, 2, 1, 4, 3, 5]), (n, 1))
    for flip in (None, fi):
        want = I.transform_keypoints(kp, sample, mats, sizes, flip)
        got = to_host(ks.keypoints_transform_cupy(
            to_dev(kp), to_dev(sample), mats, sizes, None if flip is None else to_dev(flip)))
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got[..., 2], want[..., 2])
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


def _check_obb(to_dev, to_host, rng, b=6, n=40):
    mats, _ = _chain(rng, b, 1)
    mats[0, :2, 2, :2] = 0  # two samples without shear or perspective: rectangles stay
    mats[0, :2, :2, :2] = [[0.8, -0.6], [0.6, 0.8]]
    sample = rng.integers(0, b, n).astype(np.int32)
    centre, half = rng.uniform(0, 60, (n, 2)), rng.uniform(2, 15, (n, 2))
    a = rng.uniform(-np.pi, np.pi, n)
    u = np.stack([np.cos(a), np.sin(a)], 1)
    v = np.stack([-u[:, 1], u[:, 0]], 1)
    signs = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]])
    corners = (centre[:, None] + signs[None, :, :1] * (half[:, None, :1] * u[:, None])
               + signs[None, :, 1:] * (half[:, None, 1:] * v[:, None])).astype(np.float32)
    corners[::5] = corners[::5, ::-1]  # some turn the other way
    want = I.transform_obb(corners, sample, mats[0])
    got = to_host(ks.obb_transform_cupy(to_dev(corners), to_dev(sample), mats[0]))
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-4)
    return want


def _check_polygons(to_dev, to_host, rng, b=4, n=24, stages=3):
    mats, sizes = _chain(rng, b, stages)
    sample = rng.integers(0, b, n).astype(np.int32)
    rows = _polygon_rows(rng, n)
    want, want_tight = ks.polygons_transform_numpy(rows, sample, mats, sizes)
    got, tight = ks.polygons_transform_cupy(to_dev(rows), to_dev(sample), mats, sizes)
    got, tight = to_host(got), to_host(tight)
    assert got.shape == (n, ks.polygon_capacity(rows.shape[1], stages), 2)
    assert ks.polygon_width(got) == want.shape[1]
    got = ks.trim_polygons(got)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)
    np.testing.assert_allclose(tight, want_tight, rtol=0, atol=1e-7)
    return want


def _check_pad(to_dev, to_host, rng):
    n = 10
    fields = {"labels": np.arange(n), "keypoints": _keypoints(rng, n, 4),
              "keypoint_flip": np.tile(np.array([1, 0, 3, 2]), (n, 1)),
              "polygons": _polygon_rows(rng, n), "obb": rng.uniform(0, 9, (n, 4, 2)).astype(
                  np.float32), "flags": rng.random((n, 2)) < 0.5}
    index = np.full((4, 3), -1, np.int64)
    index[0, :2], index[2] = [0, 2], [4, 5, 8]
    want = ks.pad_shaped_numpy({k: v for k, v in fields.items() if v.ndim > 1}, index)
    got = ks.pad_shaped_cupy({k: to_dev(v) for k, v in fields.items() if v.ndim > 1},
                             to_dev(index))
    for name in want:
        np.testing.assert_array_equal(to_host(got[name]), want[name], err_msg=name)
    assert want["keypoints"][1].sum() == 0 and np.isnan(want["polygons"][1]).all()
    assert (want["keypoint_flip"][1] == -1).all() and not want["flags"][1].any()


def _check_masks(to_dev, to_host, rng, b=4, stages=3):
    """Samples of their own sizes and mask counts (one without masks); chains that rotate,
    shear, mirror and cut (the intermediate canvases zero what they cut)."""
    mats, sizes = _chain(rng, b, stages)
    src = rng.integers(20, 60, (b, 2))
    counts = [2, 0, 1, 3][:b] + [2] * max(0, b - 4)
    masks = [(rng.random((n, h, w)) < 0.5).astype(np.uint8) for n, (h, w) in zip(counts, src)]
    want = ks.masks_warp_numpy(masks, mats, sizes)
    got = ks.masks_warp_cupy([to_dev(m) for m in masks], mats, sizes)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(to_host(g), w)
    assert sum(w.sum() for w in want) and sum((w == 0).sum() for w in want)


# ----------------------------------------------------------------------------- emulated
@pytest.mark.parametrize("seed", SEEDS)
def test_keypoints_kernel_emulated(emulated, shapes_cu, seed):
    _check_keypoints(*emulated, np.random.default_rng(seed))
    assert shapes_cu.calls == ["keypoints_transform"] * 2  # one launch per call, whole batch


@pytest.mark.parametrize("seed", SEEDS)
def test_obb_kernel_emulated(emulated, seed):
    want = _check_obb(*emulated, np.random.default_rng(seed))
    assert len(want) == 40


@pytest.mark.parametrize("seed", SEEDS)
def test_polygons_kernel_emulated(emulated, shapes_cu, seed):
    rng = np.random.default_rng(seed)
    for stages in (1, 3):
        want = _check_polygons(*emulated, rng, stages=stages)
        assert np.isnan(want).any() and (~np.isnan(want)).any()
    assert shapes_cu.calls == ["polygons_transform"] * 2


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_polygons_kernel_fixed_cases(backend):
    """By hand: a square half off the canvas keeps its inside half, in the reference's order; a
    triangle wholly outside is dropped, its box keeps its other
    polygon; a comb crossing x = 0 six times: 2 cuts for each tooth."""
    to_dev, to_host = backend
    sq = np.array([[-5, 2], [5, 2], [5, 8], [-5, 8]], np.float64)
    tri = np.array([[-9, -9], [-5, -9], [-5, -5]], np.float64)
    comb = _zigzag(0.0, 1.0, 6, 0.5)
    rows = I.dense_polygons(np.concatenate([sq, tri, sq + [1, 0], comb]),
                            np.array([0, 4, 7, 11, 11 + len(comb)]), np.array([0, 2, 3, 4]))
    mats, sizes = np.eye(3)[None, None].repeat(3, 1), np.array([[[20, 20]] * 3])
    got, tight = ks.polygons_transform_cupy(to_dev(rows), to_dev(np.zeros(3, np.int32)),
                                            mats, sizes)
    got = ks.trim_polygons(to_host(got))
    np.testing.assert_array_equal(got[0, :5], [[0, 2], [5, 2], [5, 8], [0, 8], [np.nan] * 2])
    assert np.isnan(got[0, 5:]).all()
    np.testing.assert_array_equal(got[1, :5], [[0, 2], [6, 2], [6, 8], [0, 8], [np.nan] * 2])
    np.testing.assert_array_equal(to_host(tight)[:2], [[0, 2, 5, 8], [0, 2, 6, 8]])
    want, _ = ks.polygons_transform_numpy(rows, np.zeros(3, np.int32), mats, sizes)
    np.testing.assert_array_equal(got, want)
    teeth = got[2][~np.isnan(got[2, :, 0])]
    assert len(teeth) == 22 and np.sum(teeth[:, 0] == 0) == 12  # 10 inside + 2 cuts a tooth


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_polygons_overflow_is_refused_by_name(backend):
    """A row that needs more rows than its capacity comes back as the marker, which the output
    refuses naming the field; a marked row stays marked through a second chain."""
    to_dev, to_host = backend
    comb = _zigzag(0.0, 1.0, 6, 0.5)
    rows = I.dense_polygons(comb, np.array([0, len(comb)]), np.array([0, 1]))
    eye = np.eye(3)[None, None]
    got, _ = ks.polygons_transform_cupy(to_dev(rows), to_dev(np.zeros(1, np.int32)), eye,
                                        np.array([[[40, 40]]]), capacity=len(comb))
    with pytest.raises(RuntimeError, match="'polygons'"):
        ks.polygon_width(to_host(got))
    again, _ = ks.polygons_transform_cupy(got, to_dev(np.zeros(1, np.int32)), eye,
                                          np.array([[[40, 40]]]))
    with pytest.raises(RuntimeError, match="'polygons'"):
        ks.polygon_width(to_host(again))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_keypoints_kernel_fixed_cases(backend):
    """A horizontal flip of a 10 px canvas: x -> 10 - x, slots 1 and 2 trade; a point landing
    at x = 10 (no pixel) and an unlabelled one give (0, 0, 0); a bad flip index too."""
    to_dev, to_host = backend
    kp = np.array([[[1, 1, 2], [2, 3, 1], [0, 5, 2]], [[4, 4, 0], [3, 3, 1], [9, 9, 1]]],
                  np.float32)
    flip = np.array([[0, 2, 1], [0, 7, 1]])
    m = np.array([[[-1, 0, 10], [0, 1, 0], [0, 0, 1]]], np.float64)
    got = to_host(ks.keypoints_transform_cupy(to_dev(kp), to_dev(np.zeros(2, np.int32)), m,
                                              [[10, 10]], to_dev(flip)))
    np.testing.assert_array_equal(got, [[[9, 1, 2], [0, 0, 0], [8, 3, 1]],
                                        [[0, 0, 0], [0, 0, 0], [7, 3, 1]]])


def test_pad_shaped_kernel_emulated(emulated, shapes_cu):
    _check_pad(*emulated, np.random.default_rng(5))
    assert shapes_cu.calls == ["pad_shaped"]


@pytest.mark.parametrize("seed", SEEDS)
def test_masks_kernel_emulated(emulated, shapes_cu, seed):
    _check_masks(*emulated, np.random.default_rng(seed))
    assert shapes_cu.calls == ["masks_warp"]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_masks_kernel_fixed_case(backend):
    """A horizontal flip of a 3 x 4 mask, then a crop by one column: the columns reversed and
    the first one cut."""
    to_dev, to_host = backend
    mask = np.array([[[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 1]]], np.uint8)
    flip = np.array([[-1, 0, 4], [0, 1, 0], [0, 0, 1]], np.float64)
    crop = np.array([[1, 0, -1], [0, 1, 0], [0, 0, 1]], np.float64)
    got = ks.masks_warp_cupy([to_dev(mask)], np.stack([flip, crop])[:, None],
                             np.array([[[3, 4]], [[3, 3]]]))
    np.testing.assert_array_equal(to_host(got[0]), [[[0, 0, 1], [0, 1, 1], [0, 0, 0]]])


def test_signatures_are_read_from_the_source():
    with open(f"{emu.KERNEL_DIR}/shapes.cu") as f:
        sig = emu.kernel_signatures(f.read())
    assert set(sig) == {"keypoints_transform", "obb_transform", "polygons_transform",
                        "pad_shaped", "masks_warp", "mask_boxes"}


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("seed", SEEDS)
def test_keypoints_kernel_gpu(seed):
    _check_keypoints(*_on_gpu(), np.random.default_rng(seed), b=16, n=400, k=6, stages=4)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", SEEDS)
def test_obb_kernel_gpu(seed):
    _check_obb(*_on_gpu(), np.random.default_rng(seed), b=16, n=500)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", SEEDS)
def test_polygons_kernel_gpu(seed):
    rng = np.random.default_rng(seed)
    reset_launch_counts()
    for stages in (1, 2, 4):
        _check_polygons(*_on_gpu(), rng, b=16, n=300, stages=stages)
    assert launch_counts() == {"polygons_transform": 3}


@pytest.mark.gpu
@pytest.mark.parametrize("seed", SEEDS)
def test_masks_kernel_gpu(seed):
    reset_launch_counts()
    _check_masks(*_on_gpu(), np.random.default_rng(seed), b=16, stages=4)
    assert launch_counts() == {"masks_warp": 1}


@pytest.mark.gpu
def test_pad_shaped_kernel_gpu():
    _check_pad(*_on_gpu(), np.random.default_rng(5))
