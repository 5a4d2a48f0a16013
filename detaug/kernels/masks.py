"""Instance masks rasterised from polygons, as COCO makes them (pycocotools' ``frPyObjects``,
``merge`` and ``decode``): the rule is in :mod:`detaug.core.polygon_fill`.

``polygon_masks_numpy`` is the NumPy twin (vectorised over every polygon of the batch), the
reference the kernel is tested against; ``polygon_masks_coco`` gives the same masks through
pycocotools itself (the CPU path: a C library made for the job, tested equal to the twin);
``polygon_masks_cupy`` makes one launch of ``masks.cu`` for every box of the batch, reads the
polygons where they are on the device (the dense field, overflow rows included), never copies
device data to the host and never synchronises.

Arguments of all three: ``dense`` (N, P, 2) float64 polygons (core/instances.py
``dense_polygons``), ``canvas`` (N, 2) int ``(H, W)`` of each box's canvas, ``out_hw`` the
planes' ``(H, W)`` (default the largest canvas). Returns (N, H, W) uint8 0/1, 0 outside a
box's canvas and for a box without a polygon.
"""
from __future__ import annotations

import numpy as np

from ..core.backend import upload
from ..core.instances import POLYGON_OVERFLOW
from ..core.polygon_fill import plane_size
from ..core.polygon_fill import polygon_masks_coco, polygon_masks_numpy  # noqa: F401 (the twins)
from .launch import get_kernel, launch

_SRC = "masks.cu"
_OPTIONS = ("-std=c++17", "--fmad=false")
_BLOCK = 128
_MAX_GRID = 65535 * 64


def polygon_masks_cupy(dense, canvas, out_hw=None, *, stream=None):
    """cupy twin of :func:`polygon_masks_numpy`: one thread per (box, pixel column), one launch
    (module docstring). ``canvas`` is host metadata (one staged copy). A row carrying the GPU
    clipping's overflow marker gives zeros here; the output refuses it by name
    (core/instances.py ``polygon_width``)."""
    import cupy as cp

    hw = np.ascontiguousarray(np.asarray(canvas, np.int64).reshape(-1, 2))
    big_h, big_w = plane_size(hw, out_hw)
    s = stream if stream is not None else cp.cuda.get_current_stream()
    with s:
        rows = dense if isinstance(dense, cp.ndarray) else upload(np.asarray(dense, np.float64))
        rows = cp.ascontiguousarray(rows.astype(cp.float64, copy=False))
        n = int(rows.shape[0]) if rows.ndim == 3 else -1
        if rows.ndim != 3 or rows.shape[2] != 2 or n != len(hw):
            raise ValueError(f"polygons must be (N, P, 2) with one canvas a box; got "
                             f"{tuple(rows.shape)} and {len(hw)} canvases")
        if n and ((hw[:, 0] > big_h).any() or (hw[:, 1] > big_w).any()):
            raise ValueError(f"out_hw {(big_h, big_w)} is smaller than a box's canvas")
        out = cp.zeros((n, big_h, big_w), cp.uint8)
        total = n * big_w
        if total == 0 or big_h == 0 or rows.shape[1] == 0:
            return out
        grid = (max(1, min((total + _BLOCK - 1) // _BLOCK, _MAX_GRID)), 1, 1)
        args = (rows, np.int64(n), np.int32(rows.shape[1]), upload(hw, s), np.int32(big_h),
                np.int32(big_w), np.float64(POLYGON_OVERFLOW), out)
        launch(get_kernel(_SRC, "polygon_masks", _OPTIONS), grid, (_BLOCK, 1, 1), args,
               stream=s, name="polygon_masks")
    return out


def masks_to_labels_numpy(masks, offsets, value):
    """DALI's pixelwise masks: (B, H, W) int32, each pixel the largest ``value`` (N,) int32 (0
    for a dropped box) of its sample's boxes (rows ``offsets[b]:offsets[b + 1]`` of ``masks``
    (N, H, W)) whose mask covers it, 0 where none does (DALI paints the labels in ascending
    order, so the highest wins)."""
    masks = np.asarray(masks)
    off = np.asarray(offsets, np.int64)
    out = np.zeros((len(off) - 1, *masks.shape[1:]), np.int32)
    painted = masks.astype(np.int32) * np.asarray(value, np.int32).reshape(-1, 1, 1)
    sample = np.repeat(np.arange(len(off) - 1), np.diff(off))
    np.maximum.at(out, sample, painted)
    return out


def masks_to_labels_cupy(masks, offsets, value, *, stream=None):
    """cupy twin of :func:`masks_to_labels_numpy`: one thread per (sample, pixel), one launch;
    ``offsets`` host metadata, ``value`` a device array or host array (uploaded with it)."""
    import cupy as cp

    off = np.ascontiguousarray(np.asarray(offsets, np.int64))
    s = stream if stream is not None else cp.cuda.get_current_stream()
    with s:
        masks = cp.ascontiguousarray(cp.asarray(masks).astype(cp.uint8, copy=False))
        b, (h, w) = len(off) - 1, masks.shape[1:]
        out = cp.empty((b, h, w), cp.int32)
        if out.size == 0:
            return out
        val = (cp.ascontiguousarray(value.astype(cp.int32, copy=False))
               if isinstance(value, cp.ndarray) else upload(np.asarray(value, np.int32), s))
        args = (masks, upload(off, s), val, np.int64(b), np.int32(h), np.int32(w), out)
        total = b * h * w
        grid = (max(1, min((total + _BLOCK - 1) // _BLOCK, _MAX_GRID)), 1, 1)
        launch(get_kernel(_SRC, "masks_to_labels", _OPTIONS), grid, (_BLOCK, 1, 1), args,
               stream=s, name="masks_to_labels")
    return out
