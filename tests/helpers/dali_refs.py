"""References of DALI's ops written out in float64: the BoxEncoder rules as plain loops (shared by
the box_encoder tests on the host and on the device), and the triangle filter of DALI's resize
with the check of a uint8 result against it (the pipeline tests of the resize's filter, one
resize and several), and the anchor of DALI's crop window."""
import numpy as np


def encode_ref(boxes, labels, anchors, criteria=0.5, offset=False, scale=2.0, means=(0,) * 4,
               stds=(1,) * 4):
    """DALI's BoxEncoder of one sample in float64: ((m, 4) encoded boxes, (m,) labels); the
    offsets are taken after multiplying by ``scale``, as DALI does (it cancels)."""
    def iou(a, b):
        iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        u = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - iw * ih
        return iw * ih / u if u > 0 else 0.0

    def cwh(b):
        return [(b[0] + b[2]) / 2, (b[1] + b[3]) / 2, b[2] - b[0], b[3] - b[1]]

    n, m = len(boxes), len(anchors)
    ious = [[iou(boxes[i], anchors[j]) for j in range(m)] for i in range(n)]
    for i in range(n):  # each box's best anchor (the last of ties) is forced: IoU 2
        best = 0
        for j in range(m):
            if ious[i][j] >= ious[i][best]:
                best = j
        ious[i][best] = 2.0
    out = np.array([[0.0] * 4 if offset else cwh(a) for a in anchors])
    lab = np.zeros(m, np.int64)
    for j in range(m):
        best = 0
        for i in range(n):
            if ious[i][j] >= ious[best][j]:
                best = i
        if n and ious[best][j] > criteria:
            b, a = np.array(cwh(boxes[best])) * scale, np.array(cwh(anchors[j])) * scale
            if offset:
                out[j] = (np.r_[(b[:2] - a[:2]) / a[2:], np.log(b[2:] / a[2:])] - means) / stds
            else:
                out[j] = cwh(boxes[best])
            lab[j] = labels[best]
    return out, lab


def triangle_axis(n_in: int, n_out: int, req: float | None = None) -> np.ndarray:
    """(n_out, n_in) float64: one axis of DALI's resize (antialiased linear = its triangle):
    output ``i`` centred at input ``t = (i + 0.5) * in / out``, input ``p`` weighed
    ``max(0, 1 - |p + 0.5 - t| / R)``, ``R = max(1, in / out)``, normalised, taps clamped to
    the image. ``req``: the size asked for (fractional: DALI's subpixel_scale moves the input
    region ``[0, in]`` about its centre by ``adj = out / req`` and resizes that region, radius
    its extent / out); None: the image onto ``n_out``."""
    adj = 1.0 if req is None else min(n_out / req, 10.0)
    lo = n_in / 2 * (1 - adj)
    s = n_in * adj / n_out
    r = max(1.0, s)
    w = np.zeros((n_out, n_in))
    for i in range(n_out):
        t = lo + (i + 0.5) * s
        ps = np.arange(int(np.floor(t - 0.5 - r)), int(np.ceil(t - 0.5 + r)) + 1)
        k = np.maximum(0.0, 1.0 - np.abs(ps + 0.5 - t) / r)
        np.add.at(w[i], np.clip(ps, 0, n_in - 1), k / k.sum())
    return w


def dali_resize(img, oh: int, ow: int, req=None) -> np.ndarray:
    """(oh, ow, C) float64, not rounded: DALI's resize of the HWC ``img`` (``req``: the
    fractional (h, w) asked for, see :func:`triangle_axis`)."""
    rh, rw = (None, None) if req is None else req
    return np.einsum("ij,jkc,lk->ilc", triangle_axis(img.shape[0], oh, rh),
                     np.asarray(img, np.float64), triangle_axis(img.shape[1], ow, rw),
                     optimize=True)


def dali_u8(ref) -> np.ndarray:
    """A float resize's uint8 image as DALI's CPU resize makes it: + 0.5, truncated, clamped."""
    return np.clip(np.floor(np.asarray(ref, np.float64) + 0.5), 0, 255).astype(np.uint8)


def assert_rounded(out, ref, tol: float = 1e-3):
    """``out`` (a uint8 image) is the float64 ``ref`` rounded half up, but within ``tol`` of a
    half, either way (1e-3: float32 sums, the CPU backend's fast path and the kernel; 1e-6: the
    float64 twin's rounding of its sample points)."""
    out = np.asarray(out).astype(np.float64)
    want = np.clip(np.floor(ref + 0.5), 0, 255)
    tie = np.abs(ref - np.floor(ref) - 0.5) < tol
    ok = (out == want) | (tie & (np.abs(out - ref) <= 0.5 + tol))
    assert ok.all(), (np.argwhere(~ok)[:5], out[~ok][:5], ref[~ok][:5])


def round_away(v: float) -> int:
    """C++'s std::round / llround: the nearest integer, halves away from zero."""
    return int(np.sign(v) * np.floor(abs(v) + 0.5))


def dali_crop_anchor(pos: float, margin: int) -> int:
    """DALI's CropAttr: std::round(double(float pos) * (in - crop)), halves away from zero."""
    return round_away(float(np.float32(pos)) * margin)
