"""Multi-sample ops: mosaic (four samples tiled around a random centre) and mixup (two samples
blended). Each output sample is made from a group of input samples: the sample itself and
partners drawn from the op's keyed stream (``partners`` of the schema), over the epoch's records
(detaug/runtime/partners.py runs the graph upstream on them: they are read and decoded with the
launch) or among the samples of the output's own batch (lined up by ops/take.py: nothing more is
decoded). Boxes of every member follow, with their labels and fields.
"""
from __future__ import annotations

import numpy as np

from ..core import backend
from ..core import geometry as G
from ..core import shapes as S
from ..core.batch import BoxBatch, ImageBatch
from ..graph import materialize as M
from ..graph.dispatch import kernel, register_kernel
from ..kernels import compose as kc
from ..core.deferred import is_planned
from .geometry import join_chain
from .multi_plan import compose_planned, mosaic_on_device
from .registry import register
from .take import take_boxes, take_images
from ..graph.arg_check import MAX_SIDE, Num, byte, count, declare_ranges, nonneg, positive, prob

_PARTNERS_DOC = ("where partners come from: 'epoch' (any record, read and decoded with the "
                 "batch: Ultralytics' draw), 'batch' (the output's own batch: nothing more is "
                 "decoded) or 'pool' (the output's batch and the pool_batches batches before it "
                 "in the epoch order, each drawn sample decoded once: Ultralytics' buffer of "
                 "recent images, keyed; detaug/runtime/partners.py)")
_POOL_DOC = "partners='pool': batches before the output's own in its pool (k >= 0)"


def _inputs(op, inputs):
    images = next((i for i in inputs if isinstance(i, ImageBatch)), None)
    boxes = next((i for i in inputs if isinstance(i, BoxBatch)), None)
    if images is None or len(inputs) != 1 + (boxes is not None):
        raise TypeError(f"{op.name}: takes (images) or (images, boxes); got "
                        f"{[type(i).__name__ for i in inputs]}")
    return images, boxes


def _grouped(ctx, op, images, boxes):
    """(groups (B + 1,), images, boxes) with the inputs lined up as the groups' members: the
    inputs themselves (partners drawn over the epoch: the graph above ran on the members), or
    the samples of the batch that the groups name (partners drawn from the batch)."""
    groups, gather = ctx.partner_groups(op)
    if gather is not None:
        images = take_images(images, gather)
        boxes = None if boxes is None else take_boxes(boxes, gather, ctx)
    if groups[-1] != images.batch_size:
        raise RuntimeError(f"{op.name}: {images.batch_size} input samples for groups of "
                           f"{groups[-1]}")
    return groups, images, boxes


def _probability(op) -> float:
    p = float(op.args["probability"])
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op.name}: probability must lie in [0, 1], got {p}")
    return p


def _groups_of(picks_per_sample, counts):
    """(groups, picks) from (B, k) picks (column 0 the sample itself, -1) and group sizes."""
    groups = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    keep = np.arange(picks_per_sample.shape[1])[None, :] < counts[:, None]
    return groups, picks_per_sample[keep]


register_kernel(("mosaic", "mixup"), "cpu", kc.compose_numpy)
register_kernel(("mosaic", "mixup"), "gpu", kc.compose_cupy)


def _compose(ctx, op, images: ImageBatch, origins, groups, canvas, fill, weights=None,
             mode="first") -> ImageBatch:
    """The tiles (materialised ``images``: what the batch holds, a device batch's pointers as
    they are) composed onto the canvases (kernels/compose.py)."""
    fill = np.broadcast_to(np.asarray(fill, np.float64), (len(canvas), images.channels))
    if is_planned(images.raw):  # planned ahead: the launch runs once the tiles are made
        return compose_planned(images, origins, groups, canvas, fill, weights, mode)
    out = kernel(ctx, op, images.device)(images.raw, origins, groups, canvas, fill,
                                         weights=weights, mode=mode)
    return ImageBatch(out, images.device)


def _regroup(b: BoxBatch, groups, canvas) -> BoxBatch:
    """Boxes of the input samples as boxes of the output samples: sample k's rows are its
    group's, in order (they are contiguous), on the output canvas."""
    host = b._host_later(lambda h: _regroup(h, groups, canvas))
    return b.replace(offsets=b.offsets[groups], canvas=canvas, region=None, geometry=None,
                     host=host)


# ---- mosaic ---------------------------------------------------------------------------------
def _mosaic_rule(ins, a):
    """Canvases 2s x 2s, and nothing else held: on the device its tiles are warped straight
    into the canvas (ops/multi_plan.py), no tile buffer."""
    s, img = S.pair(a.get("size")), S.first_image(ins)
    if s is None or img is None:
        return S.Out((None,) + ((S.Boxes(None),) if len(ins) > 1 else ()))
    canvas = S.Img((2 * s[0], 2 * s[1]), None, img.channels, 1)
    boxes = ins[1] if len(ins) > 1 and isinstance(ins[1], S.Boxes) else S.Boxes(None)
    return S.Out((canvas,) + ((boxes.on(canvas),) if len(ins) > 1 else ()), 0)


def _mosaic_partners(op, rng, pool_sizes):
    """Draws 0..3 of a sample's stream: applied (< probability) and 3 partners, each uniform
    over its pool (the epoch's records, or its batch: ``partners``)."""
    u = rng.uniform(4)
    applied = u[:, 0] < _probability(op)
    n = np.asarray(pool_sizes, np.int64)[:, None]
    picks = np.minimum((u[:, 1:] * n).astype(np.int64), n - 1)
    picks = np.concatenate([np.full((len(u), 1), -1, np.int64), picks], 1)
    return _groups_of(picks, np.where(applied, 4, 1))


_mosaic_partners.group_size = 4


def mosaic_plan(sizes, groups, centre, s, resize=True):
    """Where each input sample lands (Ultralytics' ``Mosaic._mosaic4``).

    Args:
        sizes: (M, 2) (H, W) of the input samples; groups: (B + 1,) offsets of the outputs'
            groups (4 samples: top-left, top-right, bottom-left, bottom-right; 1: no mosaic).
        centre: (B, 2) integer (xc, yc) on the 2s x 2s canvas; s: the tile size.
        resize: each sample first resized so that its longer side is s (``min(ceil(side * r),
            s)`` with r = s / longer side, as Ultralytics' ``load_image``); else its own size.

    Returns:
        matrices (M, 3, 3): the sample -> its tile (resize, then the integer crop of the part
        that lands on the canvas); tiles (M, 2) (H, W); origins (M, 2) (x0, y0) of the tiles on
        the canvas. A sample alone in its group is centred on the canvas.
    """
    sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
    m = len(sizes)
    owner = np.repeat(np.arange(len(groups) - 1), np.diff(groups))
    q = np.arange(m) - groups[:-1][owner]
    single = np.diff(groups)[owner] == 1
    h0, w0 = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)
    if resize:
        r = s / np.maximum(h0, w0)
        w, h = np.minimum(np.ceil(w0 * r), s), np.minimum(np.ceil(h0 * r), s)
    else:
        w, h = w0, h0
    xc, yc = (np.asarray(centre, np.float64)[owner, k] for k in (0, 1))
    two = 2.0 * s
    left, top = q % 2 == 0, q < 2
    x1a = np.where(left, np.maximum(xc - w, 0), xc)
    x2a = np.where(left, xc, np.minimum(xc + w, two))
    y1a = np.where(top, np.maximum(yc - h, 0), yc)
    y2a = np.where(top, yc, np.minimum(yc + h, two))
    x1b = np.where(left, w - (x2a - x1a), 0)
    y1b = np.where(top, h - (y2a - y1a), 0)
    # alone: centred (the part on the canvas, where it is larger than the canvas)
    cx, cy = np.floor((two - w) / 2), np.floor((two - h) / 2)
    x1a = np.where(single, np.maximum(cx, 0), x1a)
    y1a = np.where(single, np.maximum(cy, 0), y1a)
    x2a = np.where(single, np.minimum(cx + w, two), x2a)
    y2a = np.where(single, np.minimum(cy + h, two), y2a)
    x1b = np.where(single, x1a - cx, x1b)
    y1b = np.where(single, y1a - cy, y1b)
    mats = G.translate(-x1b, -y1b) @ G.scale(w / w0, h / h0)
    tiles = np.stack([y2a - y1a, x2a - x1a], -1).astype(np.int64)
    return mats, tiles, np.stack([x1a, y1a], -1).astype(np.int64)


def _mosaic_on_canvas(ctx, images: ImageBatch, origins, tiles, groups, canvas, fill):
    """The CPU path of a mosaic with the OpenCV warp: the filled canvases (kernels/compose.py),
    each tile warped straight into its place on them (no tile buffers, no paste afterwards).
    The tiles of a group are disjoint (:func:`mosaic_plan`: quadrants around the centre, or one
    tile), so this is ``compose(mode="first")`` of the warped tiles. None where it does not
    apply (GPU, the reference warp, images not decoded yet)."""
    from ..core.batch import DeferredWarp, PlannedImages

    if (images.device != "cpu" or backend.cpu_warp() == "reference" or not images.batch_size
            or isinstance(images.raw, (PlannedImages, DeferredWarp))):
        return None
    fill = np.broadcast_to(np.asarray(fill, np.float64), (len(canvas), images.channels))
    owner = np.repeat(np.arange(len(groups) - 1), np.diff(groups))
    # the tiles are written whole by the warp below: only the canvas around them is filled
    covered = [[(x, y, w, h) for (x, y), (h, w) in zip(origins[owner == b], tiles[owner == b])]
               for b in range(len(canvas))]
    buf = kc.canvas_numpy(canvas, fill, covered)
    views = [buf[int(b)][y:y + h, x:x + w] for b, (x, y), (h, w) in zip(owner, origins, tiles)]
    M.images(images, ctx, into=views)
    return ImageBatch(buf, "cpu")


def mosaic_centres(rng, s):
    """(B, 2) integer centres (xc, yc), ``int(uniform(lo, 2s - lo))`` with ``lo = ceil(s / 2)``:
    Ultralytics' ``_mosaic4`` draws ``int(random.uniform(-x, 2 * s + x))`` with its border
    ``x = -s // 2`` (Python's floor division: ``-ceil(s / 2)``; for an odd s one more than
    ``s // 2``). Draws 4 and 5 of the stream, after the partners."""
    _ = rng.uniform(4)  # the partners' draws (_mosaic_partners)
    lo = -(-s // 2)
    return np.floor(lo + rng.uniform(2) * (2 * s - 2 * lo)).astype(np.int64)


declare_ranges("mosaic", size=Num(2, MAX_SIDE // 2, integer=True, size=True), probability=prob(),
               fill=byte(),
               min_size=nonneg(), min_area=nonneg(), min_visibility=prob(),
               pool_batches=count(0, 1024))
@register("mosaic", rule=_mosaic_rule, plans=True, devices=("cpu", "gpu"), inputs=(1, 2),
          kind="other",
          outputs=lambda n, a: n, partners=_mosaic_partners,
          args={"size": 640, "probability": 1.0, "fill": 114.0, "resize": True,
                "antialias": True, "min_size": 0.0, "min_area": 0.0, "min_visibility": 0.0,
                "partners": "epoch", "pool_batches": 1},
          arg_docs={"partners": _PARTNERS_DOC, "pool_batches": _POOL_DOC,"size": "s: each sample's longer side is resized to s; the canvas is 2s x 2s",
                    "probability": "chance that a sample becomes a mosaic of itself and 3 "
                                   "partners; otherwise it is centred alone on the canvas",
                    "fill": "canvas value where no sample lands (Ultralytics' 114)",
                    "resize": "resize each sample to longer side s first (Ultralytics' "
                              "load_image); False: place it at its own size",
                    "antialias": "antialias the resize where it shrinks (False: bilinear, "
                                 "as Ultralytics' INTER_LINEAR)",
                    "min_size": "drop boxes narrower or lower than this (pixels) in their tile",
                    "min_area": "drop boxes with less area than this in their tile",
                    "min_visibility": "drop boxes whose visible fraction in their tile is under "
                                      "this"},
          output_spec="images uint8 (B, 2s, 2s, C); boxes: the union of the group's, on the canvas",
          doc="Ultralytics' mosaic: each sample and 3 partners (drawn over the epoch, or from its "
              "batch) tiled around a random centre of a 2s x 2s canvas; boxes clipped to their "
              "tile, pruned, fields kept")
def mosaic(ctx, op, inputs, args):
    s = args["size"]
    if isinstance(s, bool) or not float(s).is_integer() or int(s) < 2:
        raise ValueError(f"{op.name}: size must be an integer of at least 2, got {s!r}")
    s = int(s)
    groups, images, boxes = _grouped(ctx, op, *_inputs(op, inputs))
    mats, tiles, origins = mosaic_plan(images.sizes(), groups, mosaic_centres(ctx.rng(op), s), s,
                                       bool(args["resize"]))
    b = len(groups) - 1
    canvas = np.full((b, 2), 2 * s, np.int64)
    tiled = join_chain(ctx, images, mats, tiles, antialias=bool(args["antialias"]))
    out = None
    # the canvas warps below apply no DALI filter: a chain that asked for it (a DALI resize the
    # tiles joined without resampling, resize=False) is made by materialize's filter instead
    if tiled.geometry.filter != "triangle":  # (join_chain always leaves a chain)
        out = _mosaic_on_canvas(ctx, tiled, origins, tiles, groups, canvas, args["fill"])
        if out is None:  # on the GPU, or planned ahead: the tiles warped into the canvases
            out = mosaic_on_device(ctx, tiled, origins, groups, canvas, args["fill"])
    if out is None:
        warped = M.images(tiled, ctx)
        out = _compose(ctx, op, warped, origins, groups, canvas, args["fill"])
    if boxes is None:
        return (out,)
    on_canvas = np.full((len(tiles), 2), 2 * s, np.int64)
    bchain = boxes.pending().then(mats, tiles).then(G.translate(origins[:, 0], origins[:, 1]),
                                                   on_canvas)
    kept = M.prune(boxes.with_geometry(bchain), ctx, min_size=float(args["min_size"]),
                   min_area=float(args["min_area"]), min_visibility=float(args["min_visibility"]))
    return out, _regroup(kept, groups, canvas)


# ---- mixup ----------------------------------------------------------------------------------
def _mixup_partners(op, rng, pool_sizes):
    """Draws 0..1 of a sample's stream: applied (< probability) and the partner, uniform over
    its pool (the epoch's records, or its batch: ``partners``)."""
    u = rng.uniform(2)
    applied = u[:, 0] < _probability(op)
    n = np.asarray(pool_sizes, np.int64)
    picks = np.stack([np.full(len(u), -1, np.int64), np.minimum((u[:, 1] * n).astype(np.int64),
                                                                n - 1)], 1)
    return _groups_of(picks, np.where(applied, 2, 1))


_mixup_partners.group_size = 2
_GAMMA_TRIES = 8


def gamma_draws(rng, a):
    """(B,) Gamma(a, 1) draws from a fixed number of the stream's uniforms (Marsaglia and
    Tsang's method, ``_GAMMA_TRIES`` candidates, the first accepted; a < 1 through
    Gamma(a + 1) U^(1 / a)). All candidates failing (probability below 1e-13 for a >= 1) gives
    the mean, d."""
    a = float(a)
    if not a > 0:
        raise ValueError(f"the Beta parameters must be positive, got {a}")
    boost = rng.uniform(1)[:, 0]
    d = (a if a >= 1 else a + 1) - 1.0 / 3
    c = 1.0 / np.sqrt(9 * d)
    x = rng.normal(_GAMMA_TRIES)
    u = rng.uniform(_GAMMA_TRIES)
    v = (1 + c * x) ** 3
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = (v > 0) & (np.log(u) < 0.5 * x * x + d - d * v + d * np.log(np.where(v > 0, v, 1)))
    first = np.argmax(ok, 1)
    g = np.where(ok.any(1), d * v[np.arange(len(v)), first], d)
    return g if a >= 1 else g * boost ** (1.0 / a)


def mixup_weights(rng, alpha, beta):
    """(B,) int64 weights of the sample itself, of 65536: ``round(r * 65536)`` with r ~
    Beta(alpha, beta) (Ultralytics: Beta(32, 32)); draws after the partners'."""
    _ = rng.uniform(2)  # the partners' draws (_mixup_partners)
    g1, g2 = gamma_draws(rng, alpha), gamma_draws(rng, beta)
    return np.clip(np.round(g1 / (g1 + g2) * kc.ONE), 0, kc.ONE).astype(np.int64)


declare_ranges("mixup", probability=prob(), alpha=positive(), beta=positive(), fill=byte(),
               pool_batches=count(0, 1024))
@register("mixup", rule=S.same_canvas, plans=True, devices=("cpu", "gpu"), inputs=(1, 2),
          kind="other",
          outputs=lambda n, a: n, partners=_mixup_partners,
          args={"probability": 1.0, "alpha": 32.0, "beta": 32.0, "fill": 114.0,
                "weight_field": "mixup_weight", "partners": "epoch", "pool_batches": 1},
          arg_docs={"partners": _PARTNERS_DOC, "pool_batches": _POOL_DOC,"probability": "chance that a sample is blended with a partner drawn over "
                                   "the epoch (Ultralytics' mixup); otherwise it is kept",
                    "alpha": "the sample's weight r ~ Beta(alpha, beta) (Ultralytics: 32, 32)",
                    "beta": "see alpha",
                    "fill": "value of the canvas where one of the two images does not reach",
                    "weight_field": "name of the per-box field holding each box's weight (r for "
                                    "the sample's boxes, 1 - r for the partner's, 1 unblended)"},
          output_spec="images uint8 (B, H, W, C), the larger of the two sizes; boxes of both",
          doc="blend each sample with a partner (drawn over the epoch, or from its batch): "
              "r a + (1 - r) b with r ~ Beta(alpha, beta) per sample, both top-left; boxes of "
              "both, r kept per box")
def mixup(ctx, op, inputs, args):
    for k in ("alpha", "beta"):
        if not float(args[k]) > 0:
            raise ValueError(f"{op.name}: {k} must be positive (a Beta parameter), got {args[k]!r}")
    images, boxes = _inputs(op, inputs)
    # made first: a sample that is also a partner (partners='batch') is warped once
    images, boxes = M.images(images, ctx), None if boxes is None else M.boxes(boxes, ctx)
    groups, images, boxes = _grouped(ctx, op, images, boxes)
    w = mixup_weights(ctx.rng(op), args["alpha"], args["beta"])
    sizes = images.sizes()
    b = len(groups) - 1
    canvas = np.maximum.reduceat(sizes, groups[:-1], axis=0) if b else np.zeros((0, 2), np.int64)
    counts = np.diff(groups)
    owner = np.repeat(np.arange(b), counts)
    first = np.arange(len(owner)) == groups[:-1][owner]
    weights = np.where(counts[owner] == 1, kc.ONE, np.where(first, w[owner], kc.ONE - w[owner]))
    out = _compose(ctx, op, images, np.zeros((len(owner), 2), np.int64), groups, canvas,
                   args["fill"], weights, "weighted")
    if boxes is None:
        return (out,)
    bx = M.boxes(boxes, ctx)
    per_box = (weights / kc.ONE)[bx.sample_index()].astype(np.float32)
    name = str(args["weight_field"])

    def weighted(fields, xp_weights):
        out = dict(fields)
        out[name] = fields[name] * xp_weights if name in fields else xp_weights
        return out

    dev = (backend.upload(per_box, getattr(ctx, "stream", None)) if bx.device == "gpu"
           else per_box)
    host = bx._host_later(lambda h: h.replace(fields=weighted(h.fields, per_box)))
    return out, _regroup(bx.replace(fields=weighted(bx.fields, dev), host=host), groups, canvas)
