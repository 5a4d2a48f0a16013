"""Shortcuts of the OpenCV warp path (kernels/warp.py: warp_cv2) that give its pixels exactly:
a unit-step map with a reversed axis copied by ``cv2.flip`` (:func:`_copy_steps`), and OpenCV's
faster BORDER_CONSTANT where no sample point's taps come near the source's edge, so that the
border mode reads nothing (:func:`_taps_inside`, checked against the installed OpenCV once a
process by :func:`_constant_border_holds`)."""
from __future__ import annotations

import functools

import numpy as np


def _put(target: np.ndarray, result: np.ndarray) -> None:
    """Finish an OpenCV call made with ``dst=target``: OpenCV writes in place when ``target``
    fits, else it returns a new array, which is copied (and cast) here."""
    if result.ctypes.data != target.ctypes.data:
        np.copyto(target, result.reshape(target.shape), casting="unsafe")


def _taps_inside(m_idx, grid_wh, src_hw, margin=1.0) -> bool:
    """Whether every point of the ``grid_wh`` (W, H) output grid maps through the index map
    ``m_idx`` ((2, 3) affine or (3, 3) projective, OpenCV's inverse map) at least ``margin``
    pixels inside the source's pixel centres (so both bilinear taps of each axis lie in the
    source, whatever OpenCV's 1/32 px rounding). The points lie in the hull of the grid's four
    corners, and a map whose divide is positive at them maps that hull onto the hull of their
    images (as :func:`_reaches_outside`): the corners decide."""
    gw, gh = grid_wh
    px = np.array([0.0, gw - 1.0, 0.0, gw - 1.0])
    py = np.array([0.0, 0.0, gh - 1.0, gh - 1.0])
    x = m_idx[0, 0] * px + m_idx[0, 1] * py + m_idx[0, 2]
    y = m_idx[1, 0] * px + m_idx[1, 1] * py + m_idx[1, 2]
    if m_idx.shape[0] == 3:
        d = m_idx[2, 0] * px + m_idx[2, 1] * py + m_idx[2, 2]
        if not (d > 0).all():
            return False
        x, y = x / d, y / d
    h, w = src_hw
    return bool((x >= margin).all() and (x <= w - 1 - margin).all()
                and (y >= margin).all() and (y <= h - 1 - margin).all())


@functools.lru_cache(maxsize=1)
def _constant_border_holds() -> bool:
    """Whether the installed OpenCV warps pixels whose taps lie inside the source the same with
    BORDER_CONSTANT as with BORDER_REPLICATE (its faster constant path computing the same
    bilinear): checked once a process on fixed random images, affine and projective maps,
    uint8 and float32, 1 and 3 channels. Where it does not, the warp keeps BORDER_REPLICATE."""
    import cv2

    rng = np.random.default_rng(4321)
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    for c, dtype in ((3, np.uint8), (1, np.uint8), (3, np.float32)):
        img = rng.integers(0, 256, (70, 90, c)).astype(dtype)
        img = img[:, :, 0] if c == 1 else img
        for k in range(4):
            a = rng.uniform(-0.4, 0.4)
            m = np.array([[np.cos(a), -np.sin(a), 45.0], [np.sin(a), np.cos(a), 35.0],
                          [rng.uniform(-2e-3, 2e-3) * (k % 2), rng.uniform(-2e-3, 2e-3) * (k % 2),
                           1.0]]) @ np.array([[0.9, 0.05, -20.0], [0.0, 0.8, -20.0], [0, 0, 1]])
            warp = cv2.warpPerspective if k % 2 else cv2.warpAffine
            mm = m if k % 2 else m[:2]
            if not _taps_inside(mm, (40, 40), img.shape[:2]):
                continue
            one = warp(img, mm, (40, 40), flags=flags, borderMode=cv2.BORDER_REPLICATE)
            two = warp(img, mm, (40, 40), flags=flags, borderMode=cv2.BORDER_CONSTANT,
                       borderValue=(7, 7, 7, 7))
            if not np.array_equal(one, two):
                return False
    return True


def _copy_steps(cv2, src, take, dst, plane):
    """``dst[...] = src[take]`` (``take``: :func:`_unit_steps`' slices); a reversed axis (a flip)
    by ``cv2.flip`` of the window read forwards (NumPy copies a reversed axis of HWC pixels a
    byte at a time: 5-10x slower)."""
    flips = [t.step < 0 for t in take]
    if not any(flips) or src.dtype not in (np.uint8, np.float32) or src.shape[2] > 4:
        np.copyto(dst, src[take])
        return
    forward = tuple(slice(t.start + t.step * (n - 1), t.start + 1) if f else t
                    for t, f, n in zip(take, flips, dst.shape[:2]))
    code = -1 if all(flips) else (0 if flips[0] else 1)
    _put(plane(dst), cv2.flip(plane(src[forward]), code, dst=plane(dst)))
