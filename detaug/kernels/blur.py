"""Gaussian blur of uint8 HWC images, per-sample kernels: the NumPy twin and the cupy launcher
of ``pixel.cu``'s ``gaussian_blur``.

The blur is separable: a horizontal pass with ``wx`` (``2 rx + 1`` taps), then a vertical pass
with ``wy`` (``2 ry + 1`` taps), borders by reflection without repeating the edge (torch's
'reflect', OpenCV's BORDER_REFLECT_101), folded again where the kernel is wider than the image.
Both passes are in float32 with every product and sum rounded on its own, in the same order in
the twin and in the kernel (compiled with ``--fmad=false``), and the result is rounded half up
and clamped to [0, 255]: the twin and the GPU give the same bytes.

Kernel weights (:func:`gaussian_weights`) are torchvision's: ``exp(-x**2 / (2 sigma**2))`` at
``x = -r .. r`` normalised to sum 1, computed in float64 and rounded to float32 once.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.backend import upload_many
from .color import _as_list as _items  # the batch check every uint8 HWC kernel shares
from .launch import get_kernel, launch

_SRC = "pixel.cu"
_OPTIONS = ("-std=c++17", "--fmad=false")
TILE = 32            # BLUR_TW = BLUR_TH in pixel.cu
MAX_RADIUS_Y = 160   # (32 + 2 * 160) * 32 floats = 45 KB of shared memory: under the 48 KB default


def window_from_sigma(sigma):
    """DALI's rule: ``2 * ceil(3 * sigma) + 1`` (sigma > 0)."""
    return 2 * np.ceil(3 * np.asarray(sigma, np.float64)).astype(np.int64) + 1


def sigma_from_window(window):
    """DALI's (and OpenCV's, and torchvision's functional) rule: radius = (window - 1) / 2,
    ``sigma = 0.3 * (radius - 1) + 0.8``."""
    return 0.3 * ((np.asarray(window, np.float64) - 1) * 0.5 - 1) + 0.8


def gaussian_weights(window: int, sigma: float) -> np.ndarray:
    """(window,) float32 weights: exp(-0.5 (x / sigma)^2), x = -(window-1)/2 .. (window-1)/2,
    divided by their sum (in float64)."""
    half = (window - 1) * 0.5
    x = np.linspace(-half, half, window)
    pdf = np.exp(-0.5 * (x / float(sigma)) ** 2)
    return (pdf / pdf.sum()).astype(np.float32)


def reflect101(i, n):
    """Index ``i`` (int array) reflected into [0, n) without repeating the edge, folded as often
    as needed (pixel.cu's reflect101)."""
    i = np.asarray(i, np.int64)
    if n == 1:
        return np.zeros_like(i)
    period = 2 * (n - 1)
    i = np.mod(i, period)
    return np.where(i < n, i, period - i)


def _check_weights(items, wx, wy):
    if len(wx) != len(items) or len(wy) != len(items):
        raise ValueError(f"one (wx, wy) pair per sample: {len(items)} images, {len(wx)} wx, "
                         f"{len(wy)} wy")
    for i, (a, b) in enumerate(zip(wx, wy)):
        if len(a) % 2 == 0 or len(b) % 2 == 0:
            raise ValueError(f"sample {i}: kernel sizes must be odd, got {len(a)} x {len(b)}")


def blur_one_numpy(img, wx, wy):
    """One (H, W, C) uint8 image blurred with float32 ``wx`` then ``wy`` (the kernel's math)."""
    h, w, _ = img.shape
    wx, wy = np.asarray(wx, np.float32), np.asarray(wy, np.float32)
    rx, ry = len(wx) // 2, len(wy) // 2
    x = img.astype(np.float32)
    cols = np.arange(w)
    hor = np.zeros(x.shape, np.float32)
    for j in range(2 * rx + 1):
        hor = hor + wx[j] * x[:, reflect101(cols + j - rx, w)]
    rows = np.arange(h)
    out = np.zeros(x.shape, np.float32)
    for i in range(2 * ry + 1):
        out = out + wy[i] * hor[reflect101(rows + i - ry, h)]
    return np.floor(np.clip(out, np.float32(0), np.float32(255)) + np.float32(0.5)).astype(np.uint8)


def gaussian_blur_numpy(images, wx, wy):
    """The NumPy twin: each image blurred with its own separable kernel.

    Args / Shape: images (B, H, W, C) uint8 or a list of (H, W, C) uint8; wx, wy: B float
    arrays of odd lengths (horizontal and vertical taps). Returns: same layout, uint8, new arrays.
    """
    items, dense = _items(images)
    _check_weights(items, wx, wy)
    outs = [blur_one_numpy(im, a, b) for im, a, b in zip(items, wx, wy)]
    if dense:
        return np.stack(outs) if outs else np.empty_like(images)
    return outs


def gaussian_blur_cv2(images, wx, wy):
    """The CPU backend's blur: OpenCV's ``sepFilter2D`` (float32 output, BORDER_REFLECT_101)
    with the same float32 weights, rounded half up and clamped; a list of arrays back. Its sums
    may round differently from the twin's in the last float32 bit (tests/kernels/test_pixel_kernels.py
    bounds the difference by one level)."""
    import cv2

    items, _ = _items(images)
    _check_weights(items, wx, wy)
    outs = []
    for im, a, b in zip(items, wx, wy):
        if im.size == 0:
            outs.append(im.copy())
            continue
        f = cv2.sepFilter2D(np.ascontiguousarray(im), cv2.CV_32F, np.asarray(a, np.float32),
                            np.asarray(b, np.float32), borderType=cv2.BORDER_REFLECT_101)
        outs.append(np.floor(np.clip(f.reshape(im.shape), np.float32(0), np.float32(255))
                             + np.float32(0.5)).astype(np.uint8))
    return outs


def launch_plan(shapes, wx, wy):
    """Host metadata of one launch: dims (B, 5) int32, weight offsets (B,) int64, the packed
    float32 weights, grid, block and shared-memory bytes."""
    b = len(shapes)
    dims = np.zeros((b, 5), np.int32)
    offs = np.zeros(b, np.int64)
    packed, at = [], 0
    for i, ((h, w, c), a, v) in enumerate(zip(shapes, wx, wy)):
        dims[i] = (h, w, c, len(a) // 2, len(v) // 2)
        offs[i] = at
        packed += [np.asarray(a, np.float32), np.asarray(v, np.float32)]
        at += len(a) + len(v)
    if b > 65535:
        raise ValueError(f"gaussian_blur: {b} samples in one launch; the GPU kernel takes 65535")
    ry = int(dims[:, 4].max(initial=0))
    if ry > MAX_RADIUS_Y:
        raise ValueError(f"gaussian_blur: a vertical kernel of {2 * ry + 1} taps is wider than the "
                         f"GPU kernel takes ({2 * MAX_RADIUS_Y + 1}); use a smaller sigma or "
                         "window_size")
    weights = np.concatenate(packed) if packed else np.zeros(1, np.float32)
    grid = (max(1, math.ceil(int(dims[:, 1].max(initial=1)) / TILE)),
            max(1, math.ceil(int(dims[:, 0].max(initial=1)) / TILE)), b)
    return dict(dims=dims, offsets=offs, weights=weights, grid=grid, block=(32, 8, 1),
                shared=(TILE + 2 * ry) * TILE * 4)


def gaussian_blur_cupy(images, wx, wy, *, stream=None):
    """cupy twin of :func:`gaussian_blur_numpy`: one launch for the batch; a dense batch gives a
    dense array, a ragged one a list of views into one buffer."""
    import cupy as cp

    s = stream if stream is not None else cp.cuda.get_current_stream()
    with s:
        dense = not isinstance(images, (list, tuple))
        items, _ = _items(cp.ascontiguousarray(images) if dense else images)
        _check_weights(items, wx, wy)
        items = [cp.ascontiguousarray(im) for im in items]
        if dense:
            out = cp.empty(images.shape, cp.uint8)
            outs = [out[i] for i in range(out.shape[0])]
        else:
            flat = cp.empty((sum(int(im.size) for im in items),), cp.uint8)
            ends = np.cumsum([0] + [int(im.size) for im in items])
            outs = [flat[ends[i]:ends[i + 1]].reshape(im.shape) for i, im in enumerate(items)]
            out = outs
        live = [i for i, im in enumerate(items) if im.size]
        if not live:
            return out
        plan = launch_plan([items[i].shape for i in live], [wx[i] for i in live],
                           [wy[i] for i in live])
        ptrs = np.array([[items[i].data.ptr for i in live], [outs[i].data.ptr for i in live]],
                        np.uint64)
        d_ptrs, d_dims, d_offs, d_w = upload_many([ptrs, plan["dims"], plan["offsets"],
                                                   plan["weights"]], s)
        launch(get_kernel(_SRC, "gaussian_blur", _OPTIONS), plan["grid"], plan["block"],
               (d_ptrs[0], d_ptrs[1], d_dims, d_offs, d_w), shared_mem=plan["shared"], stream=s,
               name="gaussian_blur")
    return out
