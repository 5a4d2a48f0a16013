"""The CPU warp's fill placed by row spans (kernels/warp_region.py: each row's columns inside
every mask from the twin's test at a few points around each bound's crossing) against the twin's
test at every point of the grid: affine and projective maps, chains' regions with affine and
divided slabs, antialiased grids, a horizon inside the output and values lying on a bound along
whole rows (the rows tested point by point), on fixed and fresh random inputs."""
import numpy as np
import pytest

from detaug.core import geometry as G
from detaug.core.batch import _identity_geometry
from detaug.kernels import warp as W
from detaug.kernels import warp_region as WR
from helpers import fresh_seed, random_images
from helpers.warp import random_region

FRESH = fresh_seed()


def full_fill(big, inv, nx, ny, spec, b, fills):
    """The reference: the twin's test (``_inside_masks``) on the whole supersampled grid, the
    rect's fill first, then the slabs from the last."""
    gx = WR._grid_positions(big.shape[1] // nx, nx)
    gy = WR._grid_positions(big.shape[0] // ny, ny)
    inside, slabs = WR._inside_masks(inv, gx, gy, spec, b, grid=True)
    for mask, fv in [(inside, fills[0])] + list(zip(slabs, fills[1:]))[::-1]:
        fv = np.asarray(fv, np.float64)
        big[~mask] = np.clip(np.floor(fv + 0.5), 0, 255) if big.dtype == np.uint8 else fv


def both(monkeypatch, images, mats, out, **kw):
    """warp_cv2 with the span fill, and with the full test; the rows the span fill tested point
    by point are counted."""
    exact_rows = []
    real_masks = WR._inside_masks

    def counted(inv, ox, oy, spec, b, grid):
        if grid:
            exact_rows.append(len(oy))
        return real_masks(inv, ox, oy, spec, b, grid)

    monkeypatch.setattr(WR, "_inside_masks", counted)
    fast = W.warp_cv2(images, mats, out, **kw)
    monkeypatch.setattr(WR, "_inside_masks", real_masks)
    monkeypatch.setattr(W, "_fill_outside", full_fill)
    full = W.warp_cv2(images, mats, out, **kw)
    monkeypatch.setattr(W, "_fill_outside", WR._fill_outside)
    for f, g in zip(fast, full):
        np.testing.assert_array_equal(f, g)
    return sum(exact_rows)


def _homography(rng, h, w, strength):
    s = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
    sign = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]])
    e = s + sign * rng.uniform(-strength, strength, (4, 2)) * [w / 2, h / 2]
    return G.homography(s, e)[0]


@pytest.mark.parametrize("seed", [7, FRESH])
@pytest.mark.parametrize("antialias", [False, True])
def test_span_fill_is_the_full_test(seed, antialias, monkeypatch):
    """Random affine and projective maps reaching outside random regions (a rect within or past
    the image, up to three slabs each with its fill): the same pixels as the full test."""
    rng = np.random.default_rng(seed)
    n = 8
    sizes = [(int(rng.integers(20, 60)), int(rng.integers(20, 60))) for _ in range(n)]
    images = random_images(rng, [(h, w, 3) for h, w in sizes])
    out = np.array([(int(rng.integers(15, 60)), int(rng.integers(15, 60))) for _ in range(n)])
    mats = []
    for k, (h, w) in enumerate(sizes):
        a = np.deg2rad(rng.uniform(-40, 40))
        s = rng.uniform(0.4, 1.6)
        m = np.array([[s * np.cos(a), -s * np.sin(a), rng.uniform(-15, 15)],
                      [s * np.sin(a), s * np.cos(a), rng.uniform(-15, 15)], [0, 0, 1.0]])
        mats.append(m if k % 2 else _homography(rng, h, w, 0.4) @ m)
    region = random_region(rng, sizes, out, 3, max_slabs=3)
    both(monkeypatch, images, np.stack(mats), out, fill=np.array([114.0, 7.0, 250.0]),
         antialias=antialias, region=region)


@pytest.mark.parametrize("seed", [11, FRESH])
def test_span_fill_of_a_chain_with_divided_slabs(seed, monkeypatch):
    """A chain rotate -> perspective -> crop: the rotate's canvas is a slab with a divide, three
    fills show."""
    rng = np.random.default_rng(seed)
    h, w = 48, 64
    g = _identity_geometry(np.array([[h, w]]), 3)
    rot = G.linear_about(G.rotation_linear(rng.uniform(15, 40)), [[w / 2, h / 2]], [[w / 2, h / 2]])
    g = g.then(rot, [[h, w]], fill=np.full((1, 3), 11.0))
    g = g.then(_homography(rng, h, w, 0.5)[None], [[h, w]], fill=np.full((1, 3), 22.0))
    g = g.then(G.translate(-3.0, -2.0), [[40, 56]], fill=np.full((1, 3), 33.0))
    rect, rect_fill, clamp, slabs, slab_fill, nslab = g.valid_region()
    assert slabs.shape[-1] == 7 and nslab[0] >= 1
    images = random_images(rng, [(h, w, 3)])
    both(monkeypatch, images, g.matrices, np.array([[40, 56]]), fill=rect_fill,
         antialias=False, region=(rect, clamp, slabs, slab_fill, nslab))


def test_rows_the_spans_cannot_settle_are_tested_point_by_point(monkeypatch):
    """A horizon inside the output (the divide changes sign along rows) and a quarter turn whose
    rect bound lies exactly on a row's value (the value is the same along the row, on the bound):
    those rows are tested at every point, and the pixels are the full test's."""
    rng = np.random.default_rng(3)
    img = random_images(rng, [(40, 50, 3)])
    inv = np.array([[1.0, 0.1, 0.0], [0.0, 1.0, 0.0], [-0.03, 0.002, 1.0]])  # w = 0 at ox ~ 33
    rows = both(monkeypatch, img, np.linalg.inv(inv)[None], np.array([[30, 50]]), fill=9.0,
                antialias=False)
    assert rows > 0
    # a quarter turn: source x is the output row's y; the rect's x bound 5.5 is row 5's centre
    turn = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    rect = np.array([[5.5, 30.0, -3.0, 45.0]])
    clamp = G.clamp_of_rect(rect, np.array([[40, 50]]))
    region = (rect, clamp, np.zeros((1, 0, 4)), np.zeros((1, 0, 3)), np.zeros(1, np.int64))
    rows = both(monkeypatch, img, turn[None], np.array([[40, 40]]), fill=200.0, antialias=False,
                region=region)
    assert rows > 0


def test_row_spans_by_hand():
    """The identity onto an 8 x 6 grid with the rect x in [2, 5), y in [1, 4.5): pixel centres
    2.5, 3.5, 4.5 are inside along each row from y = 1.5 to 3.5; row 4 (y = 4.5, on the bound
    all along: [1, 4.5) leaves it out) is tested point by point, rows 0 and 5 have no column
    inside."""
    spec = W._prepare([np.zeros((6, 8, 3), np.uint8)], np.eye(3)[None], np.array([[6, 8]]), 0.0,
                      False, 8, None, None, np.uint8, "HWC",
                      (np.array([[2.0, 5.0, 1.0, 4.5]]), np.array([[0, 7, 0, 5]]),
                       np.zeros((1, 0, 4)), np.zeros((1, 0, 3)), np.zeros(1, np.int64)))
    gx, gy = WR._grid_positions(8, 1), WR._grid_positions(6, 1)
    (lo, hi, exact), = WR._row_spans(np.eye(3), gx, gy, spec, 0)
    assert exact[0].tolist() == [4] and not exact[1].any()
    inside = [[lo[i] <= j < hi[i] for j in range(8)] for i in range(6) if i != 4]
    want = [[1 <= i <= 3 and 2 <= j <= 4 for j in range(8)] for i in range(6) if i != 4]
    assert inside == want
