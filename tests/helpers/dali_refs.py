"""References of DALI's tensor ops, written out from DALI's BoxEncoder rules as plain float64 loops (shared by the
box_encoder tests on the host and on the device)."""
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
