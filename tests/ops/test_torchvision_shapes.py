"""Keypoints, bitmap masks and oriented boxes through detaug's CPU ops equal torchvision v2's
functionals (``torchvision.transforms.v2.functional``: its ``KeyPoints``, ``Mask`` and rotated
``BoundingBoxes`` kernels) on the same parameters, on fixed and fresh random inputs. Skipped
where torchvision does not import.

detaug's side: keypoints and oriented boxes are per-box fields of a pipeline run through the op
(``fn.flip`` / ``fn.resize`` / ``fn.rotate(expand=False)`` / ``fn.affine`` / ``fn.crop``); bitmap
masks go through ``kernels.shapes.masks_warp_numpy`` (the CPU path of masks, nearest sampling
through the inverse matrix) with the matrix each op plans (``core.geometry``: ``flip``, ``scale``,
``linear_about(rotation_linear)``, ``translate``, the builders the ops call).

Conventions, converted explicitly:

- detaug's coordinates are continuous: the image covers ``[0, W] x [0, H]`` and pixel ``(i, j)``
  has its centre at ``(j + 0.5, i + 0.5)``. torchvision 0.28 is not one convention for keypoints:
  ``horizontal_flip_keypoints`` maps ``x -> W - 1 - x`` (pixel indices, its images' rule), while
  ``resize_keypoints`` scales about the origin and ``rotate`` / ``affine_keypoints`` turn about
  ``(W / 2, H / 2)`` (continuous coordinates, its boxes' rule). So the flip is compared on
  ``x_tv = x - 0.5`` (and its result shifted back), resize, rotate, affine and crop on the same
  continuous coordinates.
- visibility: torchvision's ``KeyPoints`` have none and keep a point that leaves the canvas;
  detaug makes it ``(0, 0, 0)`` (COCO's unlabelled point). A point is compared where torchvision
  puts it inside ``[0, W) x [0, H)``, and must be unlabelled in detaug where torchvision puts it
  outside (points within 1e-3 px of an edge are left out: float32 rounding decides them).
- oriented boxes: detaug carries 4 corners (N, 4, 2), torchvision's ``XYXYXYXY`` 8 numbers; a
  flip reverses detaug's turning direction (the corners are mapped in place) where torchvision
  reorders them, so corners are compared as a closed polygon (any start, either direction).
  ``clamping_mode=None``: torchvision otherwise clamps rotated boxes to the canvas, detaug never
  clips oriented boxes.
- masks: torchvision's ``NEAREST`` resize is PyTorch's legacy nearest (source ``floor(i * in /
  out)``); ``NEAREST_EXACT`` samples at pixel centres (``floor((i + 0.5) * in / out)``), detaug's
  rule: compared with the latter (and shown to differ from the former on a downscale). The
  rotation samples through ``grid_sample`` in float32: equal except where a source point lies
  within rounding of a pixel edge, so at most 0.5% of the pixels may differ, each on an edge of
  the mask.

Tolerances: coordinates 1e-3 px (detaug returns float32; torchvision computes in float32).
"""
import numpy as np
import pytest

from detaug import fn
from detaug.core import geometry as G
from detaug.kernels.shapes import masks_warp_numpy
from helpers import fresh_seed, run_graph, torchvision_or_skip
from helpers.geometry import compare_keypoints

torch = pytest.importorskip("torch")
ATOL = 1e-3


@pytest.fixture(params=[20260515, fresh_seed()], ids=lambda s: f"seed{s}")
def rng(request):
    """Each test on a fixed seed and on this run's fresh one (DETAUG_FRESH_SEED replays it)."""
    print(f"rng seed {request.param}")
    return np.random.default_rng(request.param)


@pytest.fixture(scope="module")
def F():
    torchvision_or_skip()
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional

    formats = tv_tensors.BoundingBoxFormat.__members__
    if not hasattr(tv_tensors, "KeyPoints") or "XYXYXYXY" not in formats:
        pytest.skip("this torchvision has no KeyPoints or rotated BoundingBoxes (0.23 added them)")
    return functional


@pytest.fixture(scope="module")
def XY8(F):
    from torchvision import tv_tensors

    return tv_tensors.BoundingBoxFormat.XYXYXYXY


# ---- keypoints ---------------------------------------------------------------------------------
def _keypoints(rng, h, w, k=40):
    kp = np.zeros((1, k, 3), np.float32)
    kp[0, :, 0] = rng.uniform(0, w, k)
    kp[0, :, 1] = rng.uniform(0, h, k)
    kp[0, :, 2] = 2
    kp[0, :3, :2] = [[0.5, 0.5], [w - 0.5, h / 2], [w / 3, h - 0.25]]  # fixed: centres, edges
    return kp


def _detaug_keypoints(graph, kp, h, w):
    img = np.zeros((h, w, 3), np.uint8)
    _, out = run_graph([img], [[[0, 0, w, h]]], graph, fields=[{"keypoints": kp}])
    got = out.per_sample()[0]
    assert len(got["boxes"]) == 1
    return got["keypoints"][0].astype(np.float64)


def _tv(a):
    return torch.as_tensor(np.asarray(a, np.float32))


@pytest.mark.parametrize("h, w", [(40, 60), (33, 17)])
def test_keypoints_horizontal_flip(F, rng, h, w):
    kp = _keypoints(rng, h, w)
    got = _detaug_keypoints(lambda i, b: fn.flip(i, b, horizontal=1), kp, h, w)
    ref = F.horizontal_flip_keypoints(_tv(kp[0, :, :2] - 0.5), canvas_size=(h, w)).numpy() + 0.5
    assert compare_keypoints(got, ref, (h, w), ATOL)[0] == len(kp[0])
    assert np.allclose(got[0, :2], [w - 0.5, 0.5])  # fixed: the first pixel's centre


@pytest.mark.parametrize("size", [(72, 92), (25, 31)])
def test_keypoints_resize(F, rng, size):
    h, w = 40, 60
    kp = _keypoints(rng, h, w)
    got = _detaug_keypoints(lambda i, b: fn.resize(i, b, size=size), kp, h, w)
    ref, canvas = F.resize_keypoints(_tv(kp[0, :, :2]), size=list(size), canvas_size=(h, w))
    assert tuple(canvas) == size
    assert compare_keypoints(got, ref.numpy().astype(np.float64), size, ATOL)[0] == len(kp[0])


@pytest.mark.parametrize("angle", [30.0, -75.5, 180.0, "random"])
def test_keypoints_rotate_keep_canvas(F, rng, angle):
    h, w = 48, 64
    angle = float(rng.uniform(-180, 180)) if angle == "random" else angle
    kp = _keypoints(rng, h, w)
    got = _detaug_keypoints(lambda i, b: fn.rotate(i, b, angle=angle, expand=False), kp, h, w)
    ref, canvas = F.rotate_keypoints(_tv(kp[0, :, :2]), canvas_size=(h, w), angle=angle,
                                     expand=False)
    inside, outside = compare_keypoints(got, ref.numpy().astype(np.float64), (h, w), ATOL)
    assert inside > 10
    if angle == 30.0:
        assert outside > 0  # corners of a landscape canvas turned 30 degrees leave it


def test_keypoints_affine(F, rng):
    """fn.affine(rotate=a, scale=s, translate_x/y=t) about the centre against affine_keypoints
    with ``angle=-a``: torchvision's affine angle turns clockwise on screen (its rotate passes
    ``-angle``), detaug's ``rotate`` counter-clockwise, as its fn.rotate."""
    h, w = 50, 70
    for _ in range(3):
        a, s = float(rng.uniform(-90, 90)), float(rng.uniform(0.6, 1.5))
        t = [float(v) for v in rng.uniform(-8, 8, 2)]
        kp = _keypoints(rng, h, w)
        got = _detaug_keypoints(lambda i, b: fn.affine(i, b, rotate=a, scale=s, translate_x=t[0],
                                                       translate_y=t[1]), kp, h, w)
        ref, _ = F.affine_keypoints(_tv(kp[0, :, :2]), canvas_size=(h, w), angle=-a,
                                    translate=t, scale=s, shear=[0.0, 0.0])
        assert compare_keypoints(got, ref.numpy().astype(np.float64), (h, w), ATOL)[0] > 5


def test_keypoints_crop(F, rng):
    h, w = 40, 60
    kp = _keypoints(rng, h, w)
    x0, y0, x1, y1 = 7, 5, 47, 30
    got = _detaug_keypoints(lambda i, b: fn.crop(i, b, window=(x0, y0, x1, y1)), kp, h, w)
    ref, canvas = F.crop_keypoints(_tv(kp[0, :, :2]), top=y0, left=x0, height=y1 - y0,
                                   width=x1 - x0)
    inside, outside = compare_keypoints(got, ref.numpy().astype(np.float64), tuple(canvas), ATOL)
    assert inside > 5 and outside > 5


# ---- masks -------------------------------------------------------------------------------------
def _masks(rng, h, w, n=3):
    """n masks of a few random discs and rectangles each (edges are few next to the area)."""
    yy, xx = np.mgrid[:h, :w]
    out = np.zeros((n, h, w), np.uint8)
    for m in out:
        for _ in range(3):
            cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(3, min(h, w) / 3)
            m[(xx - cx) ** 2 + (yy - cy) ** 2 < r * r] = 1
            x0, y0 = rng.integers(0, w - 4), rng.integers(0, h - 4)
            m[y0:y0 + rng.integers(2, h // 2), x0:x0 + rng.integers(2, w // 2)] = 1
    return out


def _warp(masks, matrix, out_hw):
    m = np.asarray(matrix, np.float64).reshape(1, 1, 3, 3)
    return masks_warp_numpy([masks], m, np.array([[out_hw]], np.int64))[0]


def test_masks_flip_resize_crop_equal(F, rng):
    h, w = 37, 53
    masks = _masks(rng, h, w)
    t = torch.from_numpy(masks)
    flipped = _warp(masks, G.flip(np.array([w]), np.array([h]), np.array([1]), np.array([0])),
                    (h, w))
    assert np.array_equal(flipped, F.horizontal_flip_mask(t).numpy())
    for oh, ow in [(74, 106), (20, 31), (111, 159)]:
        got = _warp(masks, G.scale(np.array([ow / w]), np.array([oh / h])), (oh, ow))
        exact = F.resize_mask(t, [oh, ow], interpolation="nearest-exact").numpy()
        assert np.array_equal(got, exact), (oh, ow)
    # legacy nearest on a downscale by 37/20 x 53/31: source rows floor(i * in / out), not at
    # the centres (an integer upscale is the one case where the two rules agree)
    legacy = F.resize_mask(t, [20, 31], interpolation="nearest").numpy()
    assert not np.array_equal(_warp(masks, G.scale(np.array([31 / w]), np.array([20 / h])),
                                    (20, 31)), legacy)
    x0, y0, ch, cw = 6, 4, 25, 30
    got = _warp(masks, G.translate(np.array([-x0]), np.array([-y0])), (ch, cw))
    assert np.array_equal(got, F.crop_mask(t, top=y0, left=x0, height=ch, width=cw).numpy())


@pytest.mark.parametrize("angle", [30.0, -112.0, "random"])
def test_masks_rotate_keep_canvas(F, rng, angle):
    h, w = 48, 64
    angle = float(rng.uniform(-180, 180)) if angle == "random" else angle
    masks = _masks(rng, h, w)
    centre = np.array([[w / 2, h / 2]])
    m = G.linear_about(G.rotation_linear(np.array([angle])), centre, centre)
    got = _warp(masks, m, (h, w))
    ref = F.rotate_mask(torch.from_numpy(masks), angle=angle, expand=False).numpy()
    diff = got != ref
    assert diff.mean() <= 0.005, diff.mean()
    edge_any = np.zeros_like(diff)
    for a in (got, ref):  # every differing pixel lies on an edge of the mask in either
        pad = np.pad(a, ((0, 0), (1, 1), (1, 1)), mode="edge")
        edge_any |= (pad[:, 1:-1, :-2] != a) | (pad[:, 1:-1, 2:] != a) | \
            (pad[:, :-2, 1:-1] != a) | (pad[:, 2:, 1:-1] != a)
    assert not (diff & ~edge_any).any()
    assert got.sum() > 0


# ---- oriented boxes ----------------------------------------------------------------------------
def _obbs(rng, h, w, n=6):
    """n rectangles near the centre (so that no op drops them), random size and angle; the
    first is axis-aligned (fixed)."""
    c = rng.uniform([w * 0.35, h * 0.35], [w * 0.65, h * 0.65], (n, 2))
    half = rng.uniform(2, 8, (n, 2))
    a = rng.uniform(-np.pi, np.pi, n)
    a[0] = 0.0
    u = np.stack([np.cos(a), np.sin(a)], 1)
    v = np.stack([-np.sin(a), np.cos(a)], 1)
    sx, sy = half[:, :1], half[:, 1:]
    corners = np.stack([c - sx * u - sy * v, c + sx * u - sy * v, c + sx * u + sy * v,
                        c - sx * u + sy * v], 1)
    return corners.astype(np.float32)


def _detaug_obb(graph, corners, h, w):
    img = np.zeros((h, w, 3), np.uint8)
    boxes = np.concatenate([corners.min(1), corners.max(1)], 1)
    _, out = run_graph([img], [boxes], graph, fields=[{"obb": corners}])
    got = out.per_sample()[0]
    assert len(got["boxes"]) == len(corners)
    return got["obb"].astype(np.float64)


def _same_polygon(a, b):
    """(4, 2) corners a and b describe the same closed polygon: some start, some direction."""
    orders = [np.roll(b, -k, 0) for k in range(4)] + [np.roll(b[::-1], -k, 0) for k in range(4)]
    return min(np.abs(a - o).max() for o in orders) <= ATOL


@pytest.mark.parametrize("op", ["flip", "rotate", "resize"])
def test_oriented_boxes_equal(F, XY8, rng, op):
    h, w = 48, 64
    corners = _obbs(rng, h, w)
    tv = torch.from_numpy(corners.reshape(-1, 8).copy())
    if op == "flip":
        got = _detaug_obb(lambda i, b: fn.flip(i, b, horizontal=1), corners, h, w)
        ref = F.horizontal_flip_bounding_boxes(tv, format=XY8, canvas_size=(h, w))
    elif op == "rotate":
        angle = float(rng.uniform(-180, 180))
        got = _detaug_obb(lambda i, b: fn.rotate(i, b, angle=angle, expand=False), corners, h, w)
        ref, _ = F.rotate_bounding_boxes(tv, format=XY8, canvas_size=(h, w), angle=angle,
                                         expand=False, clamping_mode=None)
    else:  # uniform scale: a rectangle stays a rectangle in both
        got = _detaug_obb(lambda i, b: fn.resize(i, b, size=(96, 128)), corners, h, w)
        ref, _ = F.resize_bounding_boxes(tv, canvas_size=(h, w), size=[96, 128], format=XY8,
                                         clamping_mode=None)
    ref = ref.numpy().astype(np.float64).reshape(-1, 4, 2)
    for g, r in zip(got, ref):
        assert _same_polygon(g, r), (g, r)


def test_oriented_boxes_stretched_enclose_torchvisions_parallelogram(F, XY8, rng):
    """A resize that scales x and y apart turns a turned rectangle into a parallelogram:
    torchvision keeps the 4 mapped corners, detaug the smallest rectangle enclosing them
    (core/instances.py). The axis-aligned box (first) is still a rectangle: equal; the others
    enclose torchvision's corners, and have at most the parallelogram's area times 2."""
    h, w = 48, 64
    corners = _obbs(rng, h, w)
    got = _detaug_obb(lambda i, b: fn.resize(i, b, size=(48, 128)), corners, h, w)
    ref, _ = F.resize_bounding_boxes(torch.from_numpy(corners.reshape(-1, 8).copy()),
                                     canvas_size=(h, w), size=[48, 128], format=XY8,
                                     clamping_mode=None)
    ref = ref.numpy().astype(np.float64).reshape(-1, 4, 2)
    assert _same_polygon(got[0], ref[0])
    for g, r in zip(got, ref):
        e0, e1 = g[1] - g[0], g[3] - g[0]
        assert abs(np.dot(e0, e1)) <= 1e-3 * np.linalg.norm(e0) * np.linalg.norm(e1)  # right angle
        p = r - g[0]
        s, t = p @ e0 / np.dot(e0, e0), p @ e1 / np.dot(e1, e1)
        assert ((s >= -1e-4) & (s <= 1 + 1e-4) & (t >= -1e-4) & (t <= 1 + 1e-4)).all()
        d0, d1 = r[2] - r[0], r[3] - r[1]
        area_r = 0.5 * abs(d0[0] * d1[1] - d0[1] * d1[0])
        assert np.linalg.norm(e0) * np.linalg.norm(e1) <= 2 * area_r + 1e-3
