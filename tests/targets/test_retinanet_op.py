"""detaug.ops.targets (fn.retinanet_encode): a hand-computed case (a box equal to one anchor is that
anchor's object, one-hot at its class, zero offsets; the other anchors background), fresh random
boxes against detaug.targets.retinanet's encoder called with the same configuration (the op's
plumbing of sizes, strides, ratios, scales, overlaps, std), the output rule's anchor count, and
the refusals naming the op."""
import numpy as np
import pytest

from detaug import fn
from detaug.ops import targets as T
from detaug.targets.retinanet import AnchorConfig, RetinaNetEncoder, TargetConfig

from helpers import run_graph

ONE_LEVEL = dict(sizes=(16,), strides=(16,), ratios=(1.0,), scales=(1.0,))


def test_a_box_on_an_anchor_is_its_object():
    imgs = [np.zeros((32, 32, 3), np.uint8)] * 2
    boxes = [np.array([[0, 0, 16, 16]], np.float32), np.zeros((0, 4), np.float32)]
    reg, lab = run_graph(imgs, boxes, lambda i, b: fn.retinanet_encode(b, num_classes=3, **ONE_LEVEL),
                         labels=[np.array([2]), np.zeros(0, np.int64)])
    reg, lab = np.asarray(reg), np.asarray(lab)
    assert reg.shape == (2, 4, 5) and lab.shape == (2, 4, 4) and reg.dtype == lab.dtype == np.float32
    # anchors (2 x 2 cells of 16 px): [0,0,16,16], [16,0,32,16], [0,16,16,32], [16,16,32,32]
    assert lab[0, :, -1].tolist() == [1, 0, 0, 0] and lab[1, :, -1].tolist() == [0, 0, 0, 0]
    assert lab[0, 0, :3].tolist() == [0, 0, 1] and not lab[0, 1:, :3].any() and not lab[1, :, :3].any()
    np.testing.assert_allclose(reg[0, 0, :4], 0, atol=1e-6)
    assert reg[:, :, 4].tolist() == lab[:, :, -1].tolist()


def test_fresh_boxes_match_the_encoder_with_the_same_configuration(rng):
    n = 3
    imgs = [np.zeros((48, 64, 3), np.uint8)] * n
    boxes, labels = [], []
    for _ in range(n):
        k = int(rng.integers(0, 6))
        xy = rng.uniform(0, 40, (k, 2))
        wh = rng.uniform(4, 24, (k, 2))
        boxes.append(np.concatenate([xy, np.minimum(xy + wh, [64, 48])], 1).astype(np.float32))
        labels.append(rng.integers(0, 5, k))
    args = dict(sizes=(8, 16), strides=(8, 16), ratios=(0.5, 1.0), scales=(1.0, 1.5),
                positive_overlap=0.45, negative_overlap=0.3, std=0.1)
    reg, lab = (np.asarray(a) for a in run_graph(
        imgs, boxes, lambda i, b: fn.retinanet_encode(b, num_classes=5, **args), labels=labels))
    enc = RetinaNetEncoder(5, (48, 64), AnchorConfig((8, 16), (8, 16), (0.5, 1.0), (1.0, 1.5)),
                           TargetConfig(0.45, 0.3, False, std=(0.1,) * 4))
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in boxes])])
    want_reg, want_lab = enc(np.concatenate(boxes), np.concatenate(labels), offsets)
    want_reg, want_lab = np.asarray(want_reg), np.asarray(want_lab)
    a = (6 * 8 + 3 * 4) * 4  # cells of the two levels x anchors per cell
    assert reg.shape == (n, a, 5) and lab.shape == (n, a, 6)
    np.testing.assert_allclose(reg, want_reg.reshape(reg.shape), atol=1e-6)
    np.testing.assert_array_equal(lab, want_lab.reshape(lab.shape))


def test_refusals_name_the_op():
    same = [np.zeros((32, 32, 3), np.uint8)] * 2
    none = [np.zeros((0, 4), np.float32)] * 2
    with pytest.raises(ValueError, match=r"retinanet_encode\w*: num_classes is required"):
        run_graph(same, none, lambda i, b: fn.retinanet_encode(b, **ONE_LEVEL))
    with pytest.raises(TypeError, match=r"retinanet_encode\w*: takes boxes, got ImageBatch"):
        run_graph(same, none, lambda i, b: fn.retinanet_encode(i, num_classes=2, **ONE_LEVEL))
    mixed = [np.zeros((32, 32, 3), np.uint8), np.zeros((16, 32, 3), np.uint8)]
    with pytest.raises(ValueError, match=r"images of one batch must share one size .*"
                                         r"\[\(16, 32\), \(32, 32\)\]"):
        run_graph(mixed, none, lambda i, b: fn.retinanet_encode(b, num_classes=2, **ONE_LEVEL))


def test_the_encoder_is_made_once_per_configuration():
    T._encoder.cache_clear()
    cfg = (AnchorConfig(*ONE_LEVEL.values()), TargetConfig(0.5, 0.4, False, std=(0.2,) * 4))
    assert T._encoder(2, (32, 32), *cfg) is T._encoder(2, (32, 32), *cfg)
    assert T._encoder(2, (32, 48), *cfg) is not T._encoder(2, (32, 32), *cfg)
    assert T._encoder(2, (32, 32), *cfg).anchors.shape == (4, 4)


@pytest.mark.gpu
def test_gpu_targets_are_the_cpu_ones(rng):
    imgs = [np.zeros((48, 64, 3), np.uint8)] * 2
    boxes = [np.array([[2, 3, 30, 40], [10, 10, 60, 20]], np.float32), np.zeros((0, 4), np.float32)]
    labels = [np.array([1, 0]), np.zeros(0, np.int64)]
    outs = [run_graph(imgs, boxes, lambda i, b: fn.retinanet_encode(b, num_classes=2, **ONE_LEVEL),
                      labels=labels, device=d) for d in ("cpu", "gpu")]
    for c, g in zip(*outs, strict=True):
        np.testing.assert_allclose(np.asarray(c), g.get() if hasattr(g, "get") else np.asarray(g),
                                   atol=1e-6)
