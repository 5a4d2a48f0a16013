"""clip_boxes / prune_boxes(clip=True) with no geometric op pending: the reader's keypoints and
polygons are cut to the canvas by the rule a chain's last canvas applies (core/instances.py),
checked against a float64 reference written point by point; oriented boxes stay as they are
(a canvas never cuts them); prune_boxes(clip=False) leaves every shape as it came."""
import numpy as np
import pytest

from detaug import fn
from helpers import run_graph
from helpers.geometry import dense_polygons_of, polygons_of_row


def _clip_ref(poly, w, h):
    """Sutherland-Hodgman in float64, one point at a time, against [0, w] x [0, h]."""
    pts = [tuple(p) for p in poly]
    for axis, bound, ge in ((0, 0.0, True), (0, w, False), (1, 0.0, True), (1, h, False)):
        out = []
        for j, cur in enumerate(pts):
            prev = pts[j - 1]
            cin = cur[axis] >= bound if ge else cur[axis] <= bound
            pin = prev[axis] >= bound if ge else prev[axis] <= bound
            if cin != pin:
                t = (bound - prev[axis]) / (cur[axis] - prev[axis])
                cut = [prev[0] + t * (cur[0] - prev[0]), prev[1] + t * (cur[1] - prev[1])]
                cut[axis] = bound
                out.append(tuple(cut))
            if cin:
                out.append(cur)
        pts = out
    return np.array(pts, np.float64).reshape(-1, 2)


def _samples(rng, sizes):
    """Per sample 4 boxes overhanging the image, each with 1-2 polygons and 3 keypoints spread
    beyond it (one polygon wholly outside on the first box) and an oriented box."""
    imgs, boxes, fields, polys = [], [], [], []
    for h, w in sizes:
        n = 4
        lo = rng.uniform([-6, -6], [w - 6, h - 6], (n, 2))
        bx = np.concatenate([lo, lo + rng.uniform(4, 14, (n, 2))], 1)
        ps = [[rng.uniform(lo[i] - 5, lo[i] + 20, (int(rng.integers(3, 7)), 2))
               for _ in range(int(rng.integers(1, 3)))] for i in range(n)]
        ps[0].append(np.array([[w + 1.0, 1], [w + 5.0, 2], [w + 3.0, 6]]))  # wholly outside
        kp = np.concatenate([rng.uniform([-4, -4], [w + 4, h + 4], (n, 3, 2)),
                             rng.integers(0, 3, (n, 3, 1))], -1).astype(np.float32)
        kp[kp[..., 2] == 0] = 0
        kp[1, 0] = [w, 2, 2]  # x = W lies on no pixel: unlabelled
        kp[1, 1] = [0, h - 0.25, 1]  # on the last row: kept
        obb = rng.uniform(-8, max(w, h) + 8, (n, 4, 2)).astype(np.float32)
        imgs.append(np.zeros((h, w, 3), np.uint8))
        boxes.append(bx)
        fields.append({"polygons": dense_polygons_of(ps), "keypoints": kp, "obb": obb})
        polys.append(ps)
    return imgs, boxes, fields, polys


def _kp_ref(kp, w, h):
    out = kp.astype(np.float64).copy()
    off = ~((out[..., 0] >= 0) & (out[..., 0] < w) & (out[..., 1] >= 0) & (out[..., 1] < h))
    out[off | (out[..., 2] <= 0)] = 0
    return out


@pytest.mark.parametrize("op", ["clip_boxes", "prune_boxes"])
def test_clipping_boxes_cuts_the_readers_shapes_to_the_canvas(op, rng):
    sizes = [(30, 40), (36, 28)]
    imgs, boxes, fields, polys = _samples(rng, sizes)
    graph = ((lambda i, b: fn.clip_boxes(b)) if op == "clip_boxes"
             else (lambda i, b: fn.prune_boxes(b, clip=True, min_area=1.0)))
    (out,) = run_graph(imgs, boxes, graph, fields=fields)
    compared = 0
    for (h, w), got, f, ps in zip(sizes, out.per_sample(), fields, polys):
        assert (got["boxes"][:, :2] >= 0).all() and (got["boxes"][:, 2] <= w).all()
        for k, label in enumerate(got["labels"]):  # the kept boxes, with their own shapes
            np.testing.assert_allclose(got["keypoints"][k], _kp_ref(f["keypoints"][label], w, h),
                                       atol=1e-6)
            assert np.array_equal(got["obb"][k], f["obb"][label])
            ref = [c for c in (_clip_ref(p, w, h) for p in ps[label]) if len(c) >= 3]
            have = polygons_of_row(got["polygons"][k])
            assert len(have) == len(ref)
            for a, b in zip(have, ref):
                np.testing.assert_allclose(a, b, atol=1e-9)
                assert (a >= 0).all() and (a[:, 0] <= w).all() and (a[:, 1] <= h).all()
                compared += 1
        assert (got["keypoints"][..., 0] < w).all()
    assert compared >= 4


def test_prune_without_clip_leaves_the_shapes(rng):
    sizes = [(30, 40)]
    imgs, boxes, fields, _ = _samples(rng, sizes)
    (out,) = run_graph(imgs, boxes, lambda i, b: fn.prune_boxes(b, clip=False), fields=fields)
    got = out.per_sample()[0]
    for name in ("keypoints", "obb"):
        assert np.array_equal(got[name], fields[0][name][got["labels"]])
    a, b = got["polygons"], fields[0]["polygons"][got["labels"]]
    assert np.array_equal(np.isnan(a), np.isnan(b)) and np.array_equal(np.nan_to_num(a),
                                                                       np.nan_to_num(b))
