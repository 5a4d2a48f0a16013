"""The mosaic canvas filled only around its tiles (kernels/compose.py ``canvas_numpy(covered=)``):
the filled rectangles and the tiles cover every pixel of the canvas exactly once, and the
filled part holds ``fill``; quadrant tiles around a random centre as the mosaic makes them,
tiles reaching past the canvas, and none."""
import numpy as np
import pytest

from detaug.kernels import compose as kc
from helpers import fresh_seed


def _quadrant_tiles(rng, h, w):
    yc, xc = int(rng.integers(0, h + 1)), int(rng.integers(0, w + 1))
    rects = []
    for x0, x1, y0, y1 in ((0, xc, 0, yc), (xc, w, 0, yc), (0, xc, yc, h), (xc, w, yc, h)):
        if rng.random() < 0.8 and x1 > x0 and y1 > y0:  # a tile within its quadrant
            a, b = sorted(rng.integers(x0, x1 + 1, 2))
            c, d = sorted(rng.integers(y0, y1 + 1, 2))
            rects.append((int(a), int(c), int(b - a), int(d - c)))
    if rng.random() < 0.3:  # one reaching past the canvas (clipped)
        rects = [(w - 2, h - 3, 10, 10)] if w > 2 and h > 3 else rects
    return rects


@pytest.mark.parametrize("seed", [0, fresh_seed()])
def test_filled_and_covered_tile_the_canvas_once(seed):
    rng = np.random.default_rng(seed)
    for _ in range(50):
        h, w = int(rng.integers(1, 40)), int(rng.integers(1, 40))
        rects = _quadrant_tiles(rng, h, w)
        count = np.zeros((h, w), np.int64)
        for y0, y1, x0, x1 in kc._uncovered(h, w, rects):
            assert 0 <= y0 < y1 <= h and 0 <= x0 < x1 <= w
            count[y0:y1, x0:x1] += 1
        for x, y, rw, rh in rects:
            count[max(0, y):y + rh, max(0, x):x + rw] += 1
        assert (count == 1).all(), (h, w, rects)


def test_canvas_numpy_fills_around_the_covered_rectangles():
    rng = np.random.default_rng(1)
    canvas = np.array([[20, 30], [20, 30]])
    rects = [_quadrant_tiles(rng, 20, 30), []]
    buf = kc.canvas_numpy(canvas, np.array([[114, 7, 200], [1, 2, 3]]), rects)
    mask = np.ones((20, 30), bool)
    for x, y, rw, rh in rects[0]:
        mask[max(0, y):y + rh, max(0, x):x + rw] = False
    assert (buf[0][mask] == [114, 7, 200]).all() and (buf[1] == [1, 2, 3]).all()
