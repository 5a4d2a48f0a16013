"""RetinaNet target encoding as a pipeline op, on the batch's device (detaug/targets/retinanet.py)."""
from __future__ import annotations

import functools

import numpy as np

from ..graph import materialize as M
from ..core import backend
from ..core import shapes as S
from ..core.batch import BoxBatch
from ..targets.retinanet import AnchorConfig, RetinaNetEncoder, TargetConfig
from .registry import register
from ..graph.arg_check import declare_ranges, MAX_SIDE, count, positive, prob


@functools.lru_cache(maxsize=32)
def _encoder(num_classes, image_size, anchors: AnchorConfig, targets: TargetConfig):
    """Anchors depend only on the configuration: made once, shared by every batch."""
    return RetinaNetEncoder(num_classes, image_size, anchors, targets)


declare_ranges("retinanet_encode", num_classes=count(1, 1 << 20), sizes=positive(MAX_SIDE,
               form='seq'), strides=count(1, MAX_SIDE, form='seq'), ratios=positive(form='seq'),
               scales=positive(form='seq'), positive_overlap=prob(), negative_overlap=prob(),
               std=positive(form='seq'))
def _encoded_rule(ins, a):
    """Regression (A, 5) and labels (A, C + 1) float32 per sample, A the anchors of the boxes'
    canvas (known where the images have one canvas)."""
    b = ins[0] if ins and isinstance(ins[0], S.Boxes) else None
    canvas = b.canvas.hw if b is not None and b.canvas is not None else None
    if canvas is None or a.get("num_classes") is None:
        return S.Out((None, None))
    from ..targets.retinanet import feature_shapes

    cfg = AnchorConfig(tuple(a["sizes"]), tuple(a["strides"]), tuple(a["ratios"]),
                       tuple(a["scales"]))
    n = sum(h * w for h, w in feature_shapes(canvas, cfg)) * cfg.anchors_per_cell
    return S.Out((S.Array(n * 5 * 4), S.Array(n * (int(a["num_classes"]) + 1) * 4)))


@register("retinanet_encode", rule=_encoded_rule, plans=False, devices=("cpu", "gpu"),
          inputs=(1, 1), outputs=2, kind="box",
          args={"num_classes": None, "sizes": (32, 64, 128, 256, 512), "strides": (8, 16, 32, 64, 128),
                "ratios": (0.5, 1.0, 2.0), "scales": (1.0, 2 ** (1 / 3), 2 ** (2 / 3)),
                "positive_overlap": 0.5, "negative_overlap": 0.4, "force_match": False,
                "std": 0.2, "ignore_padding": True},
          output_spec="regression (B, A, 5) float32, labels (B, A, C + 1) float32 (keras-retinanet)",
          doc="RetinaNet targets in keras-retinanet's layout: anchor IoU matching, corner offsets / "
              "std, one-hot labels, anchor state last (-1 ignore, 0 background, 1 object)")
def retinanet_encode(ctx, op, inputs, args):
    b = inputs[0]
    if not isinstance(b, BoxBatch):
        raise TypeError(f"{op.name}: takes boxes, got {type(b).__name__}")
    if args["num_classes"] is None:
        raise ValueError(f"{op.name}: num_classes is required")
    b = M.boxes(b, ctx)
    if b.batch_size and (b.canvas != b.canvas[0]).any():
        raise ValueError(f"{op.name}: images of one batch must share one size (resize or "
                         f"letterbox first); got {sorted(set(map(tuple, b.canvas.tolist())))}")
    size = tuple(int(v) for v in b.canvas[0]) if b.batch_size else (1, 1)
    std = args["std"]
    enc = _encoder(int(args["num_classes"]), size,
                   AnchorConfig(tuple(args["sizes"]), tuple(args["strides"]), tuple(args["ratios"]),
                                tuple(args["scales"])),
                   TargetConfig(args["positive_overlap"], args["negative_overlap"],
                                bool(args["force_match"]), std=(std,) * 4 if np.ndim(std) == 0 else tuple(std)))
    # anchors centred in padding are ignored: the content region's far corner bounds the valid part
    valid_hw = b.content_region()[:, [3, 2]] if args["ignore_padding"] else None
    if valid_hw is not None and b.device == "gpu":
        valid_hw = backend.upload(valid_hw.astype(np.float32))
    return enc(b.boxes, b.labels, b.offsets, valid=b.valid, image_sizes=valid_hw)
