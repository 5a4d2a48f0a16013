"""DALI's resampling filter for axis-aligned chains: a triangle whose radius is the shrink factor.

DALI's ``fn.resize`` (``antialias=True``, ``INTERP_LINEAR``: its defaults) resamples each axis
with a triangular filter (dali/kernels/imgproc/resample: ``ResamplingFilters::Triangular``,
``DefaultFilterRadius``, ``InitializeResamplingFilter``). detaug's own warp (kernels/warp.py)
averages up to 8 bilinear samples instead; this module gives DALI's filter to a chain whose map
is axis-aligned (scale, translation, flip: a resize with crops, flips and integral pastes around
it), on the host (:func:`resample_numpy`, float64) and on the device (:func:`resample_cupy`,
``resample.cu``, ONE launch per batch), from the same tables.

Math, per axis (docs/design.md coordinates: pixel ``p`` has its centre at ``p + 0.5``). The
chain's inverse maps output ``o`` to input ``t = a o + c``; output pixel ``j`` is centred at
``t_j = a (j + 0.5) + c`` and the scale is ``s = |a|`` (input pixels per output pixel). The
filter's radius is ``R = max(1, s)`` (DALI: ``Triangular(in / out)`` when shrinking, ``Triangular(1)``
= bilinear otherwise), the weight of input pixel ``p`` is ``max(0, 1 - |p + 0.5 - t_j| / R)``,
divided by the sum of the weights of pixel ``j``'s taps (DALI normalises each output pixel's
weights), and a tap outside the chain's clamp columns ``[cx0, cx1]`` (rows alike: the image, or
the crop a later op resamples) reads the edge pixel (DALI replicates the border). An output pixel
whose centre maps outside the region's rect ``[x_lo, x_hi) x [y_lo, y_hi)`` takes ``fill`` (a
window reaching past the image). The filter is separable: ``out(i, j) = sum_r wy[i, r] sum_s
wx[j, s] src(rows[i, r], cols[j, s])``; then the epilogue of the warp (normalise, a uint8 output
``clip(floor(v + 0.5), 0, 255)`` as DALI's CPU resize rounds, layout). The twin computes in
float64; the kernel (and the CPU backend's fast path) in float32 with the same weights: the
twin's uint8 values, but where the float64 value lies within about 1e-3 of a half, which may
round to the other neighbour (tests/dali/test_triangle_filter.py).
"""
from __future__ import annotations

import math

import numpy as np

from .warp import _device_inputs, _finish, launch_flat, launch_warp, plan_warp, warp_numpy
from .warp_spec import _allocate_numpy, _is_dense, _out_shape, _prepare, _proj_rows

_BLOCK = 256
_KERNEL_DTYPE = {np.dtype(np.uint8): "u8", np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}


def triangle_samples(matrices, nslab=None) -> np.ndarray:
    """(B,) bool: the samples whose chain DALI's filter serves: an affine map with no rotation
    or shear (``m[0, 1] = m[1, 0] = 0``) and no slab in its region (``nslab``, from
    :func:`detaug.core.geometry.valid_region`)."""
    m = np.asarray(matrices, np.float64).reshape(-1, 3, 3)
    ok = (m[:, 0, 1] == 0) & (m[:, 1, 0] == 0) & ~_proj_rows(m)
    if nslab is not None:
        ok &= np.asarray(nslab).reshape(-1) == 0
    return ok


def axis_tables(n_out: int, a: float, c: float, lo: float, hi: float, clo: int, chi: int):
    """The taps of one axis: ``(idx (n_out, K) int64, w (n_out, K) float64)`` for the map
    ``t = a o + c`` (output to input), the rect ``[lo, hi)`` and the clamp ``[clo, chi]``
    (module docstring). Each row's weights sum to 1; a row whose centre maps outside the rect
    has ``idx[j, 0] = -1`` (fill)."""
    s = abs(float(a))
    radius = max(1.0, s)
    k = int(math.floor(2.0 * radius)) + 1  # every p with |p + 0.5 - t| < R
    t = a * (np.arange(n_out, dtype=np.float64) + 0.5) + c
    p = np.floor(t - 0.5 - radius)[:, None] + 1.0 + np.arange(k, dtype=np.float64)
    w = np.maximum(0.0, 1.0 - np.abs(p + 0.5 - t[:, None]) / radius)
    w /= w.sum(1, keepdims=True)  # the tap nearest t weighs >= 1 - 0.5 / R > 0
    idx = np.clip(p, clo, chi).astype(np.int64)
    outside = ~((t >= lo) & (t < hi))
    idx[outside, 0] = -1
    return idx, w


def _sample_tables(spec, b: int):
    """(rows idx, rows w, cols idx, cols w) of sample ``b`` of a warp spec."""
    inv, (h, w), rect, clamp = spec.inv[b], spec.out_sizes[b], spec.rect[b], spec.clamp[b]
    ri, rw = axis_tables(int(h), inv[1, 1], inv[1, 2], rect[2], rect[3], clamp[2], clamp[3])
    ci, cw = axis_tables(int(w), inv[0, 0], inv[0, 2], rect[0], rect[1], clamp[0], clamp[1])
    return ri, rw, ci, cw


def _check(spec):
    # (the inverse of an axis-aligned map is axis-aligned: the spec's inverses serve)
    bad = np.nonzero(~triangle_samples(spec.inv, spec.nslab))[0]
    if len(bad):
        raise ValueError(f"DALI's triangle filter needs axis-aligned affine maps and no slab; "
                         f"samples {bad[:8].tolist()} are not")


def _one_numpy(spec, b: int, dtype=np.float64) -> np.ndarray:
    """Sample ``b`` filtered in ``dtype``: the rows first (each output row a weighted sum of
    whole source rows, gathered as contiguous copies), then the columns of that."""
    ri, rw, ci, cw = _sample_tables(spec, b)
    img = spec.images[b]
    rows = np.zeros((len(ri), img.shape[1], img.shape[2]), dtype)
    rsafe, csafe = np.maximum(ri, 0), np.maximum(ci, 0)
    for r in range(ri.shape[1]):
        rows += rw[:, r, None, None].astype(dtype) * img[rsafe[:, r]]
    out = np.zeros((len(ri), len(ci), img.shape[2]), dtype)
    for s in range(ci.shape[1]):
        out += cw[:, s, None].astype(dtype) * rows[:, csafe[:, s]]
    outside = (ri[:, 0] < 0)[:, None] | (ci[:, 0] < 0)[None, :]
    out[outside] = spec.fill[b]
    return out


def resample_numpy(images, matrices, out_sizes, *, fill=0.0, mean=None, std=None,
                   out_dtype=np.uint8, layout="HWC", region=None, precision=np.float64):
    """DALI's triangle filter (module docstring), then the warp's epilogue. Arguments and
    returns as :func:`detaug.kernels.warp.warp_numpy` (uint8 or float32 host images); every
    sample's map must be axis-aligned with no slab (:func:`triangle_samples`), else ValueError.
    ``precision``: float64 (the twin: the reference) or float32 (the CPU backend's fast path,
    the kernel's arithmetic: within a grey level of the twin, about twice as fast)."""
    spec = _prepare(images, matrices, out_sizes, fill, True, 8, mean, std, out_dtype, layout,
                    region)
    _check(spec)
    out = _allocate_numpy(spec)
    for b in range(spec.B):
        out[b][...] = _finish(_one_numpy(spec, b, precision).astype(np.float64), spec, b)
    return out


# --------------------------------------------------------------------------- CUDA path
def launch_plan(spec) -> dict:
    """Host metadata of the launch (resample.cu's header): everything but the input pointers."""
    B, C = spec.B, spec.C
    npix = spec.out_sizes[:, 0] * spec.out_sizes[:, 1]
    if B > 65535:
        raise ValueError("resample_cupy handles at most 65535 samples per call")
    offsets = np.zeros(B + 1, np.int64)
    np.cumsum(npix * C, out=offsets[1:])
    meta_i = np.zeros((B, 8), np.int64)
    idx, wt, at = [], [], 0
    for b in range(B):
        ri, rw, ci, cw = _sample_tables(spec, b)
        meta_i[b] = (spec.in_pitches[b], spec.out_sizes[b, 0], spec.out_sizes[b, 1], offsets[b],
                     at, at + ri.size, ri.shape[1], ci.shape[1])
        idx += [ri.ravel(), ci.ravel()]
        wt += [rw.ravel(), cw.ravel()]
        at += ri.size + ci.size
    if at >= 2**31:
        raise ValueError("resample_cupy: the batch's filter tables are too large")
    mean = spec.mean if spec.mean is not None else np.zeros((B, C))
    std = spec.std if spec.std is not None else np.ones((B, C))
    return dict(meta_i=meta_i, idx=np.concatenate(idx).astype(np.int32),
                wt=np.concatenate(wt).astype(np.float32),
                meta_f=np.concatenate([spec.fill, mean, std], 1).astype(np.float32),
                offsets=offsets,
                name=f"resample_{_KERNEL_DTYPE[spec.out_dtype]}_{spec.layout.lower()}_c{C}",
                grid=((int(npix.max()) + _BLOCK - 1) // _BLOCK, B, 1), block=(_BLOCK, 1, 1))


class ResampleLaunch:
    """One :func:`resample_cupy` launch planned on the host (no GPU call), run on the images'
    pointers once they exist; the interface of :class:`detaug.kernels.warp.WarpLaunch`."""

    __slots__ = ("plan", "B", "shapes", "out_dtype", "dense")

    def __init__(self, spec):
        _check(spec)
        self.plan = launch_plan(spec) if spec.B else None
        self.B, self.out_dtype, self.dense = spec.B, spec.out_dtype, _is_dense(spec)
        self.shapes = [_out_shape(spec, b) for b in range(spec.B)]

    def run(self, inputs, stream=None):
        """The launch on ``inputs[0]`` (a DeviceImages: the planned images, made)."""
        return self.launch(inputs[0].ptrs, inputs[0].pitches, stream)

    def launch(self, ptrs, pitches=None, stream=None):
        """ONE kernel launch on images at ``ptrs`` (B,), rows ``pitches`` bytes apart (default:
        as planned); nothing is copied back. A dense array, or a list of views of one buffer."""
        from .launch import get_kernel

        if self.B == 0:
            return []
        plan = self.plan
        meta_i = plan["meta_i"]
        if pitches is not None and not np.array_equal(pitches, meta_i[:, 0]):
            meta_i = meta_i.copy()
            meta_i[:, 0] = pitches
        return launch_flat(get_kernel("resample.cu", plan["name"]), plan,
                           [np.asarray(ptrs, np.uint64), meta_i, plan["idx"], plan["wt"],
                            plan["meta_f"]], self, stream)


def plan_resample(images, matrices, out_sizes, *, fill=0.0, mean=None, std=None,
                  out_dtype=np.uint8, layout="HWC", region=None) -> ResampleLaunch:
    """The host half of :func:`resample_cupy` (a DeviceImages' shapes and pitches are read, not
    its pointers), as a :class:`ResampleLaunch`."""
    return ResampleLaunch(_prepare(images, matrices, out_sizes, fill, True, 8, mean, std,
                                   out_dtype, layout, region))


def resample_cupy(images, matrices, out_sizes, *, fill=0.0, mean=None, std=None,
                  out_dtype=np.uint8, layout="HWC", region=None, stream=None):
    """CUDA implementation of :func:`resample_numpy` (uint8 device images: a list of cupy
    arrays, one dense array, or a DeviceImages): ONE kernel launch for the batch."""
    import cupy as cp

    rl = plan_resample(images, matrices, out_sizes, fill=fill, mean=mean, std=std,
                       out_dtype=out_dtype, layout=layout, region=region)
    if rl.B == 0:
        return []
    stream = stream if stream is not None else cp.cuda.get_current_stream()
    with stream:
        keep, ptrs = _device_inputs(cp, images)  # noqa: F841 (alive until the launch is queued)
        return rl.launch(ptrs, None, stream)


# --------------------------------------------------------------------------- mixed batches
def _rows(kw: dict, idx) -> dict:
    """The keyword arguments of samples ``idx`` (per-sample arrays indexed)."""
    out = dict(kw)
    for k in ("fill", "mean", "std"):
        v = kw.get(k)
        if v is not None and np.ndim(v) == 2:
            out[k] = np.asarray(v)[idx]
    if kw.get("region") is not None:
        out["region"] = tuple(np.asarray(v)[idx] for v in kw["region"])
    return out


def _assemble(parts, idx_parts, B, dense, xp):
    """The samples of ``parts`` (outputs of subsets ``idx_parts``) in batch order: one dense
    array where ``dense``, else a list."""
    got = [None] * B
    for part, idx in zip(parts, idx_parts):
        for k, b in enumerate(idx):
            got[int(b)] = part[k]
    return xp.stack(got) if dense and B else got


class MixedLaunch:
    """A batch whose samples split between DALI's filter and the warp (a chain axis-aligned for
    some samples only, e.g. a per-sample rotation of 0): the two launches planned, their samples
    put back in order (one launch each; a dense result is stacked, one copy)."""

    __slots__ = ("tri", "box", "launches", "B", "shapes", "out_dtype", "dense")

    def __init__(self, images, matrices, out_sizes, tri, kw):
        tri = np.asarray(tri, bool)
        self.tri, self.box = np.nonzero(tri)[0], np.nonzero(~tri)[0]
        sub = _sub_images(images, self.tri), _sub_images(images, self.box)
        mats, sizes = np.asarray(matrices), np.asarray(out_sizes)
        wkw = {k: v for k, v in kw.items() if k not in ("antialias", "max_taps")}
        self.launches = (plan_resample(sub[0], mats[self.tri], sizes[self.tri],
                                       **_rows(wkw, self.tri)),
                         plan_warp(sub[1], mats[self.box], sizes[self.box], **_rows(kw, self.box)))
        spec_shapes = [None] * len(tri)
        for idx, ln in zip((self.tri, self.box), self.launches):
            for k, b in enumerate(idx):
                spec_shapes[int(b)] = ln.shapes[k]
        self.B, self.shapes = len(tri), spec_shapes
        self.out_dtype = np.dtype(kw.get("out_dtype", np.uint8))
        self.dense = bool(self.B) and all(s == spec_shapes[0] for s in spec_shapes)

    def run(self, inputs, stream=None):
        return self.launch(inputs[0].ptrs, inputs[0].pitches, stream)

    def launch(self, ptrs, pitches=None, stream=None):
        import cupy as cp

        ptrs = np.asarray(ptrs)
        pitches = None if pitches is None else np.asarray(pitches)
        parts = []
        for idx, ln in zip((self.tri, self.box), self.launches):
            if not len(idx):
                parts.append([])
                continue
            pp = None if pitches is None else pitches[idx]
            out = (ln.launch(ptrs[idx], pp, stream) if isinstance(ln, ResampleLaunch)
                   else launch_warp(ln, ptrs[idx], pp, stream))
            parts.append(out)
        with (stream if stream is not None else cp.cuda.get_current_stream()):
            return _assemble(parts, (self.tri, self.box), self.B, self.dense, cp)


def _sub_images(images, idx):
    """Samples ``idx`` of a batch's images: a DeviceImages' rows (its pointers, shapes and
    pitches: planned images have no pixels yet), else a list."""
    from ..core.batch import DeviceImages

    if isinstance(images, DeviceImages):
        return DeviceImages(images.ptrs[idx], images.shapes[idx], images.pitches[idx],
                            images.owners, images.device_id)
    return [images[int(b)] for b in idx]


def filtered_numpy(images, matrices, out_sizes, tri, warp_fn=warp_numpy, precision=np.float64,
                   **kw):
    """A host batch with DALI's filter (in ``precision``) on samples ``tri`` (B,) bool and
    ``warp_fn`` (the warp's twin or its OpenCV path) on the others, in batch order (a dense
    array where the sizes agree, else a list)."""
    tri = np.asarray(tri, bool)
    imgs = list(images) if isinstance(images, (list, tuple)) else [images[b] for b in range(len(images))]
    parts, idx_parts = [], []
    wkw = {k: v for k, v in kw.items() if k not in ("antialias", "max_taps")}
    wkw["precision"] = precision
    for sel, fn, args in ((np.nonzero(tri)[0], resample_numpy, wkw),
                          (np.nonzero(~tri)[0], warp_fn, kw)):
        if len(sel):
            out = fn([imgs[int(b)] for b in sel], np.asarray(matrices)[sel],
                     np.asarray(out_sizes)[sel], **_rows(args, sel))
            parts.append(out)
            idx_parts.append(sel)
    sizes = np.asarray(out_sizes).reshape(-1, 2)
    dense = len(sizes) > 0 and bool((sizes == sizes[0]).all())
    return _assemble(parts, idx_parts, len(tri), dense, np)
