"""OpenCV's bilinear ``cv2.resize`` of a uint8 image, computed on a few lines of its output: the
CPU warp's mosaic tiles (kernels/warp.py) take a window of ONE resize of their image, shared by
its tiles, and only the lines whose taps a tile's clamp rectangle changes are made here.

The rule (OpenCV's ``INTER_LINEAR`` on 8-bit images, ``hal::resize`` with ``resizeGeneric_``;
:func:`emulation_holds` checks it against the installed OpenCV): for an output of ``n_dst`` from
``n_src`` along an axis, ``scale = 1 / (n_dst / n_src)`` (float64) and per output index ``d``,
``f = float32(float64(d + 0.5) * scale - 0.5)``, ``s = floor(f)``, ``f -= s`` (float32); the
weights are ``round_half_even(float32(1 - f) * 2048)`` and ``round_half_even(f * 2048)``. Along
x the taps ``s, s + 1`` are moved inside the image first (``s < 0``: ``s = 0, f = 0``;
``s >= n_src - 1``: ``s = n_src - 1, f = 0``); along y the weights keep ``f`` and only the rows
read are clipped to the image. A row of the horizontal pass is ``h = a0 S[s] + a1 S[s + 1]``
(integers), and the output ``((b0 (h0 >> 4)) >> 16) + ((b1 (h1 >> 4)) >> 16) + 2) >> 2``.
OpenCV takes another path (INTER_AREA) where both axes shrink by exactly 2, and copies where the
sizes agree (the rule gives the copy too); :func:`emulable` says which.

A *clamped* resize is the resize of the image whose pixels outside the rectangle ``(cx0, cx1,
cy0, cy1)`` (inclusive columns and rows) repeat its edge (``cv2.copyMakeBorder(...,
BORDER_REPLICATE)`` of the rectangle out to the image's size): what a fused chain's clamp makes
of a resize followed by a crop. It equals the plain resize wherever both taps of both axes lie
in the rectangle; :func:`clamped_lines` gives the output rows and columns where they do not.
"""
from __future__ import annotations

import functools

import numpy as np

_ONE = np.float32(2048)  # OpenCV's INTER_RESIZE_COEF_SCALE


@functools.lru_cache(maxsize=512)
def axis_table(n_src: int, n_dst: int, taps_inside: bool):
    """(first tap (n_dst,) int64, weight 0, weight 1 (n_dst,) int32) along one axis (module
    docstring); ``taps_inside``: x's rule (taps moved into the image), else y's. Read-only."""
    scale = 1.0 / (n_dst / n_src)
    f = ((np.arange(n_dst, dtype=np.float64) + 0.5) * scale - 0.5).astype(np.float32)
    s = np.floor(f)
    f = f - s
    s = s.astype(np.int64)
    if taps_inside:
        low, high = s < 0, s >= n_src - 1
        f[low | high] = 0
        s[low], s[high] = 0, n_src - 1
    w0 = np.rint((np.float32(1) - f) * _ONE).astype(np.int32)
    w1 = np.rint(f * _ONE).astype(np.int32)
    for a in (s, w0, w1):
        a.flags.writeable = False
    return s, w0, w1


def emulable(src_hw, dst_hw) -> bool:
    """Whether OpenCV resizes ``src_hw`` to ``dst_hw`` by the rule (not both axes halved
    exactly: INTER_AREA then)."""
    scales = [1.0 / (d / s) for s, d in zip(src_hw, dst_hw)]
    halved = all(abs(sc - round(sc)) < np.finfo(np.float64).eps and round(sc) == 2
                 for sc in scales)
    return not halved


def resize_at(img, dst_hw, rows, cols, clamp=None):
    """``cv2.resize(img, (W_dst, H_dst), interpolation=INTER_LINEAR)[rows][:, cols]`` by the
    rule, of the image clamped to ``clamp`` (cx0, cx1, cy0, cy1) when given.

    Args:
        img: uint8 (H, W, C) (or (H, W)).
        dst_hw: (H_dst, W_dst) of the whole resize.
        rows, cols: int arrays of output rows and columns.
    Returns:
        uint8 (len(rows), len(cols), C) (or without C for a 2-D ``img``).
    """
    h, w = img.shape[:2]
    cx0, cx1, cy0, cy1 = clamp if clamp is not None else (0, w - 1, 0, h - 1)
    xs, a0, a1 = (t.take(cols) for t in axis_table(w, int(dst_hw[1]), True))
    ys, b0, b1 = (t.take(rows) for t in axis_table(h, int(dst_hw[0]), False))
    # the taps: in the image, then in the rectangle (inside the image: one clip does both;
    # the second x tap is the first where a1 = 0, at the last column)
    x0 = np.minimum(np.maximum(xs, cx0), cx1)
    x1 = np.minimum(np.maximum(xs + 1, cx0), cx1)
    n = len(ys)
    y = np.minimum(np.maximum(np.concatenate([ys, ys + 1]), cy0), cy1)
    lo = int(y.min()) if n else 0
    # the horizontal pass of the source rows read, once each (a column's line reads one block
    # of rows), >> 4 as the vertical pass reads it; int32 products (below 2^27)
    rows_read = img[lo:int(y.max()) + 1] if n else img[:0]
    tail = (1,) * (img.ndim - 2)
    # np.take, not fancy indexing: several times faster for these gathers along one axis
    if np.array_equal(x0, x1):  # both taps on one column (a line cut by the rectangle)
        hp = np.take(rows_read, x0, axis=1) * (a0 + a1).reshape((1, -1) + tail)
    else:
        hp = np.take(rows_read, x0, axis=1) * a0.reshape((1, -1) + tail)
        hp += np.take(rows_read, x1, axis=1) * a1.reshape((1, -1) + tail)
    hp >>= 4
    hp = np.take(hp, y - lo, axis=0)
    hp *= np.concatenate([b0, b1]).reshape((-1, 1) + tail)
    hp >>= 16
    v = hp[:n]
    v += hp[n:]
    v += 2
    v >>= 2
    return v.astype(np.uint8)


def clamped_lines(src_hw, dst_hw, window, clamp):
    """(rows, cols): the output rows and columns, of the window ``(row slice, column slice)`` of
    a resize of ``src_hw`` to ``dst_hw``, where the clamped resize differs from the plain one
    (a tap of that axis outside the clamp rectangle), as indices into the whole resize."""
    (h, w), (cx0, cx1, cy0, cy1) = src_hw, clamp
    (rs, cs) = window
    return (_cut(axis_table(h, int(dst_hw[0]), False)[0], rs, cy0 if cy0 > 0 else None,
                 cy1 if cy1 < h - 1 else None),
            _cut(axis_table(w, int(dst_hw[1]), True)[0], cs, cx0, cx1 if cx1 < w - 1 else None))


def _cut(first_taps, window, low, high):
    """The indices in ``window`` whose first tap (ascending along the axis) lies below ``low``
    (the first tap leaves the rectangle) or at or above ``high`` (the second one, inside the
    image, does); None: that edge cuts nothing. A prefix and a suffix of the window."""
    a, b = window.start, window.stop
    left = a if low is None else min(b, max(a, int(np.searchsorted(first_taps, low, "left"))))
    right = b if high is None else min(b, max(left, int(np.searchsorted(first_taps, high,
                                                                         "left"))))
    return np.concatenate([np.arange(a, left), np.arange(right, b)])


def fix_clamped(dst, img, dst_hw, window, clamp):
    """``dst`` (the window of the plain resize of ``img``) turned into the window of the clamped
    one: its lines of :func:`clamped_lines` made by the rule. In place; returns ``dst``."""
    rows, cols = clamped_lines(img.shape[:2], dst_hw, window, clamp)
    rs, cs = window
    if len(rows):
        dst[rows - rs.start] = resize_at(img, dst_hw, rows, np.arange(cs.start, cs.stop), clamp)
    if len(cols):
        dst[:, cols - cs.start] = resize_at(img, dst_hw, np.arange(rs.start, rs.stop), cols,
                                            clamp)
    return dst


@functools.lru_cache(maxsize=1)
def emulation_holds() -> bool:
    """Whether the installed OpenCV resizes by the rule: :func:`resize_at` against
    ``cv2.resize`` (plain, and of a ``copyMakeBorder`` copy for the clamp) on fixed random images,
    1 and 3 channels, up and down, once a process. Where it does not, the warp keeps its
    border-copy path."""
    import cv2

    rng = np.random.default_rng(12345)
    for (h, w), (dh, dw), c, clamp in (((23, 37), (31, 52), 3, (4, 30, 3, 19)),
                                       ((41, 29), (17, 20), 3, (0, 27, 5, 40)),
                                       ((13, 16), (40, 9), 1, (2, 15, 0, 10)),
                                       ((30, 31), (30, 40), 3, (1, 28, 2, 27))):
        img = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
        cx0, cx1, cy0, cy1 = clamp
        border = cv2.copyMakeBorder(img[cy0:cy1 + 1, cx0:cx1 + 1], cy0, h - 1 - cy1, cx0,
                                    w - 1 - cx1, cv2.BORDER_REPLICATE).reshape(h, w, c)
        rows, cols = np.arange(dh), np.arange(dw)
        for src, cl in ((img, None), (border, None), (img, clamp)):
            want = cv2.resize(src if cl is None else border, (dw, dh),
                              interpolation=cv2.INTER_LINEAR).reshape(dh, dw, c)
            if not np.array_equal(resize_at(img if cl is not None else src, (dh, dw), rows,
                                            cols, cl), want):
                return False
    return True
