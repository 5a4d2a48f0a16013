"""Bitmap masks (the per-box field ``bitmasks``) through the ops on the CPU.

- the chain's warp (core/instances.py ``warp_bitmasks``, nearest) against a float64 reference
  written op by op: each output pixel centre taken back through each op's inverse in turn,
  kept only where it lies on a pixel of every canvas, then the source pixel holding it;
- flips and resizes in a pipeline against that reference with the matrices written by hand
  from the coordinate convention (docs/design.md: ``x -> W - x``, ``x -> x * W' / W``);
- every op family (mosaic, letterbox, the random crops, zoom-out, paste, rotate) takes a box's
  own rectangle as its mask to pixels inside the box the box kernel computes, dropped with it;
  mixup keeps both samples' masks where they were; pad_boxes pads them row for row with 0;
- the COCO sample's objects written twice, as polygons and as a crowd RLE: through a random
  chain and a mosaic both copies stay or go together and the warped RLE mask matches the
  moved polygons rasterised (fn.instance_masks; the torch adapter's masks);
- the memory plan counts a mask per box on the boxes' canvas (the GPU path:
  tests/ops/test_bitmasks_gpu.py).
"""
import os

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core.instances import warp_bitmasks
from detaug.runtime.gpu import output_sizes
from helpers import COCO, fresh_seed, run_graph

SEEDS = [11, fresh_seed()]


def _map_back(m, pts):
    q = np.concatenate([pts, np.ones((len(pts), 1))], 1) @ np.linalg.inv(m).T
    return q[:, :2] / q[:, 2:]


def reference_warp(mask, mats, sizes, source_hw):
    """(H', W') uint8: ``mask`` (h, w) through the ops ``mats`` (S, 3, 3) with output canvases
    ``sizes`` (S, 2), in float64, op by op backwards (the definition, not the composed map)."""
    h_out, w_out = (int(v) for v in sizes[-1])
    jj, ii = np.meshgrid(np.arange(w_out) + 0.5, np.arange(h_out) + 0.5)
    pts = np.stack([jj.ravel(), ii.ravel()], 1)
    ok = np.ones(len(pts), bool)
    canvases = [tuple(source_hw)] + [tuple(s) for s in sizes[:-1]]
    for m, (h, w) in zip(mats[::-1], canvases[::-1]):
        pts = _map_back(np.asarray(m, np.float64), pts)
        ok &= (pts[:, 0] >= 0) & (pts[:, 0] < w) & (pts[:, 1] >= 0) & (pts[:, 1] < h)
    out = np.zeros(len(pts), np.uint8)
    ix, iy = np.floor(pts[ok, 0]).astype(int), np.floor(pts[ok, 1]).astype(int)
    out[ok] = mask[iy, ix] != 0
    return out.reshape(h_out, w_out)


def _random_step(rng, hw_in):
    """A random op: rotation, scale, mirror, shift and a little perspective; a new canvas."""
    h, w = hw_in
    a, s = rng.uniform(-np.pi, np.pi), rng.uniform(0.5, 1.6)
    c, d = s * np.cos(a), s * np.sin(a)
    flip = rng.choice([-1.0, 1.0])
    m = np.array([[flip * c, -d, 0], [flip * d, c, 0], [0, 0, 1]])
    m[2, :2] = rng.uniform(-4e-3, 4e-3, 2) * (rng.random() < 0.5)
    out = rng.integers(8, 40, 2)
    centre_in, centre_out = np.array([w / 2, h / 2]), np.array([out[1] / 2, out[0] / 2])
    shift = np.eye(3)
    shift[:2, 2] = centre_out + rng.uniform(-5, 5, 2)
    back = np.eye(3)
    back[:2, 2] = -centre_in
    return shift @ m @ back, out


@pytest.mark.parametrize("seed", SEEDS)
def test_warp_bitmasks_against_float64_reference(seed):
    rng = np.random.default_rng(seed)
    b, steps = 3, 3
    src = rng.integers(6, 36, (b, 2))
    counts = rng.integers(0, 4, b)
    sample = np.repeat(np.arange(b), counts)
    plane = src.max(0)
    planes = np.zeros((len(sample), *plane), np.uint8)
    for i, s in enumerate(sample):
        planes[i, :src[s, 0], :src[s, 1]] = rng.random(tuple(src[s])) < rng.uniform(0.1, 0.9)
    planes[:1] = 0  # an empty mask stays empty
    mats, sizes = np.zeros((steps, b, 3, 3)), np.zeros((steps, b, 2), np.int64)
    hw = src.copy()
    for k in range(steps):
        for j in range(b):
            mats[k, j], sizes[k, j] = _random_step(rng, hw[j])
        hw = sizes[k]
    got = warp_bitmasks(planes, sample, src, mats, sizes)
    assert got.shape == (len(sample), *sizes[-1].max(0)) and got.dtype == np.uint8
    differ = total = 0
    for i, s in enumerate(sample):
        h, w = sizes[-1, s]
        want = reference_warp(planes[i, :src[s, 0], :src[s, 1]], mats[:, s], sizes[:, s], src[s])
        differ += int((got[i, :h, :w] != want).sum())
        total += want.size
        assert not got[i, h:].any() and not got[i, :, w:].any()
    # composed inverse against op-by-op inverses: they may part only at a centre within
    # rounding of a pixel edge
    assert differ <= max(1, total // 10000), (differ, total)


def test_warp_bitmasks_on_coco_masks_against_float64_reference(tmp_path):
    """The COCO sample's objects as crowd RLEs, decoded per batch (rle_planes) and warped by
    a random chain that first shrinks each image 12 times: equal to the reference on
    pycocotools' decode of the same RLE."""
    from pycocotools import mask as coco_mask

    from detaug.core.instances import rle_planes
    from readers.coco_instances import read_coco_shapes

    rng = np.random.default_rng(fresh_seed())
    ds = read_coco_shapes(_twice_coco(tmp_path, images=3), ROOT, bitmasks=True)
    recs = ds.records
    src = np.array([[r.height, r.width] for r in recs])
    runs = [r.fields["rle"] for r in recs]
    sample = np.repeat(np.arange(len(recs)), [len(x) for x in runs])
    counts = np.concatenate([x.counts for x in runs])
    offsets = np.concatenate([[0], np.cumsum(counts)])
    values = np.concatenate([x.values for x in runs])
    planes = rle_planes(values, offsets, src[sample], src.max(0))
    mats, sizes = np.zeros((2, len(recs), 3, 3)), np.zeros((2, len(recs), 2), np.int64)
    for j, (h, w) in enumerate(src):
        small = np.array([h // 12, w // 12])
        rot, _ = _random_step(rng, small)
        mats[0, j], sizes[0, j] = rot @ np.diag([1 / 12, 1 / 12, 1]), small
        mats[1, j], sizes[1, j] = _random_step(rng, small)
    got = warp_bitmasks(planes, sample, src, mats, sizes)
    differ = total = compared = 0
    for i, s in enumerate(sample):
        if not counts[i]:
            assert not got[i].any()
            continue
        h, w = src[s]
        rle = {"size": [int(h), int(w)], "counts": runs[s][i - _first_row(runs, s)].tolist()}
        decoded = coco_mask.decode(coco_mask.frPyObjects(rle, int(h), int(w)))
        want = reference_warp(decoded, mats[:, s], sizes[:, s], (h, w))
        hh, ww = sizes[-1, s]
        differ += int((got[i, :hh, :ww] != want).sum())
        total += want.size
        compared += 1
    assert compared >= 3 and differ <= max(1, total // 10000), (differ, total)


def _first_row(runs, s):
    """The first box row of sample ``s`` among the samples' ragged fields ``runs``."""
    return sum(len(x) for x in runs[:s])


def _hand_flip(w, h, horizontal, vertical):
    m = np.eye(3)
    if horizontal:
        m[0] = [-1, 0, w]
    if vertical:
        m[1] = [0, -1, h]
    return m


@pytest.mark.parametrize("seed", SEEDS)
def test_flip_resize_pipeline_against_hand_matrices(seed):
    rng = np.random.default_rng(seed)
    # odd sizes: no output pixel centre maps back onto a pixel edge (a tie that rounding of
    # the map decides) under a resize, (i + 0.5) h / h' being an integer only for an even h
    sizes = [tuple(int(v) for v in 2 * rng.integers(5, 20, 2) + 1) for _ in range(3)]
    out_hw = (int(rng.integers(8, 50)), int(rng.integers(8, 50)))
    imgs, boxes, fields = [], [], []
    for h, w in sizes:
        imgs.append(np.zeros((h, w, 3), np.uint8))
        boxes.append(np.array([[0, 0, w, h], [1, 2, w - 1, h - 2]], np.float32))
        fields.append({"bitmasks": (rng.random((2, h, w)) < 0.5).astype(np.uint8)})

    def graph(i, b):
        i, b = fn.flip(i, b, horizontal=1, vertical=1)
        return fn.resize(i, b, size=out_hw)
    _, out = run_graph(imgs, boxes, graph, fields=fields)
    for (h, w), f, got in zip(sizes, fields, out.per_sample()):
        resize = np.diag([out_hw[1] / w, out_hw[0] / h, 1.0])
        mats = [_hand_flip(w, h, True, True), resize]
        for k in range(2):
            want = reference_warp(f["bitmasks"][k], mats, [(h, w), out_hw], (h, w))
            np.testing.assert_array_equal(got["bitmasks"][k], want)


def _rect_samples(rng, sizes):
    """Per sample 3 boxes with integer corners, each with its own rectangle as its mask (the
    pixels whose centres lie in it); labels name sample and box."""
    imgs, boxes, labels, fields = [], [], [], []
    for k, (h, w) in enumerate(sizes):
        imgs.append(np.full((h, w, 3), 60 * k, np.uint8))
        lo = rng.integers(0, [w - 6, h - 6], (3, 2))
        hi = lo + rng.integers(4, [w, h], (3, 2)).clip(max=[w, h] - lo)
        masks = np.zeros((3, h, w), np.uint8)
        for i in range(3):
            masks[i, lo[i, 1]:hi[i, 1], lo[i, 0]:hi[i, 0]] = 1
        boxes.append(np.concatenate([lo, hi], 1).astype(np.float32))
        labels.append(10 * k + np.arange(3))
        fields.append({"bitmasks": masks})
    return imgs, boxes, labels, fields


OPS = {
    "mosaic": lambda i, b: fn.mosaic(i, b, size=32, partners="batch"),
    "mosaic_noresize": lambda i, b: fn.mosaic(i, b, size=32, resize=False, partners="batch"),
    "letterbox": lambda i, b: fn.letterbox(i, b, size=(40, 40)),
    "iou_crop": lambda i, b: fn.random_iou_crop(i, b),
    "resized_crop": lambda i, b: fn.random_resized_crop(i, b, size=(36, 30)),
    "zoom_out": lambda i, b: fn.zoom_out(i, b),
    "paste": lambda i, b: fn.paste(i, b, ratio=1.5, paste_x=0.3, paste_y=0.8),
    "rotate": lambda i, b: fn.rotate(i, b, angle=fn.random.uniform(range=(-40, 40)),
                                     expand=False),
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_rectangle_mask_stays_in_its_box(op):
    rng = np.random.default_rng(fresh_seed())
    sizes = [(40, 56), (48, 36), (30, 44), (52, 50)]
    imgs, boxes, labels, fields = _rect_samples(rng, sizes)
    _, out = run_graph(imgs, boxes, OPS[op], labels=labels, fields=fields,
                       seed=int(rng.integers(1 << 30)))
    axis_aligned = op != "rotate"
    seen = 0
    for got, (h, w) in zip(out.per_sample(), out.canvas):
        assert got["bitmasks"].shape == (len(got["boxes"]), h, w)
        for box, mask in zip(got["boxes"], got["bitmasks"]):
            ii, jj = np.nonzero(mask)
            cx, cy = jj + 0.5, ii + 0.5
            assert ((cx >= box[0] - 1e-3) & (cx <= box[2] + 1e-3) & (cy >= box[1] - 1e-3)
                    & (cy <= box[3] + 1e-3)).all()
            if axis_aligned and min(box[2] - box[0], box[3] - box[1]) >= 4:
                # nearest sampling of a scaled rectangle: every pixel a source pixel away from
                # the box's edges is in the mask
                y, x = np.mgrid[:h, :w] + 0.5
                inner = ((x > box[0] + 2) & (x < box[2] - 2) & (y > box[1] + 2)
                         & (y < box[3] - 2))
                assert mask[inner].all()
                seen += 1
    assert seen or not axis_aligned


def test_mixup_keeps_both_samples_masks():
    rng = np.random.default_rng(fresh_seed())
    imgs, boxes, labels, fields = _rect_samples(rng, [(40, 40)] * 4)
    _, out = run_graph(imgs, boxes, lambda i, b: fn.mixup(i, b, partners="batch"),
                       labels=labels, fields=fields)
    partners = 0
    for got in out.per_sample():
        partners += len(got["labels"]) > 3
        for mask, label in zip(got["bitmasks"], got["labels"]):
            k, i = divmod(int(label), 10)
            np.testing.assert_array_equal(mask, fields[k]["bitmasks"][i])
    assert partners


def test_pad_boxes_pads_masks_row_for_row():
    rng = np.random.default_rng(fresh_seed())
    imgs, boxes, labels, fields = _rect_samples(rng, [(40, 56), (48, 36), (30, 44)])
    boxes[1][1] = [1, 1, 1.5, 1.5]  # pruned: under min_area

    def graph(i, b):
        b = fn.prune_boxes(b, min_area=1.0)
        return b, fn.pad_boxes(b, max_boxes=4)
    plain, padded = run_graph(imgs, boxes, graph, labels=labels, fields=fields)
    assert list(padded["counts"]) == [3, 2, 3]
    assert padded["bitmasks"].shape == (3, 4, 48, 56)
    for b, got in enumerate(plain.per_sample()):
        n = len(got["boxes"])
        h, w = got["bitmasks"].shape[1:]
        np.testing.assert_array_equal(padded["bitmasks"][b, :n, :h, :w], got["bitmasks"])
        assert not padded["bitmasks"][b, n:].any() and not padded["bitmasks"][b, :, h:].any()
        assert list(got["labels"]) == [lab for lab in labels[b] if lab != 11]


# ---- the COCO sample: each object as polygons and as a crowd RLE ---------------------------
ROOT = os.path.join(COCO, "images")
COPY = 10 ** 9  # the RLE copy's annotation id: the object's + COPY


def _twice_coco(folder, images=12):
    """The first ``images`` images of the COCO sample, each object of at least 1,500 px kept as
    its polygons and added again as a crowd RLE of them (pycocotools' merge)."""
    import json

    from pycocotools import mask as coco_mask

    with open(os.path.join(COCO, "annotations.json")) as f:
        doc = json.load(f)
    doc["images"] = doc["images"][:images]
    sizes = {im["id"]: (im["height"], im["width"]) for im in doc["images"]}
    anns = [a for a in doc["annotations"] if a["image_id"] in sizes]
    for a in list(anns):
        if a["area"] >= 1500 and isinstance(a["segmentation"], list):
            h, w = sizes[a["image_id"]]
            rle = coco_mask.merge(coco_mask.frPyObjects(a["segmentation"], h, w))
            anns.append(dict(a, id=a["id"] + COPY, iscrowd=1, segmentation={
                "size": [h, w], "counts": rle["counts"].decode("ascii")}))
    doc["annotations"] = anns
    path = os.path.join(str(folder), "twice.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


def _twice_pipe(folder, images):
    """A pipeline of ``images`` samples a batch over ``_twice_coco(folder, images)`` read with
    polygons and bitmasks: the pipeline, its decoded images and its boxes (add to its graph
    under ``with pipe:``)."""
    ann = _twice_coco(folder, images=images)
    pipe = Pipeline(batch_size=images, num_threads=1, seed=fresh_seed(), prefetch_queue_depth=1)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=ROOT, annotations_file=ann, polygons=True,
                                     bitmasks=True)
        img = fn.decoders.image(enc)
    return pipe, img, boxes


def _pairs_agree(targets, min_area=400):
    """Per target dict (boxes, annotation_id, masks): each copy beside its object (both kept
    or both dropped), and its mask close to the object's polygons' (IoU)."""
    compared = 0
    for t in targets:
        ids = [int(v) for v in np.asarray(t["annotation_id"])]
        masks = np.asarray(t["masks"])
        where = {a: k for k, a in enumerate(ids)}
        for a, k in where.items():
            if a >= COPY:
                assert a - COPY in where, f"copy {a} kept without its object"
                continue
            if a + COPY not in where:
                continue  # (a small object: no copy)
            poly, bits = masks[k] != 0, masks[where[a + COPY]] != 0
            np.testing.assert_array_equal(np.asarray(t["boxes"])[k],
                                          np.asarray(t["boxes"])[where[a + COPY]])
            if poly.sum() >= min_area:
                iou = (poly & bits).sum() / (poly | bits).sum()
                assert iou > 0.8, (a, iou)
                compared += 1
    return compared


@pytest.mark.parametrize("kind", ["chain", "mosaic"])
def test_coco_rle_copies_follow_their_polygons(tmp_path, kind):
    pipe, img, boxes = _twice_pipe(tmp_path, 4)
    with pipe:
        if kind == "chain":
            img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
            img, boxes = fn.rotate(img, boxes, angle=fn.random.uniform(range=(-30, 30)),
                                   expand=False)
            img, boxes = fn.random_resized_crop(img, boxes, size=(256, 320),
                                                random_area=(0.5, 1.0))
        else:
            img, boxes = fn.mosaic(img, boxes, size=160, partners="batch")
        pipe.set_outputs(img, fn.instance_masks(boxes))
    _, out = pipe.run()
    pipe.close()
    assert "bitmasks" not in out.fields  # (united into masks)
    assert _pairs_agree(out.per_sample()) >= 3


def test_torch_targets_masks_unite_polygons_and_bitmasks(tmp_path):
    pytest.importorskip("torch")
    from detaug.adapters.torch import DetaugIterator

    pipe, img, boxes = _twice_pipe(tmp_path, 2)
    with pipe:
        img, boxes = fn.flip(img, boxes, horizontal=1)
        pipe.set_outputs(img, boxes)
    it = DetaugIterator(pipe, output_map=["images", "targets"], boxes_format="list")
    targets = next(iter(it))["targets"]
    assert all("bitmasks" not in t for t in targets)
    assert _pairs_agree([{k: v.numpy() for k, v in t.items()} for t in targets]) >= 3


def test_memory_plan_counts_a_mask_per_box():
    pipe = Pipeline(batch_size=4, num_threads=1, seed=0)
    with pipe:
        enc, boxes = fn.readers.coco(file_root="x", annotations_file="x.json", bitmasks=True)
        img = fn.decoders.image(enc, device="mixed")
        img, boxes = fn.resize(img, boxes, size=(64, 80))
        pipe.set_outputs(img, boxes, fn.instance_masks(boxes))
    ops, outs = list(pipe.graph.ops), pipe._outputs
    got = output_sizes.batch_bytes(ops, outs, [[100, 120]], 4, boxes_per_sample=3.0)
    box = output_sizes.BOX_BYTES
    assert dict(got.parts)[outs[1].name] == 4 * (box + 3 * 64 * 80)
    assert dict(got.parts)[outs[2].name] == 4 * (box + 3 * 64 * 80)  # united, not added
    # held while instance_masks runs: the boxes' moved masks it reads (nothing else is held:
    # the resize's image and boxes are fused into the chain)
    assert got.working == 4 * 3 * 64 * 80
    with pipe:
        padded = fn.pad_boxes(boxes, max_boxes=5)
    got = output_sizes.batch_bytes(list(pipe.graph.ops), [padded], [[100, 120]], 4)
    assert got.outputs == 4 * 5 * (32 + 64 * 80)
