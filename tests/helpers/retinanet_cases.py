"""RetinaNet parity cases shared by the GPU tests (tests/targets/test_retinanet.py) and the CPU
emulation of retinanet.cu (tests/kernels/test_kernel_parity.py): random batches, and the check
that the cupy path agrees with the float64 reference except where float32 rounding may decide
(an IoU within 1e-6
of a threshold, two boxes within 1e-6 of an anchor's best IoU, or two anchors within 1e-6 of a
box's best IoU under force_match; such anchors are counted and printed)."""
import numpy as np

from detaug.targets import retinanet as rn

EPS = 1e-6
C = 80


def random_batch(rng, batch, boxes_per_image, hw, num_classes=C, ragged=True):
    h, w = hw
    counts = rng.integers(0, boxes_per_image + 1, batch) if ragged else np.full(batch, boxes_per_image)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(offsets[-1])
    xy = rng.uniform(-10, [w, h], (n, 2))
    wh = rng.uniform(2, [w * 0.5, h * 0.5], (n, 2))
    boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
    return boxes, rng.integers(0, num_classes, n).astype(np.int64), offsets, rng.random(n) > 0.2


def ambiguous_anchors(anchors, boxes, offsets, valid, cfg, region):
    """(B, A) bool: anchors whose state, gt or forced match float32 rounding may decide."""
    batch, num_anchors = len(offsets) - 1, len(anchors)
    out = np.zeros((batch, num_anchors), bool)
    centres = rn._anchor_centres(anchors)
    for b in range(batch):
        idx = np.arange(offsets[b], offsets[b + 1])
        idx = idx if valid is None else idx[valid[idx]]
        if not idx.size:
            continue
        iou = rn.iou_matrix(anchors, boxes[idx])
        top = np.sort(iou, axis=1)[:, ::-1]
        best = top[:, 0]
        out[b] |= np.abs(best - cfg.positive_overlap) < EPS
        out[b] |= np.abs(best - cfg.negative_overlap) < EPS
        if top.shape[1] > 1:
            out[b] |= (best - top[:, 1] < EPS) & (best > 0)
        if cfg.force_match:
            inside = (centres[:, 0] < region[b, 1]) & (centres[:, 1] < region[b, 0])
            col = np.where(inside[:, None], iou, -1.0)
            col_sorted = np.sort(col, axis=0)[::-1]
            for n in np.flatnonzero(col_sorted[0] - col_sorted[1] < EPS):
                out[b] |= col[:, n] > col_sorted[0, n] - EPS
    return out


def check_parity(cp, anchors, boxes, labels, offsets, valid=None, image_sizes=None, canvas=None,
                 cfg=rn.TargetConfig()):
    """``cp``: cupy, or the fake of tests/helpers/cuda_emulation.py."""
    kw = dict(valid=valid, image_sizes=image_sizes, canvas=canvas, config=cfg)
    reg_ref, lab_ref = rn.encode_targets_numpy(anchors, boxes, labels, offsets, C, **kw)
    dev = dict(kw, valid=None if valid is None else cp.asarray(valid),
               image_sizes=None if image_sizes is None else cp.asarray(image_sizes))
    reg_gpu, lab_gpu = rn.encode_targets_cupy(cp.asarray(anchors), cp.asarray(boxes), cp.asarray(labels),
                                              offsets, C, **dev)
    assert isinstance(reg_gpu, cp.ndarray) and reg_gpu.dtype == cp.float32 and lab_gpu.dtype == cp.float32
    reg_gpu, lab_gpu = reg_gpu.get(), lab_gpu.get()
    assert reg_gpu.shape == reg_ref.shape and lab_gpu.shape == lab_ref.shape
    mismatch = (reg_gpu[..., 4] != reg_ref[..., 4]) | np.any(lab_gpu != lab_ref, axis=-1)
    mismatch |= ~np.all(np.isclose(reg_gpu[..., :4], reg_ref[..., :4], rtol=1e-5, atol=1e-4), axis=-1)
    if mismatch.any():
        region = rn._valid_region(image_sizes, canvas, len(offsets) - 1)
        allowed = ambiguous_anchors(anchors, boxes, offsets, valid, cfg, region)
        unexplained = mismatch & ~allowed
        assert not unexplained.any(), f"{int(unexplained.sum())} anchors differ: {np.argwhere(unexplained)[:10]}"
        print(f"GPU/NumPy: {int(mismatch.sum())} anchors differ, each within {EPS} of a float32 decision")
    return reg_ref
