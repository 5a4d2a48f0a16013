"""Running a batch's pending geometry: the one warp of the images, the one transform of the boxes.

This is the executing half of the lazy batches of :mod:`detaug.core.batch`, which hold data only. It
sits above both the batch types and the kernels (layer rule: docs/design.md) and picks the
kernel: cupy on the device; on the host the NumPy twin when ``backend.cpu_warp()`` is
'reference', else OpenCV, split over the context's host threads.

Every function takes the batch and the execution context ``ctx`` (a BatchContext: its stream and
thread pool; ``None`` on the host outside a pipeline, where the work runs in this thread).
"""
from __future__ import annotations

import numpy as np

from ..core import backend, recycle
from ..core.batch import BoxBatch, DeferredWarp, ImageBatch
from ..core.deferred import is_planned, stand_in
from ..core.instances import SHAPE_FIELDS, shapes_clipped, shapes_through, tight_boxes
from ..kernels import boxes as kb
from ..kernels import resample
from ..kernels import shapes as ks
from ..kernels import warp


def images(batch: ImageBatch, ctx, *, mean=None, std=None, dtype=None, layout=None,
           antialias=True, into=None) -> ImageBatch:
    """``batch`` with its pending chain (and the requested epilogue) run as one warp per batch.

    Args:
        batch: an ImageBatch, with or without a pending chain.
        ctx: the batch's context (stream, host threads), or None (host, this thread).
        mean, std: optional per-channel ``(C,)`` or per-sample ``(B, C)``: out = (v - mean) / std.
        dtype: output dtype (uint8 when None: no normalisation).
        layout: 'HWC' or 'CHW' (default: the batch's).
        antialias: supersample where the chain shrinks the image (kernels/warp.py); False samples
            each output pixel once (bilinear at its centre's preimage).
        into: a list of B host arrays (sample b's output shape, uint8; views allowed) that the
            OpenCV path writes the samples into (a mosaic's canvas); only for a CPU batch with
            a pending chain and no epilogue, with the OpenCV warp (else ValueError).

    Returns:
        An ImageBatch without pending geometry (``batch`` itself when there is nothing to do).
    """
    layout = layout or batch.layout
    if dtype is None and batch.batch_size and batch.is_float:
        dtype = np.float32  # float32 images stay float32 (warped in float, not rounded)
    if (batch.geometry is None and mean is None
            and (dtype in (None, np.uint8) or (batch.is_float and dtype == np.float32))
            and layout == batch.layout and into is None):
        return batch
    if batch.layout != "HWC":
        raise ValueError("this batch is already normalised to CHW; normalise once, last")
    g, kwargs = warp_arguments(batch, mean=mean, std=std, dtype=dtype, layout=layout,
                               antialias=antialias)
    n = batch.batch_size
    tri = _triangle(g, kwargs)
    if tri is not None and into is None:
        return _filtered(batch, ctx, g, kwargs, tri, layout)
    if is_planned(batch.raw):
        # planned ahead (detaug/runtime/gpu/plan_ahead.py): the launch is planned here, run once
        # its source is made (decoded, or made by the launches planned before it: core/deferred.py)
        return ImageBatch(DeferredWarp(batch.raw, warp.plan_warp(stand_in(batch.raw), g.matrices,
                                                                 g.sizes, **kwargs)),
                          batch.device, layout, None)
    if into is not None:
        if (batch.device != "cpu" or backend.cpu_warp() == "reference" or mean is not None
                or dtype not in (None, np.uint8) or layout != "HWC" or len(into) != n):
            raise ValueError("into: a CPU batch's uint8 HWC samples with the OpenCV warp only")
        _chunks(ctx, lambda lo, hi: warp.warp_cv2(batch.data[lo:hi], g.matrices[lo:hi], g.sizes[lo:hi],
                                                  out=list(into[lo:hi]), **_rows(kwargs, lo, hi)), n)
        return ImageBatch(list(into), batch.device, layout, None)
    if batch.device == "gpu":
        out = warp.warp_cupy(batch.raw, g.matrices, g.sizes, stream=getattr(ctx, "stream", None),
                             **kwargs)
    elif backend.cpu_warp() == "reference":
        out = warp.warp_numpy(batch.data, g.matrices, g.sizes, **kwargs)
    elif n and (g.sizes == g.sizes[0]).all():
        # one batch buffer; each host thread writes its samples straight into it
        h, w = (int(v) for v in g.sizes[0])
        c = batch.channels
        shape = (n,) + ((c, h, w) if layout == "CHW" else (h, w, c))
        out = recycle.empty(shape, np.dtype(dtype or np.uint8))
        _chunks(ctx, lambda lo, hi: warp.warp_cv2(batch.data[lo:hi], g.matrices[lo:hi], g.sizes[lo:hi],
                                                  out=out[lo:hi], **_rows(kwargs, lo, hi)), n)
    else:
        # ragged sizes: one warp_cv2 call per thread's chunk (a list back, or a dense array
        # where the chunk's sizes agree); the samples in order
        chunks = _chunks(ctx, lambda lo, hi: warp.warp_cv2(batch.data[lo:hi], g.matrices[lo:hi],
                                                           g.sizes[lo:hi], **_rows(kwargs, lo, hi)), n)
        out = [o for chunk in chunks for o in chunk]
    return ImageBatch(out, batch.device, layout, None)


def _triangle(g, kwargs):
    """(B,) bool: the samples that take DALI's triangle filter (a chain that asked for it,
    antialiased, where the sample's map is axis-aligned: kernels/resample.py), or None when
    none does."""
    if g.filter != "triangle" or not kwargs["antialias"]:
        return None
    tri = resample.triangle_samples(g.matrices, kwargs["region"][4])
    return tri if tri.any() else None


def _filtered(batch: ImageBatch, ctx, g, kwargs, tri, layout) -> ImageBatch:
    """:func:`images` for a chain with DALI's filter on the samples ``tri`` and the warp on the
    others (one launch each on the GPU; planned ahead like the warp)."""
    rkw = {k: v for k, v in kwargs.items() if k != "antialias"}
    if is_planned(batch.raw) or batch.device == "gpu":
        src = stand_in(batch.raw) if is_planned(batch.raw) else batch.raw
        ln = (resample.plan_resample(src, g.matrices, g.sizes, **rkw) if tri.all()
              else resample.MixedLaunch(src, g.matrices, g.sizes, tri, kwargs))
        if is_planned(batch.raw):
            return ImageBatch(DeferredWarp(batch.raw, ln), batch.device, layout, None)
        import cupy as cp

        stream = getattr(ctx, "stream", None)
        stream = stream if stream is not None else cp.cuda.get_current_stream()
        with stream:
            keep, ptrs = warp._device_inputs(cp, batch.raw)
            pitches = batch.raw.pitches if hasattr(batch.raw, "pitches") else None
            out = ln.launch(ptrs, pitches, stream)
            del keep  # freed in stream order, after the launch
        return ImageBatch(out, batch.device, layout, None)
    # the CPU backend: the twins ('reference'), else OpenCV's warp and the filter in float32
    ref = backend.cpu_warp() == "reference"
    n = batch.batch_size
    out = _chunks(ctx, lambda lo, hi: resample.filtered_numpy(
        batch.data[lo:hi], g.matrices[lo:hi], g.sizes[lo:hi], tri[lo:hi],
        warp_fn=warp.warp_numpy if ref else warp.warp_cv2,
        precision=np.float64 if ref else np.float32, **_rows(kwargs, lo, hi)), n)
    if n and (g.sizes == g.sizes[0]).all():
        out = np.concatenate([np.asarray(o) for o in out if len(o)])
    else:
        out = [o for chunk in out for o in chunk]
    return ImageBatch(out, batch.device, layout, None)


def warp_arguments(batch: ImageBatch, *, mean=None, std=None, dtype=None, layout=None,
                   antialias=True):
    """(the pending chain, the warp's keyword arguments) of :func:`images`: the fill and region
    of the chain (:meth:`Geometry.valid_region`), the epilogue, antialias."""
    g = batch.pending()
    rect, rect_fill, clamp, slabs, slab_fill, nslab = g.valid_region()
    return g, dict(fill=rect_fill, mean=mean, std=std, out_dtype=dtype or np.uint8,
                   layout=layout or batch.layout, region=(rect, clamp, slabs, slab_fill, nslab),
                   antialias=antialias and g.antialias)


def _chunks(ctx, fn, n):
    return ctx.map_chunks(fn, n) if ctx is not None else ([fn(0, n)] if n else [])


def _rows(kwargs: dict, lo: int, hi: int) -> dict:
    """The per-sample keyword arrays of samples lo..hi."""
    out = dict(kwargs)
    for k in ("fill", "mean", "std"):
        v = kwargs[k]
        if v is not None and np.ndim(v) == 2:
            out[k] = np.asarray(v)[lo:hi]
    out["region"] = tuple(np.asarray(v)[lo:hi] for v in kwargs["region"])
    return out


def boxes(b: BoxBatch, ctx=None) -> BoxBatch:
    """Transform the boxes once through the pending chain (if any), clipping them at every
    canvas and dropping those that leave one, as the ops run one by one would."""
    return b if b.geometry is None else prune(b, ctx)


def prune(b: BoxBatch, ctx=None, *, clip=True, min_size=0.0, min_area=0.0,
          min_visibility=0.0) -> BoxBatch:
    """:func:`boxes`, then drop boxes under ``min_size`` / ``min_area`` / ``min_visibility``
    (visible fraction of the box mapped through the chain unclipped), in one kernel; also clips
    boxes that arrived unclipped (no chain). ``clip=False`` writes the last op's box before its
    final clip (earlier ops always clip). A dropped box keeps its row with its valid flag
    cleared, so that its labels and fields go with it."""
    b.require_xyxy()
    if b.geometry is not None and "masks" in b.fields:
        raise ValueError("a geometric op after fn.instance_masks: the masks are made on the "
                         "final canvas; move fn.instance_masks after the last geometric op")
    mats, canvases, modes = b.pending().box_stages()
    kw = dict(mode=modes, clip=clip, min_size=min_size, min_area=min_area,
              min_visibility=min_visibility, valid=b.valid)
    if b.device == "gpu":
        out, keep = kb.box_transform_cupy(b.boxes, b.sample_index(), mats, canvases,
                                          stream=getattr(ctx, "stream", None), **kw)
    else:
        out, keep = kb.box_transform_numpy(b.boxes, b.sample_index(), mats, canvases, **kw)
    host = b._host_later(lambda h: prune(h, None, clip=clip, min_size=min_size, min_area=min_area,
                                         min_visibility=min_visibility))
    fields, tight = _shapes(b, ctx, clip)
    # moved shapes: a box that asks (tight_box) follows its polygons and mask
    if b.geometry is not None and fields is not b.fields:
        out = (ks.tight_boxes_cupy(out, fields, tight, stream=getattr(ctx, "stream", None))
               if b.device == "gpu" else tight_boxes(out, fields))
    return b.replace(boxes=out, valid=keep, geometry=None, host=host, fields=fields)


def _shapes(b: BoxBatch, ctx=None, clip=True):
    """``(fields, tight)``: the fields, with the instance shapes among them (keypoints,
    polygons, oriented boxes) moved through the pending chain (core/instances.py on the CPU,
    kernels/shapes.py on the GPU); with no chain and ``clip``, keypoints and polygons cut to the
    current canvas as a chain's last canvas cuts them (the reader's shapes may overhang the
    image as its boxes may). ``tight``: on the GPU, each box's enclosing box of its moved
    polygons and (where ``tight_box`` asks) mask pixels, or None."""
    if (b.geometry is None and not clip) or not set(SHAPE_FIELDS) & set(b.fields):
        return b.fields, None
    if b.geometry is None and not {"keypoints", "polygons"} & set(b.fields):
        return b.fields, None  # oriented boxes alone: a canvas never cuts them
    if b.device == "gpu":
        stream = getattr(ctx, "stream", None)
        if b.geometry is None:
            return ks.shapes_clipped_cupy(b.fields, b.sample_index(), b.canvas, stream=stream)
        return ks.shapes_through_cupy(b.fields, b.sample_index(), b.geometry, stream=stream)
    if b.geometry is None:
        return shapes_clipped(b.fields, b.sample_index(), b.canvas), None
    return shapes_through(b.fields, b.sample_index(), b.geometry), None


def current_host_boxes(b: BoxBatch):
    """(boxes (N, 4) float64 in current coordinates, valid (N,) bool) on the host, for
    planning: the boxes as the chain so far leaves them (clipped at every canvas; a box that
    left a canvas is not valid)."""
    h = boxes(b.host_view(), None)
    valid = np.ones(h.num_boxes, bool) if h.valid is None else np.asarray(h.valid, bool)
    return np.asarray(h.boxes, np.float64), valid


def value(v, ctx, **epilogue):
    """Any graph value made concrete: images warped, boxes transformed, others as they are."""
    if isinstance(v, ImageBatch):
        return images(v, ctx, **epilogue)
    if isinstance(v, BoxBatch):
        return boxes(v, ctx)
    return v
