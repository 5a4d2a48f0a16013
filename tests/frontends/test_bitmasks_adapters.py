"""The Keras and tf adapters' padded boxes carry bitmap masks (the field ``bitmasks``) row for
row, 0 past the real boxes; tf's spec leaves the masks' planes free (each batch's largest
canvas)."""
from types import SimpleNamespace

import numpy as np

from detaug.adapters.keras import batch_to_numpy
from detaug.adapters.tf import _spec
from detaug.core.batch import BoxBatch


def _batch(rng):
    counts = [2, 0, 3]
    n = sum(counts)
    masks = (rng.random((n, 12, 16)) < 0.5).astype(np.uint8)
    valid = np.ones(n, bool)
    valid[2] = False  # sample 2's first box was dropped
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    boxes = rng.uniform(0, 10, (n, 4)).astype(np.float32)
    return BoxBatch(boxes, np.arange(n), offsets, np.array([[12, 16], [8, 8], [10, 16]]), "cpu",
                    {"bitmasks": masks}, valid), masks


def test_keras_padded_boxes_carry_bitmasks(rng):
    bb, masks = _batch(rng)
    out = batch_to_numpy([bb], ["boxes"])["boxes"]
    assert list(out["counts"]) == [2, 0, 2]
    assert out["bitmasks"].shape == (3, 2, 12, 16) and out["bitmasks"].dtype == np.uint8
    for b, idx in {0: [0, 1], 2: [3, 4]}.items():
        np.testing.assert_array_equal(out["bitmasks"][b], masks[idx])
    assert not out["bitmasks"][1].any()


def test_tf_spec_leaves_mask_planes_free(rng):
    bb, _ = _batch(rng)
    probe = batch_to_numpy([bb], ["boxes"], max_boxes=4)
    tf = SimpleNamespace(TensorSpec=lambda shape, dtype: tuple(shape), as_dtype=lambda d: d)
    spec = _spec(tf, probe, fixed_boxes=True)["boxes"]
    assert spec["bitmasks"] == (None, 4, None, None) and spec["boxes"] == (None, 4, 4)
