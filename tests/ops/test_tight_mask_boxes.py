"""Tight boxes from bitmap masks: a box whose field ``tight_box`` is set becomes, after the chain,
the box of its warped mask's pixels (pixel (i, j) covers [j, j + 1] x [i, i + 1]), united with
its polygons' box where it has both; an empty mask keeps the corners' box, which the drop rules
judged.

- a 90-degree turn by hand (exact on the pixel grid): an L-shaped mask, a mask turned off the
  canvas, a box not asking; readers.coco(bitmasks=True, tight_boxes=True) on a crowd's RLE and
  readers.voc(bitmasks=True, tight_boxes=True) on a SegmentationObject PNG; the refusals;
- fresh random masks through a random chain against the box of the output mask computed another
  way (pixel centres), the same boxes kept and dropped as without tight boxes, each tight box
  within half a pixel of its corners' box;
- the device path (kernels/shapes.py: masks_warp, polygons_transform, mask_boxes, one launch
  each) equal to the CPU, emulated (tests/helpers/cuda_emulation.py) and on the GPU (``gpu``).
"""
import os

import numpy as np
import pytest
from PIL import Image

from detaug import Pipeline, fn
from detaug.core import geometry as G
from detaug.core import instances as I
from detaug.core.batch import BoxBatch, _identity_geometry
from detaug.graph import materialize as M
from helpers import cuda_emulation as emu
from helpers import fresh_seed, run_graph
from helpers.reader_files import voc_xml, write_coco, write_voc

SEEDS = [13, fresh_seed()]
H, W = 30, 40  # a 90-degree turn about (20, 15) keeps integers: (x, y) -> (y + 5, 35 - x)


def _turn(img, boxes):
    return fn.rotate(img, boxes, angle=90, expand=False)


def _l_masks():
    """Three masks on the 30 x 40 canvas: an L (column 10 rows 5-9, row 9 columns 10-17: box
    [10, 5, 18, 10]), columns 1-2 (which the turn sends below the canvas), the L again."""
    m = np.zeros((3, H, W), np.uint8)
    m[0, 5:10, 10] = m[0, 9, 10:18] = 1
    m[1, 11:13, 1:3] = 1
    m[2] = m[0]
    return m


# the corners' boxes after the turn: [8, 3, 20, 12] -> [8, 15, 17, 27]; [0, 10, 12, 14] ->
# [15, 23, 19, 35] clipped to [15, 23, 19, 30]; the L's mask turned: rows 17-24, columns 10-14
BOXES = np.array([[8, 3, 20, 12], [0, 10, 12, 14], [8, 3, 20, 12]], np.float32)
CORNERS = np.array([[8, 15, 17, 27], [15, 23, 19, 30], [8, 15, 17, 27]])
L_TURNED = [10, 17, 15, 25]


def test_turned_masks_by_hand():
    img = np.zeros((H, W, 3), np.uint8)
    out = run_graph([img], [BOXES], _turn, fields=[{"bitmasks": _l_masks(),
                                                    "tight_box": np.array([1, 1, 0], np.uint8)}])
    s = out[1].per_sample()[0]
    assert s["bitmasks"][0].sum() == 12 and not s["bitmasks"][1].any()
    np.testing.assert_allclose(s["boxes"], [L_TURNED, CORNERS[1], CORNERS[2]], atol=1e-4)


def _runs(mask):
    """COCO's uncompressed RLE counts of ``mask`` (column-major, starting with 0s)."""
    flat = mask.T.reshape(-1)
    change = np.flatnonzero(np.diff(flat)) + 1
    edges = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(edges).tolist()
    return ([0] + runs) if flat[0] else runs


def _reader_boxes(make, **kw):
    pipe = Pipeline(batch_size=1, num_threads=1, seed=0)
    with pipe:
        enc, boxes = make(**kw)
        pipe.set_outputs(_turn(fn.decoders.image(enc), boxes)[1])
    (out,) = pipe.run()
    pipe.close()
    return out.per_sample()[0]["boxes"]


def test_coco_rle_boxes_follow_their_masks(tmp_path):
    """A crowd's RLE (the L) and a polygon object (no mask: a zero plane, its polygon's box)."""
    seg = {"size": [H, W], "counts": _runs(_l_masks()[0])}
    anns = [{"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 1, "bbox": [8, 3, 12, 9],
             "area": 12, "segmentation": seg},
            {"id": 2, "image_id": 1, "category_id": 1, "iscrowd": 0, "bbox": [8, 3, 12, 9],
             "area": 50, "segmentation": [[10, 5, 18, 5, 18, 10]]}]
    path, root = write_coco(tmp_path, [{"id": 1, "file_name": "1.jpg", "width": W, "height": H}],
                            anns)

    def coco(**kw):
        return fn.readers.coco(file_root=root, annotations_file=path, **kw)
    got = _reader_boxes(coco, bitmasks=True, polygons=True, tight_boxes=True)
    # the triangle (10, 5), (18, 5), (18, 10) turned: (10, 25), (10, 17), (15, 17)
    np.testing.assert_allclose(got, [L_TURNED, [10, 17, 15, 25]], atol=1e-4)
    np.testing.assert_allclose(_reader_boxes(coco, bitmasks=True), CORNERS[[0, 2]], atol=1e-4)
    with pytest.raises(ValueError, match="needs polygons=True or bitmasks=True"):
        _reader_boxes(coco, tight_boxes=True)


def test_voc_boxes_follow_their_segmentation_masks(tmp_path):
    """Object 1 is the L, object 2 has no pixel in the PNG: it keeps its corners' box."""
    objects = [("dog", 9, 4, 20, 12), ("cat", 9, 4, 20, 12)]  # 1-based: [8, 3, 20, 12]
    root = write_voc(tmp_path, {"a": voc_xml("a.jpg", (W, H), objects)},
                     images={"a.jpg": (W, H)})
    os.makedirs(os.path.join(root, "SegmentationObject"))
    index = _l_masks()[0].copy()
    index[0, :] = 255  # VOC's outline value: no object's
    im = Image.fromarray(index, "P")
    im.putpalette([0, 0, 0, 128, 0, 0] + [0] * 762)
    im.save(os.path.join(root, "SegmentationObject", "a.png"))

    def voc(**kw):
        return fn.readers.voc(root=root, **kw)
    np.testing.assert_allclose(_reader_boxes(voc, bitmasks=True, tight_boxes=True),
                               [L_TURNED, CORNERS[0]], atol=1e-4)
    with pytest.raises(ValueError, match="needs bitmasks=True"):
        _reader_boxes(voc, tight_boxes=True)


# ----------------------------------------------------------------------------- random
def _inputs(rng, n=4, k=3):
    """Images of random sizes; ``k`` boxes each, each with a random mask inside its pixels."""
    imgs, boxes, masks = [], [], []
    for _ in range(n):
        h, w = int(rng.integers(24, 50)), int(rng.integers(24, 50))
        imgs.append(rng.integers(0, 256, (h, w, 3), np.uint8))
        lo = np.floor(rng.uniform([0, 0], [w - 10, h - 10], (k, 2)))
        hi = np.minimum(lo + np.floor(rng.uniform(3, 14, (k, 2))), [w, h])
        boxes.append(np.concatenate([lo, hi], 1) - rng.uniform(0, 0.9, (k, 4)) * [1, 1, -1, -1])
        m = np.zeros((k, h, w), np.uint8)
        for j, (x0, y0, x1, y1) in enumerate(np.concatenate([lo, hi], 1).astype(int)):
            m[j, y0:y1, x0:x1] = rng.random((y1 - y0, x1 - x0)) < rng.uniform(0.05, 0.7)
        masks.append(m)
    return imgs, boxes, masks


def _graph(i, b):
    i, b = fn.flip(i, b, horizontal=fn.random.coin_flip())
    i, b = fn.rotate(i, b, angle=fn.random.uniform(range=(-60, 60)), expand=False)
    return fn.random_resized_crop(i, b, size=(36, 44), random_area=(0.5, 1.0))[1]


def _pixel_boxes(masks):
    """Independent of mask_boxes: the extreme nonzero pixel centres, half a pixel out."""
    out = np.full((len(masks), 4), np.nan)
    for k, m in enumerate(masks):
        i, j = np.nonzero(m)
        if len(i):
            out[k] = [j.min(), i.min(), j.max() + 1.0, i.max() + 1.0]
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_random_masks_give_their_pixels_box(seed):
    rng = np.random.default_rng(seed)
    imgs, boxes, masks = _inputs(rng)
    got = {}
    for tight in (0, 1):
        fields = [{"bitmasks": m, "tight_box": np.full(len(m), tight, np.uint8)} for m in masks]
        (got[tight],) = run_graph(imgs, boxes, _graph, fields=fields, seed=seed)
    seen = 0
    for a, b in zip(got[0].per_sample(), got[1].per_sample()):
        np.testing.assert_array_equal(a["labels"], b["labels"])  # the same boxes kept
        np.testing.assert_array_equal(a["bitmasks"], b["bitmasks"])
        want = _pixel_boxes(b["bitmasks"])
        has = ~np.isnan(want[:, 0])
        np.testing.assert_array_equal(b["boxes"][has], want[has].astype(np.float32))
        np.testing.assert_array_equal(b["boxes"][~has], a["boxes"][~has])
        # a mask pixel lit has its centre inside the object, so inside the corners' box
        assert (b["boxes"][has, :2] >= a["boxes"][has, :2] - 0.5 - 1e-4).all()
        assert (b["boxes"][has, 2:] <= a["boxes"][has, 2:] + 0.5 + 1e-4).all()
        seen += int(has.sum())
    assert seen >= 3


# ----------------------------------------------------------------------------- device
def _batch(rng, sizes):
    """Samples of 2-4 boxes, each with a random mask (some empty) and 0-1 triangles; every box
    but every third asks for a tight box."""
    plane = np.max(sizes, 0)
    boxes, masks, polys = [], [], []
    for h, w in sizes:
        n = int(rng.integers(2, 5))
        lo = rng.uniform([0, 0], [w - 6, h - 6], (n, 2))
        boxes.append(np.concatenate([lo, lo + rng.uniform(3, 12, (n, 2))], 1))
        m = np.zeros((n, *plane), np.uint8)
        m[:, :h, :w] = rng.random((n, h, w)) < rng.uniform(0.0, 0.02, (n, 1, 1))
        masks.append(m)
        polys += [[lo[j] + rng.uniform(0, 8, (3, 2))] if rng.random() < 0.5 else []
                  for j in range(n)]
    counts = [len(b) for b in boxes]
    pts = [p for ps in polys for p in ps]
    dense = I.dense_polygons(np.concatenate(pts) if pts else np.zeros((0, 2)),
                             np.cumsum([0] + [len(p) for p in pts]),
                             np.cumsum([0] + [len(ps) for ps in polys]))
    n = sum(counts)
    fields = {"bitmasks": np.concatenate(masks), "polygons": dense,
              "tight_box": (np.arange(n) % 3 != 0).astype(np.uint8)}
    return BoxBatch(np.concatenate(boxes).astype(np.float32), np.arange(n),
                    np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                    np.asarray(sizes, np.int64), "cpu", fields)


def _chain(rng, sizes):
    hw = np.asarray(sizes, np.int64)
    b = len(hw)
    g = _identity_geometry(hw, 3)
    centre = hw[:, ::-1] / 2.0
    g = g.then(G.linear_about(G.rotation_linear(rng.uniform(-50, 50, b)), centre, centre), hw)
    out = np.stack([rng.integers(20, 44, b), rng.integers(20, 44, b)], 1)
    return g.then(G.scale(out[:, 1] / hw[:, 1], out[:, 0] / hw[:, 0]), out)


@pytest.mark.parametrize("seed", SEEDS)
def test_device_tight_boxes_equal_the_cpu(shape_kernels, seed):
    rng = np.random.default_rng(seed)
    sizes = [(int(rng.integers(16, 40)), int(rng.integers(16, 40))) for _ in range(4)]
    host = _batch(rng, sizes)
    g = _chain(rng, sizes)
    want, got = emu.prune_on_host_and_device(host, g)
    assert sorted(shape_kernels.calls) == ["mask_boxes", "masks_warp", "polygons_transform"]
    np.testing.assert_array_equal(np.asarray(got.boxes), want.boxes)
    # the CPU's boxes themselves: the union of both shapes' boxes where tight_box is set
    moved = I.shapes_through(host.fields, host.sample_index(), g)
    tight = I.union_boxes(I.polygon_boxes(*I.ragged_polygons(moved["polygons"])),
                          _pixel_boxes(moved["bitmasks"]))
    corners = M.prune(host.with_geometry(g).replace(fields={})).boxes
    use = (host.fields["tight_box"] != 0) & ~np.isnan(tight[:, 0])
    assert use.any() and (~use).any()
    np.testing.assert_array_equal(want.boxes[use], tight[use].astype(np.float32))
    np.testing.assert_array_equal(want.boxes[~use], corners[~use])


def _feed(rng, n=4):
    imgs, boxes, masks = _inputs(rng, n)
    return imgs, boxes, [{"bitmasks": m, "tight_box": np.ones(len(m), np.uint8)} for m in masks]


@pytest.mark.gpu
@pytest.mark.parametrize("seed", SEEDS)
def test_pipeline_tight_mask_boxes_gpu_equal_cpu(seed):
    imgs, boxes, fields = _feed(np.random.default_rng(seed))
    (cpu,) = run_graph(imgs, boxes, _graph, fields=fields, seed=seed)
    (gpu,) = run_graph(imgs, boxes, _graph, fields=fields, seed=seed, device="gpu")
    for want, got in zip(cpu.per_sample(), gpu.per_sample()):
        np.testing.assert_array_equal(got["boxes"], want["boxes"])
        np.testing.assert_array_equal(got["bitmasks"], want["bitmasks"])
