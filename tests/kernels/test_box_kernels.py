"""NumPy twins of detaug/kernels/boxes.py against hand-computed values and independent
float64 references (brute-force corner transforms, sampled ellipses, plain loops)."""
import math

import numpy as np
import pytest

from detaug.kernels.boxes import (
    box_transform_numpy,
    iou_matrix_numpy,
    kept_counts_numpy,
    pad_boxes_numpy,
    sample_index_from_offsets,
    windows_iou_numpy,
)

I3 = np.eye(3)


def rotation_about(cx, cy, degrees):
    t = math.radians(degrees)
    c, s = math.cos(t), math.sin(t)
    to_origin = np.array([[1, 0, -cx], [0, 1, -cy], [0, 0, 1]], float)
    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]], float)
    back = np.array([[1, 0, cx], [0, 1, cy], [0, 0, 1]], float)
    return back @ rot @ to_origin


def random_affine(rng, b):
    m = np.tile(np.eye(3), (b, 1, 1))
    m[:, :2, :2] = rng.normal(0, 1.0, (b, 2, 2))
    m[:, :2, 2] = rng.uniform(-50, 150, (b, 2))
    return m


def random_boxes(rng, n, lo=-20.0, hi=220.0):
    p = rng.uniform(lo, hi, (n, 2))
    wh = rng.uniform(1, 80, (n, 2))
    return np.concatenate([p, p + wh], axis=1).astype(np.float32)


def reference_corners(boxes, si, mats):
    """Brute force: the 4 corners in homogeneous coordinates through the full 3x3 matrix."""
    b = boxes.astype(np.float64)
    corners = np.stack([b[:, [0, 1]], b[:, [2, 1]], b[:, [2, 3]], b[:, [0, 3]]], axis=1)
    hom = np.concatenate([corners, np.ones(corners.shape[:2] + (1,))], axis=2)
    out = np.einsum("nij,nkj->nki", mats[si], hom)
    xy = out[..., :2] / out[..., 2:]
    return np.concatenate([xy.min(1), xy.max(1)], axis=1)


def reference_ellipse(boxes, si, mats, k=20000):
    """Enclosing box of many points sampled on each inscribed ellipse, mapped forward."""
    b = boxes.astype(np.float64)
    th = np.linspace(0, 2 * np.pi, k, endpoint=False)
    cx, cy = (b[:, 0] + b[:, 2]) / 2, (b[:, 1] + b[:, 3]) / 2
    a, bb = (b[:, 2] - b[:, 0]) / 2, (b[:, 3] - b[:, 1]) / 2
    px = cx[:, None] + a[:, None] * np.cos(th)
    py = cy[:, None] + bb[:, None] * np.sin(th)
    m = mats[si]
    x = m[:, 0, 0, None] * px + m[:, 0, 1, None] * py + m[:, 0, 2, None]
    y = m[:, 1, 0, None] * px + m[:, 1, 1, None] * py + m[:, 1, 2, None]
    return np.stack([x.min(1), y.min(1), x.max(1), y.max(1)], axis=1)


# ----------------------------------------------------------------------------- transform


def test_sample_index_from_offsets():
    np.testing.assert_array_equal(sample_index_from_offsets([0, 2, 2, 5]), [0, 0, 2, 2, 2])
    assert sample_index_from_offsets([0]).shape == (0,)
    assert sample_index_from_offsets(np.array([0, 3])).dtype == np.int32
    with pytest.raises(ValueError):
        sample_index_from_offsets([0, 3, 2])


@pytest.mark.parametrize("mode", ["corners", "ellipse"])
def test_horizontal_flip(mode):
    flip = np.array([[[-1, 0, 100], [0, 1, 0], [0, 0, 1]]], float)
    out, keep = box_transform_numpy(np.array([[10, 20, 30, 40]], np.float32), [0], flip,
                                    [[50, 100]], mode=mode)
    np.testing.assert_array_equal(out, [[70, 20, 90, 40]])
    assert out.dtype == np.float32 and keep.tolist() == [True]


@pytest.mark.parametrize("mode", ["corners", "ellipse"])
def test_rotation_90(mode):
    # Counter-clockwise quarter turn of a 100 (H) x 200 (W) image: (x, y) -> (y, 200 - x);
    # the output canvas is 200 (H) x 100 (W).
    turn = np.array([[[0, 1, 0], [-1, 0, 200], [0, 0, 1]]], float)
    out, keep = box_transform_numpy(np.array([[10, 20, 30, 60]], np.float32), [0], turn,
                                    [[200, 100]], mode=mode)
    np.testing.assert_allclose(out, [[20, 170, 60, 190]], atol=1e-5)
    assert keep.tolist() == [True]


def test_rotation_30_ellipse_keeps_square_corners_grow():
    m = rotation_about(50, 50, 30)[None]
    box = np.array([[40, 40, 60, 60]], np.float32)
    e, _ = box_transform_numpy(box, [0], m, [[100, 100]], mode="ellipse")
    c, _ = box_transform_numpy(box, [0], m, [[100, 100]], mode="corners")
    np.testing.assert_allclose(e, [[40, 40, 60, 60]], atol=1e-4)
    side = 20 * (math.cos(math.radians(30)) + math.sin(math.radians(30)))
    np.testing.assert_allclose(c, [[50 - side / 2, 50 - side / 2, 50 + side / 2, 50 + side / 2]],
                               atol=1e-4)


def test_random_matrices_corners_against_brute_force():
    rng = np.random.default_rng(1)
    offsets = np.array([0, 7, 7, 30, 64])
    si = sample_index_from_offsets(offsets)
    boxes, mats = random_boxes(rng, 64), random_affine(rng, 4)
    canvas = rng.uniform(50, 300, (4, 2))
    ref = reference_corners(boxes, si, mats)
    out, _ = box_transform_numpy(boxes, si, mats, canvas, clip=False)
    np.testing.assert_allclose(out, ref, atol=1e-3, rtol=1e-6)
    clipped, keep = box_transform_numpy(boxes, si, mats, canvas)
    hw = canvas[si]
    ref_c = np.stack([np.clip(ref[:, 0], 0, hw[:, 1]), np.clip(ref[:, 1], 0, hw[:, 0]),
                      np.clip(ref[:, 2], 0, hw[:, 1]), np.clip(ref[:, 3], 0, hw[:, 0])], axis=1)
    np.testing.assert_allclose(clipped, ref_c, atol=1e-3, rtol=1e-6)
    # keep with the defaults: exactly the boxes with a visible part of positive size
    inside = (ref_c[:, 2] > ref_c[:, 0]) & (ref_c[:, 3] > ref_c[:, 1])
    np.testing.assert_array_equal(keep, inside)
    assert 0 < keep.sum() < 64  # the draw covers both outcomes


def test_random_matrices_ellipse_against_sampled_ellipse():
    rng = np.random.default_rng(2)
    si = sample_index_from_offsets([0, 10, 25])
    boxes, mats = random_boxes(rng, 25), random_affine(rng, 2)
    out, _ = box_transform_numpy(boxes, si, mats, [[1, 1], [1, 1]], mode="ellipse", clip=False)
    ref = reference_ellipse(boxes, si, mats)
    extent = np.abs(ref[:, 2:] - ref[:, :2]).max()
    np.testing.assert_allclose(out, ref, atol=1e-4 * extent)


def test_each_sample_uses_its_own_matrix_and_canvas():
    mats = np.stack([I3, np.diag([2.0, 2.0, 1.0])])
    boxes = np.array([[10, 10, 20, 20], [10, 10, 20, 20], [10, 10, 20, 20]], np.float32)
    out, keep = box_transform_numpy(boxes, [0, 1, 1], mats, [[100, 100], [30, 35]])
    np.testing.assert_array_equal(out, [[10, 10, 20, 20], [20, 20, 35, 30], [20, 20, 35, 30]])
    assert keep.all()


def test_clip_visibility_size_decisions():
    boxes = np.array([
        [150, 10, 170, 30],   # wholly outside (right): clipped to zero width
        [-10, 0, 10, 20],     # half outside: visibility 0.5
        [10, 10, 12, 50],     # 2 px wide
        [20, 20, 30, 30],     # area 100
        [40, 40, 60, 60],     # ordinary, but marked invalid
    ], np.float32)
    si, m, cv = np.zeros(5, np.int32), I3[None], [[100, 100]]
    valid = np.array([True, True, True, True, False])
    out, keep = box_transform_numpy(boxes, si, m, cv, valid=valid)
    np.testing.assert_array_equal(out[0], [100, 10, 100, 30])
    np.testing.assert_array_equal(out[1], [0, 0, 10, 20])
    assert keep.tolist() == [False, True, True, True, False]
    _, keep = box_transform_numpy(boxes, si, m, cv, min_visibility=0.4)
    assert keep.tolist() == [False, True, True, True, True]
    _, keep = box_transform_numpy(boxes, si, m, cv, min_visibility=0.6)
    assert keep.tolist() == [False, False, True, True, True]
    _, keep = box_transform_numpy(boxes, si, m, cv, min_size=3)
    assert keep.tolist() == [False, True, False, True, True]
    _, keep = box_transform_numpy(boxes, si, m, cv, min_area=101)
    assert keep.tolist() == [False, True, False, False, True]  # 200, 80, 100, 400
    # clip=False writes the unclipped box; the decisions are the same (on the visible part)
    out, keep_nc = box_transform_numpy(boxes, si, m, cv, clip=False, min_visibility=0.4)
    np.testing.assert_array_equal(out, boxes)
    assert keep_nc.tolist() == [False, True, True, True, True]


def test_transform_empty_and_not_mutated():
    out, keep = box_transform_numpy(np.zeros((0, 4), np.float32), np.zeros(0, np.int32),
                                    np.tile(I3, (2, 1, 1)), np.ones((2, 2)))
    assert out.shape == (0, 4) and keep.shape == (0,) and keep.dtype == bool
    out, keep = box_transform_numpy(np.zeros((0, 4), np.float32), np.zeros(0, np.int32),
                                    np.zeros((0, 3, 3)), np.zeros((0, 2)))
    assert out.shape == (0, 4)
    boxes = np.array([[1, 2, 3, 4]], np.float32)
    mats = np.array([[[2, 0, 1], [0, 2, 1], [0, 0, 1]]], float)
    b0, m0 = boxes.copy(), mats.copy()
    box_transform_numpy(boxes, [0], mats, [[50, 50]], mode="ellipse")
    np.testing.assert_array_equal(boxes, b0)
    np.testing.assert_array_equal(mats, m0)
    with pytest.raises(ValueError):
        box_transform_numpy(boxes, [0], mats, [[50, 50]], mode="bogus")


# ----------------------------------------------------------------------------- padding


def test_pad_crafted():
    boxes = np.arange(20, dtype=np.float32).reshape(5, 4)
    labels = np.array([1, 2, 3, 4, 5], np.int64)
    crowd = np.array([True, True, False, True, False])
    keep = np.array([True, False, True, True, True])
    padded, fields, counts = pad_boxes_numpy(boxes, {"labels": labels, "iscrowd": crowd}, keep,
                                             np.array([0, 3, 3, 5]), 3, fill=-7.0)
    assert padded.shape == (3, 3, 4) and padded.dtype == np.float32
    np.testing.assert_array_equal(padded[0, :2], boxes[[0, 2]])
    np.testing.assert_array_equal(padded[0, 2], [-7] * 4)
    np.testing.assert_array_equal(padded[1], np.full((3, 4), -7))
    np.testing.assert_array_equal(padded[2, :2], boxes[[3, 4]])
    np.testing.assert_array_equal(fields["labels"], [[1, 3, -1], [-1, -1, -1], [4, 5, -1]])
    assert fields["labels"].dtype == np.int64
    np.testing.assert_array_equal(fields["iscrowd"], [[True, False, False], [False] * 3,
                                                      [True, False, False]])
    np.testing.assert_array_equal(counts, [2, 0, 2])
    assert counts.dtype == np.int32
    assert kept_counts_numpy(keep, [0, 3, 3, 5]).tolist() == [2, 0, 2]


def test_pad_random_drops_keep_fields_aligned():
    rng = np.random.default_rng(3)
    sizes = rng.integers(0, 40, 9)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    n = int(offsets[-1])
    boxes = random_boxes(rng, n)
    ids = np.arange(n, dtype=np.int32)
    labels = rng.integers(0, 80, n).astype(np.int64)
    score = rng.random(n).astype(np.float32)
    keep = rng.random(n) < 0.6
    max_boxes = 25
    padded, f, counts = pad_boxes_numpy(boxes, {"id": ids, "label": labels, "score": score},
                                        keep, offsets, max_boxes)
    for b in range(len(sizes)):   # plain loop reference
        kept = [i for i in range(offsets[b], offsets[b + 1]) if keep[i]][:max_boxes]
        assert counts[b] == len(kept)
        np.testing.assert_array_equal(f["id"][b, :len(kept)], kept)
        np.testing.assert_array_equal(f["id"][b, len(kept):], -1)
        np.testing.assert_array_equal(padded[b, :len(kept)], boxes[kept])
        np.testing.assert_array_equal(padded[b, len(kept):], 0)
        np.testing.assert_array_equal(f["label"][b, :len(kept)], labels[kept])
        np.testing.assert_array_equal(f["score"][b, :len(kept)], score[kept])
        np.testing.assert_array_equal(f["score"][b, len(kept):], -1.0)
    kept_per = [keep[offsets[b]:offsets[b + 1]].sum() for b in range(len(sizes))]
    assert kept_counts_numpy(keep, offsets).tolist() == kept_per


def test_pad_truncates_to_first_max_boxes_and_keep_none():
    boxes = np.arange(24, dtype=np.float32).reshape(6, 4)
    padded, f, counts = pad_boxes_numpy(boxes, {"l": np.arange(6)}, None, [0, 6], 4)
    np.testing.assert_array_equal(padded[0], boxes[:4])
    np.testing.assert_array_equal(f["l"], [[0, 1, 2, 3]])
    assert counts.tolist() == [4]
    assert kept_counts_numpy(None, [0, 6]).tolist() == [6]  # more than max_boxes: the caller warns


def test_pad_fill_values_and_empty():
    boxes = np.zeros((1, 4), np.float32)
    _, f, _ = pad_boxes_numpy(boxes, {"a": np.array([5], np.uint8), "b": np.array([5], np.int16)},
                              None, [0, 1], 3, field_fill={"a": 9})
    assert f["a"].tolist() == [[5, 9, 9]] and f["b"].tolist() == [[5, -1, -1]]
    padded, f, counts = pad_boxes_numpy(np.zeros((0, 4), np.float32), {"l": np.zeros(0, int)},
                                        None, [0, 0, 0], 2)
    assert padded.shape == (2, 2, 4) and counts.tolist() == [0, 0] and (f["l"] == -1).all()
    padded, f, counts = pad_boxes_numpy(np.zeros((0, 4), np.float32), {}, None, [0], 5)
    assert padded.shape == (0, 5, 4) and counts.shape == (0,) and f == {}
    assert kept_counts_numpy(None, [0]).shape == (0,)
    padded, _, counts = pad_boxes_numpy(boxes, {}, None, [0, 1], 0)
    assert padded.shape == (1, 0, 4) and counts.tolist() == [0]


def test_pad_not_mutated_and_checks():
    boxes = np.ones((3, 4), np.float32)
    labels = np.array([1, 2, 3])
    keep = np.array([True, False, True])
    copies = boxes.copy(), labels.copy(), keep.copy()
    pad_boxes_numpy(boxes, {"l": labels}, keep, [0, 3], 2)
    for a, c in zip((boxes, labels, keep), copies):
        np.testing.assert_array_equal(a, c)
    with pytest.raises(ValueError):
        pad_boxes_numpy(boxes, {"l": labels[:2]}, keep, [0, 3], 2)
    with pytest.raises(ValueError):
        pad_boxes_numpy(boxes, {}, keep, [0, 2], 2)


# ----------------------------------------------------------------------------- IoU


def loop_iou(a, b):
    a, b = [float(v) for v in a], [float(v) for v in b]
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def test_iou_matrix_hand_values():
    a = np.array([[0, 0, 10, 10], [0, 0, 0, 0]], np.float32)
    b = np.array([[5, 0, 15, 10], [0, 0, 10, 10], [20, 20, 30, 30], [0, 0, 0, 0]], np.float32)
    iou = iou_matrix_numpy(a, b)
    assert iou.shape == (2, 4) and iou.dtype == np.float32
    np.testing.assert_allclose(iou, [[1 / 3, 1, 0, 0], [0, 0, 0, 0]], atol=1e-7)
    assert iou_matrix_numpy(np.zeros((0, 4)), b).shape == (0, 4)
    assert iou_matrix_numpy(a, np.zeros((0, 4))).shape == (2, 0)


def test_iou_matrix_random_against_loop():
    rng = np.random.default_rng(4)
    a, b = random_boxes(rng, 13, 0, 100), random_boxes(rng, 17, 0, 100)
    ref = np.array([[loop_iou(x, y) for y in b] for x in a])
    np.testing.assert_allclose(iou_matrix_numpy(a, b), ref, atol=1e-6)
    assert (ref > 0).any() and (ref == 0).any()


def test_windows_iou_against_loop():
    rng = np.random.default_rng(5)
    sizes = [3, 0, 6, 1]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    boxes = random_boxes(rng, int(offsets[-1]), 0, 100)
    windows = random_boxes(rng, 4 * 5, 0, 100).reshape(4, 5, 4)
    out = windows_iou_numpy(windows, boxes, offsets)
    assert out.shape == (4, 5, 6) and out.dtype == np.float32
    for b in range(4):
        for t in range(5):
            for j in range(6):
                if j < sizes[b]:
                    ref = loop_iou(windows[b, t], boxes[offsets[b] + j])
                    assert abs(out[b, t, j] - ref) < 1e-6
                else:
                    assert out[b, t, j] == -1
    assert windows_iou_numpy(np.zeros((0, 3, 4)), np.zeros((0, 4)), [0]).shape == (0, 3, 0)
    assert windows_iou_numpy(np.zeros((2, 3, 4)), np.zeros((0, 4)), [0, 0, 0]).shape == (2, 3, 0)


# ----------------------------------------------------------------------------- staged chains


def _one_stage_at_a_time(boxes, si, mats, canvases, modes, valid=None):
    """Reference: the chain as separate single-stage calls, each clipping (the ops one by one)."""
    out, keep = boxes, np.ones(len(boxes), bool) if valid is None else valid.copy()
    for m, cv, md in zip(mats, canvases, modes):
        out, k = box_transform_numpy(out, si, m, cv, mode=md)
        keep &= k
    return out, keep


@pytest.mark.parametrize("seed", [50, 51, None])
def test_staged_chain_equals_stages_one_by_one(seed):
    """A K-stage call clips at every canvas: the same boxes and drops as K single-stage calls,
    and against an independent float64 loop over boxes."""
    seed = int(np.random.default_rng().integers(2**31)) if seed is None else seed
    rng = np.random.default_rng(seed)
    b, k = 5, int(rng.integers(2, 6))
    offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 30, b))]).astype(np.int64)
    si = sample_index_from_offsets(offsets)
    boxes = random_boxes(rng, int(offsets[-1]))
    mats = np.stack([random_affine(rng, b) * [[[0.3]]] + np.eye(3) * 0.7 for _ in range(k)])
    mats[:, :, 2] = [0, 0, 1]
    canvases = rng.uniform(40, 260, (k, b, 2))
    modes = [str(rng.choice(["corners", "ellipse"])) for _ in range(k)]
    valid = rng.random(len(boxes)) < 0.9
    got, keep = box_transform_numpy(boxes, si, mats, canvases, mode=modes, valid=valid)
    ref, ref_keep = _one_stage_at_a_time(boxes, si, mats, canvases, modes, valid)
    np.testing.assert_array_equal(keep, ref_keep, err_msg=f"seed {seed}")
    np.testing.assert_allclose(got[keep], ref[keep], atol=1e-3, err_msg=f"seed {seed}")
    # independent loop: corner / ellipse box, then clip, stage by stage, in float64
    for n in range(len(boxes)):
        x0, y0, x1, y1 = boxes[n].astype(np.float64)
        alive = bool(valid[n])
        for s in range(k):
            m = mats[s, si[n]]
            if modes[s] == "corners":
                r = reference_corners(np.array([[x0, y0, x1, y1]]), [0], m[None])[0]
            else:
                cx, cy, a, e = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
                hx, hy = np.hypot(m[0, 0] * a, m[0, 1] * e), np.hypot(m[1, 0] * a, m[1, 1] * e)
                ncx, ncy = m[:2, :2] @ [cx, cy] + m[:2, 2]
                r = [ncx - hx, ncy - hy, ncx + hx, ncy + hy]
            h, w = canvases[s, si[n]]
            x0, y0, x1, y1 = np.clip(r, 0, [w, h, w, h])
            alive &= x1 > x0 and y1 > y0
        assert keep[n] == alive, f"seed {seed}, box {n}"
        if alive:
            np.testing.assert_allclose(got[n], [x0, y0, x1, y1], atol=1e-3, err_msg=f"seed {seed}")


def test_staged_chain_crop_then_pad_drops_the_cut_box():
    """The issue's example: crop keeping [100, 200) x [0, 100), then a window reaching 100 px
    left: the box [10, 10, 90, 90] left the first canvas, so it is gone (a one-stage composed
    transform would keep it); a box half inside is clipped at the first canvas and keeps only
    that half after the pad."""
    boxes = np.array([[10, 10, 90, 90], [50, 10, 150, 90]], np.float32)
    crop = np.array([[1.0, 0, -100], [0, 1, 0], [0, 0, 1]])[None]
    pad = np.array([[1.0, 0, 100], [0, 1, 0], [0, 0, 1]])[None]
    out, keep = box_transform_numpy(boxes, [0, 0], np.stack([crop, pad]),
                                    np.array([[[100, 100]], [[100, 200]]], float))
    assert keep.tolist() == [False, True]
    np.testing.assert_array_equal(out[1], [100, 10, 150, 90])
    composed, keep1 = box_transform_numpy(boxes, [0, 0], pad @ crop, [[100, 200]])
    assert keep1.tolist() == [True, True]  # what fusing the matrices alone would give


def test_staged_visibility_against_the_unclipped_chain():
    """min_visibility compares the final clipped box with the box mapped through the whole
    chain unclipped: a box half cut by the first crop and not by the second is 50% visible."""
    boxes = np.array([[0, 0, 40, 20]], np.float32)
    crop = np.array([[1.0, 0, -20], [0, 1, 0], [0, 0, 1]])[None]  # keeps x in [20, 120)
    up = np.array([[2.0, 0, 0], [0, 2, 0], [0, 0, 1]])[None]
    mats, cv = np.stack([crop, up]), np.array([[[50, 100]], [[100, 200]]], float)
    out, keep = box_transform_numpy(boxes, [0], mats, cv, min_visibility=0.49)
    np.testing.assert_allclose(out[0], [0, 0, 40, 40])
    assert keep.tolist() == [True]
    _, keep = box_transform_numpy(boxes, [0], mats, cv, min_visibility=0.51)
    assert keep.tolist() == [False]
