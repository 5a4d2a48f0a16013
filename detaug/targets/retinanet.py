"""RetinaNet anchors and training targets in keras-retinanet's layout.

Anchors
    For pyramid level ``l`` with base size ``s_l`` and stride ``t_l`` the feature map of an
    ``(H, W)`` canvas has ``ceil(H / t_l) x ceil(W / t_l)`` cells. Cell ``(i, j)`` has its centre
    at ``((j + 0.5) t_l, (i + 0.5) t_l)`` and carries ``len(ratios) * len(scales)`` anchors,
    ratio-major (for each ratio, for each scale, as keras-retinanet's ``generate_anchors``): with
    ``area = (s_l * scale)^2``, ``w = sqrt(area / ratio)``, ``h = w * ratio`` (ratio is h / w);
    the half sizes ``w / 2``, ``h / 2`` are rounded to multiples of 2^-10 px (see base_anchors).
    Order: level by level, then cells row-major (i, then j), then the anchors of a cell.
    Boxes are ``float32 [x0, y0, x1, y1]`` in continuous pixel coordinates (docs/design.md).

Targets (per image, over that image's valid boxes)
    ``iou[a, n]`` is the intersection over union of anchor ``a`` and box ``n`` (0 when they do
    not overlap with positive width and height). ``m[a] = max_n iou[a, n]``; ``g[a]`` is its
    argmax (ties -> lowest box index). The anchor state is ``1`` if ``m >= positive_overlap``,
    ``-1`` if ``negative_overlap < m < positive_overlap``, ``0`` otherwise (and ``0`` for every
    anchor of an image without boxes). With ``force_match`` each box ``n`` also takes its best
    anchor ``a*(n) = argmax_a iou[a, n]`` over anchors inside the valid region with ``iou > 0``
    (ties -> lowest anchor index): that anchor becomes positive with ``g = n`` (when several
    boxes force one anchor the highest box index wins, as a sequential loop over boxes would).
    Finally an anchor whose centre ``c`` has ``c_x >= W_valid`` or ``c_y >= H_valid`` is ignored
    (``-1``), as keras-retinanet does for the padded part of a batch.

    ``regression[b, a] = [(gx0 - ax0) / aw, (gy0 - ay0) / ah, (gx1 - ax1) / aw, (gy1 - ay1) / ah]``
    with ``gt = box g[a]``, then ``(r - mean) / std``; the fifth column is the state. As in
    keras-retinanet it is filled for every anchor of an image that has boxes (the loss uses only
    positives) and is zero for images without boxes. ``labels[b, a, :C]`` is the one-hot class of
    ``g[a]`` for positive anchors and all-zero otherwise; ``labels[b, a, C]`` is the state.

The NumPy functions are the float64 reference (the twin of ``kernels/retinanet.cu``); the CuPy
function is one kernel launch per batch (two with ``force_match``). cupy is imported lazily.
"""
from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

_BLOCK = 128  # threads per block; equals RN_BLOCK in kernels/retinanet.cu
_SOURCE = "retinanet.cu"
_GRID = 1024.0  # anchor half sizes are multiples of 1 / _GRID px


@dataclasses.dataclass(frozen=True)
class AnchorConfig:
    """Anchor geometry: one base size and stride per pyramid level (default P3-P7)."""

    sizes: tuple = (32, 64, 128, 256, 512)
    strides: tuple = (8, 16, 32, 64, 128)
    ratios: tuple = (0.5, 1.0, 2.0)
    scales: tuple = (2.0 ** 0.0, 2.0 ** (1.0 / 3.0), 2.0 ** (2.0 / 3.0))

    def __post_init__(self):
        for name in ("sizes", "strides", "ratios", "scales"):
            value = tuple(float(v) for v in getattr(self, name))
            if not value or min(value) <= 0:
                raise ValueError(f"AnchorConfig.{name} must be a non-empty tuple of positive numbers")
            object.__setattr__(self, name, value)
        if len(self.sizes) != len(self.strides):
            raise ValueError("AnchorConfig.sizes and strides need one entry per pyramid level")

    @property
    def anchors_per_cell(self) -> int:
        return len(self.ratios) * len(self.scales)


@dataclasses.dataclass(frozen=True)
class TargetConfig:
    """Matching thresholds and regression normalisation (keras-retinanet defaults)."""

    positive_overlap: float = 0.5
    negative_overlap: float = 0.4
    force_match: bool = False
    mean: tuple = (0.0, 0.0, 0.0, 0.0)
    std: tuple = (0.2, 0.2, 0.2, 0.2)

    def __post_init__(self):
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))
        if len(self.mean) != 4 or len(self.std) != 4 or min(abs(s) for s in self.std) == 0:
            raise ValueError("TargetConfig.mean and std need 4 values each, std non-zero")
        if not self.negative_overlap <= self.positive_overlap:
            raise ValueError("TargetConfig needs negative_overlap <= positive_overlap")


# ----------------------------------------------------------------------------------- anchors

def base_anchors(size: float, ratios, scales) -> np.ndarray:
    """``(len(ratios) * len(scales), 4)`` float64 anchors centred at 0 (keras-retinanet order)."""
    ratio = np.repeat(np.asarray(ratios, np.float64), len(scales))
    scale = np.tile(np.asarray(scales, np.float64), len(ratios))
    w = np.sqrt((size * scale) ** 2 / ratio)
    h = w * ratio
    # Half sizes on a 2^-10 px grid (< 0.0005 px from keras-retinanet's values): every anchor
    # coordinate is then exact in float32 for canvases below 16384 px, so all anchors of one
    # shape have bit-identical widths and areas, and the IoU ties they create (a box inside
    # several same-shape anchors) are exact ties on every backend, broken by lowest index.
    hw, hh = np.round(0.5 * w * _GRID) / _GRID, np.round(0.5 * h * _GRID) / _GRID
    return np.stack([-hw, -hh, hw, hh], axis=1)


def feature_shapes(image_shape, config: AnchorConfig) -> list:
    """``[(ceil(H / stride), ceil(W / stride)) for each level]``."""
    h, w = (int(v) for v in image_shape)
    return [(math.ceil(h / s), math.ceil(w / s)) for s in config.strides]


@functools.lru_cache(maxsize=64)
def _anchors_cached(image_shape: tuple, config: AnchorConfig) -> np.ndarray:
    levels = []
    for (fh, fw), size, stride in zip(feature_shapes(image_shape, config), config.sizes, config.strides):
        cx, cy = np.meshgrid((np.arange(fw) + 0.5) * stride, (np.arange(fh) + 0.5) * stride)
        shifts = np.stack([cx.ravel(), cy.ravel(), cx.ravel(), cy.ravel()], axis=1)
        base = base_anchors(size, config.ratios, config.scales)
        levels.append((shifts[:, None, :] + base[None, :, :]).reshape(-1, 4))
    anchors = np.ascontiguousarray(np.concatenate(levels, axis=0), dtype=np.float32)
    anchors.setflags(write=False)  # shared by every caller of the cache
    return anchors


def anchors_for_shape(image_shape, config: AnchorConfig = AnchorConfig()) -> np.ndarray:
    """All anchors of an ``(H, W)`` canvas, ``(A, 4)`` float32 xyxy, read-only, memoised."""
    if len(image_shape) != 2 or min(int(v) for v in image_shape) < 1:
        raise ValueError(f"image_shape must be (H, W) with positive sizes, got {image_shape!r}")
    return _anchors_cached(tuple(int(v) for v in image_shape), config)


# ------------------------------------------------------------------------- input checking

def _check_inputs(anchors, boxes, labels, offsets, num_classes, valid, image_sizes):
    """Shape checks shared by both backends; returns host offsets (or None) and B."""
    if anchors.ndim != 2 or anchors.shape[1] != 4 or anchors.shape[0] == 0:
        raise ValueError(f"anchors must be (A, 4), got {anchors.shape}")
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"boxes must be (N, 4), got {boxes.shape}")
    n = boxes.shape[0]
    if labels.shape != (n,):
        raise ValueError(f"labels must be ({n},) to match boxes, got {labels.shape}")
    if valid is not None and valid.shape != (n,):
        raise ValueError(f"valid must be ({n},) to match boxes, got {valid.shape}")
    if int(num_classes) < 1:
        raise ValueError("num_classes must be >= 1")
    host_offsets = None
    if type(offsets).__module__.startswith("cupy"):
        batch = offsets.size - 1
    else:
        host_offsets = np.asarray(offsets, dtype=np.int64)
        batch = host_offsets.size - 1
        if (host_offsets.ndim != 1 or batch < 0 or host_offsets[0] != 0 or host_offsets[-1] != n
                or np.any(np.diff(host_offsets) < 0)):
            raise ValueError(f"offsets must be (B + 1,) non-decreasing from 0 to N={n}, got {host_offsets}")
    if image_sizes is not None and tuple(image_sizes.shape) != (batch, 2):
        raise ValueError(f"image_sizes must be (B, 2) = ({batch}, 2) as (H_valid, W_valid), "
                         f"got {tuple(image_sizes.shape)}")
    return host_offsets, batch


def _valid_region(image_sizes, canvas, batch) -> np.ndarray:
    """``(B, 2)`` (H_valid, W_valid) as float32 values (the kernel's, so that a border that is
    not a float32 number, e.g. a letterbox's content edge, splits the anchors the same way on
    both backends); +inf (no padding rule) when neither is given."""
    if image_sizes is not None:
        return np.asarray(image_sizes, dtype=np.float32).astype(np.float64).reshape(batch, 2)
    fill = (np.inf, np.inf) if canvas is None else tuple(float(v) for v in canvas)
    return np.tile(np.asarray(fill, np.float64), (batch, 1))


def _anchor_centres(anchors) -> np.ndarray:
    # float32 arithmetic on purpose: the kernel computes 0.5f * (x0 + x1) the same way, so the
    # padding rule agrees bit for bit even where a centre lands exactly on the valid border.
    a = np.asarray(anchors, dtype=np.float32)
    return np.stack([(a[:, 0] + a[:, 2]) * np.float32(0.5), (a[:, 1] + a[:, 3]) * np.float32(0.5)], 1)


# ---------------------------------------------------------------------- NumPy reference

def iou_matrix(anchors, boxes) -> np.ndarray:
    """``(A, M)`` float64 IoU; 0 unless the intersection has positive width and height."""
    a = np.asarray(anchors, np.float64)
    b = np.asarray(boxes, np.float64)
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.maximum(iw, 0.0) * np.maximum(ih, 0.0)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=inter > 0)


def bbox_transform(anchors, gt, mean, std) -> np.ndarray:
    """keras-retinanet's corner-offset regression targets, float64 ``(A, 4)``."""
    a = np.asarray(anchors, np.float64)
    g = np.asarray(gt, np.float64)
    wh = np.tile(np.stack([a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]], 1), 2)
    return ((g - a) / wh - np.asarray(mean)) / np.asarray(std)


def _match_image(anchors, boxes, inside, cfg: TargetConfig):
    """State (A,) int, gt index (A,) into ``boxes`` for one image with >= 1 box."""
    iou = iou_matrix(anchors, boxes)
    gt = np.argmax(iou, axis=1)
    best = iou[np.arange(iou.shape[0]), gt]
    state = np.where(best >= cfg.positive_overlap, 1, np.where(best > cfg.negative_overlap, -1, 0))
    if cfg.force_match:
        column = np.where(inside[:, None], iou, -1.0)
        best_anchor = np.argmax(column, axis=0)
        for n, a in enumerate(best_anchor):  # ascending n: the last box forcing an anchor wins
            if column[a, n] > 0:
                state[a], gt[a] = 1, n
    return state, gt


def encode_targets_numpy(anchors, boxes, labels, offsets, num_classes, *, valid=None,
                         image_sizes=None, canvas=None, config: TargetConfig = TargetConfig()):
    """Float64 reference of the RetinaNet targets (module docstring), one image at a time.

    Args:
        anchors: ``(A, 4)`` float xyxy. boxes: ``(N, 4)`` packed boxes of the batch.
        labels: ``(N,)`` int class ids in ``[0, num_classes)``. offsets: ``(B + 1,)`` host ints.
        valid: optional ``(N,)`` bool; boxes with False are treated as absent.
        image_sizes: optional ``(B, 2)`` (H_valid, W_valid) for the padding rule; when None,
            ``canvas`` ``(H, W)`` is used for every image; when both are None there is no rule.
    Returns:
        ``regression (B, A, 5)`` float32 and ``labels (B, A, num_classes + 1)`` float32.
    """
    anchors, boxes, labels = np.asarray(anchors), np.asarray(boxes), np.asarray(labels)
    valid = None if valid is None else np.asarray(valid, dtype=bool)
    image_sizes = None if image_sizes is None else np.asarray(image_sizes)
    offsets, batch = _check_inputs(anchors, boxes, labels, offsets, num_classes, valid, image_sizes)
    num_anchors, num_classes = anchors.shape[0], int(num_classes)
    keep = np.ones(boxes.shape[0], bool) if valid is None else valid
    if np.any((labels[keep] < 0) | (labels[keep] >= num_classes)):
        raise ValueError(f"labels of valid boxes must lie in [0, {num_classes})")
    region = _valid_region(image_sizes, canvas, batch)
    centres = _anchor_centres(anchors)
    regression = np.zeros((batch, num_anchors, 5), np.float32)
    onehot = np.zeros((batch, num_anchors, num_classes + 1), np.float32)
    for b in range(batch):
        inside = (centres[:, 0] < region[b, 1]) & (centres[:, 1] < region[b, 0])
        idx = np.arange(offsets[b], offsets[b + 1])
        idx = idx[keep[idx]]
        state = np.zeros(num_anchors, np.int64)
        if idx.size:
            state, gt = _match_image(anchors, boxes[idx], inside, config)
            regression[b, :, :4] = bbox_transform(anchors, boxes[idx][gt], config.mean, config.std)
        state[~inside] = -1
        positive = np.flatnonzero(state == 1)
        if positive.size:
            onehot[b, positive, labels[idx][gt[positive]]] = 1.0
        regression[b, :, 4] = state
        onehot[b, :, num_classes] = state
    return regression, onehot


def encode_targets_plain_numpy(anchors, boxes, labels, offsets, num_classes, *, valid=None,
                               image_sizes=None, canvas=None, config: TargetConfig = TargetConfig()):
    """Baseline for benchmarks: keras-retinanet's ``anchor_targets_bbox`` transliterated.

    What keras-retinanet's CPU generator does per batch: a Python loop over images, a float64
    ``compute_overlap`` per image, states, one-hot, ``bbox_transform`` for all anchors, then the
    padding rule. It gives the same result as :func:`encode_targets_numpy` (tests check it), but
    keeps keras-retinanet's statement order and per-image temporaries so that the benchmark
    ratio is against that generator and not against a reference tuned for speed. It has no
    forced matching (keras-retinanet has none).
    """
    if config.force_match:
        raise ValueError("encode_targets_plain_numpy follows keras-retinanet: no force_match")
    anchors = np.asarray(anchors, np.float64)
    boxes, labels = np.asarray(boxes), np.asarray(labels)
    offsets = np.asarray(offsets, np.int64)
    batch, num_classes = offsets.size - 1, int(num_classes)
    keep = np.ones(boxes.shape[0], bool) if valid is None else np.asarray(valid, bool)
    region = _valid_region(None if image_sizes is None else np.asarray(image_sizes), canvas, batch)
    regression_batch = np.zeros((batch, anchors.shape[0], 5), np.float32)
    labels_batch = np.zeros((batch, anchors.shape[0], num_classes + 1), np.float32)
    for index in range(batch):
        sel = slice(offsets[index], offsets[index + 1])
        bboxes, classes = boxes[sel][keep[sel]], labels[sel][keep[sel]]
        if bboxes.shape[0]:
            overlaps = iou_matrix(anchors, bboxes)
            argmax_overlaps_inds = np.argmax(overlaps, axis=1)
            max_overlaps = overlaps[np.arange(overlaps.shape[0]), argmax_overlaps_inds]
            positive_indices = max_overlaps >= config.positive_overlap
            ignore_indices = (max_overlaps > config.negative_overlap) & ~positive_indices
            labels_batch[index, ignore_indices, -1] = -1
            labels_batch[index, positive_indices, -1] = 1
            regression_batch[index, ignore_indices, -1] = -1
            regression_batch[index, positive_indices, -1] = 1
            labels_batch[index, positive_indices, classes[argmax_overlaps_inds[positive_indices]]] = 1
            regression_batch[index, :, :-1] = bbox_transform(
                anchors, bboxes[argmax_overlaps_inds, :], config.mean, config.std)
        centres = _anchor_centres(anchors)
        outside = (centres[:, 0] >= region[index, 1]) | (centres[:, 1] >= region[index, 0])
        labels_batch[index, outside, :] = 0  # detaug: ignored anchors carry no class
        labels_batch[index, outside, -1] = -1
        regression_batch[index, outside, -1] = -1
    return regression_batch, labels_batch


# --------------------------------------------------------------------------------- CuPy

def encode_targets_cupy(anchors, boxes, labels, offsets, num_classes, *, valid=None,
                        image_sizes=None, canvas=None, config: TargetConfig = TargetConfig()):
    """GPU twin of :func:`encode_targets_numpy` (same arguments, cupy arrays in and out).

    One launch of ``retinanet_encode`` for the whole batch (grid: anchor blocks x images);
    with ``force_match`` one launch of ``retinanet_best_anchor`` before it. IoU is computed in
    float32, so states can differ from the float64 reference only where ``|IoU - threshold|``
    is within float32 rounding. ``offsets`` may be a host array (uploaded) or a device array
    (not validated, no synchronisation). Class ids are not range-checked on the device: an
    out-of-range id leaves that anchor's one-hot row empty (memory stays safe).
    """
    import cupy as cp

    from detaug.kernels.launch import get_kernel, launch

    anchors = cp.ascontiguousarray(cp.asarray(anchors, dtype=cp.float32))
    boxes = cp.ascontiguousarray(cp.asarray(boxes, dtype=cp.float32))
    labels = cp.ascontiguousarray(cp.asarray(labels, dtype=cp.int32))
    valid = None if valid is None else cp.ascontiguousarray(cp.asarray(valid, dtype=cp.bool_))
    if image_sizes is not None:  # (B, 2) float32 on the device
        image_sizes = cp.ascontiguousarray(cp.asarray(image_sizes, dtype=cp.float32))
    host_offsets, batch = _check_inputs(anchors, boxes, labels, offsets, num_classes, valid, image_sizes)
    num_anchors, num_classes = anchors.shape[0], int(num_classes)
    regression = cp.empty((batch, num_anchors, 5), cp.float32)
    onehot = cp.empty((batch, num_anchors, num_classes + 1), cp.float32)
    if batch == 0:
        return regression, onehot
    dev_offsets = cp.asarray(host_offsets if host_offsets is not None else offsets, dtype=cp.int64)
    if image_sizes is None:
        region = _valid_region(None, canvas, 1)[0]
        sizes, default_h, default_w = anchors, np.float32(region[0]), np.float32(region[1])
    else:  # the defaults are unused
        sizes, default_h, default_w = image_sizes, np.float32(np.inf), np.float32(np.inf)
    flags = (1 if valid is not None else 0) | (2 if image_sizes is not None else 0)
    valid_arg = valid if valid is not None else labels  # never read without flag 1
    grid = ((num_anchors + _BLOCK - 1) // _BLOCK, batch, 1)
    keys = labels  # never read without flag 4
    if config.force_match and boxes.shape[0]:
        keys = cp.zeros(boxes.shape[0], cp.uint64)  # one memset
        launch(get_kernel(_SOURCE, "retinanet_best_anchor"), grid, (_BLOCK, 1, 1),
               (anchors, boxes, valid_arg, dev_offsets, sizes, keys, np.int32(num_anchors),
                np.int32(flags), default_h, default_w), name="retinanet_best_anchor")
        flags |= 4
    mean = [np.float32(m) for m in config.mean]
    inv_std = [np.float32(1.0 / s) for s in config.std]
    launch(get_kernel(_SOURCE, "retinanet_encode"), grid, (_BLOCK, 1, 1),
           (anchors, boxes, labels, valid_arg, dev_offsets, sizes, keys, regression, onehot,
            np.int32(num_anchors), np.int32(num_classes), np.int32(flags), default_h, default_w,
            np.float32(config.positive_overlap), np.float32(config.negative_overlap), *mean, *inv_std),
           name="retinanet_encode")
    return regression, onehot


# ------------------------------------------------------------------------------ encoder op

class RetinaNetEncoder:
    """Targets for a fixed ``(H, W)`` canvas; callable on numpy or cupy box batches.

    The anchors are made once (host) and uploaded once per device on first GPU use. When
    ``image_sizes`` is not given, the whole canvas counts as valid (anchors centred outside
    it are still ignored). Holds no per-call state.
    """

    def __init__(self, num_classes: int, image_size, config: AnchorConfig = AnchorConfig(),
                 targets: TargetConfig = TargetConfig()):
        self.num_classes = int(num_classes)
        self.image_size = tuple(int(v) for v in image_size)
        self.config, self.targets = config, targets
        self.anchors = anchors_for_shape(self.image_size, config)
        self._device_anchors = {}

    @property
    def num_anchors(self) -> int:
        return self.anchors.shape[0]

    def anchors_on_device(self):
        """The anchors as a cupy array on the current device (uploaded once per device)."""
        import cupy as cp

        device = cp.cuda.Device().id
        if device not in self._device_anchors:
            self._device_anchors[device] = cp.asarray(self.anchors)
        return self._device_anchors[device]

    def __call__(self, boxes, labels, offsets, valid=None, image_sizes=None):
        kwargs = dict(valid=valid, image_sizes=image_sizes, canvas=self.image_size, config=self.targets)
        if type(boxes).__module__.startswith("cupy"):
            return encode_targets_cupy(self.anchors_on_device(), boxes, labels, offsets,
                                       self.num_classes, **kwargs)
        if isinstance(boxes, np.ndarray):
            return encode_targets_numpy(self.anchors, boxes, labels, offsets, self.num_classes, **kwargs)
        raise TypeError(f"RetinaNetEncoder takes numpy or cupy boxes, got {type(boxes).__name__}")
