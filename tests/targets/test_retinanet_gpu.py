"""RetinaNet targets on the GPU against the float64 NumPy reference (same inputs, fresh random
batches); the tolerated differences are those of tests/retinanet_cases.py (float32 rounding at a
decision)."""
import numpy as np
import pytest

cp = pytest.importorskip("cupy")
try:
    _HAS_GPU = cp.cuda.runtime.getDeviceCount() > 0
except Exception:  # no driver, no device
    _HAS_GPU = False

from detaug.targets import retinanet as rn  # noqa: E402
from detaug.kernels.launch import launch_counts, reset_launch_counts  # noqa: E402
import retinanet_cases as rn_cases  # noqa: E402
from retinanet_cases import random_batch  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _HAS_GPU, reason="no CUDA device")]
C = rn_cases.C


def check_parity(*args, **kwargs):
    return rn_cases.check_parity(cp, *args, **kwargs)


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("seed", [0, None])
def test_parity_small_batches(force, seed):
    seed = int(np.random.SeedSequence().entropy % 2 ** 32) if seed is None else seed
    rng = np.random.default_rng(seed)
    hw = (256, 320)
    anchors = rn.anchors_for_shape(hw)
    cfg = rn.TargetConfig(force_match=force)
    boxes, labels, offsets, valid = random_batch(rng, 4, 20, hw)
    sizes = rng.integers([128, 160], [257, 321], (4, 2))
    check_parity(anchors, boxes, labels, offsets, cfg=cfg)
    check_parity(anchors, boxes, labels, offsets, valid=valid, image_sizes=sizes, cfg=cfg)
    reg = check_parity(anchors, boxes, labels, offsets, valid=valid, canvas=(200, 300), cfg=cfg)
    assert (reg[..., 4] == 1).any(), f"seed {seed}"


def test_parity_many_boxes_per_image():
    # more boxes than one shared-memory chunk (128): the chunk loop and its barriers
    rng = np.random.default_rng(11)
    hw = (128, 160)
    boxes, labels, offsets, valid = random_batch(rng, 3, 300, hw, ragged=False)
    offsets = np.asarray([0, 0, 300, 600, 900])  # first image empty
    for force in (False, True):
        check_parity(rn.anchors_for_shape(hw), boxes, labels, offsets, valid=valid,
                     cfg=rn.TargetConfig(force_match=force))


def test_parity_batch_64_at_640_and_encoder():
    rng = np.random.default_rng(64)
    hw = (640, 640)
    boxes, labels, offsets, _ = random_batch(rng, 64, 20, hw, ragged=False)
    enc = rn.RetinaNetEncoder(C, hw)
    check_parity(enc.anchors, boxes, labels, offsets, canvas=hw)
    reg, lab = enc(cp.asarray(boxes), cp.asarray(labels), offsets)
    assert isinstance(reg, cp.ndarray) and reg.shape == (64, 76725, 5) and lab.shape == (64, 76725, C + 1)
    assert enc.anchors_on_device() is enc.anchors_on_device()  # uploaded once per device


def test_zero_boxes_and_empty_batch():
    anchors = rn.anchors_for_shape((96, 96))
    empty = cp.zeros((0, 4), cp.float32), cp.zeros(0, cp.int32)
    reg, lab = rn.encode_targets_cupy(cp.asarray(anchors), *empty, np.asarray([0, 0, 0]), C,
                                      image_sizes=np.asarray([[96, 96], [40, 96]]))
    ref = rn.encode_targets_numpy(anchors, np.zeros((0, 4), np.float32), np.zeros(0, int), [0, 0, 0], C,
                                  image_sizes=np.asarray([[96, 96], [40, 96]]))
    np.testing.assert_array_equal(reg.get(), ref[0])
    np.testing.assert_array_equal(lab.get(), ref[1])
    reg, lab = rn.encode_targets_cupy(cp.asarray(anchors), *empty, np.asarray([0]), C,
                                      config=rn.TargetConfig(force_match=True))
    assert reg.shape == (0, len(anchors), 5)


def test_device_offsets_and_inputs_untouched():
    rng = np.random.default_rng(5)
    hw = (128, 128)
    anchors = rn.anchors_for_shape(hw)
    boxes, labels, offsets, valid = random_batch(rng, 3, 10, hw)
    d_boxes, d_labels, d_valid = cp.asarray(boxes), cp.asarray(labels), cp.asarray(valid)
    a = rn.encode_targets_cupy(anchors, d_boxes, d_labels, cp.asarray(offsets), C, valid=d_valid)
    b = rn.encode_targets_cupy(anchors, d_boxes, d_labels, offsets, C, valid=d_valid)
    for x, y in zip(a, b):
        cp.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(d_boxes.get(), boxes)
    np.testing.assert_array_equal(d_labels.get(), labels)


@pytest.mark.parametrize("force", [False, True])
def test_launch_count_independent_of_batch(force):
    hw = (640, 640)
    enc = rn.RetinaNetEncoder(C, hw, targets=rn.TargetConfig(force_match=force))
    counts = []
    for batch in (1, 64):
        boxes, labels, offsets, valid = random_batch(np.random.default_rng(batch), batch, 20, hw, ragged=False)
        enc(cp.asarray(boxes), cp.asarray(labels), offsets, valid=cp.asarray(valid))  # compile, upload
        reset_launch_counts()
        enc(cp.asarray(boxes), cp.asarray(labels), offsets, valid=cp.asarray(valid))
        counts.append(launch_counts())
    assert counts[0] == counts[1]
    assert sum(counts[0].values()) == (2 if force else 1)
