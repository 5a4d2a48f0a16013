"""compose_numpy's copy path: a weighted group of one full-weight tile covering its canvas (a
sample mixup leaves alone) is the tile itself, as the weighted sum gives it."""
import numpy as np

from detaug.kernels.compose import ONE, compose_numpy


def test_weighted_single_full_tile_is_the_tile_and_mixed_groups_unchanged(rng):
    h, w = int(rng.integers(3, 30)), int(rng.integers(3, 30))
    a, b, c = (rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(3))
    r = int(rng.integers(1, ONE))
    # sample 0: a alone (weight ONE); sample 1: b and c blended r : ONE - r
    out = compose_numpy([a, b, c], np.zeros((3, 2), np.int64), np.array([0, 1, 3]),
                        np.array([[h, w], [h, w]]), 114, weights=np.array([ONE, r, ONE - r]),
                        mode="weighted")
    np.testing.assert_array_equal(out[0], a)
    # by hand: floor((r b + (ONE - r) c + ONE / 2) / ONE)
    want = (r * b.astype(np.int64) + (ONE - r) * c.astype(np.int64) + ONE // 2) >> 16
    np.testing.assert_array_equal(out[1], want)
    # a single tile smaller than its canvas, or not at the origin: the fill around it
    small = compose_numpy([a], np.array([[1, 2]]), np.array([0, 1]), np.array([[h + 3, w + 2]]),
                          7, weights=np.array([ONE]), mode="weighted")[0]
    assert (small[:2] == 7).all() and (small[:, :1] == 7).all()
    np.testing.assert_array_equal(small[2:2 + h, 1:1 + w], a)
