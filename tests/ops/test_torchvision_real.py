"""Masks, keypoints and oriented boxes of real objects (the COCO sample: its photographs, each
object's mask decoded by pycocotools from its polygon, points on that polygon, and the
polygon's minimum-area rectangle) through detaug's CPU ops in a pipeline equal torchvision v2's
functionals (``Mask``, ``KeyPoints`` and rotated ``BoundingBoxes`` kernels) on the same
parameters: the ops and cases ``tests/ops/test_torchvision_shapes.py`` leaves out (vertical
flip, affine, perspective, paste against ``pad``, rotation with ``expand=True``, oriented boxes
through a crop) and, on real masks, the flip and resize it checks on generated ones. Each case
carries the three together on two fixed images and one this run draws. Skipped where
torchvision does not import.

Conventions (as in test_torchvision_shapes.py): detaug's coordinates are continuous (the image
covers ``[0, W] x [0, H]``); torchvision's keypoint flips use pixel indices (``y -> H - 1 - y``),
so a flip is compared on ``y - 0.5``, its other keypoint kernels and all of its box kernels on the
same continuous coordinates. torchvision's affine angle turns clockwise on screen, detaug's
counter-clockwise: ``angle=-a``. detaug makes a point that leaves the canvas ``(0, 0, 0)``
(COCO's unlabelled point), torchvision keeps it; detaug drops a box (with its mask, points and
oriented box) that leaves the canvas: compared are the objects detaug keeps, by label, and
every object torchvision keeps fully inside is among them. Oriented boxes are compared as closed
polygons (any start, either direction), with ``clamping_mode=None``: detaug never clips them.
Masks: exact where torchvision moves whole pixels (flips, pad, crop); ``nearest-exact`` resize
exact but on the output rows and columns whose centre maps back exactly onto a source pixel
edge (float rounding picks the pixel there); where torchvision samples through ``grid_sample``
in float32 (affine, perspective, rotation) at most 0.5% of an object's pixels may differ, each
on an edge of the mask in one of the two.

Where torchvision 0.29 parts from itself (docs/conventions.md): with ``expand=True`` its
keypoint and box kernels put the turned image's extent at 0 while its mask kernel centres the
image on the rounded canvas; detaug's points follow the pixels, so they are compared with
torchvision's moved by half the rounding (and its masks with torchvision's as they are). A
perspective turns a rectangle into a quadrilateral, which torchvision's box kernel makes a
parallelogram and detaug the smallest rectangle enclosing it (core/instances.py): the test
checks that detaug's rectangle encloses the corners through torchvision's homography (its
keypoint kernel) with at most twice their area.
"""
import json
import os

import cv2
import numpy as np
import pytest

from detaug import fn
from helpers import COCO, fresh_seed, images_of, run_graph, torchvision_or_skip
from helpers.geometry import compare_keypoints

torch = pytest.importorskip("torch")
ATOL = 1e-3
K = 8  # points per object, spread along its polygon
FIXED_IMAGES = (309, 389)


@pytest.fixture(scope="module")
def tv():
    torchvision_or_skip()
    from torchvision import tv_tensors
    from torchvision.transforms.v2 import functional

    if not hasattr(tv_tensors, "KeyPoints") or \
            "XYXYXYXY" not in tv_tensors.BoundingBoxFormat.__members__:
        pytest.skip("this torchvision has no KeyPoints or rotated BoundingBoxes (0.23 added them)")
    return functional, tv_tensors.BoundingBoxFormat.XYXYXYXY


@pytest.fixture(scope="module")
def coco():
    with open(os.path.join(COCO, "annotations.json")) as f:
        return json.load(f)


def _drawn_image():
    ids = sorted({a["image_id"] for a in json.load(open(os.path.join(COCO, "annotations.json")))
                  ["annotations"] if not a["iscrowd"]} - set(FIXED_IMAGES))
    return int(np.random.default_rng(fresh_seed()).choice(ids))


def _sample(coco, image_id, most=4):
    """(image, boxes (n, 4), fields) of one COCO image: up to ``most`` of its polygon objects
    with at least K vertices, largest first; masks (n, H, W) uint8 from pycocotools, keypoints
    (n, K, 3) on the polygon's vertices, obb (n, 4, 2) the polygon's minimum-area rectangle."""
    from pycocotools import mask as coco_mask

    info = next(i for i in coco["images"] if i["id"] == image_id)
    h, w = info["height"], info["width"]
    img = cv2.imread(os.path.join(COCO, "images", info["file_name"]))
    assert img is not None and img.shape[:2] == (h, w)
    anns = [a for a in coco["annotations"] if a["image_id"] == image_id and not a["iscrowd"]
            and isinstance(a["segmentation"], list) and len(a["segmentation"][0]) >= 2 * K]
    anns = sorted(anns, key=lambda a: -a["area"])[:most]
    assert anns, image_id
    masks, kps, obbs, boxes = [], [], [], []
    for a in anns:
        rle = coco_mask.merge(coco_mask.frPyObjects(a["segmentation"], h, w))
        masks.append(coco_mask.decode(rle))
        poly = np.asarray(a["segmentation"][0], np.float32).reshape(-1, 2)
        pick = poly[np.linspace(0, len(poly) - 1, K).astype(int)]
        kps.append(np.concatenate([pick, np.full((K, 1), 2, np.float32)], 1))
        obbs.append(cv2.boxPoints(cv2.minAreaRect(poly)))
        x, y, bw, bh = a["bbox"]
        boxes.append([x, y, x + bw, y + bh])
    fields = {"bitmasks": np.stack(masks).astype(np.uint8), "keypoints": np.stack(kps),
              "obb": np.stack(obbs).astype(np.float32)}
    return img, np.asarray(boxes, np.float32), fields


def _tv(a):
    return torch.as_tensor(np.ascontiguousarray(a, np.float32))


def _same_polygon(a, b):
    orders = [np.roll(b, -k, 0) for k in range(4)] + [np.roll(b[::-1], -k, 0) for k in range(4)]
    return min(np.abs(a - o).max() for o in orders) <= ATOL


def _encloses(g, r):
    """detaug's rectangle ``g`` (4, 2) has right angles, holds the 4 corners ``r`` and has at
    most twice their quadrilateral's area (the bound of the smallest enclosing rectangle)."""
    e0, e1 = g[1] - g[0], g[3] - g[0]
    assert abs(np.dot(e0, e1)) <= 1e-3 * np.linalg.norm(e0) * np.linalg.norm(e1)
    p = r - g[0]
    s, t = p @ e0 / np.dot(e0, e0), p @ e1 / np.dot(e1, e1)
    d0, d1 = r[2] - r[0], r[3] - r[1]
    assert np.linalg.norm(e0) * np.linalg.norm(e1) <= abs(d0[0] * d1[1] - d0[1] * d1[0]) + 1e-3
    return bool(((s >= -1e-4) & (s <= 1 + 1e-4) & (t >= -1e-4) & (t <= 1 + 1e-4)).all())


def _masks_close(got, ref):
    """Equal but for at most 0.5% of the object's pixels, each on an edge of either mask."""
    diff = got != ref
    assert diff.sum() <= max(2, 0.005 * max(ref.sum(), got.sum())), (diff.sum(), ref.sum())
    edge = np.zeros_like(diff)
    for a in (got, ref):
        pad = np.pad(a, 1, mode="edge")
        edge |= (pad[1:-1, :-2] != a) | (pad[1:-1, 2:] != a) | (pad[:-2, 1:-1] != a) | \
            (pad[2:, 1:-1] != a)
    assert not (diff & ~edge).any()


def _ties(n, out):
    """The output rows (or columns) of a resize ``n -> out`` whose centre maps back exactly onto
    a source pixel edge, ``(i + 0.5) n / out`` an integer: float rounding picks the pixel."""
    i = np.arange(out)
    return ((2 * i + 1) * n) % (2 * out) == 0


def _perspective_points(rng, h, w):
    start = [[0, 0], [w, 0], [w, h], [0, h]]
    jitter = rng.uniform(0, 0.12, (4, 2)) * [w, h] * [[1, 1], [-1, 1], [-1, -1], [1, -1]]
    return start, (np.asarray(start, np.float64) + jitter).round(2).tolist()


def _case(op, rng, h, w, F, xy8, keep):
    """(detaug graph, torchvision's mask / keypoints / oriented boxes functions, output canvas,
    mask rule, oriented box rule) for ``op`` with parameters drawn from ``rng``; ``keep``: a box
    that a crop keeps whole."""
    if op in ("hflip", "vflip"):
        hor = op == "hflip"

        def kp(p):
            p = p - 0.5
            return (F.horizontal_flip_keypoints if hor else F.vertical_flip_keypoints)(
                p, canvas_size=(h, w)) + 0.5
        return (lambda i, b: fn.flip(i, b, horizontal=int(hor), vertical=int(not hor)),
                F.horizontal_flip_mask if hor else F.vertical_flip_mask, kp,
                lambda o: (F.horizontal_flip_bounding_boxes if hor else
                           F.vertical_flip_bounding_boxes)(o, format=xy8, canvas_size=(h, w)),
                (h, w), "exact", "equal")
    if op == "resize":
        size = [int(round(h * rng.uniform(0.4, 0.9))), int(round(w * rng.uniform(0.4, 0.9)))]
        scale = min(size[0] / h, size[1] / w)  # uniform for the oriented boxes' sake
        size = [int(round(h * scale)), int(round(w * scale))]
        return (lambda i, b: fn.resize(i, b, size=tuple(size)),
                lambda m: F.resize_mask(m, size, interpolation="nearest-exact"),
                lambda p: F.resize_keypoints(p, size=size, canvas_size=(h, w))[0],
                lambda o: F.resize_bounding_boxes(o, canvas_size=(h, w), size=size, format=xy8,
                                                  clamping_mode=None)[0],
                tuple(size), ("ties", _ties(h, size[0]), _ties(w, size[1])), "equal")
    if op == "affine":
        a, s = float(rng.uniform(-60, 60)), float(rng.uniform(0.7, 1.3))
        t = [float(v) for v in rng.uniform(-20, 20, 2).round(2)]
        return (lambda i, b: fn.affine(i, b, rotate=a, scale=s, translate_x=t[0],
                                       translate_y=t[1]),
                lambda m: F.affine_mask(m, angle=-a, translate=t, scale=s, shear=[0.0, 0.0]),
                lambda p: F.affine_keypoints(p, canvas_size=(h, w), angle=-a, translate=t,
                                             scale=s, shear=[0.0, 0.0])[0],
                lambda o: F.affine_bounding_boxes(o, format=xy8, canvas_size=(h, w), angle=-a,
                                                  translate=t, scale=s, shear=[0.0, 0.0],
                                                  clamping_mode=None),
                (h, w), "close", "equal")
    if op == "perspective":
        start, end = _perspective_points(rng, h, w)

        def kp(p):
            return F.perspective_keypoints(p, canvas_size=(h, w), startpoints=start,
                                           endpoints=end)
        # the corners through torchvision's homography (its keypoint kernel): its box kernel
        # then replaces the quadrilateral with a parallelogram, detaug with the smallest
        # rectangle enclosing it
        return (lambda i, b: fn.perspective(i, b, startpoints=start, endpoints=end),
                lambda m: F.perspective_mask(m, startpoints=start, endpoints=end),
                kp, lambda o: kp(o.reshape(-1, 2)).reshape(-1, 8), (h, w), "close", "enclose")
    if op == "paste":
        ratio, px, py = float(rng.uniform(1.2, 2.0)), float(rng.uniform()), float(rng.uniform())
        ch, cw = int(ratio * h), int(ratio * w)
        left, top = int(px * (cw - w)), int(py * (ch - h))
        pad = [left, top, cw - w - left, ch - h - top]
        return (lambda i, b: fn.paste(i, b, ratio=ratio, paste_x=px, paste_y=py),
                lambda m: F.pad_mask(m, padding=pad),
                lambda p: F.pad_keypoints(p, canvas_size=(h, w), padding=pad)[0],
                lambda o: F.pad_bounding_boxes(o, format=xy8, canvas_size=(h, w), padding=pad,
                                               clamping_mode=None)[0],
                (ch, cw), "exact", "equal")
    if op == "rotate_expand":
        angle = float(rng.uniform(-180, 180))
        canvas = tuple(F.rotate_mask(torch.zeros((1, h, w), dtype=torch.uint8), angle=angle,
                                     expand=True).shape[-2:])
        # torchvision's image and mask kernels centre the turned image on the canvas (rounded
        # outward); its keypoint and box kernels put the turned image's extent at 0, half the
        # rounding away from its own pixels. detaug's points follow the pixels: compared with
        # torchvision's moved by that half, which the test computes in float64
        a = np.deg2rad(angle)
        ext = np.array([w * abs(np.cos(a)) + h * abs(np.sin(a)),
                        w * abs(np.sin(a)) + h * abs(np.cos(a))])
        half = (np.array([canvas[1], canvas[0]]) - ext) / 2
        shift = torch.as_tensor(half, dtype=torch.float32)
        return (lambda i, b: fn.rotate(i, b, angle=angle, expand=True),
                lambda m: F.rotate_mask(m, angle=angle, expand=True),
                lambda p: F.rotate_keypoints(p, canvas_size=(h, w), angle=angle,
                                             expand=True)[0] + shift,
                lambda o: F.rotate_bounding_boxes(o, format=xy8, canvas_size=(h, w), angle=angle,
                                                  expand=True, clamping_mode=None)[0]
                + shift.repeat(4),
                canvas, "close", "equal")
    assert op == "crop"
    # a window of random edges that holds the largest object whole (so that points are compared)
    bx0, by0, bx1, by1 = keep
    x0, y0 = int(rng.integers(0, int(bx0) + 1)), int(rng.integers(0, int(by0) + 1))
    x1 = int(rng.integers(min(int(np.ceil(bx1)), w), w + 1))
    y1 = int(rng.integers(min(int(np.ceil(by1)), h), h + 1))
    return (lambda i, b: fn.crop(i, b, window=(x0, y0, x1, y1)),
            lambda m: F.crop_mask(m, top=y0, left=x0, height=y1 - y0, width=x1 - x0),
            lambda p: F.crop_keypoints(p, top=y0, left=x0, height=y1 - y0, width=x1 - x0)[0],
            lambda o: F.crop_bounding_boxes(o, format=xy8, top=y0, left=x0, height=y1 - y0,
                                            width=x1 - x0, clamping_mode=None)[0],
            (y1 - y0, x1 - x0), "exact", "equal")


OPS = ["hflip", "vflip", "resize", "affine", "perspective", "paste", "rotate_expand", "crop"]


@pytest.mark.parametrize("image_id", [*FIXED_IMAGES, _drawn_image()], ids=lambda i: f"img{i}")
@pytest.mark.parametrize("op", OPS)
def test_masks_keypoints_obb_of_coco_objects_equal_torchvision(tv, coco, op, image_id):
    F, xy8 = tv
    seed = fresh_seed() + image_id
    print(f"rng seed {seed}")
    rng = np.random.default_rng(seed)
    img, boxes, fields = _sample(coco, image_id)
    h, w = img.shape[:2]
    graph, tv_mask, tv_kp, tv_obb, canvas, mask_rule, obb_rule = _case(op, rng, h, w, F, xy8,
                                                                         boxes[0])
    images, out = run_graph([img], [boxes], graph, fields=[fields])
    assert images_of(images)[0].shape[:2] == canvas
    out = out.per_sample()[0]
    kept = np.asarray(out["labels"]).astype(int)
    if op in ("hflip", "vflip", "resize", "paste"):
        assert kept.tolist() == list(range(len(boxes)))
    assert len(kept) >= 1

    ref_masks = tv_mask(torch.from_numpy(fields["bitmasks"])).numpy()
    assert ref_masks.shape[1:] == canvas
    ref_kp = tv_kp(_tv(fields["keypoints"][..., :2].reshape(-1, 2))).numpy().reshape(-1, K, 2)
    ref_obb = tv_obb(_tv(fields["obb"].reshape(-1, 8))).numpy().astype(np.float64)
    ref_obb = ref_obb.reshape(-1, 4, 2)
    if mask_rule == "exact":  # an object whose every pixel stays on the canvas is kept
        whole = [i for i in range(len(boxes)) if ref_masks[i].sum() == fields["bitmasks"][i].sum()]
        assert set(whole) <= set(kept.tolist())
    compared = 0
    for row, i in enumerate(kept):
        got_mask = np.asarray(out["bitmasks"][row])[:canvas[0], :canvas[1]]
        assert got_mask.shape == canvas
        if mask_rule == "exact":
            assert np.array_equal(got_mask, ref_masks[i]), (op, i)
        elif mask_rule[0] == "ties":  # may differ on tie rows and columns only
            diff = got_mask != ref_masks[i]
            assert not diff[~mask_rule[1]][:, ~mask_rule[2]].any(), (op, i)
        else:
            _masks_close(got_mask, ref_masks[i])
        compared += compare_keypoints(np.asarray(out["keypoints"][row], np.float64),
                                      ref_kp[i].astype(np.float64), canvas, ATOL)[0]
        got_obb = np.asarray(out["obb"][row], np.float64)
        if obb_rule == "equal":
            assert _same_polygon(got_obb, ref_obb[i]), (got_obb, ref_obb[i])
        else:
            assert _encloses(got_obb, ref_obb[i]), (got_obb, ref_obb[i])
    assert compared > 0  # points compared where both put them on the canvas
