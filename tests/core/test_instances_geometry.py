"""Keypoints, polygons, oriented boxes and masks through per-sample matrices
(detaug/core/instances.py): hand cases, float64 per-point references, and OpenCV's convex
intersection and minimum-area rectangle as independent references."""
import cv2
import numpy as np
import pytest

from detaug.core import geometry as G
from detaug.core.instances import (clip_polygons, mirrors, polygon_boxes, transform_keypoints,
                                   transform_obb, transform_polygons, warp_masks)

FI = [0, 2, 1]


def test_keypoints_hand_flip_and_crop():
    kp = np.array([[[2.5, 3.5, 2], [1.5, 1.5, 1], [8.5, 1.5, 2]]], np.float32)
    flip = G.flip(10, 8, 1, 0)
    out = transform_keypoints(kp, [0], flip, [[8, 10]], FI)
    # mirrored: x -> 10 - x, and the left/right points trade slots
    assert np.array_equal(out[0], [[7.5, 3.5, 2], [1.5, 1.5, 2], [8.5, 1.5, 1]])
    crop = G.translate(-5, 0)  # keep x in [5, 10): a 5 x 8 canvas
    chain = np.stack([flip, crop]), np.array([[[8, 10]], [[8, 5]]])
    out = transform_keypoints(kp, [0], *chain, FI)
    assert np.array_equal(out[0], [[2.5, 3.5, 2], [0, 0, 0], [3.5, 1.5, 1]])
    # a vertical flip mirrors too; both flips are a half turn: no swap
    both = G.flip(10, 8, 1, 1)
    out = transform_keypoints(kp, [0], both, [[8, 10]], FI)
    assert np.array_equal(out[0], [[7.5, 4.5, 2], [8.5, 6.5, 1], [1.5, 6.5, 2]])
    assert list(mirrors(np.stack([G.flip(10, 8, 0, 1)]))) == [True]


def test_unlabelled_points_stay_unlabelled(rng):
    kp = np.zeros((3, 4, 3), np.float32)
    out = transform_keypoints(kp, [0, 1, 1], G.translate([3, 4], [1, 2]), [[9, 9], [9, 9]])
    assert not out.any()


def _reference_keypoints(kp, sample, mats, sizes, fi):
    out = np.zeros_like(kp, dtype=np.float64)
    for n in range(len(kp)):
        b = sample[n]
        m_all = np.eye(3)
        for mat in mats[:, b]:
            m_all = mat @ m_all
        flip = np.linalg.det(m_all) < 0
        for k in range(kp.shape[1]):
            x, y, v = (float(t) for t in kp[n, k])
            if v <= 0:
                continue
            ok = True
            for mat, (h, w) in zip(mats[:, b], sizes[:, b]):
                p = mat @ np.array([x, y, 1.0])
                x, y = p[0] / p[2], p[1] / p[2]
                ok &= 0 <= x < w and 0 <= y < h
            if ok:
                out[n, fi[k] if flip else k] = [x, y, v]
    return out


def _random_chain(rng, b, with_perspective=True):
    hw0 = rng.integers(24, 60, (b, 2))
    ops, sizes = [], []
    # rotate about the centre, keeping the canvas
    lin = G.rotation_linear(rng.uniform(-180, 180, b)) * rng.uniform(0.7, 1.3, (b, 1, 1))
    c = hw0[:, ::-1] / 2
    ops.append(G.linear_about(lin, c, c))
    sizes.append(hw0)
    ops.append(G.flip(hw0[:, 1], hw0[:, 0], rng.integers(0, 2, b), rng.integers(0, 2, b)))
    sizes.append(hw0)
    crop = rng.integers(2, 8, (b, 2))
    ops.append(G.translate(-crop[:, 0], -crop[:, 1]))
    sizes.append(hw0 - crop)
    if with_perspective:
        h, w = (hw0 - crop).T
        start = np.stack([[np.zeros(b), np.zeros(b)], [w, np.zeros(b)], [w, h], [np.zeros(b), h]])
        start = np.moveaxis(start, -1, 0).swapaxes(1, 2).astype(np.float64)
        end = start + rng.uniform(-3, 3, start.shape)
        ops.append(G.homography(start, end))
        sizes.append(hw0 - crop)
    return np.stack(ops), np.stack(sizes), hw0


def test_keypoints_match_float64_reference(rng):
    b, n, k = 4, 9, 3
    mats, sizes, hw0 = _random_chain(rng, b)
    sample = rng.integers(0, b, n)
    kp = np.zeros((n, k, 3), np.float32)
    kp[..., 0] = rng.uniform(0, 1, (n, k)) * hw0[sample, 1][:, None]
    kp[..., 1] = rng.uniform(0, 1, (n, k)) * hw0[sample, 0][:, None]
    kp[..., 2] = rng.integers(0, 3, (n, k))
    kp[kp[..., 2] == 0] = 0
    got = transform_keypoints(kp, sample, mats, sizes, FI)
    ref = _reference_keypoints(kp, sample, mats, sizes, FI)
    assert np.allclose(got, ref, atol=1e-4)


def test_clip_polygon_hand_case():
    pts = np.array([[-5, -5], [5, -5], [5, 5], [-5, 5]], np.float64)
    out, off = clip_polygons(pts, [0, 4], [[0, 0, 10, 10]])
    assert list(off) == [0, 4]
    assert sorted(map(tuple, out)) == [(0, 0), (0, 5), (5, 0), (5, 5)]
    out, off = clip_polygons(pts + 20, [0, 4], [[0, 0, 10, 10]])
    assert list(off) == [0, 0]


def _area(p):
    x, y = p[:, 0], p[:, 1]
    return 0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


def test_clip_convex_polygons_equal_opencv(rng):
    polys, rects = [], []
    for _ in range(40):
        hull = cv2.convexHull(rng.uniform(-10, 30, (8, 2)).astype(np.float32))[:, 0]
        polys.append(hull.astype(np.float64))
        rects.append([*rng.uniform(-5, 5, 2), *rng.uniform(8, 25, 2)])
    off = np.concatenate([[0], np.cumsum([len(p) for p in polys])])
    out, new_off = clip_polygons(np.concatenate(polys), off, rects)
    for q, (p, r) in enumerate(zip(polys, rects)):
        box = np.array([[r[0], r[1]], [r[2], r[1]], [r[2], r[3]], [r[0], r[3]]], np.float32)
        ref_area, _ = cv2.intersectConvexConvex(p.astype(np.float32), box)
        got = out[new_off[q]:new_off[q + 1]]
        assert (_area(got) if len(got) >= 3 else 0.0) == pytest.approx(ref_area, abs=1e-3)


def test_polygons_through_chain_match_reference_points(rng):
    b = 3
    mats, sizes, hw0 = _random_chain(rng, b, with_perspective=False)
    # polygons well inside every canvas: the clip changes nothing, the points map exactly
    boff = np.array([0, 1, 3, 3, 4])
    sample = np.array([0, 1, 2, 1])
    polys, owners = [], []
    for n in range(4):
        for _ in range(boff[n + 1] - boff[n]):
            polys.append(rng.uniform(-1, 1, (5, 2)) + hw0[sample[n], ::-1] / 2)
            owners.append(sample[n])
    off = np.concatenate([[0], np.cumsum([len(p) for p in polys])])
    pts, poff, nboff = transform_polygons(np.concatenate(polys), off, boff, sample, mats, sizes)
    assert list(nboff) == list(boff) and list(poff) == list(off)
    ref = []
    for p, o in zip(polys, owners):
        m = np.eye(3)
        for mat in mats[:, o]:
            m = mat @ m
        h = np.c_[p, np.ones(len(p))] @ m.T
        ref.append(h[:, :2] / h[:, 2:])
    assert np.allclose(pts, np.concatenate(ref), atol=1e-4)


def test_polygon_leaving_the_canvas_is_dropped_and_box_is_tight():
    diamond = np.array([[5, 0], [10, 5], [5, 10], [0, 5]], np.float64)
    far = diamond + 100
    pts, poff, boff = transform_polygons(np.concatenate([diamond, far]), [0, 4, 8], [0, 2], [0],
                                         np.eye(3)[None], [[20, 20]])
    assert list(boff) == [0, 1] and len(pts) == 4
    rot = G.linear_about(G.rotation_linear(45), [[5, 5]], [[10, 10]])
    pts, poff, boff = transform_polygons(diamond, [0, 4], [0, 1], [0], rot, [[20, 20]])
    box = polygon_boxes(pts, poff, boff)[0]
    r = 5 / np.sqrt(2)  # the diamond turned by 45 degrees is a square of half-side 5 / sqrt 2
    assert np.allclose(box, [10 - r, 10 - r, 10 + r, 10 + r], atol=1e-5)


def test_obb_exact_under_rotation_and_enclosing_under_shear(rng):
    corners = np.array([[[10, 10], [30, 10], [30, 20], [10, 20]]], np.float64)
    rot = G.linear_about(G.rotation_linear(30), [[20, 15]], [[25, 25]])
    got = transform_obb(corners, [0], rot)
    h = np.c_[corners[0], np.ones(4)] @ rot[0].T
    assert np.allclose(got[0], h[:, :2], atol=1e-5)
    for _ in range(10):
        lin = G.shear_linear(rng.uniform(-30, 30), rng.uniform(-30, 30)) @ \
            G.rotation_linear(rng.uniform(-90, 90))
        m = G.linear_about(lin, [[20, 15]], [[40, 40]])
        got = transform_obb(corners, [0], m)[0].astype(np.float64)
        mapped = (np.c_[corners[0], np.ones(4)] @ m[0].T)[:, :2]
        (_, (w, h), _) = cv2.minAreaRect(mapped.astype(np.float32))
        assert _area(got) == pytest.approx(w * h, rel=1e-3)
        e = np.roll(got, -1, 0) - got  # a rectangle
        assert abs(np.dot(e[0], e[1])) < 1e-3 * np.linalg.norm(e[0]) * np.linalg.norm(e[1])
        for p in mapped:  # encloses every mapped corner
            assert cv2.pointPolygonTest(got.astype(np.float32), tuple(map(float, p)), True) > -1e-3


def test_masks_flip_resize_rot90_exact(rng):
    m = (rng.random((2, 6, 8)) < 0.5).astype(np.uint8)
    assert np.array_equal(warp_masks(m, G.flip(8, 6, 1, 0)[0], [6, 8], (6, 8)), m[:, :, ::-1])
    up = warp_masks(m, G.scale(2, 2)[0], [12, 16], (6, 8))
    assert np.array_equal(up, m.repeat(2, 1).repeat(2, 2))
    quarter = G.linear_about(G.rotation_linear(90), [[4, 3]], [[3, 4]])[0]
    assert np.array_equal(warp_masks(m, quarter, [8, 6], (6, 8)), np.rot90(m, 1, (1, 2)))


def test_masks_match_float64_reference_with_intermediate_canvas(rng):
    m = (rng.random((1, 9, 11)) < 0.5).astype(np.uint8)
    rot = G.linear_about(G.rotation_linear(23.0), [[5.5, 4.5]], [[5.5, 4.5]])[0]
    crop = G.translate(-3, -2)[0]
    back = G.translate(3, 2)[0]  # pad back: the cropped-away band must stay 0
    mats, sizes = np.stack([rot, crop, back]), np.array([[9, 11], [5, 6], [9, 11]])
    got = warp_masks(m, mats, sizes, (9, 11))
    ref = np.zeros((9, 11), np.uint8)
    comp = back @ crop @ rot
    for i in range(9):
        for j in range(11):
            q = np.linalg.solve(comp, [j + 0.5, i + 0.5, 1.0])
            x, y = q[0] / q[2], q[1] / q[2]
            p1 = rot @ [x, y, 1]
            p2 = crop @ p1
            if 0 <= x < 11 and 0 <= y < 9 and 0 <= p1[0] < 11 and 0 <= p1[1] < 9 \
                    and 0 <= p2[0] < 6 and 0 <= p2[1] < 5:
                ref[i, j] = m[0, int(np.floor(y)), int(np.floor(x))]
    assert np.array_equal(got[0], ref)
    assert not got[0, :2].any() and not got[0, :, :3].any()


def test_dense_polygons_round_trip(rng):
    from detaug.core.instances import dense_polygons, ragged_polygons

    for _ in range(50):
        n = int(rng.integers(0, 5))
        boff = np.concatenate([[0], np.cumsum(rng.integers(0, 3, n))]).astype(np.int64)
        off = np.concatenate([[0], np.cumsum(rng.integers(3, 6, boff[-1]))]).astype(np.int64)
        pts = rng.random((off[-1], 2)).astype(np.float32)
        dense = dense_polygons(pts, off, boff)
        assert dense.shape[0] == n
        back = ragged_polygons(dense)
        assert np.array_equal(back[0].astype(np.float32), pts)
        assert np.array_equal(back[1], off) and np.array_equal(back[2], boff)
    # hand case: box 0 two polygons, box 1 none
    d = dense_polygons(np.arange(14).reshape(7, 2), [0, 3, 7], [0, 2, 2])
    assert d.shape == (2, 9, 2) and np.isnan(d[0, 3]).all() and np.isnan(d[1]).all()
    assert np.array_equal(d[0, 4], [6, 7])


def test_clip_concave_polygons_area_equals_fan_reference(rng):
    """A concave polygon's clipped area: the signed sum, over the triangles of its fan from
    its first point, of each triangle's intersection with the rectangle (OpenCV's convex
    intersection), signed by the triangle's turn: the indicator of a polygon is that signed
    sum of its fan's indicators."""
    polys, rects = [], []
    for _ in range(30):
        k = int(rng.integers(5, 12))
        ang = np.sort(rng.uniform(0, 2 * np.pi, k))
        rad = rng.uniform(3, 12, k)  # a star: concave where the radius dips
        polys.append(np.stack([10 + rad * np.cos(ang), 10 + rad * np.sin(ang)], 1))
        rects.append([*rng.uniform(-2, 10, 2), *rng.uniform(10, 24, 2)])
    off = np.concatenate([[0], np.cumsum([len(p) for p in polys])])
    out, new_off = clip_polygons(np.concatenate(polys), off, rects)
    for q, (p, r) in enumerate(zip(polys, rects)):
        box = np.array([[r[0], r[1]], [r[2], r[1]], [r[2], r[3]], [r[0], r[3]]], np.float32)
        ref = 0.0
        for i in range(1, len(p) - 1):
            tri = np.array([p[0], p[i], p[i + 1]])
            (ax, ay), (bx, by) = tri[1] - tri[0], tri[2] - tri[0]
            turn = np.sign(ax * by - ay * bx)
            if turn:
                hull = tri if turn > 0 else tri[::-1]
                area, _ = cv2.intersectConvexConvex(hull.astype(np.float32), box)
                ref += turn * max(area, 0.0)
        got = out[new_off[q]:new_off[q + 1]]
        assert (_area(got) if len(got) >= 3 else 0.0) == pytest.approx(abs(ref), abs=2e-3)


def _width_by_loop(rows):
    """polygon_width's value by a plain loop: the last row (1-based) with a real x in any box,
    plus the NaN row after it; 0 where none."""
    last = 0
    for box in np.asarray(rows, np.float64):
        for r in range(len(box)):
            if not np.isnan(box[r, 0]):
                last = max(last, r + 1)
    return last + 1 if last else 0


def _random_rows(rng, n, p):
    """(n, p, 2) polygon rows: each box real up to a random row, NaN after (some rows inside
    NaN too: a separator between polygons)."""
    rows = rng.random((n, p, 2)) * 100
    for b in range(n):
        rows[b, int(rng.integers(0, p + 1)):] = np.nan
    rows[rng.random((n, p)) < 0.15] = np.nan
    return rows


def test_polygon_width_matches_a_loop_and_names_the_overflow(rng):
    from detaug.core.instances import POLYGON_OVERFLOW, polygon_width

    assert polygon_width(np.zeros((0, 4, 2))) == 0 and polygon_width(np.zeros((3, 0, 2))) == 0
    hand = np.full((2, 6, 2), np.nan)
    hand[0, :2] = 1.0
    hand[1, 3] = 5.0  # box 1's last real row is row 4 (1-based): width 5
    assert polygon_width(hand) == 5
    for _ in range(100):
        rows = _random_rows(rng, int(rng.integers(1, 6)), int(rng.integers(1, 9)))
        assert polygon_width(rows) == _width_by_loop(rows)
        rows[int(rng.integers(0, len(rows))), 0, 0] = POLYGON_OVERFLOW
        with pytest.raises(RuntimeError, match="'polygons'.*polygon_capacity"):
            polygon_width(rows)


@pytest.mark.gpu
def test_polygon_width_gpu_equals_host(rng, cp):
    from detaug.core.instances import POLYGON_OVERFLOW, polygon_width

    for n in [1, 2, 7, 300]:  # one box: its first-row column is contiguous
        rows = _random_rows(rng, n, int(rng.integers(1, 12)))
        assert polygon_width(cp.asarray(rows)) == polygon_width(rows) == _width_by_loop(rows)
        rows[n - 1, 0, 0] = POLYGON_OVERFLOW
        with pytest.raises(RuntimeError, match="polygon_capacity"):
            polygon_width(cp.asarray(rows))
