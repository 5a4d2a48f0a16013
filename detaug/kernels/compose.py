"""Multi-sample composition: tiles pasted onto canvases (mosaic), images blended (mixup).

An output sample ``b`` is made from the tiles ``groups[b] .. groups[b + 1] - 1`` (uint8 HWC
images of their own sizes, all with C channels), each placed on the ``(H_b, W_b)`` canvas with
its top-left corner at the integer ``origins[t] = (x0, y0)``, and ``fill[b]`` (C integers in
0..255) everywhere a tile does not cover. Two rules:

* ``mode="first"``: pixel ``(y, x)`` takes the value of the first tile of the sample that covers
  it (``x0 <= x < x0 + w``, ``y0 <= y < y0 + h``), else ``fill`` (mosaic: the tiles are disjoint);
* ``mode="weighted"``: with integer ``weights[t]`` (of 65536; a sample's weights sum to 65536),
  ``out = (sum_t weights[t] * v_t + 32768) >> 16`` where ``v_t`` is tile t's value where it covers
  the pixel, else ``fill`` (mixup: ``round(r a + (1 - r) b)``, halves up, with ``r`` quantised to
  1/65536). Integer math: the twin and the kernel agree to the bit.

:func:`compose_numpy` is the reference and the CPU path (a paste is slicing); :func:`compose_cupy`
makes ONE launch of ``compose.cu`` for the whole batch (metadata in one upload, nothing copied
back). Outputs are one dense ``(B, H, W, C)`` array where all canvases agree, else a list.
"""
from __future__ import annotations

import numpy as np

from ..core import recycle
from ..core.backend import upload_many
from ..core.batch import DeviceImages
from .launch import get_kernel, launch

_SRC = "compose.cu"
_BLOCK = 256
_MAX_GRID_X = 4096
_MODES = {"first": 0, "weighted": 1}
ONE = 65536  # the weights' unit
_STRIP_BYTES = 1 << 19  # float32 rows of a blend at a time: kept in the CPU's cache


def _check(tile_shapes, origins, groups, canvas, fill, weights, mode):
    """Validated (origins (T, 2) int64, groups (B + 1,) int64, canvas (B, 2) int64, fill (B, C)
    int32, weights (T,) int64, C)."""
    if mode not in _MODES:
        raise ValueError(f"mode must be 'first' or 'weighted', got {mode!r}")
    shapes = np.asarray(tile_shapes, np.int64).reshape(-1, 3)
    t = len(shapes)
    origins, groups, canvas = check_layout(t, origins, groups, canvas)
    b = len(canvas)
    chans = set(shapes[:, 2].tolist())
    if len(chans) > 1:
        raise ValueError(f"all tiles must have the same channel count, got {sorted(chans)}")
    c = chans.pop() if chans else 3
    fill = check_fill(fill, b, c)
    w = np.full(t, ONE, np.int64) if weights is None else np.asarray(weights, np.int64).reshape(t)
    if mode == "weighted":
        sums = np.add.reduceat(w, groups[:-1]) if t else np.zeros(0, np.int64)
        sums = np.where(np.diff(groups) > 0, sums, ONE)
        if np.any(w < 0) or np.any(sums != ONE):
            raise ValueError(f"weights must be non-negative and sum to {ONE} per sample")
    return origins, groups, canvas, fill.astype(np.int32), w, c


def check_layout(t, origins, groups, canvas):
    """Validated (origins (T, 2), groups (B + 1,), canvas (B, 2)) int64 of ``t`` tiles: the
    groups cut the tiles in order, every canvas has a positive size."""
    origins = np.asarray(origins, np.int64).reshape(-1, 2)
    groups = np.asarray(groups, np.int64).reshape(-1)
    canvas = np.asarray(canvas, np.int64).reshape(-1, 2)
    b = len(canvas)
    if origins.shape != (t, 2):
        raise ValueError(f"origins must be ({t}, 2), got {origins.shape}")
    if groups.shape != (b + 1,) or groups[0] != 0 or groups[-1] != t or np.any(np.diff(groups) < 0):
        raise ValueError(f"groups must be ({b + 1},) non-decreasing from 0 to {t}, got {groups}")
    if np.any(canvas < 1):
        raise ValueError(f"canvas sizes must be positive, got {canvas.tolist()}")
    return origins, groups, canvas


def check_fill(fill, b, c):
    """``fill`` as (B, C) float64 values of uint8 canvases (a scalar, (C,) or (B, C))."""
    fill = np.asarray(fill, np.float64)
    fill = np.broadcast_to(fill.reshape(b, -1) if fill.ndim == 2 else fill, (b, c))
    if np.any(fill != np.round(fill)) or np.any((fill < 0) | (fill > 255)):
        raise ValueError("fill must be integers in 0..255 (uint8 canvases)")
    return fill


def _shapes(tiles):
    if isinstance(tiles, DeviceImages):
        return tiles.shapes
    return np.array([t.shape for t in tiles], np.int64).reshape(-1, 3)


def compose_numpy(tiles, origins, groups, canvas, fill, *, weights=None, mode="first"):
    """Reference twin (and the CPU path).

    Args:
        tiles: list of T uint8 ``(h, w, C)`` arrays (or a dense ``(T, h, w, C)`` array).
        origins: ``(T, 2)`` integer ``(x0, y0)`` of each tile on its sample's canvas.
        groups: ``(B + 1,)`` offsets: sample b's tiles are ``groups[b]:groups[b + 1]``.
        canvas: ``(B, 2)`` ``(H, W)`` of each output.
        fill: scalar, ``(C,)`` or ``(B, C)`` integers in 0..255.
        weights: ``(T,)`` integers of 65536 (``mode="weighted"``).
        mode: "first" or "weighted" (module docstring).

    Returns:
        ``(B, H, W, C)`` uint8 when all canvases agree, else a list of B arrays.
    """
    tiles = list(tiles)
    origins, groups, canvas, fill, w, c = _check(_shapes(tiles), origins, groups, canvas, fill,
                                                 weights, mode)
    dense = len(canvas) and bool(np.all(canvas == canvas[0]))
    # one buffer for a dense batch, written in place (fresh pages are slow to fault in: once)
    buf = (recycle.empty((len(canvas), int(canvas[0, 0]), int(canvas[0, 1]), c), np.uint8)
           if dense else None)
    outs = []
    for b in range(len(canvas)):
        h, wd = (int(v) for v in canvas[b])
        lo, hi = int(groups[b]), int(groups[b + 1])
        if mode == "first":
            out = buf[b] if dense else np.empty((h, wd, c), np.uint8)
            out[...] = _row(fill[b], wd, np.uint8)
            for t in range(hi - 1, lo - 1, -1):  # the first tile wins: pasted last
                _paste(out, tiles[t], origins[t])
        elif (hi - lo == 1 and int(w[lo]) == ONE and tuple(tiles[lo].shape[:2]) == (h, wd)
              and int(origins[lo, 0]) == 0 and int(origins[lo, 1]) == 0):
            # one tile of full weight covering the canvas: (ONE t + ONE / 2) >> 16 = t exactly
            out = buf[b] if dense else np.empty((h, wd, c), np.uint8)
            np.copyto(out, tiles[lo])
        elif hi - lo == 2 and all(tuple(tiles[t].shape) == (h, wd, c) and not origins[t].any()
                                  for t in (lo, lo + 1)):
            # two tiles over the whole canvas (a mixup of equal sizes): w0 a + w1 b + 32768 in
            # float32 is exact (integers below 2^24), and so are the scaling by 2^-16 and floor
            out = buf[b] if dense else np.empty((h, wd, c), np.uint8)
            _blend_two(tiles[lo], tiles[lo + 1], int(w[lo]), int(w[lo + 1]), out)
        else:
            # sum_t w_t v_t = sum_t w_t fill + sum_t w_t (tile_t - fill) where tile t lies:
            # the fill's share once, then each tile's difference on its own rectangle (int32:
            # |w (tile - fill)| < 2^24, and the sum is the non-negative weighted sum)
            acc = np.empty((h, wd, c), np.int32)
            acc[...] = _row(int(w[lo:hi].sum()) * fill[b].astype(np.int64) + ONE // 2, wd, np.int32)
            for t in range(lo, hi):
                _accumulate(acc, tiles[t], origins[t], int(w[t]), fill[b])
            acc >>= 16
            out = buf[b] if dense else np.empty((h, wd, c), np.uint8)
            np.copyto(out, acc, casting="unsafe")
        outs.append(out)
    return buf if dense else outs


def _blend_two(a, b, wa, wb, out):
    """``out = (wa a + wb b + 32768) >> 16`` (uint8 images of one shape, wa + wb = 65536): the
    sum by ``cv2.addWeighted`` into float32, where every step is exact (the values are integers
    under 2^24, then multiples of 2^-16 under 256), so the integer formula's result to the bit."""
    import cv2

    h, w = a.shape[:2]
    rows = max(1, min(h, _STRIP_BYTES // (4 * w * a.shape[2])))  # floats kept in cache
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    for r0 in range(0, h, rows):
        r1 = min(h, r0 + rows)
        t = cv2.addWeighted(a[r0:r1], float(wa), b[r0:r1], float(wb), float(ONE // 2),
                            dtype=cv2.CV_32F)
        np.multiply(t, np.float32(1.0 / ONE), out=t)
        np.floor(t, out=t)
        np.copyto(out[r0:r1], t.reshape(out[r0:r1].shape), casting="unsafe")
    return out


def canvas_numpy(canvas, fill, covered=None):
    """Canvases ``(B, H, W, C)`` uint8 (one array when all ``canvas`` sizes agree, else a list)
    filled with ``fill`` ``(B, C)`` integers in 0..255: what :func:`compose_numpy` pastes onto,
    for a caller that writes its tiles in place (the mosaic's CPU path). ``covered``: per
    canvas, disjoint ``(x, y, w, h)`` rectangles inside it that the caller overwrites whole;
    they are left unfilled (uninitialised), the rest filled (a mosaic's tiles cover up to
    three quarters of its canvas: writing them twice cost a third of the op)."""
    canvas = np.asarray(canvas, np.int64).reshape(-1, 2)
    fill = np.asarray(fill, np.float64).reshape(len(canvas), -1)
    if np.any(fill != np.round(fill)) or np.any((fill < 0) | (fill > 255)):
        raise ValueError("fill must be integers in 0..255 (uint8 canvases)")
    fill = fill.astype(np.uint8)
    c = fill.shape[1]
    dense = len(canvas) and bool(np.all(canvas == canvas[0]))
    if dense:
        buf = recycle.empty((len(canvas), int(canvas[0, 0]), int(canvas[0, 1]), c), np.uint8)
    else:
        buf = [np.empty((int(h), int(w), c), np.uint8) for h, w in canvas]
    for b in range(len(canvas)):
        row = _row(fill[b], int(canvas[b, 1]), np.uint8)
        if covered is None or not len(covered[b]):
            buf[b][...] = row
            continue
        for y0, y1, x0, x1 in _uncovered(int(canvas[b, 0]), int(canvas[b, 1]), covered[b]):
            buf[b][y0:y1, x0:x1] = row[x0:x1]
    return buf


def _uncovered(h, w, rects):
    """Rectangles ``(y0, y1, x0, x1)`` tiling the part of an h x w canvas outside the disjoint
    rectangles ``rects`` ``(x, y, w, h)`` (clipped to the canvas): in bands of rows between
    their top and bottom edges, the gaps between the rectangles that span each band."""
    r = [(max(0, int(x)), max(0, int(y)), min(w, int(x) + int(rw)), min(h, int(y) + int(rh)))
         for x, y, rw, rh in rects]
    r = [(x0, y0, x1, y1) for x0, y0, x1, y1 in r if x1 > x0 and y1 > y0]
    edges = sorted({0, h} | {y0 for _, y0, _, _ in r} | {y1 for _, _, _, y1 in r})
    out = []
    for top, bottom in zip(edges[:-1], edges[1:]):
        at = 0
        for x0, x1 in sorted((x0, x1) for x0, y0, x1, y1 in r if y0 <= top and y1 >= bottom):
            if x0 > at:
                out.append((top, bottom, at, x0))
            at = max(at, x1)
        if at < w:
            out.append((top, bottom, at, w))
    return out


def _row(value, width, dtype):
    """One canvas row of ``value`` per pixel, contiguous: assigned to a whole canvas it is copied
    row by row (a (C,) value broadcast to every pixel is copied C bytes at a time: 40x slower)."""
    return np.ascontiguousarray(np.broadcast_to(np.asarray(value).astype(dtype), (width, len(value))))


def _paste(out, tile, origin):
    """``tile`` written onto ``out`` at ``origin`` (x0, y0), the part inside ``out`` only."""
    x0, y0 = int(origin[0]), int(origin[1])
    th, tw = tile.shape[:2]
    ya, yb = max(y0, 0), min(y0 + th, out.shape[0])
    xa, xb = max(x0, 0), min(x0 + tw, out.shape[1])
    if ya < yb and xa < xb:
        out[ya:yb, xa:xb] = tile[ya - y0:yb - y0, xa - x0:xb - x0]


def _accumulate(acc, tile, origin, weight, fill):
    """``acc += weight * (tile - fill)`` on the part of ``acc`` that ``tile`` covers."""
    x0, y0 = int(origin[0]), int(origin[1])
    th, tw = tile.shape[:2]
    ya, yb = max(y0, 0), min(y0 + th, acc.shape[0])
    xa, xb = max(x0, 0), min(x0 + tw, acc.shape[1])
    if ya < yb and xa < xb and weight:
        d = tile[ya - y0:yb - y0, xa - x0:xb - x0].astype(np.int32)
        d -= _row(fill, xb - xa, np.int32)
        d *= weight
        acc[ya:yb, xa:xb] += d


def launch_meta(tile_shapes, tile_pitches, origins, groups, canvas, fill, weights, mode):
    """Host metadata of the launch (compose.cu's header): ``tile_meta (T, 6)``, ``out_meta
    (B, 5)``, ``fill (B, C)`` int32, output offsets ``(B + 1,)``, C, grid. Kept apart from
    :func:`compose_cupy` so that the test runs the kernel's source on the CPU with it."""
    origins, groups, canvas, fill, w, c = _check(tile_shapes, origins, groups, canvas, fill,
                                                 weights, mode)
    shapes = np.asarray(tile_shapes, np.int64).reshape(-1, 3)
    t, b = len(shapes), len(canvas)
    tile_meta = np.empty((t, 6), np.int64)
    tile_meta[:, 0:2] = origins
    tile_meta[:, 2:4] = shapes[:, :2]
    tile_meta[:, 4] = np.asarray(tile_pitches, np.int64).reshape(t)
    tile_meta[:, 5] = w
    n = canvas[:, 0] * canvas[:, 1] * c
    offsets = np.zeros(b + 1, np.int64)
    np.cumsum(n, out=offsets[1:])
    out_meta = np.stack([canvas[:, 0], canvas[:, 1], offsets[:-1], groups[:-1], groups[1:]], 1)
    grid = (max(1, min((int(n.max(initial=1)) + _BLOCK - 1) // _BLOCK, _MAX_GRID_X)),
            max(1, min(b, 65535)), 1)
    return dict(tile_meta=tile_meta, out_meta=np.ascontiguousarray(out_meta, np.int64), fill=fill,
                offsets=offsets, channels=c, grid=grid, block=(_BLOCK, 1, 1), mode=_MODES[mode])


class ComposeLaunch:
    """One :func:`compose_cupy` launch planned on the host (no GPU call): its metadata
    (:func:`launch_meta`) for tiles of known shapes, their pointers and pitches given when it
    runs. ``B``, ``shapes``, ``out_dtype``, ``dense`` describe the outputs
    (core/deferred.py's launch)."""

    __slots__ = ("meta", "B", "shapes", "out_dtype", "dense")

    def __init__(self, tile_shapes, tile_pitches, origins, groups, canvas, fill, weights, mode):
        self.meta = launch_meta(tile_shapes, tile_pitches, origins, groups, canvas, fill,
                                weights, mode)
        cv = np.asarray(canvas, np.int64).reshape(-1, 2)
        c = self.meta["channels"]
        self.B, self.out_dtype = len(cv), np.dtype(np.uint8)
        self.shapes = [(int(h), int(w), c) for h, w in cv]
        self.dense = bool(len(cv)) and bool(np.all(cv == cv[0]))

    def run(self, inputs, stream=None):
        """:func:`launch_compose` on ``inputs[0]`` (a DeviceImages: the tiles, made)."""
        return launch_compose(self, inputs[0].ptrs, inputs[0].pitches, stream)


def plan_compose(tiles, origins, groups, canvas, fill, *, weights=None, mode="first") -> ComposeLaunch:
    """The host half of :func:`compose_cupy` for tiles of a :class:`DeviceImages` (its shapes and
    pitches are read; its pointers may be unknown yet)."""
    return ComposeLaunch(tiles.shapes, tiles.pitches, origins, groups, canvas, fill, weights, mode)


def launch_compose(cl: ComposeLaunch, ptrs, pitches=None, stream=None):
    """The device half of :func:`compose_cupy`: the planned launch on tiles at ``ptrs`` (T,),
    rows ``pitches`` (T,) bytes apart (default: as planned). ONE launch, nothing copied back."""
    import cupy as cp

    stream = stream if stream is not None else cp.cuda.get_current_stream()
    meta = cl.meta
    tile_meta = meta["tile_meta"]
    if pitches is not None and len(tile_meta) and not np.array_equal(pitches, tile_meta[:, 4]):
        tile_meta = tile_meta.copy()
        tile_meta[:, 4] = pitches
    with stream:
        b = cl.B
        flat = cp.empty(int(meta["offsets"][-1]), cp.uint8)
        if b:
            args = tuple(upload_many([np.asarray(ptrs, np.uint64).reshape(-1), tile_meta,
                                      meta["out_meta"], meta["fill"]], stream))
            launch(get_kernel(_SRC, "compose_u8"), meta["grid"], meta["block"],
                   args + (np.int32(b), np.int32(meta["channels"]), np.int32(meta["mode"]), flat),
                   stream=stream, name="compose_u8")
            del args  # stream-ordered pool: freed after the launch has read them
        off = meta["offsets"]
        if cl.dense:
            return flat.reshape((b,) + cl.shapes[0])
        return [flat[off[k]:off[k + 1]].reshape(cl.shapes[k]) for k in range(b)]


def compose_cupy(tiles, origins, groups, canvas, fill, *, weights=None, mode="first", stream=None):
    """CUDA twin of :func:`compose_numpy`: ONE launch for the batch. ``tiles`` are cupy arrays
    (a list, or a dense array) or a :class:`DeviceImages`; the rest are host values
    (:func:`plan_compose` then :func:`launch_compose`)."""
    import cupy as cp

    stream = stream if stream is not None else cp.cuda.get_current_stream()
    with stream:
        if isinstance(tiles, DeviceImages):
            keep, ptrs, pitches, shapes = tiles, tiles.ptrs, tiles.pitches, tiles.shapes
        else:
            keep = [cp.ascontiguousarray(t) for t in tiles]
            ptrs = np.array([t.data.ptr for t in keep], np.uint64)
            shapes = _shapes(keep)
            pitches = shapes[:, 1] * shapes[:, 2]
        cl = ComposeLaunch(shapes, pitches, origins, groups, canvas, fill, weights, mode)
        out = launch_compose(cl, ptrs, None, stream)
        del keep  # stream-ordered pool: freed after the launch has read them
        return out
