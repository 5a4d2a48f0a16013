"""Random crops that know about boxes: SSD's IoU-constrained crop and the random resized crop.

Both sample all attempts' candidate windows for the whole batch in one vectorised draw, then
pick, per sample, the first candidate that satisfies the constraint. Windows are integer pixel
rectangles, so the crop moves pixels exactly and the boxes follow the same matrix.
"""
from __future__ import annotations

import numpy as np

from ..graph import materialize as M
from ..core import geometry as G
from ..core import shapes as S
from .geometry import GEO, apply_geometry, fixed_size_rule, pair, resize_filter
from .registry import Draw, register
from ..graph.arg_check import declare_ranges, Num, count, positive, side


def iou_crop_windows(u, sizes, boxes, offsets, valid, thresholds, allow_no_crop, scale, aspect):
    """Choose SSD crops (torchvision's RandomIoUCrop rule) for a batch.

    Args:
        u: (B, 1 + 4T) uniforms: option choice, then per attempt (w, h, x, y).
        sizes: (B, 2) (H, W); boxes: (N, 4) current boxes; offsets (B + 1,); valid (N,) bool.
    Returns:
        windows (B, 4) int [x0, y0, x1, y1] (the full image where no crop is taken) and keep
        (N,) bool: boxes whose centre lies inside the chosen window.

    A candidate of width W*sw and height H*sh (sw, sh uniform in ``scale``) with aspect ratio
    w/h in ``aspect`` is accepted when at least one valid box has its centre inside it and the
    largest IoU of those boxes with it is >= the sample's threshold. With no valid box, the first
    candidate of allowed aspect is taken. If no attempt succeeds the image is not cropped.
    """
    b = len(sizes)
    n_attempts = (u.shape[1] - 1) // 4
    # one threshold may be given as a number (the declared form: one or a sequence)
    options = np.atleast_1d(thresholds).tolist() + ([None] if allow_no_crop else [])
    choice = np.minimum((u[:, 0] * len(options)).astype(int), len(options) - 1)
    h, w = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)
    a = u[:, 1:].reshape(b, n_attempts, 4)
    lo, hi = scale
    cw = np.maximum(np.round(w[:, None] * (lo + (hi - lo) * a[..., 0])), 1)
    ch = np.maximum(np.round(h[:, None] * (lo + (hi - lo) * a[..., 1])), 1)
    x0 = np.floor(a[..., 2] * (w[:, None] - cw + 1)).clip(0, None)
    y0 = np.floor(a[..., 3] * (h[:, None] - ch + 1)).clip(0, None)
    cand = np.stack([x0, y0, x0 + cw, y0 + ch], -1)
    ar_ok = (cw / ch >= aspect[0]) & (cw / ch <= aspect[1])
    # all samples and attempts at once: boxes padded to (B, Nmax); invalid and padding slots
    # never count as inside
    counts = np.diff(offsets).astype(np.int64)
    nmax = max(int(counts.max(initial=0)), 1)
    slot = np.arange(nmax)[None, :] < counts[:, None]
    idx = np.minimum(offsets[:-1, None] + np.arange(nmax)[None, :], max(len(boxes) - 1, 0))
    bx = boxes[idx] if len(boxes) else np.zeros((b, nmax, 4))
    ok_box = slot & valid[idx] if len(boxes) else np.zeros((b, nmax), bool)
    thr = np.array([np.inf if o is None else o for o in options])[choice]
    has_boxes = ok_box.any(1)
    area_c = cw * ch
    # A window can only pass where some valid box is large enough: IoU <= area_box / area_window,
    # so a window more than 1/thr times the largest box fails for every box (1e-3 of margin keeps
    # the float32 test below the judge of the close cases). Only the samples with a window left
    # are tested box by box: with small boxes and high thresholds that is a few of them.
    area_all = (bx[..., 2] - bx[..., 0]) * (bx[..., 3] - bx[..., 1])
    max_area = np.where(ok_box, area_all, -np.inf).max(1)
    possible = ar_ok & np.isfinite(thr)[:, None] & (
        ~has_boxes[:, None] | (thr[:, None] <= 0)
        | (max_area[:, None] >= thr[:, None] * area_c * (1 - 1e-3)))
    ok = np.zeros((b, n_attempts), bool)
    rows = np.nonzero(possible.any(1))[0]
    if len(rows):
        # layout (S, N, T): the attempts are the long, contiguous inner axis of every broadcast
        # float32: half the memory traffic; windows and boxes are whole or float32 pixels anyway
        sb = bx[rows]
        bx0, by0, bx1, by1 = (np.ascontiguousarray(sb[..., k], np.float32)[:, :, None] for k in range(4))
        cx, cy = (bx0 + bx1) * 0.5, (by0 + by1) * 0.5
        area_b = (bx1 - bx0) * (by1 - by0)
        sc = cand[rows]
        c0, c1, c2, c3 = (np.ascontiguousarray(sc[..., k], np.float32)[:, None, :] for k in range(4))
        inside = (cx > c0) & (cx < c2) & (cy > c1) & (cy < c3) & ok_box[rows, :, None]   # (S, N, T)
        inter = (np.maximum(np.minimum(c2, bx1) - np.maximum(c0, bx0), 0) *
                 np.maximum(np.minimum(c3, by1) - np.maximum(c1, by0), 0))
        union = area_c[rows].astype(np.float32)[:, None, :] + area_b - inter
        iou = inter / np.where(union > 0, union, np.float32(1))
        best = np.where(inside, iou, np.float32(-1)).max(1)                                # (S, T)
        # (rows only holds samples with a finite threshold: without boxes, any window passes)
        ok[rows] = ar_ok[rows] & (~has_boxes[rows, None] | (best >= thr[rows, None]))
    hit = ok.any(1)
    first = ok.argmax(1)
    windows = np.where(hit[:, None], cand[np.arange(b), first], np.stack([np.zeros(b), np.zeros(b), w, h], -1))
    # boxes whose centre leaves the chosen window are dropped (all boxes, valid or not: the mask
    # only ever clears flags)
    win = np.repeat(windows, counts, axis=0)
    acx, acy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    inside_win = (acx > win[:, 0]) & (acx < win[:, 2]) & (acy > win[:, 1]) & (acy < win[:, 3])
    keep = np.where(np.repeat(hit, counts), inside_win, True) if len(boxes) else np.ones(0, bool)
    return windows, keep


declare_ranges("random_iou_crop", thresholds=Num(0.0, 1.0, form='seq'), scaling=positive(1.0,
               form='range'), aspect_ratio=positive(form='range'), num_attempts=count(1, 1 << 16))
@register("random_iou_crop",
          draws=(Draw("threshold"), Draw("attempts", lambda a: 4 * int(a["num_attempts"]))),
          rule=S.same_canvas, plans=True, **GEO,
          args={"thresholds": (0.1, 0.3, 0.5, 0.7, 0.9), "allow_no_crop": True,
                "scaling": (0.3, 1.0), "aspect_ratio": (0.5, 2.0), "num_attempts": 50},
          doc="SSD crop: a window whose IoU with some box is >= a threshold drawn per sample; "
              "boxes whose centre leaves the window are dropped (with their fields)")
def random_iou_crop(ctx, op, inputs, args, draws):
    def plan(sizes, boxes):
        b = len(sizes)
        u = np.concatenate([draws["threshold"], draws["attempts"]], 1)  # iou_crop_windows' u
        if boxes is not None:
            cur, valid = M.current_host_boxes(boxes)
            offsets = boxes.offsets
        else:
            cur, valid, offsets = np.zeros((0, 4)), np.zeros(0, bool), np.zeros(b + 1, np.int64)
        win, keep = iou_crop_windows(u, sizes, cur, offsets, valid, args["thresholds"],
                                     args["allow_no_crop"], pair(args["scaling"], "scaling"),
                                     pair(args["aspect_ratio"], "aspect_ratio"))
        out = np.stack([win[:, 3] - win[:, 1], win[:, 2] - win[:, 0]], -1)
        return G.translate(-win[:, 0], -win[:, 1]), out, keep if boxes is not None else None

    return apply_geometry(ctx, op, inputs, plan)


def resized_crop_windows(u, sizes, scale, ratio):
    """torchvision's RandomResizedCrop window, vectorised over attempts; central crop fallback.
    u: (B, 4T) uniforms (area fraction, log-ratio, x, y per attempt)."""
    b = len(sizes)
    t = u.shape[1] // 4
    h, w = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)
    a = u.reshape(b, t, 4)
    area = (h * w)[:, None] * (scale[0] + (scale[1] - scale[0]) * a[..., 0])
    logr = np.log(ratio[0]) + (np.log(ratio[1]) - np.log(ratio[0])) * a[..., 1]
    r = np.exp(logr)
    cw = np.round(np.sqrt(area * r))
    ch = np.round(np.sqrt(area / r))
    ok = (cw > 0) & (ch > 0) & (cw <= w[:, None]) & (ch <= h[:, None])
    first = np.where(ok.any(1), ok.argmax(1), -1)
    # fallback: central crop with the ratio clamped into range
    in_r = w / h
    fw = np.where(in_r < ratio[0], w, np.where(in_r > ratio[1], np.round(h * ratio[1]), w))
    fh = np.where(in_r < ratio[0], np.round(w / ratio[0]), h)
    idx = np.arange(b)
    sel = np.maximum(first, 0)
    cw_s = np.where(first >= 0, cw[idx, sel], fw)
    ch_s = np.where(first >= 0, ch[idx, sel], fh)
    x0 = np.where(first >= 0, np.floor(a[idx, sel, 2] * (w - cw_s + 1)).clip(0, None), np.floor((w - cw_s) / 2))
    y0 = np.where(first >= 0, np.floor(a[idx, sel, 3] * (h - ch_s + 1)).clip(0, None), np.floor((h - ch_s) / 2))
    return np.stack([x0, y0, x0 + cw_s, y0 + ch_s], -1)


declare_ranges("random_resized_crop", size=side(), random_area=positive(1.0, form='range'),
               random_aspect_ratio=positive(form='range'), num_attempts=count(1, 1 << 16))
@register("random_resized_crop", draws=(Draw("attempts", lambda a: 4 * int(a["num_attempts"])),),
          rule=fixed_size_rule, plans=True, **GEO,
          args={"size": None, "random_area": (0.08, 1.0), "random_aspect_ratio": (3 / 4, 4 / 3),
                "num_attempts": 10, "antialias": True},
          doc="Inception-style crop (area and aspect ranges) resized to size=(h, w); boxes follow")
def random_resized_crop(ctx, op, inputs, args, draws):
    if args["size"] is None:
        raise ValueError(f"{op.name}: random_resized_crop needs size=(h, w)")
    oh, ow = pair(args["size"], "size")

    def plan(sizes, boxes):
        win = resized_crop_windows(draws["attempts"], sizes,
                                   pair(args["random_area"], "random_area"),
                                   pair(args["random_aspect_ratio"], "random_aspect_ratio"))
        cw, ch = win[:, 2] - win[:, 0], win[:, 3] - win[:, 1]
        m = G.scale(ow / cw, oh / ch) @ G.translate(-win[:, 0], -win[:, 1])
        return m, np.tile([oh, ow], (len(sizes), 1)), None

    # images alone (DALI's form of the op): DALI's triangle filter over the window, as its
    # resize of the ROI (taps beyond the window); with boxes (detaug's form) detaug's warp,
    # its taps clamped to the window (a crop, then a resize)
    filt = resize_filter(inputs, args)
    return apply_geometry(ctx, op, inputs, plan, antialias=bool(args["antialias"]), filter=filt,
                          roi=filt == "triangle")
