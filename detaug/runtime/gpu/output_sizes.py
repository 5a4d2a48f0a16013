"""A launch's device bytes, read off the graph at build: what its outputs take and what its ops
hold while they run (the memory plan's inputs: detaug/runtime/gpu/memory_plan.py).

Each value of the graph is followed symbolically from the reader's annotated image sizes: an
image as its canvas (``hw``, the same for every sample: after resize, letterbox, a fixed crop,
mosaic) or an upper bound of it (``bound``: after a random crop, a flip, a rotation that keeps
the canvas), its channels and bytes per channel; boxes carry the canvas of their images (so
``retinanet_encode`` knows its anchor count); arrays their bytes per sample. Where an op's
output size cannot be known before it runs (a resize to a per-sample size, an op this module
does not know) the estimate is None and the plan measures the first launch instead.

Working memory: what a launch holds besides its outputs while its ops run. On the GPU a chain of
geometric ops, and a normalize after it, is one warp that writes the output directly, so a
geometric op's image is held only where a non-geometric op reads it (a colour op other than
normalize, mosaic, mixup, a pixel op), and any other op's image (a colour op's, a mosaic's) is
held where another op reads it; all of them count, since a launch keeps every value of its
graph until its outputs are collected (runtime/context.py: ``BatchContext.values``). A mosaic
also holds its tiles (each sample resized to s x s before they
are composed) and a mixup its partners' images. Decoded images are the decode side's (the ring
of a decode process). Boxes and small arrays are counted at ``BOX_BYTES`` a sample."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

BOX_BYTES = 100 * 32   # per sample and box output: 100 boxes of 32 bytes (coordinates, label, ...)
# color/pixel ops that the GPU warp applies in its one launch (they never hold an image of their own)
FUSED_INTO_WARP = {"normalize", "crop_mirror_normalize"}
_KEEP_CANVAS = {"flip", "random_iou_crop", "affine", "perspective", "materialize", "_upload",
                "random_erasing", "erase", "brightness_contrast", "hsv", "photometric_distort",
                "grayscale", "gaussian_blur", "noise", "noise.gaussian", "noise.salt_and_pepper",
                "noise.shot", "jitter", "jpeg_compression", "mixup", "warp_affine"}


@dataclasses.dataclass(frozen=True)
class Img:
    hw: tuple | None        # the canvas of every sample, or None
    bound: tuple | None     # an upper bound of each sample's (h, w), or None (unknown)
    channels: int = 3
    itemsize: int = 1

    def sample_bytes(self):
        hw = self.hw or self.bound
        return None if hw is None else int(hw[0]) * int(hw[1]) * self.channels * self.itemsize


@dataclasses.dataclass(frozen=True)
class Boxes:
    canvas: Img | None


@dataclasses.dataclass(frozen=True)
class Array:
    sample_bytes: int


@dataclasses.dataclass(frozen=True)
class LaunchBytes:
    """One batch's device bytes (a launch of k batches takes k times these)."""
    outputs: int                 # the batch's outputs
    working: int                 # held besides them while its ops run
    parts: tuple = ()            # (name, bytes) of each output, for messages


def _pair(v):
    """(h, w) from an int or a pair of constants; None for anything else (a DataNode, None)."""
    if isinstance(v, (bool, np.bool_)) or v is None:
        return None
    if isinstance(v, (int, float, np.integer, np.floating)):
        return (int(round(v)), int(round(v))) if v > 0 else None
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(
            isinstance(x, (int, float, np.integer, np.floating)) and x > 0 for x in v):
        return (int(round(v[0])), int(round(v[1])))
    return None


def _resize(img, a):
    size = _pair(a.get("size"))
    if size is None and a.get("resize_x") is not None and a.get("resize_y") is not None:
        size = _pair((a["resize_y"], a["resize_x"]))
    if size is not None:
        mode, keep = a.get("mode") or "default", a.get("keep_aspect")
        if mode == "not_smaller" or keep == "cover":
            return None  # covers size: larger along one side, by each image's aspect
        if keep or mode == "not_larger":
            return Img(None, size, img.channels, img.itemsize)  # fits inside size
        return Img(size, None, img.channels, img.itemsize)
    for key in ("resize_longer", "max_size"):
        if _pair(a.get(key)) is not None:
            return Img(None, _pair(a[key]), img.channels, img.itemsize)
    return None


def _image_rule(name, img: Img, a):
    """The image output of op ``name`` (its arguments ``a``) from its image input ``img``."""
    fixed = lambda hw: Img(hw, None, img.channels, img.itemsize) if hw else None  # noqa: E731
    if name in _KEEP_CANVAS:
        if name == "warp_affine" and _pair(a.get("size")):
            return fixed(_pair(a["size"]))
        return Img(None, img.hw or img.bound, img.channels, img.itemsize)
    if name == "resize":
        return _resize(img, a)
    if name in ("letterbox", "random_resized_crop"):
        return fixed(_pair(a.get("size")))
    if name == "scale_jitter":
        return fixed(_pair(a.get("size"))) if a.get("crop") and a.get("pad") else None
    if name == "random_shortest_size":
        return Img(None, _pair(a.get("max_size")), img.channels, img.itemsize) if _pair(a.get("max_size")) else None
    if name == "crop":
        hw = _pair(a.get("crop")) or (_pair((a["crop_h"], a["crop_w"]))
                                      if a.get("crop_h") is not None and a.get("crop_w") is not None else None)
        return fixed(hw) if hw else Img(None, img.hw or img.bound, img.channels, img.itemsize)
    if name == "rotate":
        if _pair(a.get("size")):
            return fixed(_pair(a["size"]))
        src = img.hw or img.bound
        if not (a.get("expand") or a.get("keep_size") is False):
            return Img(None, src, img.channels, img.itemsize)
        d = None if src is None else int(math.ceil(math.hypot(*src))) + 1
        return Img(None, None if d is None else (d, d), img.channels, img.itemsize)
    if name == "zoom_out":
        src, r = img.hw or img.bound, a.get("ratio")
        top = max(r) if isinstance(r, (tuple, list)) else r
        if src is None or not isinstance(top, (int, float)):
            return None
        return Img(None, (int(math.ceil(src[0] * top)), int(math.ceil(src[1] * top))),
                   img.channels, img.itemsize)
    if name in ("normalize", "crop_mirror_normalize"):
        dtype = str(a.get("dtype") or a.get("output_dtype") or "float32").lower()
        itemsize = 2 if "16" in dtype else 1 if "uint8" in dtype else 4
        ch = 4 if a.get("pad_output") else img.channels
        hw = img.hw or img.bound
        if name == "crop_mirror_normalize":
            crop = _pair(a.get("crop")) or (_pair((a["crop_h"], a["crop_w"]))
                                            if a.get("crop_h") is not None and a.get("crop_w") is not None else None)
            if crop:
                return Img(crop, None, ch, itemsize)
        return Img(img.hw, None if img.hw else hw, ch, itemsize)
    return None


def _multiplier(op, levels, by_id) -> int:
    """Samples of this op per output sample (ops under a mosaic run on 4 samples each)."""
    from ..partners import samples_per_output

    return samples_per_output(levels.get(op.id, ()), by_id)


def batch_bytes(ops, outputs, sizes_hw, batch_size, levels=None):
    """:class:`LaunchBytes` of one batch of ``batch_size`` (None where some output's size is not
    known before the graph runs). ``ops``: the needed ops, inputs first; ``outputs``: the
    pipeline's output DataNodes; ``sizes_hw``: the reader's (N, 2) annotated sizes (None:
    unknown); ``levels``: multi-sample levels (detaug/runtime/partners.py). Decoded images are
    the decode side's (memory_plan counts them), not the launch's."""
    levels, by_id = levels or {}, {op.id: op for op in ops}
    top = None
    if sizes_hw is not None and len(sizes_hw):
        hw = np.asarray(sizes_hw, np.int64).reshape(-1, 2)
        top = (int(hw[:, 0].max()), int(hw[:, 1].max()))
    vals, held, extra = {}, [], 0
    consumers = {}
    for op in ops:
        for i in op.inputs:
            consumers.setdefault((i.op.id, i.index), []).append(op)
    for op in ops:
        name, a = op.schema.name, {**op.schema.args, **op.args}
        ins = [vals.get((i.op.id, i.index)) for i in op.inputs]
        img = next((v for v in ins if isinstance(v, Img)), None)
        mult = _multiplier(op, levels, by_id)
        if name.startswith("decoders."):
            ch = 1 if "GRAY" in str(a.get("output_type", "RGB")).upper() else 3
            out = {0: Img(None, top, ch, 1)}
        elif name == "retinanet_encode":
            b = ins[0] if ins and isinstance(ins[0], Boxes) else None
            canvas = b.canvas.hw if b is not None and b.canvas is not None else None
            if canvas is None or a.get("num_classes") is None:
                out = {0: None, 1: None}
            else:
                from ...targets.retinanet import AnchorConfig, feature_shapes

                cfg = AnchorConfig(tuple(a["sizes"]), tuple(a["strides"]), tuple(a["ratios"]),
                                   tuple(a["scales"]))
                n = sum(h * w for h, w in feature_shapes(canvas, cfg)) * cfg.anchors_per_cell
                out = {0: Array(n * 5 * 4), 1: Array(n * (int(a["num_classes"]) + 1) * 4)}
        elif name == "mosaic":
            s = _pair(a.get("size"))
            src = img if img is not None else None
            out = {0: None if s is None or src is None else Img((2 * s[0], 2 * s[1]), None, src.channels, 1)}
            if s is not None and src is not None:  # each tile resized to s x s before composing
                extra += mult * 4 * s[0] * s[1] * src.channels
            if len(ins) > 1:
                out[1] = Boxes(out[0])
        elif op.schema.kind == "source":  # encoded bytes (host), then boxes and their fields
            out = {k: Boxes(None) for k in range(1, len(op.outputs))}
        elif op.schema.kind == "random":
            out = {}
        elif op.schema.kind == "box" and name != "pad_boxes":
            out = {k: v for k, v in enumerate(ins) if isinstance(v, Boxes)} or {0: Boxes(None)}
        elif name == "pad_boxes":
            n = a.get("max_boxes")
            out = {0: Array((int(n) if n else 100) * 32)}
        else:
            new = None if img is None else _image_rule(name, img, a)
            out = {}
            for k, v in enumerate(ins):
                if isinstance(v, Img):
                    out[k] = new
                elif isinstance(v, Boxes):
                    out[k] = Boxes(new)
        for k, v in out.items():
            vals[(op.id, k)] = v
            if isinstance(v, Img) and not name.startswith("decoders."):
                users = consumers.get((op.id, k), [])
                # a geometric op's image read only by geometric ops (and normalize) is never
                # made: the chain is one warp
                fused = op.schema.kind == "geometric" and all(
                    u.schema.kind == "geometric" or u.schema.name in FUSED_INTO_WARP for u in users)
                if users and not fused and v.sample_bytes() is not None:
                    held.append(v.sample_bytes() * mult)
    parts, total = [], 0
    for node in outputs:
        v = vals.get((node.op.id, node.index))
        if node.device == "cpu":
            continue
        if isinstance(v, Img):
            nb = v.sample_bytes()
        elif isinstance(v, Array):
            nb = v.sample_bytes
        elif isinstance(v, Boxes):
            nb = BOX_BYTES
        else:
            nb = None
        if nb is None:
            return None
        parts.append((node.name, nb * batch_size))
        total += nb * batch_size
    work = (sum(held) + extra) * batch_size + pool_slack(parts)
    return LaunchBytes(total, work, tuple(parts))


SLACK_MIN = 16 * 2**20  # outputs from this size on count for the pool's fragmentation


def pool_slack(parts) -> int:
    """What cupy's pool holds besides the live outputs where a batch has several large outputs
    of different sizes: it serves a request from a larger freed block by splitting it, so the
    blocks freed by one launch do not all fit the next one's requests and the pool grows by one
    block of the largest output. Measured (H100, tests/test_memory_plan_gpu.py): the RetinaNet
    input at batch 16 (outputs of 79, 25 and 398 MB a batch) pooled 1,401 MB for two launches of
    501 MB. One large output (the benchmark pipeline's image batch) splits nothing: no slack."""
    large = sorted(b for _, b in parts if b >= SLACK_MIN)
    return large[-1] if len(large) >= 2 else 0
