"""Pieces of the OpenCV warp path (kernels/warp.py: warp_cv2): a unit-step map with a reversed
axis (a flip) copied by ``cv2.flip``, its pixels exactly (:func:`_copy_steps`); the finish of an
OpenCV call made into a target (:func:`_put`, the colour kernels' too: kernels/color.py)."""
from __future__ import annotations

import numpy as np


def _put(target: np.ndarray, result: np.ndarray) -> None:
    """Finish an OpenCV call made with ``dst=target``: OpenCV writes in place when ``target``
    fits, else it returns a new array, which is copied (and cast) here."""
    if result.ctypes.data != target.ctypes.data:
        np.copyto(target, result.reshape(target.shape), casting="unsafe")


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
