"""The valid region of a fused chain (detaug.core.geometry.valid_region): which output points hold
source content and which fill the others take, against a brute-force float64 evaluation of the
ops one by one (a point is content iff it lies inside the source and every intermediate canvas;
else it holds the fill of the LAST op that found it outside its input)."""
import numpy as np
import pytest

from detaug.core import geometry as G
from detaug.core.batch import _identity_geometry


def _random_op(rng, hw):
    """(matrix, out (H, W)) of a random op on a canvas of size hw: crop / pad windows, flips,
    resizes, free rotations with and without expand, quarter turns."""
    h, w = hw
    kind = rng.choice(["crop", "flip", "resize", "rotate", "rotate_expand", "quarter"])
    if kind == "crop":
        x0, y0 = rng.integers(-w // 2, w // 2 + 1), rng.integers(-h // 2, h // 2 + 1)
        cw, ch = rng.integers(max(w // 3, 1), 2 * w + 1), rng.integers(max(h // 3, 1), 2 * h + 1)
        return G.translate(-x0, -y0)[0], (int(ch), int(cw))
    if kind == "flip":
        return G.flip(w, h, int(rng.integers(2)), int(rng.integers(2)))[0], (h, w)
    if kind == "resize":
        oh, ow = int(rng.integers(5, 2 * h + 5)), int(rng.integers(5, 2 * w + 5))
        return G.scale(ow / w, oh / h)[0], (oh, ow)
    angle = 90.0 * rng.integers(1, 4) if kind == "quarter" else rng.uniform(-60, 60)
    lin = G.rotation_linear([angle])
    out = np.array([[h, w]], float)
    if kind != "rotate":
        from detaug.ops.geometry import expanded_size
        out = expanded_size(lin, np.array([[h, w]]))
    m = G.linear_about(lin, np.array([[w / 2, h / 2]]), out[:, ::-1] / 2)[0]
    return m, (int(out[0, 0]), int(out[0, 1]))


def _brute_force(src_hw, ops, sizes, fills, pts):
    """(content mask, fill value) at output points ``pts`` (P, 2): walk back op by op."""
    value = np.full(len(pts), -1.0)  # -1: content
    comp = np.eye(3)
    composed = []
    for m in ops:
        comp = m @ comp
        composed.append(comp)
    inv_final = np.linalg.inv(composed[-1])
    canvases = [src_hw] + sizes[:-1]
    prev = [np.eye(3)] + composed[:-1]
    for k, (cm, (h, w)) in enumerate(zip(prev, canvases)):  # canvas k is the input of op k
        p = (cm @ inv_final @ np.c_[pts, np.ones(len(pts))].T).T
        outside = ~((p[:, 0] >= 0) & (p[:, 0] < w) & (p[:, 1] >= 0) & (p[:, 1] < h))
        value = np.where(outside, fills[k], value)  # a later op's fill overrides
    return value


def _rule(region, m_final, pts):
    rect, rect_fill, clamp, slabs, slab_fill, nslab = region
    inv = np.linalg.inv(m_final)
    x = inv[0, 0] * pts[:, 0] + inv[0, 1] * pts[:, 1] + inv[0, 2]
    y = inv[1, 0] * pts[:, 0] + inv[1, 1] * pts[:, 1] + inv[1, 2]
    r = rect[0]
    value = np.where((x >= r[0]) & (x < r[1]) & (y >= r[2]) & (y < r[3]), -1.0, rect_fill[0, 0])
    for k in range(int(nslab[0]) - 1, -1, -1):
        a, b, c, w = slabs[0, k]
        v = (a * pts[:, 0] + b * pts[:, 1]) + c
        value = np.where((v >= 0) & (v < w), value, slab_fill[0, k, 0])
    return value


@pytest.mark.parametrize("seed", list(range(60, 72)) + [None])
def test_region_matches_ops_one_by_one(seed):
    seed = int(np.random.default_rng().integers(2**31)) if seed is None else seed
    rng = np.random.default_rng(seed)
    src = (int(rng.integers(8, 60)), int(rng.integers(8, 60)))
    g = _identity_geometry(np.array([src]), 1)
    ops, sizes, fills = [], [], []
    hw = src
    same_fill = rng.random() < 0.5
    for _ in range(int(rng.integers(1, 6))):
        m, hw = _random_op(rng, hw)
        f = 0.0 if same_fill else float(rng.choice([0.0, 114.0, 7.0]))
        g = g.then(m[None], np.array([hw]), fill=[[f]])
        ops.append(m)
        sizes.append(hw)
        fills.append(f)
    region = g.valid_region()
    oh, ow = hw
    # pixel centres plus random points; ties on a boundary have measure zero
    pts = np.concatenate([np.stack(np.meshgrid(np.arange(ow) + 0.5, np.arange(oh) + 0.5), -1).reshape(-1, 2),
                          rng.uniform(0, 1, (500, 2)) * [ow, oh]])
    want = _brute_force(src, ops, sizes, fills, pts)
    got = _rule(region, g.matrices[0], pts)
    bad = np.nonzero(want != got)[0]
    # a point within 1e-6 px of a boundary may fall either way
    assert len(bad) <= 2, (f"seed {seed}: {len(bad)} of {len(pts)} points differ, e.g. "
                           f"{pts[bad[:3]]} want {want[bad[:3]]} got {got[bad[:3]]}")


def test_axis_chains_need_no_slab_and_redundant_canvases_are_dropped():
    g = _identity_geometry(np.array([[100, 200]]), 3)
    g = g.then(G.flip(200, 100, 1, 0), np.array([[100, 200]]))
    g = g.then(G.translate(-50, -10), np.array([[60, 120]]))  # a crop inside the image
    g = g.then(G.scale(2.0, 2.0), np.array([[120, 240]]))
    rect, rect_fill, clamp, slabs, slab_fill, nslab = g.valid_region()
    assert nslab.tolist() == [0] and slabs.shape == (1, 0, 4)
    # after the flip, canvas x in [50, 170) is source x in (30, 150]
    np.testing.assert_allclose(rect, [[30, 150, 10, 70]])
    np.testing.assert_array_equal(clamp, [[30, 149, 10, 69]])
    # flip and resize alone cut nothing: the rect is the source
    g = _identity_geometry(np.array([[100, 200]]), 3).then(G.flip(200, 100, 1, 1), np.array([[100, 200]]))
    g = g.then(G.scale(0.5, 0.5), np.array([[50, 100]]))
    rect, *_ = g.valid_region()
    np.testing.assert_allclose(rect, [[0, 200, 0, 100]])


def test_different_fills_keep_their_order():
    """zoom_out (fill 0) then letterbox (fill 114): the paste area keeps 0, the bars get 114."""
    g = _identity_geometry(np.array([[10, 10]]), 1)
    g = g.then(G.translate(10, 0), np.array([[10, 30]]), fill=[[0.0]])  # paste 10 px right
    g = g.then(G.translate(0, 10), np.array([[30, 30]]), fill=[[114.0]])  # bars above / below
    region = g.valid_region()
    pts = np.array([[5.5, 15.5], [15.5, 15.5], [15.5, 5.5], [5.5, 5.5], [25.5, 25.5]])
    np.testing.assert_array_equal(_rule(region, g.matrices[0], pts), [0, -1, 114, 114, 114])


@pytest.mark.parametrize("seed", [80, 81, None])
def test_axis_chain_boxes_in_one_stage_equal_stage_by_stage(seed):
    """An axis-aligned chain's boxes go through one stage (composed matrix, clipped to every
    canvas mapped to the output): the same boxes and drops as clipping op by op."""
    from detaug.kernels.boxes import box_transform_numpy

    seed = int(np.random.default_rng().integers(2**31)) if seed is None else seed
    rng = np.random.default_rng(seed)
    b = 8
    src = rng.integers(10, 80, (b, 2))
    g = _identity_geometry(src, 1)
    hw = src.copy()
    for _ in range(int(rng.integers(2, 6))):
        kind = rng.choice(["crop", "flip", "resize"])
        if kind == "crop":
            x0, y0 = rng.integers(-20, 20, b), rng.integers(-20, 20, b)
            out = np.maximum(hw + rng.integers(-30, 30, (b, 2)), 1)
            g = g.then(G.translate(-x0, -y0), out)
        elif kind == "flip":
            out = hw
            g = g.then(G.flip(hw[:, 1], hw[:, 0], rng.integers(0, 2, b), rng.integers(0, 2, b)), out)
        else:
            out = rng.integers(5, 120, (b, 2))
            g = g.then(G.scale(out[:, 1] / hw[:, 1], out[:, 0] / hw[:, 0]), out)
        hw = out
    offsets = np.arange(b + 1) * 6
    si = np.repeat(np.arange(b), 6)
    p = rng.uniform(-10, 80, (6 * b, 2))
    boxes = np.concatenate([p, p + rng.uniform(1, 40, (6 * b, 2))], 1).astype(np.float32)
    mats, rects, modes = g.box_stages()
    assert len(modes) == 1
    got, keep = box_transform_numpy(boxes, si, mats, rects, mode=modes)
    ref, ref_keep = box_transform_numpy(boxes, si, np.stack([s.matrix for s in g.steps]),
                                        np.stack([s.sizes for s in g.steps]))
    np.testing.assert_array_equal(keep, ref_keep, err_msg=f"seed {seed}")
    np.testing.assert_allclose(got[keep], ref[keep], atol=1e-4, err_msg=f"seed {seed}")
    assert offsets[-1] == len(boxes)
