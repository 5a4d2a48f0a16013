"""Polygons, keypoints and oriented boxes through the multi-sample and box ops on the CPU:
each op family (mosaic, letterbox, the random crops, zoom-out, paste, flip, resize) takes a
box's own rectangle as its polygon to the box the box kernel computes (the box path, tested
against Ultralytics and torchvision elsewhere, is the reference: a rectangle clipped to a
rectangle is the clipped box), an inner polygon stays inside it; mosaic and the warps
(affine, rotate, perspective) against float64 references of their maps; mixup keeps both
samples' polygons where they were; pad_boxes pads the shaped fields row for row."""
import cv2
import numpy as np
import pytest

from detaug import fn
from helpers import run_graph
from helpers.geometry import (dense_polygons_of, mosaic4_placement, mosaic_batch_draws,
                              polygons_of_row)

COLOURS = (40, 80, 160, 220)


def _samples(rng, sizes):
    """Images of one colour each; per sample 3 boxes, each with its rectangle as a polygon, the
    last with a triangle inside too (dense P differs by sample); labels name sample and box."""
    imgs, boxes, labels, fields, polys = [], [], [], [], []
    for k, (h, w) in enumerate(sizes):
        imgs.append(np.full((h, w, 3), COLOURS[k], np.uint8))
        lo = rng.uniform([0, 0], [w - 8, h - 8], (3, 2))
        hi = lo + rng.uniform(4, [w, h], (3, 2)).clip(max=[w, h] - lo)
        ps = [[np.stack([lo[i], [hi[i, 0], lo[i, 1]], hi[i], [lo[i, 0], hi[i, 1]]])]
              for i in range(3)]  # the box's rectangle
        ps[2].append(np.stack([lo[2], hi[2], [lo[2, 0], hi[2, 1]]]))
        boxes.append(np.concatenate([lo, hi], 1))
        labels.append(10 * k + np.arange(3))
        fields.append({"polygons": dense_polygons_of(ps)})
        polys.append(ps)
    return imgs, boxes, labels, fields, polys


OPS = {
    "mosaic": lambda i, b: fn.mosaic(i, b, size=32, partners="batch"),
    "mosaic_alone": lambda i, b: fn.mosaic(i, b, size=32, probability=0.0),
    "mosaic_noresize": lambda i, b: fn.mosaic(i, b, size=32, resize=False, partners="batch"),
    "letterbox": lambda i, b: fn.letterbox(i, b, size=(40, 40)),
    "iou_crop": lambda i, b: fn.random_iou_crop(i, b),
    "resized_crop": lambda i, b: fn.random_resized_crop(i, b, size=(36, 30)),
    "zoom_out": lambda i, b: fn.zoom_out(i, b),
    "paste": lambda i, b: fn.paste(i, b, ratio=1.5, paste_x=0.3, paste_y=0.8),
    "flip_resize": lambda i, b: fn.resize(*fn.flip(i, b, horizontal=1, vertical=1),
                                          size=(31, 45)),
}


@pytest.mark.parametrize("op", sorted(OPS))
def test_a_box_rectangle_polygon_keeps_the_kernels_box(op, rng):
    sizes = [(40, 56), (48, 36), (30, 44), (52, 50)]
    imgs, boxes, labels, fields, polys = _samples(rng, sizes)
    _, out = run_graph(imgs, boxes, OPS[op], labels=labels, fields=fields,
                       seed=int(rng.integers(1 << 30)))
    seen = 0
    for got in out.per_sample():
        for box, row, label in zip(got["boxes"], got["polygons"], got["labels"]):
            have = polygons_of_row(row)
            k, i = divmod(int(label), 10)
            assert len(have) <= len(polys[k][i])
            if not have:  # cut to less than a triangle: only where the box is thin
                assert min(box[2] - box[0], box[3] - box[1]) < 1e-3
                continue
            first = have[0]  # the box's own rectangle (its first polygon)
            assert np.allclose([*first.min(0), *first.max(0)], box, atol=1e-3)
            for p in have[1:]:
                assert (p >= box[:2] - 1e-3).all() and (p <= box[2:] + 1e-3).all()
            seen += 1
    assert seen


def test_mixup_keeps_both_samples_polygons(rng):
    """Mixup places both images top-left, unscaled: every polygon of the sample and of its
    partner is where it was (the partner's beside its boxes, after the sample's own)."""
    sizes = [(40, 40)] * 4
    imgs, boxes, labels, fields, polys = _samples(rng, sizes)
    _, out = run_graph(imgs, boxes, lambda i, b: fn.mixup(i, b, partners="batch"),
                       labels=labels, fields=fields)
    partners = 0
    for s, got in enumerate(out.per_sample()):
        owners = got["labels"] // 10
        assert (owners[:3] == s).all()
        partners += len(owners) > 3
        for row, label in zip(got["polygons"], got["labels"]):
            k, i = divmod(int(label), 10)
            have = polygons_of_row(row)
            assert len(have) == len(polys[k][i])
            for p, q in zip(have, polys[k][i]):
                assert np.array_equal(p, q)
    assert partners


def test_pad_boxes_pads_shaped_fields(rng):
    """pad_boxes after a prune: row r of sample b is its r-th kept box, for boxes, polygons,
    keypoints and oriented boxes alike; the rest NaN (polygons, obb) or 0 (keypoints)."""
    sizes = [(40, 56), (48, 36), (30, 44)]
    imgs, boxes, labels, fields, _ = _samples(rng, sizes)
    for b, f in zip(boxes, fields):
        f["keypoints"] = np.concatenate([rng.uniform(0, 30, (3, 2, 2)), np.full((3, 2, 1), 2)],
                                        -1).astype(np.float32)
        f["obb"] = np.stack([b[:, [0, 1]], b[:, [2, 1]], b[:, [2, 3]], b[:, [0, 3]]],
                            1).astype(np.float32)
    boxes[1][1] = [1, 1, 1.5, 1.5]  # pruned: under min_area

    def graph(i, b):
        b = fn.prune_boxes(b, min_area=1.0)
        return b, fn.pad_boxes(b, max_boxes=4)
    plain, padded = run_graph(imgs, boxes, graph, labels=labels, fields=fields)
    assert list(padded["counts"]) == [3, 2, 3]
    assert padded["polygons"].shape[:2] == (3, 4) and padded["keypoints"].shape == (3, 4, 2, 3)
    for b, got in enumerate(plain.per_sample()):
        n = len(got["boxes"])
        for name in ("boxes", "labels", "polygons", "keypoints", "obb"):
            a, ref = padded[name][b, :n], got[name]
            assert np.array_equal(np.isnan(a), np.isnan(ref)) if a.dtype.kind == "f" else True
            assert np.array_equal(np.nan_to_num(a, nan=-7), np.nan_to_num(ref, nan=-7))
        assert np.isnan(padded["polygons"][b, n:]).all() and np.isnan(padded["obb"][b, n:]).all()
        assert (padded["keypoints"][b, n:] == 0).all() and (padded["labels"][b, n:] == -1).all()


# ---- mosaic against a float64 reference of Ultralytics' placement ----------------------------
def _clip_ref(poly, rect):
    """Sutherland-Hodgman, one point at a time in float64: ``poly`` (n, 2) to [x0, y0, x1, y1]."""
    pts = [tuple(p) for p in poly]
    for axis, bound, keep_ge in ((0, rect[0], True), (0, rect[2], False), (1, rect[1], True),
                                 (1, rect[3], False)):
        inside = (lambda p: p[axis] >= bound) if keep_ge else (lambda p: p[axis] <= bound)
        out = []
        for j, cur in enumerate(pts):
            prev = pts[j - 1]
            if inside(cur) != inside(prev):
                t = (bound - prev[axis]) / (cur[axis] - prev[axis])
                cut = [prev[0] + t * (cur[0] - prev[0]), prev[1] + t * (cur[1] - prev[1])]
                cut[axis] = bound
                out.append(tuple(cut))
            if inside(cur):
                out.append(cur)
        pts = out
    return np.array(pts).reshape(-1, 2)


@pytest.mark.parametrize("resize,p", [(True, 1.0), (False, 0.5)])
def test_mosaic_polygons_against_reference(resize, p, rng):
    """Each member's polygons scaled and placed as Ultralytics places its pixels, clipped to
    its tile, in float64 (groups and centres from the op's keyed draws, as test_mosaic_mixup's
    reference takes them); a polygon wholly cut away leaves its instance's other ones."""
    from detaug import Pipeline

    n, s = 4, 24
    sizes = [(int(rng.integers(12, 40)), int(rng.integers(12, 40))) for _ in range(n)]
    polys = []
    for h, w in sizes:
        polys.append([[rng.uniform([-2, -2], [w + 2, h + 2], (int(rng.integers(3, 7)), 2))
                       for _ in range(int(rng.integers(1, 3)))] for _ in range(3)])

    def src(info):
        i = info.idx_in_epoch
        h, w = sizes[i]
        ps = polys[i]
        bx = np.array([[*np.concatenate(q).min(0).clip(0), *np.minimum(np.concatenate(q).max(0),
                                                                      [w, h])] for q in ps])
        return (np.zeros((h, w, 3), np.uint8),
                {"boxes": bx.astype(np.float32), "labels": 10 * i + np.arange(3),
                 "polygons": dense_polygons_of(ps)})
    pipe = Pipeline(batch_size=n, num_threads=1, seed=int(rng.integers(1 << 30)))
    with pipe:
        img, bx = fn.external_source(source=src, batch=False, num_outputs=2, size=n)
        pipe.set_outputs(*fn.mosaic(img, bx, size=s, resize=resize, partners="batch",
                                    probability=p))
    _, out = pipe.run()
    draws = mosaic_batch_draws(pipe, n, s, p)
    pipe.close()
    compared = mosaics = 0
    for k, (got, members, (xc, yc)) in enumerate(zip(out.per_sample(), *draws)):
        mosaics += len(members) == 4
        want = {}
        for q, r in enumerate(members):
            h0, w0 = sizes[r]
            if resize:
                ratio = s / max(h0, w0)
                w, h = min(int(np.ceil(w0 * ratio)), s), min(int(np.ceil(h0 * ratio)), s)
            else:
                w, h = w0, h0
            x1a, y1a, x2a, y2a, x1b, y1b = mosaic4_placement(q, len(members) == 1, xc, yc, w, h, s)
            for i, ps in enumerate(polys[r]):
                moved = [_clip_ref(pp * [w / w0, h / h0] + [x1a - x1b, y1a - y1b],
                                   (x1a, y1a, x2a, y2a)) for pp in ps]
                want.setdefault(10 * r + i, []).append([m for m in moved if len(m) >= 3])
        for row, label in zip(got["polygons"], got["labels"]):
            have = polygons_of_row(row)
            ref = want[int(label)].pop(0)
            assert len(have) == len(ref)
            for a, b in zip(have, ref):
                np.testing.assert_allclose(a, b, atol=1e-6)
                compared += 1
    assert compared >= 4 and (mosaics or p < 1)


# ---- warps: the map itself, in float64 -------------------------------------------------------
def _warps(rng, w, h):
    """(graph, 3x3 float64 map input -> output) for a given affine, a rotation about the
    centre (canvas kept) and a perspective from startpoints onto endpoints."""
    a = np.array([[rng.uniform(0.7, 1.3), rng.uniform(-0.3, 0.3), rng.uniform(-5, 5)],
                  [rng.uniform(-0.3, 0.3), rng.uniform(0.7, 1.3), rng.uniform(-5, 5)], [0, 0, 1]])
    deg = rng.uniform(-40, 40)
    c, s = np.cos(np.deg2rad(deg)), np.sin(np.deg2rad(deg))
    centre = np.array([[1, 0, w / 2], [0, 1, h / 2], [0, 0, 1]])
    rot = centre @ np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]]) @ np.linalg.inv(centre)
    start = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
    end = start + rng.uniform(-6, 6, (4, 2))
    hom = cv2.getPerspectiveTransform(start.astype(np.float32), end.astype(np.float32))
    return {
        "affine": (lambda i, b: fn.warp_affine(i, b, matrix=a[:2].reshape(-1).tolist(),
                                               inverse_map=False), a),
        "rotate": (lambda i, b: fn.rotate(i, b, angle=deg, expand=False), rot),
        "perspective": (lambda i, b: fn.perspective(i, b, startpoints=start.tolist(),
                                                    endpoints=end.tolist()),
                        hom.astype(np.float64)),
    }


@pytest.mark.parametrize("kind", ["affine", "rotate", "perspective"])
def test_polygons_through_warps_against_reference(kind, rng):
    """Each polygon mapped point by point through the op's own map in float64 (with the
    perspective divide) and clipped to the canvas, as the reference Sutherland-Hodgman does."""
    w, h = 48, 40
    sizes = [(h, w)] * 2
    imgs, boxes, labels, fields, polys = _samples(rng, sizes)
    graph, m = _warps(rng, w, h)[kind]
    _, out = run_graph(imgs, boxes, graph, labels=labels, fields=fields)
    compared = 0
    for got in out.per_sample():
        for row, label in zip(got["polygons"], got["labels"]):
            k, i = divmod(int(label), 10)
            ref = []
            for p in polys[k][i]:
                q = np.c_[p, np.ones(len(p))] @ m.T
                c = _clip_ref(q[:, :2] / q[:, 2:], (0, 0, w, h))
                if len(c) >= 3:
                    ref.append(c)
            have = polygons_of_row(row)
            assert len(have) == len(ref)
            for a, b in zip(have, ref):
                np.testing.assert_allclose(a, b, atol=1e-4)
                compared += 1
    assert compared >= 3
