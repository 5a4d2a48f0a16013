"""Erasing (cutout), box-aware: torchvision's RandomErasing (``fn.random_erasing``) and DALI's
``fn.erase`` (given regions). Both fill pixel rectangles of uint8 HWC images with a value, one
per channel, or random bytes, in one kernel launch per batch (detaug/kernels/noise.py).

A rectangle covers the pixels whose centres lie inside it: rows ``i0 <= i < i1`` and columns
``j0 <= j < j1``, i.e. the continuous region ``[j0, j1] x [i0, i1]`` (docs/design.md,
coordinates). Boxes given with the images stay where they are; each box's *visible fraction* is
the part of its area outside every rectangle of its sample (a box of zero area counts as
visible). ``box_policy='drop'`` drops the boxes whose visible fraction is under
``min_visibility`` (with their labels and fields, through the valid mask); ``'flag'`` keeps them
and writes two per-box fields instead: ``occluded`` (int32, 1 under the threshold; a later
erase ORs its own in) and ``visibility`` (float32, the fraction this op left visible).
"""
from __future__ import annotations

import numpy as np

from ..core import backend
from ..core import shapes as S
from ..core.batch import BoxBatch, ImageBatch
from ..graph import materialize as M
from ..graph.dispatch import launch, register_kernel
from ..kernels import noise as kn
from .geometry import per_sample
from .pixel import fill_bytes, pixel_images
from .registry import Draw, register
from ..graph.arg_check import declare_ranges, Num, byte, count, finite, nonneg, positive, prob

ERASE = dict(devices=("cpu", "gpu"), inputs=(1, 2), kind="other", outputs=lambda n, a: n,
             rule=S.same_canvas, plans=True,
             input_names=("images", "boxes"),
             output_spec="same inputs: uint8 images (same sizes) and boxes (dropped or flagged)")
ATTEMPTS = 10  # torchvision's RandomErasing tries 10 rectangles, then leaves the image as it is
BOX_ARGS = {"min_visibility": 0.0, "box_policy": "drop"}
BOX_DOCS = {"min_visibility": "a box whose visible fraction (area outside the erased "
                              "rectangles / its area) is under this is dropped or flagged",
            "box_policy": "'drop' (the box and its labels and fields) or 'flag' (fields "
                          "'occluded' and 'visibility' are written instead)"}


def visible_fractions(boxes, rects):
    """(n,) float64: the fraction of each box [x0, y0, x1, y1] outside the union of ``rects``
    ((k, 4) int rows/columns [i0, j0, i1, j1), half-open), by coordinate compression; a box of
    zero area gives 1."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    rects = np.asarray(rects, np.float64).reshape(-1, 4)
    out = np.ones(len(boxes))
    if not len(rects):
        return out
    for n, (x0, y0, x1, y1) in enumerate(boxes):
        area = (x1 - x0) * (y1 - y0)
        if area <= 0:
            continue
        xs = np.unique(np.clip(np.concatenate([[x0, x1], rects[:, 1], rects[:, 3]]), x0, x1))
        ys = np.unique(np.clip(np.concatenate([[y0, y1], rects[:, 0], rects[:, 2]]), y0, y1))
        cx, cy = (xs[:-1] + xs[1:]) / 2, (ys[:-1] + ys[1:]) / 2
        inside = ((cx[None, :, None] > rects[:, 1, None, None]) & (cx[None, :, None] < rects[:, 3, None, None])
                  & (cy[None, None, :] > rects[:, 0, None, None]) & (cy[None, None, :] < rects[:, 2, None, None]))
        covered = inside.any(0)                                   # (len(cx), len(cy))
        cell = np.diff(xs)[:, None] * np.diff(ys)[None, :]
        out[n] = 1.0 - float((cell * covered).sum()) / area
    return out


register_kernel(("random_erasing", "erase"), "cpu", kn.erase_numpy)
register_kernel(("random_erasing", "erase"), "gpu", kn.erase_cupy)


def _apply(ctx, op, inputs, args, rects, offsets, fills, random, keys):
    """Shared tail: erase the images, then drop or flag the boxes."""
    images = next((i for i in inputs if isinstance(i, ImageBatch)), None)
    boxes = next((i for i in inputs if isinstance(i, BoxBatch)), None)
    if images is None or len(inputs) != 1 + (boxes is not None):
        raise TypeError(f"{op.name}: takes (images) or (images, boxes); got "
                        f"{[type(i).__name__ for i in inputs]}")
    policy = args["box_policy"]
    if policy not in ("drop", "flag"):
        raise ValueError(f"{op.name}: box_policy {policy!r}: expected 'drop' or 'flag'")
    mv = float(args["min_visibility"])
    if not 0.0 <= mv <= 1.0:
        raise ValueError(f"{op.name}: min_visibility must lie in [0, 1], got {mv}")
    out = launch(ctx, op, pixel_images(ctx, op, images), rects, offsets, fills, random, keys)
    res = []
    for v in inputs:
        res.append(out if isinstance(v, ImageBatch) else _boxes(ctx, v, rects, offsets, mv, policy))
    return tuple(res)


def _boxes(ctx, b: BoxBatch, rects, offsets, min_visibility, policy):
    cur, _ = M.current_host_boxes(b)
    vis = np.ones(len(cur))
    for s in range(b.batch_size):
        lo, hi = b.offsets[s], b.offsets[s + 1]
        if hi > lo:
            vis[lo:hi] = visible_fractions(cur[lo:hi], rects[offsets[s]:offsets[s + 1]])
    under = vis < min_visibility
    if policy == "drop":
        return b.drop(~under) if under.any() else b
    host_fields = {"occluded": under.astype(np.int32), "visibility": vis.astype(np.float32)}

    def merged(fields, xp, new):
        out = dict(fields)
        out["occluded"] = new["occluded"] if "occluded" not in fields else xp.maximum(
            fields["occluded"].astype(xp.int32), new["occluded"])
        out["visibility"] = new["visibility"]
        return out

    if b.device == "gpu":
        dev = dict(zip(host_fields, backend.upload_many(list(host_fields.values()), ctx.stream)))
        import cupy as cp

        fields = merged(b.fields, cp, dev)
    else:
        fields = merged(b.fields, np, host_fields)
    host = b._host_later(lambda h: h.replace(fields=merged(h.fields, np, host_fields)))
    return b.replace(fields=fields, host=host)


def _sizes(op, img):
    """(sizes (B, 2), channels) of the images (known without their pixels where planned)."""
    if not isinstance(img, ImageBatch):
        raise TypeError(f"{op.name}: takes (images) or (images, boxes); its first input is "
                        f"{type(img).__name__}")
    return np.asarray(img.sizes(), np.int64).reshape(-1, 2), img.channels


# ---- random_erasing ---------------------------------------------------------------------------
def erasing_rects(u, sizes, scale, ratio):
    """torchvision's RandomErasing.get_params, vectorised: ``u`` (B, 1 + 4 * ATTEMPTS) uniforms
    (apply, then per attempt: area, log-ratio, row, column) with the apply test done by the
    caller. Per attempt: area = H W (s0 + (s1 - s0) u), r = exp(log r0 + (log r1 - log r0) u),
    h = round(sqrt(area r)), w = round(sqrt(area / r)) (halves to even, as Python's round); it
    fits where h < H and w < W, and sits at row floor(u (H - h + 1)), column floor(u (W - w + 1)).
    Returns (B, 4) int [i0, j0, i1, j1] of the first fitting attempt, and (B,) bool found."""
    b = len(sizes)
    h_img, w_img = sizes[:, 0].astype(np.float64)[:, None], sizes[:, 1].astype(np.float64)[:, None]
    a = u[:, 1:].reshape(b, ATTEMPTS, 4)
    area = h_img * w_img * (scale[0] + (scale[1] - scale[0]) * a[..., 0])
    lr = np.log(ratio)
    r = np.exp(lr[0] + (lr[1] - lr[0]) * a[..., 1])
    h = np.round(np.sqrt(area * r))
    w = np.round(np.sqrt(area / r))
    ok = (h < h_img) & (w < w_img)
    found = ok.any(1)
    k = ok.argmax(1)
    idx = np.arange(b)
    hs, ws = h[idx, k], w[idx, k]
    i0 = np.floor(a[idx, k, 2] * (sizes[:, 0] - hs + 1))
    j0 = np.floor(a[idx, k, 3] * (sizes[:, 1] - ws + 1))
    rects = np.stack([i0, j0, i0 + hs, j0 + ws], -1).astype(np.int64)
    return np.where(found[:, None], rects, 0), found


def _range(op, name, value, positive=False):
    v = tuple(float(x) for x in np.asarray(value, np.float64).reshape(-1))
    if len(v) != 2 or v[0] > v[1] or (positive and v[0] <= 0) or (not positive and v[0] < 0):
        raise ValueError(f"{op.name}: {name} takes a (min, max) range with "
                         f"{'0 <' if positive else '0 <='} min <= max, got {value!r}")
    return v


declare_ranges("random_erasing", probability=prob(), scale=Num(0.0, 1.0, form='range'),
               ratio=positive(form='range'), value=byte(words=('random',)), min_visibility=prob())
def _erasing_plan(op, args, draws, b, images):
    """(rects, offsets, fills, random, keys) of the erasing kernel from the image sizes."""
    sizes, c = _sizes(op, images)
    b = len(sizes)
    u = np.concatenate([draws["apply"], draws["attempts"]], 1)  # erasing_rects' u
    keys = draws["key"][:, 0]
    p = per_sample(args["probability"], b)
    if np.any((p < 0) | (p > 1)):
        raise ValueError(f"{op.name}: probability must lie in [0, 1]")
    scale = _range(op, "scale", args["scale"])
    ratio = _range(op, "ratio", args["ratio"], positive=True)
    rects, found = erasing_rects(u, sizes, scale, ratio) if b else (np.zeros((0, 4), np.int64),
                                                                    np.zeros(0, bool))
    keep = found & (u[:, 0] < p) & (rects[:, 2] > rects[:, 0]) & (rects[:, 3] > rects[:, 1])
    offsets = np.concatenate([[0], np.cumsum(keep)]).astype(np.int64)
    value = args["value"]
    random = isinstance(value, str)
    if random and value != "random":
        raise ValueError(f"{op.name}: value {value!r}: a number, one per channel, or 'random'")
    fills = np.zeros((b, c), np.uint8) if random else fill_bytes(op, "value", value, b, c)
    return rects[keep], offsets, fills, np.full(b, random), keys


@register("random_erasing", host_plan=_erasing_plan, roles={"plan_reads_images"},
          draws=(Draw("apply"), Draw("attempts", 4 * ATTEMPTS), Draw("key", 1, "bits")),
          **ERASE,
          args={"probability": 0.5, "scale": (0.02, 0.33), "ratio": (0.3, 3.3), "value": 0.0,
                **BOX_ARGS},
          per_sample=("probability",),
          arg_docs={"probability": "chance that a sample is erased (torchvision's p)",
                    "scale": "(min, max) of the erased area as a fraction of the image",
                    "ratio": "(min, max) of the rectangle's aspect ratio h / w, drawn in log space",
                    "value": "fill: one value, one per channel, or 'random' (uniform random bytes "
                             "0..255 per value; torchvision's normal noise is for float images)",
                    **BOX_DOCS},
          doc="torchvision's RandomErasing (cutout): a rectangle of random area and aspect "
              "filled with a value or noise, per sample; boxes under min_visibility dropped or "
              "flagged")
def random_erasing(ctx, op, inputs, args, params):
    return _apply(ctx, op, inputs, args, *params)


# ---- DALI's erase -----------------------------------------------------------------------------
def _axes(op, args):
    """The image axes (0 = H, 1 = W) that anchor and shape give, in their order."""
    if args["axes"] is not None:
        axes = [int(a) for a in np.atleast_1d(args["axes"])]
    else:
        names = str(args["axis_names"])
        if set(names) - set("HWC"):
            raise ValueError(f"{op.name}: axis_names {names!r}: images have axes H, W, C")
        axes = ["HWC".index(n) for n in names]
    if any(a not in (0, 1) for a in axes) or len(set(axes)) != len(axes) or not axes:
        raise ValueError(f"{op.name}: axes / axis_names {args['axes'] if args['axes'] is not None else args['axis_names']!r}: "
                         "detaug erases regions over H and W (the channels are always whole)")
    return axes


def _regions(op, name, value, b, per):
    """(B, k * per) float64 from a flat literal (the same for every sample) or a per-sample input
    (an array with one row per sample)."""
    if isinstance(value, np.ndarray) and value.ndim in (1, 2) and value.shape[0] == b:
        a = value.astype(np.float64).reshape(b, -1)
    elif isinstance(value, list) and len(value) == b and all(isinstance(v, np.ndarray) for v in value):
        if len({np.size(v) for v in value}) > 1:
            raise ValueError(f"{op.name}: a per-sample {name} must give every sample the same "
                             "number of regions")
        a = np.stack([np.asarray(v, np.float64).reshape(-1) for v in value]) if b else np.zeros((0, 0))
    else:
        a = np.broadcast_to(np.asarray(value, np.float64).reshape(1, -1), (b, np.size(value)))
    if a.shape[1] % per:
        raise ValueError(f"{op.name}: {name} has {a.shape[1]} values, not a multiple of the "
                         f"{per} axes given")
    return a


def erase_rects(op, args, sizes):
    """(B, k, 4) int [i0, j0, i1, j1]: DALI's regions (anchor, shape over the given axes; axes
    not given span the image), normalised and centred as asked, then the pixels whose centres lie
    inside: [ceil(start - 0.5), ceil(end - 0.5)), clipped to the image."""
    b = len(sizes)
    axes = _axes(op, args)
    anchor = _regions(op, "anchor", args["anchor"], b, len(axes))
    shape = _regions(op, "shape", args["shape"], b, len(axes))
    if anchor.shape != shape.shape:
        raise ValueError(f"{op.name}: anchor ({anchor.shape[1]} values) and shape "
                         f"({shape.shape[1]}) must give the same regions")
    if np.any(shape < 0):
        raise ValueError(f"{op.name}: shape must not be negative")
    k = anchor.shape[1] // len(axes)
    extent = sizes.astype(np.float64)                                    # (B, 2) H, W
    start = np.zeros((b, k, 2))
    end = np.broadcast_to(extent[:, None, :], (b, k, 2)).copy()
    for n, ax in enumerate(axes):
        a, s = anchor[:, n::len(axes)], shape[:, n::len(axes)]
        if args["normalized_anchor"] or args["normalized"]:
            a = a * extent[:, ax:ax + 1]
        if args["normalized_shape"] or args["normalized"]:
            s = s * extent[:, ax:ax + 1]
        if args["centered_anchor"]:
            a = a - s / 2
        start[..., ax], end[..., ax] = a, a + s
    lo = np.clip(np.ceil(start - 0.5), 0, extent[:, None, :])
    hi = np.clip(np.ceil(end - 0.5), 0, extent[:, None, :])
    return np.concatenate([lo, hi], -1).astype(np.int64)


declare_ranges("erase", anchor=finite(form='seq'), shape=nonneg(form='seq'), axes=count(0, 1,
               form='seq'), fill_value=byte(), min_visibility=prob())
def _erase_plan(op, args, draws, b, images):
    """(rects, offsets, fills, random, keys) of the erasing kernel: the given regions."""
    sizes, c = _sizes(op, images)
    b = len(sizes)
    rects = erase_rects(op, args, sizes) if b else np.zeros((0, 0, 4), np.int64)
    nonempty = (rects[..., 2] > rects[..., 0]) & (rects[..., 3] > rects[..., 1])
    offsets = np.concatenate([[0], np.cumsum(nonempty.sum(1))]).astype(np.int64)
    fills = fill_bytes(op, "fill_value", args["fill_value"], b, c)
    return (rects[nonempty].reshape(-1, 4), offsets, fills, np.zeros(b, bool),
            np.zeros(b, np.uint64))


@register("erase", host_plan=_erase_plan, roles={"plan_reads_images"}, **ERASE,
          args={"anchor": (), "shape": (), "axis_names": "HW", "axes": None, "fill_value": 0.0,
                "normalized": False, "normalized_anchor": False, "normalized_shape": False,
                "centered_anchor": False, **BOX_ARGS},
          per_sample=("anchor", "shape"),
          arg_docs={"anchor": "DALI's: region starts, flat over the regions, in the order of "
                              "axis_names (e.g. (y0, x0, y1, x1) for two regions over 'HW')",
                    "shape": "DALI's: region extents, laid out as anchor",
                    "axis_names": "DALI's: the axes anchor and shape give ('HW', 'WH', 'H', 'W')",
                    "axes": "DALI's: the same by index (0 = H, 1 = W); overrides axis_names",
                    "fill_value": "DALI's: one value or one per channel",
                    "normalized": "DALI's: anchor and shape relative to the image size",
                    "centered_anchor": "DALI's: anchor is the region's centre",
                    **BOX_DOCS},
          doc="DALI's erase: given regions (anchor, shape) filled with fill_value; pixels whose "
              "centre lies in a region; boxes under min_visibility dropped or flagged")
def erase(ctx, op, inputs, args, params):
    return _apply(ctx, op, inputs, args, *params)
