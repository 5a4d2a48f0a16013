"""readers.yolo_tasks.merge_polygons against a transcription of Ultralytics'
``merge_multi_segment`` (ultralytics/data/converter.py; written out here step by step from its
description, with its reversed-middle-segment indexing kept), on hand cases and random ones."""
import numpy as np
import pytest

from readers.yolo_tasks import merge_polygons


def _ultralytics(segments):
    """Ultralytics' merge, as their converter runs it: nearest pairs of consecutive segments,
    a forward pass (each segment, reversed where its two link indices are decreasing, rolled to
    its first link and closed; the ends whole, the middles up to their second link), then a
    backward pass over the middles' remaining points, by their original link indices."""
    segs = [np.array(s, np.float64).reshape(-1, 2) for s in segments]
    idx_list = [[] for _ in segs]
    for i in range(1, len(segs)):
        d = ((segs[i - 1][:, None, :] - segs[i][None, :, :]) ** 2).sum(-1)
        i1, i2 = np.unravel_index(np.argmin(d, axis=None), d.shape)
        idx_list[i - 1].append(i1)
        idx_list[i].append(i2)
    out = []
    for i, idx in enumerate(idx_list):
        if len(idx) == 2 and idx[0] > idx[1]:
            idx = idx[::-1]
            segs[i] = segs[i][::-1, :]
        segs[i] = np.roll(segs[i], -idx[0], axis=0)
        segs[i] = np.concatenate([segs[i], segs[i][:1]])
        if i in (0, len(idx_list) - 1):
            out.append(segs[i])
        else:
            out.append(segs[i][0:idx[1] - idx[0] + 1])
    for i in range(len(idx_list) - 1, -1, -1):
        if i not in (0, len(idx_list) - 1):
            idx = idx_list[i]
            out.append(segs[i][abs(idx[1] - idx[0]):])
    return np.concatenate(out)


def test_two_triangles_by_hand():
    a = [[0, 0], [4, 0], [2, 3]]
    b = [[10, 0], [14, 0], [12, 3]]
    # nearest pair: a's (4, 0) and b's (10, 0); a rolled to start there and closed, then b
    want = [[4, 0], [2, 3], [0, 0], [4, 0], [10, 0], [14, 0], [12, 3], [10, 0]]
    assert np.array_equal(merge_polygons([np.array(a), np.array(b)]), want)
    assert np.array_equal(_ultralytics([a, b]), want)


def test_three_with_a_reversed_middle_by_hand():
    a = [[0, 10], [2, 10], [1, 12]]
    # the middle's link to a is its point 2, to c its point 0: decreasing, so it is reversed
    m = [[10, 0], [12, 0], [2, 9], [0, 0]]
    c = [[11, -5], [13, -5], [12, -7]]
    got = merge_polygons([np.array(p, np.float64) for p in (a, m, c)])
    assert np.array_equal(got, _ultralytics([a, m, c]))
    # forward: a from its point 1 (2, 10), closed; m reversed ([0,0],[2,9],[12,0],[10,0]),
    # rolled by 0, cut to 3 rows; c from (11, -5), closed; back: m's rows 2.. of its closed walk
    want = [[2, 10], [1, 12], [0, 10], [2, 10],
            [0, 0], [2, 9], [12, 0],
            [11, -5], [13, -5], [12, -7], [11, -5],
            [12, 0], [10, 0], [0, 0]]
    assert np.array_equal(got, want)


def test_one_polygon_is_itself():
    p = np.array([[1.5, 2], [3, 4], [5, 1]])
    assert np.array_equal(merge_polygons([p]), p)


@pytest.mark.parametrize("seed", range(6))
def test_random_instances_match_ultralytics(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 6))
    segs = [rng.uniform(0, 100, (int(rng.integers(3, 9)), 2)).round(2) for _ in range(k)]
    got = merge_polygons([s.copy() for s in segs])
    assert np.array_equal(got, _ultralytics([s.copy() for s in segs]))
    # every point of every polygon is on the merged one
    for s in segs:
        assert all((got == p).all(1).any() for p in s)
