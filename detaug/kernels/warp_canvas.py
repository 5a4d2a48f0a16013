"""Tiles warped straight into their canvases: a mosaic's warp and paste as ONE warp launch.

Tile ``t`` of a batch of T is sample t of :func:`detaug.kernels.warp.warp_numpy` (uint8 HWC, no
normalize: ``matrices[t]`` maps its image to its ``tiles[t]`` (H, W) output) written with its
top-left corner at ``origins[t] = (x0, y0)`` of canvas ``b``, the canvas of the group
``groups[b] <= t < groups[b + 1]``; every canvas is first filled with ``fill[b]``. The tiles of
a canvas are disjoint and lie inside it (checked), so the result is exactly
``compose_numpy(warp_numpy(...), origins, groups, canvas, fill, mode="first")``
(kernels/compose.py): :func:`warp_canvas_numpy`, the twin. On the GPU
(:func:`warp_canvas_cupy`) warp.cu's ``_pitched`` kernels write each tile at its place, rows a
canvas row apart (``meta_i[15]``): the tiles' pixels are computed by the very code of the plain
warp, so the canvases equal the plain warp then compose's to the bit, without tile buffers and
without the compose's read and write of every tile.
"""
from __future__ import annotations

import numpy as np

from ..core.backend import upload_many
from .compose import check_fill, check_layout, compose_numpy
from .warp import _OPTIONS, WarpLaunch, _device_inputs, warp_numpy
from .warp_spec import _prepare


def _places(tile_sizes, origins, groups, canvas, fill, channels):
    """Validated (tile sizes (T, 2), origins (T, 2), groups (B + 1,), canvas (B, 2), fill (B, C)
    uint8 values, owner (T,)): every tile inside its canvas, the tiles of a canvas disjoint."""
    tiles = np.asarray(tile_sizes, np.int64).reshape(-1, 2)
    origins, groups, canvas = check_layout(len(tiles), origins, groups, canvas)
    b = len(canvas)
    owner = np.repeat(np.arange(b), np.diff(groups))
    x0, y0 = origins[:, 0], origins[:, 1]
    if np.any(origins < 0) or np.any(x0 + tiles[:, 1] > canvas[owner, 1]) or np.any(
            y0 + tiles[:, 0] > canvas[owner, 0]):
        raise ValueError("every tile must lie inside its canvas")
    # disjoint: every pair of a group's tiles is apart along x or along y (groups are small)
    for k in range(1, int(np.diff(groups).max(initial=0))):
        a = np.flatnonzero(np.diff(groups)[owner] > k)  # tiles with a k-th follower
        a = a[(a + k) < groups[owner[a] + 1]]
        c = a + k
        apart = ((x0[a] + tiles[a, 1] <= x0[c]) | (x0[c] + tiles[c, 1] <= x0[a])
                 | (y0[a] + tiles[a, 0] <= y0[c]) | (y0[c] + tiles[c, 0] <= y0[a])
                 | (tiles[a].min(1) == 0) | (tiles[c].min(1) == 0))
        if not apart.all():
            raise ValueError("the tiles of a canvas must be disjoint")
    fill = check_fill(fill, b, channels)
    return tiles, origins, groups, canvas, fill.astype(np.uint8), owner


def warp_canvas_numpy(images, matrices, tile_sizes, origins, groups, canvas, fill, *,
                      tile_fill=0.0, antialias=True, max_taps=8, region=None):
    """The twin: the tiles by :func:`warp_numpy` (``tile_fill`` and ``region`` its ``fill`` and
    ``region``), then pasted (compose's "first" rule). Returns ``(B, H, W, C)`` uint8 where all
    canvases agree, else a list of B arrays."""
    warped = warp_numpy(images, matrices, tile_sizes, fill=tile_fill, antialias=antialias,
                        max_taps=max_taps, region=region)
    c = warped.shape[-1] if hasattr(warped, "shape") else (warped[0].shape[-1] if warped else 3)
    _places(tile_sizes, origins, groups, canvas, fill, c)
    return compose_numpy(list(warped), origins, groups, canvas, fill, mode="first")


class CanvasWarp:
    """One :func:`warp_canvas_cupy` launch planned on the host (no GPU call): the warp's
    metadata with each tile's output offset at its place on its canvas and the canvas row
    pitch (``meta_i[:, 7]``, ``meta_i[:, 15]``), the canvases' offsets and fill. ``B``,
    ``shapes``, ``out_dtype``, ``dense`` describe the canvases (core/deferred.py's launch)."""

    __slots__ = ("warp", "B", "shapes", "out_dtype", "dense", "offsets", "fill")

    def __init__(self, spec, origins, groups, canvas, fill):
        if spec.out_dtype != np.uint8 or spec.layout != "HWC" or spec.mean is not None:
            raise ValueError("tiles are warped into their canvases as uint8 HWC, unnormalised")
        c = spec.C
        _, origins, groups, canvas, fill, owner = _places(spec.out_sizes, origins, groups,
                                                          canvas, fill, c)
        self.warp = WarpLaunch(spec)
        offsets = np.zeros(len(canvas) + 1, np.int64)
        np.cumsum(canvas[:, 0] * canvas[:, 1] * c, out=offsets[1:])
        meta_i = self.warp.plan["meta_i"]
        meta_i[:, 7] = offsets[:-1][owner] + (origins[:, 1] * canvas[owner, 1] + origins[:, 0]) * c
        meta_i[:, 15] = canvas[owner, 1] * c
        self.warp.plan["name"] = (f"warp_u8_hwc_c{c}_pitched"
                                  + ("_p" if spec.proj.any() else ""))
        self.B, self.out_dtype, self.offsets, self.fill = len(canvas), np.dtype(np.uint8), offsets, fill
        self.shapes = [(int(h), int(w), c) for h, w in canvas]
        self.dense = bool(len(canvas)) and bool(np.all(canvas == canvas[0]))

    def run(self, inputs, stream=None):
        """:func:`launch_canvas_warp` on ``inputs[0]`` (a DeviceImages: the tiles' images)."""
        return launch_canvas_warp(self, inputs[0].ptrs, inputs[0].pitches, stream)


def plan_canvas_warp(images, matrices, tile_sizes, origins, groups, canvas, fill, *,
                     tile_fill=0.0, antialias=True, max_taps=8, region=None) -> CanvasWarp:
    """The host half of :func:`warp_canvas_cupy` (``images``: a DeviceImages whose shapes and
    pitches are read, its pointers may be unknown yet)."""
    spec = _prepare(images, matrices, tile_sizes, tile_fill, antialias, max_taps, None, None,
                    np.uint8, "HWC", region)
    return CanvasWarp(spec, origins, groups, canvas, fill)


def launch_canvas_warp(cw: CanvasWarp, ptrs, pitches=None, stream=None):
    """The device half: the canvases filled (one fill), then the tiles warped into them (one
    launch), on ``stream``; nothing is copied back. The images at ``ptrs`` (T,), rows
    ``pitches`` (T,) bytes apart (default: as planned). Returns one dense ``(B, H, W, C)``
    array, or a list of views into one flat buffer."""
    import cupy as cp

    from .launch import get_kernel, launch

    if cw.B == 0:
        return []
    stream = stream if stream is not None else cp.cuda.get_current_stream()
    plan = cw.warp.plan
    meta_i = plan["meta_i"]
    if pitches is not None and cw.warp.B and not np.array_equal(pitches, meta_i[:, 2]):
        meta_i = meta_i.copy()
        meta_i[:, 2] = pitches
        if int(meta_i[:, 2].max()) >= 2**31:
            raise ValueError("an input image row is too large for 32-bit indexing")
    with stream:
        flat = cp.empty(int(cw.offsets[-1]), cp.uint8)
        c = cw.fill.shape[1]
        if (cw.fill == cw.fill[0, 0]).all():
            flat.fill(int(cw.fill[0, 0]))  # one value: a memset
        else:
            for b in range(cw.B):
                flat[cw.offsets[b]:cw.offsets[b + 1]].reshape(-1, c)[...] = cp.asarray(cw.fill[b])
        if cw.warp.B:
            args = tuple(upload_many([np.asarray(ptrs, np.uint64).reshape(-1), meta_i,
                                      plan["inv"], plan["meta_f"]], stream))
            launch(get_kernel("warp.cu", plan["name"], _OPTIONS), plan["grid"], plan["block"],
                   args + (flat,), stream=stream, name=plan["name"])
            del args  # stream-ordered pool: freed after the launch has read them
        if cw.dense:
            return flat.reshape((cw.B,) + cw.shapes[0])
        return [flat[cw.offsets[b]:cw.offsets[b + 1]].reshape(cw.shapes[b]) for b in range(cw.B)]


def warp_canvas_cupy(images, matrices, tile_sizes, origins, groups, canvas, fill, *,
                     tile_fill=0.0, antialias=True, max_taps=8, region=None, stream=None):
    """CUDA implementation of :func:`warp_canvas_numpy` (``images``: cupy arrays or a
    DeviceImages; the rest host values): one fill and ONE warp launch for the batch."""
    import cupy as cp

    spec = _prepare(images, matrices, tile_sizes, tile_fill, antialias, max_taps, None, None,
                    np.uint8, "HWC", region)
    cw = CanvasWarp(spec, origins, groups, canvas, fill)
    stream = stream if stream is not None else cp.cuda.get_current_stream()
    with stream:
        keep, ptrs = _device_inputs(cp, images)
        out = launch_canvas_warp(cw, ptrs, None, stream)
        del keep  # stream-ordered pool
        return out
