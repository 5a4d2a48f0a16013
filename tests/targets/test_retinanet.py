"""RetinaNet anchors and targets: the NumPy reference against hand values, keras-retinanet's
own anchor code, and an independent per-anchor, per-box float64 loop; the cupy encoder against
the float64 reference (``gpu``-marked); the fn.retinanet_encode op on the VOC sample."""
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from detaug import fn, pipeline_def
from detaug.kernels.launch import launch_counts, reset_launch_counts
from detaug.targets import retinanet as rn
from detaug.targets.retinanet import AnchorConfig, TargetConfig, anchors_for_shape, encode_targets_numpy
from helpers import VOC
from helpers import close_pipelines, track  # noqa: F401  (an autouse fixture)
from helpers import cupy as cp  # imported on first use: by a gpu test, where there is a GPU
from helpers import retinanet_cases as rn_cases

C = 5


# ------------------------------------------------------------------------ independent twins

def keras_generate_anchors(base_size, ratios, scales):
    """keras-retinanet's utils/anchors.py generate_anchors, verbatim in substance."""
    num_anchors = len(ratios) * len(scales)
    anchors = np.zeros((num_anchors, 4))
    anchors[:, 2:] = base_size * np.tile(scales, (2, len(ratios))).T
    areas = anchors[:, 2] * anchors[:, 3]
    anchors[:, 2] = np.sqrt(areas / np.repeat(ratios, len(scales)))
    anchors[:, 3] = anchors[:, 2] * np.repeat(ratios, len(scales))
    anchors[:, 0::2] -= np.tile(anchors[:, 2] * 0.5, (2, 1)).T
    anchors[:, 1::2] -= np.tile(anchors[:, 3] * 0.5, (2, 1)).T
    return anchors


def keras_shift(shape, stride, anchors):
    shift_x = (np.arange(0, shape[1]) + 0.5) * stride
    shift_y = (np.arange(0, shape[0]) + 0.5) * stride
    shift_x, shift_y = np.meshgrid(shift_x, shift_y)
    shifts = np.vstack((shift_x.ravel(), shift_y.ravel(), shift_x.ravel(), shift_y.ravel())).transpose()
    a, k = anchors.shape[0], shifts.shape[0]
    return (anchors.reshape((1, a, 4)) + shifts.reshape((1, k, 4)).transpose((1, 0, 2))).reshape((k * a, 4))


def keras_anchors_for_shape(image_shape, cfg=rn.AnchorConfig()):
    out = []
    for size, stride in zip(cfg.sizes, cfg.strides):
        shape = ((image_shape[0] + stride - 1) // stride, (image_shape[1] + stride - 1) // stride)
        out.append(keras_shift(shape, stride, keras_generate_anchors(size, cfg.ratios, cfg.scales)))
    return np.concatenate(out)


def brute_force(anchors, boxes, labels, offsets, num_classes, valid, image_sizes, cfg):
    """Scalar float64 loops, written from the spec without the reference's code."""
    a64, b64 = np.asarray(anchors, np.float64), np.asarray(boxes, np.float64)
    B, A = len(offsets) - 1, len(anchors)
    reg = np.zeros((B, A, 5))
    lab = np.zeros((B, A, num_classes + 1))

    def iou(a, b):
        iw = min(a[2], b[2]) - max(a[0], b[0])
        ih = min(a[3], b[3]) - max(a[1], b[1])
        if iw <= 0 or ih <= 0:
            return 0.0
        inter = iw * ih
        return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)

    for b in range(B):
        ids = [n for n in range(offsets[b], offsets[b + 1]) if valid is None or valid[n]]
        h_v, w_v = image_sizes[b]
        inside = [np.float32(anchors[a][0] + anchors[a][2]) * np.float32(0.5) < w_v and
                  np.float32(anchors[a][1] + anchors[a][3]) * np.float32(0.5) < h_v for a in range(A)]
        ious = {(a, n): iou(a64[a], b64[n]) for a in range(A) for n in ids}
        forced = {}
        if cfg.force_match:
            for n in ids:
                best_a, best_v = None, 0.0
                for a in range(A):
                    if inside[a] and ious[a, n] > best_v:
                        best_a, best_v = a, ious[a, n]
                if best_a is not None:
                    forced[best_a] = n
        for a in range(A):
            state, gt = 0, None
            if ids:
                best = -1.0
                for n in ids:
                    if ious[a, n] > best:
                        best, gt = ious[a, n], n
                state = 1 if best >= cfg.positive_overlap else (-1 if best > cfg.negative_overlap else 0)
                if a in forced:
                    state, gt = 1, forced[a]
                aw, ah = a64[a][2] - a64[a][0], a64[a][3] - a64[a][1]
                d = (b64[gt] - a64[a]) / np.array([aw, ah, aw, ah])
                reg[b, a, :4] = (d - np.array(cfg.mean)) / np.array(cfg.std)
            if not inside[a]:
                state = -1
            reg[b, a, 4] = lab[b, a, num_classes] = state
            if state == 1:
                lab[b, a, labels[gt]] = 1.0
    return reg, lab


def random_batch(rng, batch, max_boxes, hw, num_classes=C):
    h, w = hw
    counts = rng.integers(0, max_boxes + 1, batch)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(offsets[-1])
    xy = rng.uniform(-10, [w, h], (n, 2))
    wh = rng.uniform(2, [w * 0.6, h * 0.6], (n, 2))
    boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
    return boxes, rng.integers(0, num_classes, n), offsets, rng.random(n) > 0.25


def encode(anchors, boxes, labels, offsets, **kw):
    return rn.encode_targets_numpy(anchors, boxes, labels, offsets, C, **kw)


# --------------------------------------------------------------------------------- anchors

def test_anchor_count_640_and_memoised_read_only():
    anchors = rn.anchors_for_shape((640, 640))
    assert anchors.shape == ((6400 + 1600 + 400 + 100 + 25) * 9, 4) == (76725, 4)
    assert anchors.dtype == np.float32
    assert rn.anchors_for_shape((640, 640)) is anchors
    with pytest.raises(ValueError):
        anchors[0, 0] = 1.0


def test_first_p3_anchors_by_hand():
    a = rn.anchors_for_shape((640, 640))
    np.testing.assert_array_equal(a[3], [-12, -12, 20, 20])  # ratio 1, scale 1, cell (0, 0)
    w = np.sqrt(32.0 ** 2 / 0.5)  # ratio 0.5 (h / w), scale 1: a wide anchor
    np.testing.assert_allclose(a[0], [4 - w / 2, 4 - w / 4, 4 + w / 2, 4 + w / 4], atol=1e-3)
    s = 32 * 2 ** (1 / 3)  # ratio 1, scale 2^(1/3)
    np.testing.assert_allclose(a[4], [4 - s / 2, 4 - s / 2, 4 + s / 2, 4 + s / 2], atol=1e-3)
    np.testing.assert_array_equal(a[9 + 3], [-4, -12, 28, 20])  # next cell: (0, 1), centre (12, 4)
    np.testing.assert_array_equal(a[80 * 9 + 3], [-12, -4, 20, 28])  # cell (1, 0), centre (4, 12)
    p4 = 6400 * 9
    np.testing.assert_array_equal(a[p4 + 3], [8 - 32, 8 - 32, 8 + 32, 8 + 32])


@pytest.mark.parametrize("shape", [(640, 640), (100, 150), (37, 300), (1, 1)])
def test_anchors_match_keras_retinanet(shape):
    ours = rn.anchors_for_shape(shape)
    theirs = keras_anchors_for_shape(shape)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, atol=5e-4, rtol=0)  # the 2^-10 px grid


def test_anchor_config_is_used():
    cfg = rn.AnchorConfig(sizes=(16, 32), strides=(4, 8), ratios=(1.0,), scales=(1.0, 2.0))
    a = rn.anchors_for_shape((16, 24), cfg)
    assert a.shape == ((4 * 6 + 2 * 3) * 2, 4)
    np.testing.assert_array_equal(a[:2], [[-6, -6, 10, 10], [-14, -14, 18, 18]])
    np.testing.assert_allclose(a, keras_anchors_for_shape((16, 24), cfg), atol=5e-4)
    with pytest.raises(ValueError):
        rn.AnchorConfig(sizes=(32,), strides=(8, 16))


def test_anchor_coordinates_exact_in_float32():
    a = rn.anchors_for_shape((640, 640))
    w = (a[:, 2] - a[:, 0]).reshape(-1, 9)  # P3 cells all share the same 9 widths, bit for bit
    assert np.all(w[:6400] == w[0])


# --------------------------------------------------------------------------------- targets

@pytest.fixture(scope="module")
def anchors128():
    return rn.anchors_for_shape((128, 128))


def one_box(box, label=2):
    return np.asarray([box], np.float32), np.asarray([label]), np.asarray([0, 1])


def test_box_equal_to_anchor(anchors128):
    k = 9 * (5 * 16 + 5) + 3  # P3 cell (5, 5), ratio 1 scale 1: centre (44, 44)
    np.testing.assert_array_equal(anchors128[k], [28, 28, 60, 60])
    reg, lab = encode(anchors128, *one_box(anchors128[k], 2))
    assert reg.shape == (1, len(anchors128), 5) and lab.shape == (1, len(anchors128), C + 1)
    assert reg.dtype == lab.dtype == np.float32
    np.testing.assert_array_equal(reg[0, k], [0, 0, 0, 0, 1])
    np.testing.assert_array_equal(lab[0, k], [0, 0, 1, 0, 0, 1])
    # one-hot only on positives; every row's last column is the state
    assert np.all(lab[0, :, :C].sum(1) == (lab[0, :, C] == 1))
    np.testing.assert_array_equal(lab[0, :, C], reg[0, :, 4])


def shifted(anchor, target_iou):
    """The anchor moved right so that its IoU with the original is ``target_iou``."""
    w = anchor[2] - anchor[0]
    d = w * (1 - target_iou) / (1 + target_iou)
    return anchor + np.float32([d, 0, d, 0])


def test_thresholds(anchors128):
    k = 9 * (5 * 16 + 5) + 3
    for iou, default_state in [(0.45, -1), (0.3, 0), (0.6, 1)]:
        box = shifted(anchors128[k], iou)
        assert rn.iou_matrix(anchors128[k:k + 1], box[None])[0, 0] == pytest.approx(iou, abs=1e-6)
        reg, lab = encode(anchors128, *one_box(box, 4))
        assert reg[0, k, 4] == lab[0, k, C] == default_state
        assert lab[0, k, 4] == (default_state == 1)
        np.testing.assert_allclose(reg[0, k, :4], (box - anchors128[k]) / 32 / 0.2, atol=1e-5)
    box = shifted(anchors128[k], 0.45)
    reg, _ = encode(anchors128, *one_box(box), config=rn.TargetConfig(positive_overlap=0.44))
    assert reg[0, k, 4] == 1
    reg, _ = encode(anchors128, *one_box(box), config=rn.TargetConfig(negative_overlap=0.46, positive_overlap=0.7))
    assert reg[0, k, 4] == 0
    reg, _ = encode(anchors128, *one_box(box), config=rn.TargetConfig(mean=(1, 0, 0, 0), std=(0.1, 1, 1, 1)))
    assert reg[0, k, 0] == pytest.approx(((box[0] - 28) / 32 - 1) / 0.1, abs=1e-4)
    with pytest.raises(ValueError):
        rn.TargetConfig(positive_overlap=0.3, negative_overlap=0.4)


def test_padding_rule(anchors128):
    k_top = 9 * (5 * 16 + 5) + 3  # centre (44, 44)
    k_low = 9 * (10 * 16 + 5) + 3  # centre (44, 84)
    boxes = np.stack([anchors128[k_top], anchors128[k_low]]).astype(np.float32)
    args = (boxes, np.asarray([0, 1]), np.asarray([0, 2]))
    reg, lab = encode(anchors128, *args, image_sizes=np.asarray([[64, 128]]))
    centres_y = (anchors128[:, 1] + anchors128[:, 3]) / 2
    assert np.all(reg[0, centres_y >= 64, 4] == -1)
    assert np.all(lab[0, centres_y >= 64, :C] == 0)  # ignored anchors carry no class
    assert reg[0, k_top, 4] == 1 and lab[0, k_top, 0] == 1
    assert reg[0, k_low, 4] == -1
    # the border is taken as a float32 number, as the kernel reads it: 64 + 1e-6 is 64.0f, so the
    # anchors centred at y = 64 stay ignored (float64 would have let them in)
    reg_f, _ = encode(anchors128, *args, image_sizes=np.asarray([[64 + 1e-6, 128]]))
    assert (centres_y == 64).any()
    np.testing.assert_array_equal(reg_f, reg)
    # canvas as default region; None and None means no rule at all
    reg_c, _ = encode(anchors128, *args, canvas=(64, 128))
    np.testing.assert_array_equal(reg_c, reg)
    reg_none, _ = encode(anchors128, *args)
    assert reg_none[0, k_low, 4] == 1
    # anchors centred beyond a canvas that is not a multiple of the stride: ignored by default
    a = rn.anchors_for_shape((520, 520))
    enc = rn.RetinaNetEncoder(C, (520, 520))
    r, _ = enc(np.zeros((0, 4), np.float32), np.zeros(0, int), np.asarray([0, 0]))
    c = (a[:, :2] + a[:, 2:]) / 2
    np.testing.assert_array_equal(r[0, :, 4], np.where((c >= 520).any(1), -1, 0))
    assert (r[0, :, 4] == -1).any()


def test_force_match_small_box(anchors128):
    box = np.float32([50, 50, 54, 54])
    iou = rn.iou_matrix(anchors128, box[None])[:, 0]
    assert iou.max() < 0.4
    reg, lab = encode(anchors128, *one_box(box, 3))
    assert not np.any(reg[0, :, 4] == 1)
    reg, lab = encode(anchors128, *one_box(box, 3), config=rn.TargetConfig(force_match=True))
    (pos,) = np.nonzero(reg[0, :, 4] == 1)
    assert pos.tolist() == [int(np.argmax(iou))]
    assert lab[0, pos[0], 3] == 1
    np.testing.assert_allclose(reg[0, pos[0], :4], rn.bbox_transform(anchors128[pos], box[None], (0,) * 4, (0.2,) * 4)[0],
                               atol=1e-5)


def test_force_match_reassigns_to_forcing_box(anchors128):
    big = np.float32([20, 20, 70, 70])
    small = np.float32([40, 40, 48, 48])  # its best anchor's best box is `big`
    boxes, labels, offsets = np.stack([big, small]), np.asarray([0, 1]), np.asarray([0, 2])
    iou = rn.iou_matrix(anchors128, boxes)
    best_small = int(np.argmax(iou[:, 1]))
    assert iou[best_small, 0] > iou[best_small, 1]
    reg, lab = encode(anchors128, boxes, labels, offsets, config=rn.TargetConfig(force_match=True))
    assert reg[0, best_small, 4] == 1 and lab[0, best_small, 1] == 1 and lab[0, best_small, 0] == 0


def test_invalid_boxes_are_absent(anchors128):
    rng = np.random.default_rng(3)
    boxes, labels, offsets, valid = random_batch(rng, 3, 6, (128, 128))
    labels = labels.copy()
    labels[~valid] = 99  # out of range, but masked: must not matter
    reg, lab = encode(anchors128, boxes, labels, offsets, valid=valid)
    keep = np.flatnonzero(valid)
    new_offsets = np.searchsorted(keep, offsets)
    reg2, lab2 = encode(anchors128, boxes[keep], labels[keep], new_offsets)
    np.testing.assert_array_equal(reg, reg2)
    np.testing.assert_array_equal(lab, lab2)
    with pytest.raises(ValueError):
        encode(anchors128, boxes, labels, offsets)


def test_zero_boxes(anchors128):
    k = 9 * 17 + 3
    boxes, labels = np.asarray([anchors128[k]], np.float32), np.asarray([1])
    reg, lab = encode(anchors128, boxes, labels, np.asarray([0, 0, 1, 1]))
    for b in (0, 2):
        assert not reg[b].any() and not lab[b].any()
    assert reg[1, k, 4] == 1 and lab[1, k, 1] == 1
    reg, lab = encode(anchors128, np.zeros((0, 4), np.float32), np.zeros(0, int), np.asarray([0]))
    assert reg.shape == (0, len(anchors128), 5) and lab.shape == (0, len(anchors128), C + 1)


def check_against_brute_force(rng, hw, cfg, sized):
    anchors = rn.anchors_for_shape(hw)
    boxes, labels, offsets, valid = random_batch(rng, 3, 5, hw)
    sizes = rng.integers([hw[0] // 2, hw[1] // 2], [hw[0] + 1, hw[1] + 1], (3, 2)) if sized else None
    before = [x.copy() for x in (boxes, labels, offsets, valid)]
    reg, lab = encode(anchors, boxes, labels, offsets, valid=valid, image_sizes=sizes, canvas=hw, config=cfg)
    for x, y in zip(before, (boxes, labels, offsets, valid)):
        np.testing.assert_array_equal(x, y)  # inputs not mutated
    full = np.tile(np.float64(hw), (3, 1)) if sizes is None else sizes
    reg_bf, lab_bf = brute_force(anchors, boxes, labels, offsets, C, valid, full, cfg)
    np.testing.assert_array_equal(reg[..., 4], reg_bf[..., 4])
    np.testing.assert_array_equal(lab, lab_bf)
    np.testing.assert_allclose(reg, reg_bf, rtol=1e-6, atol=1e-5)
    return reg


@pytest.mark.parametrize("seed", [0, 1, None])
@pytest.mark.parametrize("force", [False, True])
def test_reference_against_brute_force(seed, force):
    fixed = seed is not None
    seed = int(np.random.SeedSequence().entropy % 2 ** 32) if seed is None else seed
    rng = np.random.default_rng(seed)
    cfg = rn.TargetConfig(force_match=force, negative_overlap=0.3)
    try:
        reg = check_against_brute_force(rng, (96, 128), cfg, sized=bool(seed % 2))
    except AssertionError as e:
        raise AssertionError(f"seed {seed}: {e}") from None
    if fixed:  # the fixed cases are known to hold positives and negatives (random ones may not)
        assert (reg[..., 4] == 1).any() and (reg[..., 4] == 0).any()


def test_plain_baseline_equals_reference():
    rng = np.random.default_rng(7)
    anchors = rn.anchors_for_shape((160, 200))
    boxes, labels, offsets, valid = random_batch(rng, 4, 12, (160, 200))
    sizes = np.asarray([[160, 200], [100, 200], [160, 90], [50, 60]])
    for kw in (dict(), dict(valid=valid, image_sizes=sizes), dict(canvas=(150, 150))):
        ref = encode(anchors, boxes, labels, offsets, **kw)
        plain = rn.encode_targets_plain_numpy(anchors, boxes, labels, offsets, C, **kw)
        for x, y in zip(ref, plain):
            np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError):
        rn.encode_targets_plain_numpy(anchors, boxes, labels, offsets, C, config=rn.TargetConfig(force_match=True))


def test_encoder_dispatch_and_checks():
    enc = rn.RetinaNetEncoder(C, (96, 128))
    assert enc.num_anchors == len(rn.anchors_for_shape((96, 128)))
    boxes, labels, offsets, _ = random_batch(np.random.default_rng(5), 2, 4, (96, 128))
    reg, lab = enc(boxes, labels, offsets)
    ref = encode(enc.anchors, boxes, labels, offsets, canvas=(96, 128))
    np.testing.assert_array_equal(reg, ref[0])
    np.testing.assert_array_equal(lab, ref[1])
    with pytest.raises(TypeError):
        enc(boxes.tolist(), labels, offsets)
    with pytest.raises(ValueError):
        enc(boxes, labels, offsets[:-1])  # offsets[-1] != N
    with pytest.raises(ValueError):
        enc(boxes, labels[:-1], offsets)
    with pytest.raises(ValueError):
        enc(boxes, labels, offsets, image_sizes=np.ones((5, 2)))


def test_import_needs_no_cupy_or_torch():
    code = "import sys, detaug.targets.retinanet; assert 'cupy' not in sys.modules and 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# -------------------------------------- GPU (encode_targets_cupy against the float64 reference)
GPU_C = rn_cases.C


def check_parity(*args, **kwargs):
    return rn_cases.check_parity(cp, *args, **kwargs)


@pytest.mark.gpu
@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("seed", [0, None])
def test_parity_small_batches(force, seed):
    seed = int(np.random.SeedSequence().entropy % 2 ** 32) if seed is None else seed
    rng = np.random.default_rng(seed)
    hw = (256, 320)
    anchors = rn.anchors_for_shape(hw)
    cfg = rn.TargetConfig(force_match=force)
    boxes, labels, offsets, valid = rn_cases.random_batch(rng, 4, 20, hw)
    sizes = rng.integers([128, 160], [257, 321], (4, 2))
    check_parity(anchors, boxes, labels, offsets, cfg=cfg)
    check_parity(anchors, boxes, labels, offsets, valid=valid, image_sizes=sizes, cfg=cfg)
    reg = check_parity(anchors, boxes, labels, offsets, valid=valid, canvas=(200, 300), cfg=cfg)
    assert (reg[..., 4] == 1).any(), f"seed {seed}"


@pytest.mark.gpu
def test_parity_many_boxes_per_image():
    # more boxes than one shared-memory chunk (128): the chunk loop and its barriers
    rng = np.random.default_rng(11)
    hw = (128, 160)
    boxes, labels, offsets, valid = rn_cases.random_batch(rng, 3, 300, hw, ragged=False)
    offsets = np.asarray([0, 0, 300, 600, 900])  # first image empty
    for force in (False, True):
        check_parity(rn.anchors_for_shape(hw), boxes, labels, offsets, valid=valid,
                     cfg=rn.TargetConfig(force_match=force))


@pytest.mark.gpu
def test_parity_batch_64_at_640_and_encoder():
    rng = np.random.default_rng(64)
    hw = (640, 640)
    boxes, labels, offsets, _ = rn_cases.random_batch(rng, 64, 20, hw, ragged=False)
    enc = rn.RetinaNetEncoder(GPU_C, hw)
    check_parity(enc.anchors, boxes, labels, offsets, canvas=hw)
    reg, lab = enc(cp.asarray(boxes), cp.asarray(labels), offsets)
    assert isinstance(reg, cp.ndarray) and reg.shape == (64, 76725, 5) and lab.shape == (64, 76725, GPU_C + 1)
    assert enc.anchors_on_device() is enc.anchors_on_device()  # uploaded once per device


@pytest.mark.gpu
def test_zero_boxes_and_empty_batch():
    anchors = rn.anchors_for_shape((96, 96))
    empty = cp.zeros((0, 4), cp.float32), cp.zeros(0, cp.int32)
    reg, lab = rn.encode_targets_cupy(cp.asarray(anchors), *empty, np.asarray([0, 0, 0]), GPU_C,
                                      image_sizes=np.asarray([[96, 96], [40, 96]]))
    ref = rn.encode_targets_numpy(anchors, np.zeros((0, 4), np.float32), np.zeros(0, int), [0, 0, 0], GPU_C,
                                  image_sizes=np.asarray([[96, 96], [40, 96]]))
    np.testing.assert_array_equal(reg.get(), ref[0])
    np.testing.assert_array_equal(lab.get(), ref[1])
    reg, lab = rn.encode_targets_cupy(cp.asarray(anchors), *empty, np.asarray([0]), GPU_C,
                                      config=rn.TargetConfig(force_match=True))
    assert reg.shape == (0, len(anchors), 5)


@pytest.mark.gpu
def test_device_offsets_and_inputs_untouched():
    rng = np.random.default_rng(5)
    hw = (128, 128)
    anchors = rn.anchors_for_shape(hw)
    boxes, labels, offsets, valid = rn_cases.random_batch(rng, 3, 10, hw)
    d_boxes, d_labels, d_valid = cp.asarray(boxes), cp.asarray(labels), cp.asarray(valid)
    a = rn.encode_targets_cupy(anchors, d_boxes, d_labels, cp.asarray(offsets), GPU_C, valid=d_valid)
    b = rn.encode_targets_cupy(anchors, d_boxes, d_labels, offsets, GPU_C, valid=d_valid)
    for x, y in zip(a, b):
        cp.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(d_boxes.get(), boxes)
    np.testing.assert_array_equal(d_labels.get(), labels)


@pytest.mark.gpu
@pytest.mark.parametrize("force", [False, True])
def test_launch_count_independent_of_batch(force):
    hw = (640, 640)
    enc = rn.RetinaNetEncoder(GPU_C, hw, targets=rn.TargetConfig(force_match=force))
    counts = []
    for batch in (1, 64):
        boxes, labels, offsets, valid = rn_cases.random_batch(np.random.default_rng(batch), batch, 20, hw, ragged=False)
        enc(cp.asarray(boxes), cp.asarray(labels), offsets, valid=cp.asarray(valid))  # compile, upload
        reset_launch_counts()
        enc(cp.asarray(boxes), cp.asarray(labels), offsets, valid=cp.asarray(valid))
        counts.append(launch_counts())
    assert counts[0] == counts[1]
    assert sum(counts[0].values()) == (2 if force else 1)


# ------------------------------------------------------------------- the fn.retinanet_encode op
SIZE = (256, 256)


NUM_CLASSES = 20


@pipeline_def
def voc_letterbox(root, encode, **encode_args):
    enc, boxes = fn.readers.voc(root=root, random_shuffle=True)
    img = fn.decoders.image(enc)
    img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
    img, boxes = fn.letterbox(img, boxes, size=SIZE, center=False)
    if encode:
        reg, cls = fn.retinanet_encode(boxes, num_classes=NUM_CLASSES, **encode_args)
        return img, reg, cls
    return enc, boxes


def make(root=VOC, **kw):
    return track(voc_letterbox(root, **kw))


def content_sizes(paths):
    """(B, 2) float (H_valid, W_valid) of each letterboxed image, from the file's own size."""
    out = []
    for p in paths:
        with Image.open(p) as im:
            w, h = im.size
        s = min(SIZE[0] / h, SIZE[1] / w)
        out.append((round(h * s), round(w * s)))
    return np.asarray(out, np.float64)


def reference(twin_out, config=TargetConfig(), anchors=AnchorConfig()):
    enc, boxes = twin_out
    per = boxes.per_sample()
    packed = np.concatenate([d["boxes"] for d in per]).reshape(-1, 4)
    labels = np.concatenate([d["labels"] for d in per]).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(d["boxes"]) for d in per])])
    sizes = content_sizes(enc.paths)
    reg, cls = encode_targets_numpy(anchors_for_shape(SIZE, anchors), packed, labels, offsets,
                                    NUM_CLASSES, image_sizes=sizes, config=config)
    return reg, cls, sizes


@pytest.mark.parametrize("seed,batch_size", [(0, 8), (11, 5)])
def test_op_equals_numpy_reference_on_voc(voc_small, seed, batch_size):
    # the VOC sample at 1/8 size (conftest): the same records and boxes scaled; the targets are
    # compared with the reference's on the same letterboxed boxes, whatever the pixels
    pipe = make(voc_small, encode=True, batch_size=batch_size, num_threads=2, seed=seed)
    twin = make(voc_small, encode=False, batch_size=batch_size, num_threads=2, seed=seed)
    anchors = anchors_for_shape(SIZE, AnchorConfig())
    centres = (anchors[:, :2] + anchors[:, 2:]) / 2
    padded_seen = positives = 0
    for epoch in (0, 1):
        for b in range(len(pipe)):
            img, reg, cls = pipe.run_batch(b, epoch=epoch)
            ref_reg, ref_cls, sizes = reference(twin.run_batch(b, epoch=epoch))
            assert reg.shape == (batch_size, len(anchors), 5) and reg.dtype == np.float32
            assert cls.shape == (batch_size, len(anchors), NUM_CLASSES + 1)
            assert cls.dtype == np.float32
            np.testing.assert_array_equal(cls, ref_cls)            # one-hot and states, exactly
            np.testing.assert_array_equal(reg[..., 4], ref_reg[..., 4])
            np.testing.assert_allclose(reg[..., :4], ref_reg[..., :4], rtol=0, atol=1e-5)
            for s, (h, w) in enumerate(sizes):
                # anchors centred in the padding (bottom/right) are ignored
                outside = (centres[:, 0] >= w) | (centres[:, 1] >= h)
                assert (cls[s, outside, -1] == -1).all() and (reg[s, outside, 4] == -1).all()
                assert not cls[s, outside, :NUM_CLASSES].any()
                padded_seen += int(outside.any())
                positives += int((cls[s, :, -1] == 1).sum())
            assert np.isin(cls[..., -1], (-1, 0, 1)).all()
    assert padded_seen > 0 and positives > 0  # both rules were exercised


def test_op_arguments_reach_the_encoder(voc_small):
    """Non-default thresholds, std and force_match give the reference's result too."""
    args = dict(positive_overlap=0.6, negative_overlap=0.3, force_match=True, std=0.1)
    pipe = make(voc_small, encode=True, batch_size=8, seed=4, **args)
    twin = make(voc_small, encode=False, batch_size=8, seed=4)
    cfg = TargetConfig(0.6, 0.3, True, std=(0.1,) * 4)
    _, reg, cls = pipe.run_batch(2)
    ref_reg, ref_cls, _ = reference(twin.run_batch(2), config=cfg)
    np.testing.assert_array_equal(cls, ref_cls)
    np.testing.assert_allclose(reg, ref_reg, rtol=0, atol=1e-5)
    default = make(voc_small, encode=True, batch_size=8, seed=4).run_batch(2)[2]
    assert not np.array_equal(default, cls)


def test_ignore_padding_false_uses_the_whole_canvas(voc_small):
    pipe = make(voc_small, encode=True, batch_size=8, seed=2, ignore_padding=False)
    twin = make(voc_small, encode=False, batch_size=8, seed=2)
    enc, boxes = twin.run_batch(0)
    per = boxes.per_sample()
    offsets = np.concatenate([[0], np.cumsum([len(d["boxes"]) for d in per])])
    ref_reg, ref_cls = encode_targets_numpy(
        anchors_for_shape(SIZE, AnchorConfig()), np.concatenate([d["boxes"] for d in per]),
        np.concatenate([d["labels"] for d in per]), offsets, NUM_CLASSES, canvas=SIZE)
    _, reg, cls = pipe.run_batch(0)
    np.testing.assert_array_equal(cls, ref_cls)
    np.testing.assert_allclose(reg, ref_reg, rtol=0, atol=1e-5)
