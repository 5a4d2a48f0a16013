"""DALI's detection pipeline tutorial (tests/dali/ports/detection_pipeline.py) runs with
its imports changed, and its numbers are DALI's documented ones, checked here with float64
references: segmentation.select_masks (DALI's examples), the vertices moved into the crop
((v - anchor) / shape), made absolute (* (W, H)) and clamped, the boxes cropped and clipped,
the crop's pixels the decoded image's."""
import os
import runpy
import sys

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.dali.segmentation import select_masks_one

PORTS = os.path.join(os.path.dirname(__file__), "ports")


@pytest.fixture(scope="module")
def port():
    sys.path.insert(0, PORTS)
    try:
        g = runpy.run_path(os.path.join(PORTS, "detection_pipeline.py"))
    finally:
        sys.path.remove(PORTS)
    yield g
    g["pipe"].close()
    g["pipe2"].close()


def select_ref(ids, polygons, vertices, reindex=False):
    """All polygons of each selected mask, grouped in ``ids``' order, vertices contiguous."""
    rows, verts = [], []
    for k, m in enumerate(ids):
        for mid, s, e in polygons:
            if mid == m:
                rows.append([k if reindex else m, len(verts), len(verts) + e - s])
                verts.extend(vertices[s:e])
    return np.array(rows, np.int32).reshape(-1, 3), np.array(verts).reshape(-1, vertices.shape[1])


def test_select_masks_dalis_examples():
    # DALI's docs: polygons [[0, 0, 3], [1, 3, 7], [2, 7, 10]], 10 vertices
    polys = np.array([[0, 0, 3], [1, 3, 7], [2, 7, 10]], np.int32)
    verts = np.arange(20, dtype=np.float32).reshape(10, 2)
    p, v = select_masks_one([1], polys, verts, False)
    np.testing.assert_array_equal(p, [[1, 0, 4]])
    np.testing.assert_array_equal(v, verts[3:7])
    p, v = select_masks_one([2, 0], polys, verts, True)  # DALI's operator: mask_ids' order
    np.testing.assert_array_equal(p, [[0, 0, 3], [1, 3, 6]])
    np.testing.assert_array_equal(v, np.r_[verts[7:10], verts[0:3]])
    with pytest.raises(ValueError, match="mask_id 10 is not present"):
        select_masks_one([10], polys, verts, False)
    with pytest.raises(ValueError, match=r"vertex range \[0, 20\) of mask 0 is out of bounds"):
        select_masks_one([0], np.array([[0, 0, 20]]), verts[:3], False)
    with pytest.raises(ValueError, match="duplicated"):
        select_masks_one([0, 0], polys, verts, False)


def test_select_masks_op_on_random_masks(rng):
    batch = []
    for _ in range(3):
        n = int(rng.integers(1, 6))
        parts = rng.integers(1, 3, n)  # a mask in one or two polygons, as COCO's
        rows, start = [], 0
        for m, k in enumerate(parts):
            for _ in range(k):
                nv = int(rng.integers(3, 7))
                rows.append([m, start, start + nv])
                start += nv
        ids = rng.permutation(n)[:int(rng.integers(1, n + 1))].astype(np.int32)
        batch.append((ids, np.array(rows, np.int32), rng.random((start, 2)).astype(np.float32)))
    pipe = Pipeline(batch_size=3)
    with pipe:
        ids, polys, verts = fn.external_source(source=lambda: [list(c) for c in zip(*batch)],
                                               num_outputs=3)
        pipe.set_outputs(*fn.segmentation.select_masks(ids, polys, verts, reindex_masks=True))
    pipe.build()
    out_p, out_v = pipe.run()
    pipe.close()
    for s, (i, p, v) in enumerate(batch):
        rp, rv = select_ref(i.tolist(), p.tolist(), v, reindex=True)
        np.testing.assert_array_equal(out_p.at(s), rp)
        np.testing.assert_array_equal(out_v.at(s), rv)


def test_detection_pipeline_tutorial(port):
    images, bboxes, labels, polygons, vertices = port["loaded"]
    for s in range(port["batch_size"]):
        b, p, v = bboxes.at(s), polygons.at(s), vertices.at(s)
        assert (b[:, 2:] > b[:, :2]).all()  # ltrb, in pixels
        assert set(p[:, 0]) == set(range(len(b)))  # every box has its mask
        assert p.dtype == np.int32 and v.dtype == np.float32 and p[-1, 2] == len(v)
    checked_crop = 0
    for run, outs in enumerate(port["outputs"]):
        (cropped, in_b, in_p, in_v, sel_p, sel_v, out_v, out_v_abs, out_v_cl, out_b, out_b_abs,
         shape, anchor, extent, idx) = outs
        for s in range(port["batch_size"]):
            i = idx.at(s).tolist()
            rp, rv = select_ref(i, in_p.at(s).tolist(), in_v.at(s))
            np.testing.assert_array_equal(sel_p.at(s), rp)
            np.testing.assert_array_equal(sel_v.at(s), rv)
            a, e = anchor.at(s).astype(np.float64), extent.at(s).astype(np.float64)
            ref_v = (rv.astype(np.float64) - a) / e
            np.testing.assert_allclose(out_v.at(s), ref_v, rtol=1e-4, atol=1e-6)
            h, w, c = shape.at(s)
            wh = np.array([w, h], np.float64)
            np.testing.assert_allclose(out_v_abs.at(s), ref_v * wh, rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(out_v_cl.at(s), np.clip(ref_v, 0, 1), rtol=1e-4, atol=1e-6)
            ref_b = np.clip((in_b.at(s)[i].astype(np.float64) - np.r_[a, a]) / np.r_[e, e], 0, 1)
            np.testing.assert_allclose(out_b.at(s), ref_b, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(out_b_abs.at(s), ref_b * np.r_[wh, wh], rtol=1e-4, atol=1e-4)
            # the crop: the decoded image's pixels in the window (DALI: ends rounded)
            im = cropped.at(s)
            x0, y0 = np.round(a * wh).astype(int)
            x1, y1 = np.round((a + e) * wh).astype(int)
            assert im.shape == (y1 - y0, x1 - x0, 3) and c == 3
            if run == 0:  # the same records as the loading pipeline's first batch (no shuffle)
                full = images.at(s)
                assert full.shape == (h, w, 3)
                np.testing.assert_array_equal(im, full[y0:y1, x0:x1])
            checked_crop += (im.shape[:2] != (h, w))
    assert checked_crop  # some window is a real crop
