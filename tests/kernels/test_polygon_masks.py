"""Polygons to masks (core/polygon_fill.py, kernels/masks.py / masks.cu): the NumPy twin equals
pycocotools (``frPyObjects`` + ``merge`` + ``decode``, the reference COCO's evaluation uses) bit
for bit, on fresh random polygons (overhanging the canvas, on the pixel grid and off it, several a
box, boxes of different canvases) and on COCO's own polygons; a hand-computed square; the CUDA
source, compiled as host C++ (tests/helpers/cuda_emulation.py), equals the twin; on a GPU the
kernel does."""
import json
import os

import numpy as np
import pytest

from detaug.core.instances import POLYGON_OVERFLOW, dense_polygons
from detaug.kernels import masks as km
from helpers import COCO, cuda_emulation as emu
from helpers import fresh_seed

SEEDS = [0, fresh_seed()]


def random_boxes(rng, n=4, most=5, top=30):
    """Dense polygons of ``n`` boxes (0..``most`` polygons each; integer, half-pixel, 2-decimal
    or free vertices, some overhanging the canvas) and each box's canvas (H, W)."""
    hw = rng.integers(1, top, (n, 2))
    polys, per = [], []
    for h, w in hw:
        k = int(rng.integers(0, most + 1))
        per.append(k)
        for _ in range(k):
            m = int(rng.integers(3, 9))
            kind = rng.integers(0, 3)
            if kind == 0:
                p = rng.uniform(-4, [w + 4, h + 4], (m, 2))
            elif kind == 1:
                p = rng.integers(-2, [w + 2, h + 2], (m, 2)) + rng.choice([0, 0.5, 0.1, 0.7], (m, 2))
            else:
                p = np.round(rng.uniform(-1, [w + 1, h + 1], (m, 2)), 2)
            polys.append(p)
    pts = np.concatenate(polys) if polys else np.zeros((0, 2))
    dense = dense_polygons(pts, np.cumsum([0] + [len(p) for p in polys]), np.cumsum([0] + per))
    return dense, hw


def coco_boxes(images=12, scale=1.0):
    """COCO's own polygons (the repository's COCO sample), a box per annotation, scaled."""
    with open(os.path.join(COCO, "annotations.json")) as f:
        d = json.load(f)
    sizes = {i["id"]: (i["height"], i["width"]) for i in d["images"]}
    keep = sorted(sizes)[:images]
    anns = [a for a in d["annotations"] if a["image_id"] in keep and isinstance(a["segmentation"], list)]
    polys = [np.asarray(p, np.float64).reshape(-1, 2) * scale for a in anns for p in a["segmentation"]]
    dense = dense_polygons(np.concatenate(polys), np.cumsum([0] + [len(p) for p in polys]),
                           np.cumsum([0] + [len(a["segmentation"]) for a in anns]))
    hw = np.array([[int(sizes[a["image_id"]][0] * scale), int(sizes[a["image_id"]][1] * scale)]
                   for a in anns])
    return dense, hw


def pycocotools_masks(dense, hw, out_hw):
    """The reference, box by box: pycocotools on each box's polygons as Python lists."""
    from pycocotools import mask as coco_mask

    out = np.zeros((len(dense), *out_hw), np.uint8)
    for i, rows in enumerate(np.asarray(dense)):
        polys, cur = [], []
        for x, y in rows.tolist() + [[np.nan, np.nan]]:
            if np.isnan(x):
                if cur:
                    polys.append(cur)
                cur = []
            else:
                cur += [x, y]
        if polys:
            h, w = (int(v) for v in hw[i])
            out[i, :h, :w] = coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(polys, h, w)))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_twin_equals_pycocotools_on_random_polygons(seed):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        dense, hw = random_boxes(rng)
        out_hw = tuple(hw.max(0) + rng.integers(0, 3, 2))
        want = pycocotools_masks(dense, hw, out_hw)
        np.testing.assert_array_equal(km.polygon_masks_numpy(dense, hw, out_hw), want)
        np.testing.assert_array_equal(km.polygon_masks_coco(dense, hw, out_hw), want)


@pytest.mark.parametrize("scale", [1.0, 1.7])
def test_twin_equals_pycocotools_on_coco_polygons(scale):
    dense, hw = coco_boxes(images=4 if scale == 1.0 else 2, scale=scale)
    want = pycocotools_masks(dense, hw, tuple(hw.max(0)))
    assert want.any(axis=(1, 2)).all()  # every annotation has pixels
    np.testing.assert_array_equal(km.polygon_masks_numpy(dense, hw), want)


def test_hand_computed_square_and_union():
    """A square (1, 1)-(3, 3) holds the pixel centres 1.5 and 2.5 of both axes; a second,
    overlapping triangle of the same box is merged (union), a box without polygons is zeros."""
    sq = np.array([[1, 1], [3, 1], [3, 3], [1, 3]], np.float64)
    tri = np.array([[2, 2], [6, 2], [2, 6]], np.float64)
    dense = dense_polygons(np.concatenate([sq, tri]), [0, 4, 7], [0, 2, 2])
    got = km.polygon_masks_numpy(dense, [[7, 8], [7, 8]])
    want = np.zeros((7, 8), np.uint8)
    want[1:3, 1:3] = 1
    ys, xs = np.mgrid[0:7, 0:8] + 0.5
    want[(xs > 2) & (ys > 2) & (xs + ys < 8)] = 1  # the triangle's centres strictly inside
    np.testing.assert_array_equal(got[0], want)
    assert not got[1].any()


# ----------------------------------------------------------------------------- the CUDA source
@pytest.fixture
def emulated(masks_cu, monkeypatch):
    masks_cu.calls.clear()
    emu.install_fake_cupy(monkeypatch, masks_cu, km)
    return masks_cu


@pytest.mark.parametrize("seed", SEEDS)
def test_emulated_kernel_equals_twin(emulated, seed):
    """Boxes of up to 9 polygons (more than one sweep of 7), NaN rows past the real ones as
    the GPU leaves them, planes larger than the canvases; one launch a call."""
    rng = np.random.default_rng(seed)
    for _ in range(20):
        dense, hw = random_boxes(rng, n=5, most=9)
        dense = np.pad(dense, ((0, 0), (0, int(rng.integers(0, 3))), (0, 0)), constant_values=np.nan)
        out_hw = tuple(hw.max(0) + rng.integers(0, 3, 2))
        got = np.asarray(km.polygon_masks_cupy(emu.dev(dense), hw, out_hw))
        np.testing.assert_array_equal(got, km.polygon_masks_numpy(dense, hw, out_hw))
    assert emulated.calls == ["polygon_masks"] * 20


def test_emulated_kernel_on_coco_and_overflow(emulated):
    """COCO's polygons; a row carrying the clipping's overflow marker gives zeros (the output
    refuses it by name), where the twin refuses it."""
    dense, hw = coco_boxes(images=2)
    np.testing.assert_array_equal(np.asarray(km.polygon_masks_cupy(dense, hw)),
                                  km.polygon_masks_numpy(dense, hw))
    dense[0, 0] = [POLYGON_OVERFLOW, -POLYGON_OVERFLOW]
    assert not np.asarray(km.polygon_masks_cupy(dense, hw))[0].any()
    with pytest.raises(ValueError, match="overflow"):
        km.polygon_masks_numpy(dense, hw)


@pytest.mark.parametrize("seed", SEEDS)
def test_emulated_label_map_equals_twin(emulated, seed):
    """masks_to_labels: the highest value of a sample's covering boxes (a sample without boxes
    is 0); the twin checked against painting in ascending order."""
    rng = np.random.default_rng(seed)
    masks = (rng.random((7, 9, 11)) < 0.4).astype(np.uint8)
    offsets, value = np.array([0, 3, 3, 7]), rng.integers(0, 5, 7).astype(np.int32)
    want = km.masks_to_labels_numpy(masks, offsets, value)
    for b in range(3):
        ref = np.zeros((9, 11), np.int32)
        for i in sorted(range(offsets[b], offsets[b + 1]), key=lambda i: value[i]):
            ref[masks[i] != 0] = value[i]
        np.testing.assert_array_equal(want[b], ref)
    got = km.masks_to_labels_cupy(emu.dev(masks), offsets, emu.dev(value))
    np.testing.assert_array_equal(np.asarray(got), want)
    assert emulated.calls == ["masks_to_labels"]


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="smaller than a box's canvas"):
        km.polygon_masks_numpy(np.full((1, 2, 2), np.nan), [[5, 5]], (4, 5))


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("seed", SEEDS)
def test_gpu_kernel_equals_twin(seed):
    import cupy as cp

    rng = np.random.default_rng(seed)
    for _ in range(10):
        dense, hw = random_boxes(rng, n=6, most=9, top=90)
        got = km.polygon_masks_cupy(cp.asarray(dense), hw)
        np.testing.assert_array_equal(cp.asnumpy(got), km.polygon_masks_numpy(dense, hw))
    dense, hw = coco_boxes(images=12, scale=1.7)
    np.testing.assert_array_equal(cp.asnumpy(km.polygon_masks_cupy(dense, hw)),
                                  pycocotools_masks(dense, hw, tuple(hw.max(0))))
