"""The Keras and tf adapters' padded boxes carry the shaped fields (ops/instance_fields
.pad_fields): polygons (B, M, P, 2) and keypoints (B, M, K, 3), row r of sample b its r-th
kept box; tf's spec leaves the polygons' P free (it varies from batch to batch)."""
from types import SimpleNamespace

import numpy as np

from detaug.adapters.keras import batch_to_numpy
from detaug.adapters.tf import _spec
from detaug.core.batch import BoxBatch


def _batch(rng):
    counts = [2, 0, 3]
    n = sum(counts)
    polys = np.full((n, 6, 2), np.nan)
    polys[:, :3] = rng.uniform(0, 20, (n, 3, 2))
    kps = rng.uniform(1, 20, (n, 2, 3)).astype(np.float32)
    valid = np.ones(n, bool)
    valid[2] = False  # sample 2's first box was dropped
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    boxes = rng.uniform(0, 10, (n, 4)).astype(np.float32)
    return BoxBatch(boxes, np.arange(n), offsets, np.full((3, 2), 32), "cpu",
                    {"polygons": polys, "keypoints": kps}, valid), polys, kps


def test_keras_padded_boxes_carry_shaped_fields(rng):
    bb, polys, kps = _batch(rng)
    out = batch_to_numpy([bb], ["boxes"])["boxes"]
    assert list(out["counts"]) == [2, 0, 2]
    assert out["polygons"].shape == (3, 2, 6, 2) and out["keypoints"].shape == (3, 2, 2, 3)
    rows = {0: [0, 1], 2: [3, 4]}  # the kept boxes of each sample, in order
    for b, idx in rows.items():
        assert np.array_equal(np.isnan(out["polygons"][b]), np.isnan(polys[idx]))
        assert np.array_equal(np.nan_to_num(out["polygons"][b]), np.nan_to_num(polys[idx]))
        assert np.array_equal(out["keypoints"][b], kps[idx])
        assert list(out["labels"][b]) == idx
    assert np.isnan(out["polygons"][1]).all() and (out["keypoints"][1] == 0).all()


def test_tf_spec_leaves_polygon_length_free(rng):
    bb, _, _ = _batch(rng)
    probe = batch_to_numpy([bb], ["boxes"], max_boxes=4)
    tf = SimpleNamespace(TensorSpec=lambda shape, dtype: tuple(shape), as_dtype=lambda d: d)
    spec = _spec(tf, probe, fixed_boxes=True)["boxes"]
    assert spec["polygons"] == (None, 4, None, 2)
    assert spec["keypoints"] == (None, 4, 2, 3) and spec["boxes"] == (None, 4, 4)
