"""The CUDA box, colour and RetinaNet kernels (detaug/kernels/boxes.cu, color.cu, retinanet.cu)
compiled with g++ and run on the CPU (tests/cuda_emulation.py), through their modules' own
``*_cupy`` host code, against the NumPy twins: on the boundary cases of test_boundaries.py
(exactly) and on fresh random batches. The real GPU runs are in test_kernels_gpu.py and
test_retinanet_gpu.py."""
import numpy as np
import pytest

import cuda_emulation as emu
import retinanet_cases
from conftest import fresh_seed
from detaug.kernels import boxes as kb
from detaug.kernels import color as kc
from detaug.targets import retinanet as rn
from test_boundaries import PRUNE_CASES, RN_ANCHORS, RN_BOX, RN_STATES

SEEDS = [7, fresh_seed()]


@pytest.fixture(scope="module")
def boxes_cu(tmp_path_factory):
    return emu.build(tmp_path_factory.mktemp("boxes_cu"), "boxes.cu", threaded={"pad_boxes"})


@pytest.fixture(scope="module")
def color_cu(tmp_path_factory):
    return emu.build(tmp_path_factory.mktemp("color_cu"), "color.cu")


@pytest.fixture(scope="module")
def retinanet_cu(tmp_path_factory):
    return emu.build(tmp_path_factory.mktemp("retinanet_cu"), "retinanet.cu",
                     threaded={"retinanet_encode", "retinanet_best_anchor"})


@pytest.fixture
def on_boxes_cu(boxes_cu, monkeypatch):
    boxes_cu.calls.clear()
    return emu.install_fake_cupy(monkeypatch, boxes_cu, kb)


@pytest.fixture
def on_color_cu(color_cu, monkeypatch):
    color_cu.calls.clear()
    return emu.install_fake_cupy(monkeypatch, color_cu, kc)


@pytest.fixture
def on_retinanet_cu(retinanet_cu, monkeypatch):
    retinanet_cu.calls.clear()
    return emu.install_fake_cupy(monkeypatch, retinanet_cu, rn)


def test_signatures_are_read_from_the_sources():
    with open(f"{emu.KERNEL_DIR}/boxes.cu") as f:
        sig = emu.kernel_signatures(f.read())
    assert set(sig) == {"box_transform", "pad_boxes", "iou_matrix", "windows_iou"}
    assert sig["iou_matrix"] == ["const float*", "const float*", "long long", "long long", "float*"]


# ----------------------------------------------------------------------------- boxes.cu
def test_box_transform_boundaries(on_boxes_cu, boxes_cu):
    for box, (size, area, vis), kept in PRUNE_CASES:
        args = (np.array([box], np.float32), np.zeros(1, np.int32), np.eye(3)[None], [[10, 10]])
        kw = dict(min_size=size, min_area=area, min_visibility=vis)
        out, keep = kb.box_transform_cupy(emu.dev(args[0]), *args[1:], **kw)
        assert keep.tolist() == [kept], (box, size, area, vis)
        np.testing.assert_array_equal(out, kb.box_transform_numpy(*args, **kw)[0])
    out, _ = kb.box_transform_cupy(np.array([[-1, 2, 12, 8]], np.float32), [0], np.eye(3)[None],
                                   [[10, 10]])
    np.testing.assert_array_equal(out, [[0, 2, 10, 8]])
    assert boxes_cu.calls == ["box_transform"] * (len(PRUNE_CASES) + 1)


def _random_chain(rng, b, k):
    mats = np.tile(np.eye(3), (k, b, 1, 1))
    for s in range(k):
        a = rng.uniform(-np.pi, np.pi, b) * (rng.random(b) < 0.5)
        sc = rng.uniform(0.5, 2.0, (b, 2))
        mats[s, :, 0, 0], mats[s, :, 0, 1] = sc[:, 0] * np.cos(a), -sc[:, 1] * np.sin(a)
        mats[s, :, 1, 0], mats[s, :, 1, 1] = sc[:, 0] * np.sin(a), sc[:, 1] * np.cos(a)
        mats[s, :, :2, 2] = rng.uniform(-20, 20, (b, 2))
    canvas = rng.integers(5, 60, (k, b, 2))
    return mats, canvas


@pytest.mark.parametrize("seed", SEEDS)
def test_box_transform_random_chains(on_boxes_cu, seed):
    rng = np.random.default_rng(seed)
    b, n = 5, 40
    si = rng.integers(0, b, n).astype(np.int32)
    xy = rng.uniform(-10, 50, (n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(0, 20, (n, 2))], 1).astype(np.float32)
    valid = rng.random(n) > 0.1
    for k, mode, clip in ((1, "corners", True), (3, ["corners", "ellipse", "corners"], False)):
        mats, canvas = _random_chain(rng, b, k)
        kw = dict(mode=mode, clip=clip, min_size=1.0, min_area=4.0, min_visibility=0.3,
                  valid=valid)
        want, want_keep = kb.box_transform_numpy(boxes, si, mats, canvas, **kw)
        got, keep = kb.box_transform_cupy(emu.dev(boxes), emu.dev(si), mats, canvas, **kw)
        np.testing.assert_array_equal(keep, want_keep, err_msg=f"seed {seed}")
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4, err_msg=f"seed {seed}")
    # a sample index out of range drops the box and leaves it as it was
    got, keep = kb.box_transform_cupy(boxes[:2], np.array([0, b], np.int32), mats[0], canvas[0])
    assert keep.tolist()[1] is False and np.array_equal(got[1], boxes[1])


@pytest.mark.parametrize("seed", SEEDS)
def test_pad_boxes_random(on_boxes_cu, boxes_cu, seed):
    """Samples with more boxes than a block (256: the block's scan runs twice), max_boxes below
    and above the counts, fields of 1, 2, 4 and 8 bytes copied bit for bit."""
    rng = np.random.default_rng(seed)
    counts = [0, 3, 300, 17, 600]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(offsets[-1])
    boxes = rng.uniform(0, 100, (n, 4)).astype(np.float32)
    fields = {"labels": rng.integers(0, 80, n).astype(np.int64),
              "iscrowd": rng.integers(0, 2, n).astype(np.uint8),
              "difficult": rng.random(n) < 0.3, "h": rng.integers(-99, 99, n).astype(np.int16),
              "score": rng.random(n).astype(np.float32)}
    keep = rng.random(n) < 0.7
    for mb, kp in ((int(max(counts)), keep), (250, keep), (5, None), (0, keep)):
        want = kb.pad_boxes_numpy(boxes, fields, kp, offsets, mb, fill=-1.0,
                                  field_fill={"labels": -1, "score": 0.5})
        got = kb.pad_boxes_cupy(emu.dev(boxes), {k: emu.dev(v) for k, v in fields.items()},
                                None if kp is None else emu.dev(kp), offsets, mb, fill=-1.0,
                                field_fill={"labels": -1, "score": 0.5})
        np.testing.assert_array_equal(got[0], want[0], err_msg=f"seed {seed}, max {mb}")
        np.testing.assert_array_equal(got[2], want[2])
        for k in fields:
            assert got[1][k].dtype == want[1][k].dtype
            np.testing.assert_array_equal(got[1][k], want[1][k], err_msg=k)
    assert int(kb.max_kept_count_cupy(emu.dev(keep), offsets)) == kb.max_kept_count_numpy(keep, offsets)
    assert boxes_cu.calls == ["pad_boxes"] * 4


@pytest.mark.parametrize("seed", SEEDS)
def test_iou_kernels_random_and_degenerate(on_boxes_cu, seed):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 40, (30, 2))
    a = np.concatenate([xy, xy + rng.uniform(0, 15, (30, 2))], 1).astype(np.float32)
    a[:3] = [[0, 0, 0, 0], [5, 5, 5, 9], [2, 2, 1, 1]]  # no area, no width, inverted: IoU 0
    a[3:5] = [[0, 0, 4, 4], [4, 0, 8, 4]]  # touching: IoU 0
    b = a[rng.permutation(30)[:12]]
    np.testing.assert_array_equal(kb.iou_matrix_cupy(a, b), kb.iou_matrix_numpy(a, b))
    offsets = np.array([0, 0, 10, 30])
    win = rng.uniform(0, 50, (3, 4, 4)).astype(np.float32)
    np.testing.assert_array_equal(kb.windows_iou_cupy(win, a, offsets),
                                  kb.windows_iou_numpy(win, a, offsets))


# ----------------------------------------------------------------------------- color.cu
def test_color_boundaries(on_color_cu, color_cu):
    """BT.601 luma at saturation 0 (76 / 150 / 29) and DALI's half-up rounding (50.5 -> 51)."""
    px = np.array([[[[255, 0, 0], [0, 255, 0], [0, 0, 255]]]], np.uint8)
    out = kc.hsv_cupy(emu.dev(px), [0.0], [0.0], [1.0])
    np.testing.assert_array_equal(out[0], [[[76] * 3, [150] * 3, [29] * 3]])
    img = np.array([[[[101, 1, 171]]]], np.uint8)
    np.testing.assert_array_equal(kc.brightness_contrast_cupy(emu.dev(img), [0.5], [1.0])[0],
                                  [[[51, 1, 86]]])
    np.testing.assert_array_equal(kc.brightness_contrast_cupy(emu.dev(img), [1.5], [1.0])[0],
                                  [[[152, 2, 255]]])
    assert color_cu.calls == ["hsv", "brightness_contrast", "brightness_contrast"]


@pytest.mark.parametrize("seed", SEEDS)
def test_color_random_batches(on_color_cu, seed):
    """Ragged and dense batches, host and device parameters: within one grey level of the
    float64 twin (float32 math at a .5 tie), and equal on nearly every pixel."""
    rng = np.random.default_rng(seed)
    shapes = [(7, 9, 3), (1, 1, 3), (16, 5, 3), (0, 4, 3)]
    ragged = [rng.integers(0, 256, s, dtype=np.uint8) for s in shapes]
    dense = rng.integers(0, 256, (3, 6, 8, 3), dtype=np.uint8)
    for batch in (ragged, dense):
        b = len(batch)
        br, ct = rng.uniform(0.3, 1.8, b), rng.uniform(0.3, 1.8, b)
        h, s, v = rng.uniform(-180, 180, b), rng.uniform(0, 2, b), rng.uniform(0.4, 1.6, b)
        dev_batch = [emu.dev(x) for x in batch] if isinstance(batch, list) else emu.dev(batch)
        pairs = [(kc.brightness_contrast_cupy(dev_batch, br, ct, contrast_center=100.0),
                  kc.brightness_contrast_numpy(batch, br, ct, contrast_center=100.0)),
                 (kc.hsv_cupy(dev_batch, h, s, v), kc.hsv_numpy(batch, h, s, v)),
                 (kc.hsv_cupy(dev_batch, emu.dev(h), emu.dev(s), emu.dev(v)), kc.hsv_numpy(batch, h, s, v))]
        for got, want in pairs:
            assert isinstance(got, list) == isinstance(want, list)
            for g, w in zip(got, want, strict=True):
                d = np.abs(g.astype(int) - w)
                assert g.shape == w.shape and (d.size == 0 or (d.max() <= 1 and d.mean() < 0.02))


# ----------------------------------------------------------------------------- retinanet.cu
def test_retinanet_boundaries(on_retinanet_cu, retinanet_cu):
    """IoU exactly 0.5 is positive and exactly 0.4 negative in float32 too; a centre on the
    canvas edge is ignored; a box overlapping no anchor forces none."""
    anchors, box = np.array(RN_ANCHORS, np.float32), np.array(RN_BOX, np.float32)
    reg, lab = rn.encode_targets_cupy(anchors, box, np.array([2]), [0, 1], 3, canvas=(8, 8))
    np.testing.assert_array_equal(reg[0, :, 4], RN_STATES)
    np.testing.assert_array_equal(lab[0, :, :3], [[0, 0, 1] if s == 1 else [0, 0, 0] for s in RN_STATES])
    cfg = rn.TargetConfig(force_match=True)
    two = np.array([[0, 0, 4, 4], [0, 0, 4, 4]], np.float32)
    reg, lab = rn.encode_targets_cupy(two, np.array([[0, 0, 4, 2], [20, 20, 22, 22]], np.float32),
                                      np.array([2, 0]), [0, 2], 3, config=cfg)
    np.testing.assert_array_equal(lab[0, :, :3], [[0, 0, 1], [0, 0, 1]])
    big = np.array([[0, 0, 10, 10], [0, 0, 10, 10]], np.float32)
    reg, _ = rn.encode_targets_cupy(big, np.array([[0, 0, 3, 10]], np.float32), np.array([1]),
                                    [0, 1], 3, config=cfg)
    np.testing.assert_array_equal(reg[0, :, 4], [1, 0])  # ties: the lowest anchor is forced
    # two identical boxes: an anchor takes the lower one's class
    reg, lab = rn.encode_targets_cupy(two[:1], np.array([[0, 0, 4, 3]] * 2, np.float32),
                                      np.array([0, 1]), [0, 2], 3)
    np.testing.assert_array_equal(lab[0, 0, :3], [1, 0, 0])
    assert retinanet_cu.calls == ["retinanet_encode", "retinanet_best_anchor", "retinanet_encode",
                                  "retinanet_best_anchor", "retinanet_encode", "retinanet_encode"]


@pytest.mark.parametrize("seed", SEEDS)
def test_retinanet_random_batches(on_retinanet_cu, seed):
    """More boxes than one shared-memory chunk (128) in one image, an empty image, valid masks,
    padding sizes, forced matching; the tolerated differences are float32 decisions only."""
    rng = np.random.default_rng(seed)
    hw = (48, 64)
    anchors = rn.anchors_for_shape(hw, rn.AnchorConfig(sizes=(16, 32), strides=(8, 16)))
    boxes, labels, offsets, valid = retinanet_cases.random_batch(rng, 3, 12, hw)
    many, many_labels, _, many_valid = retinanet_cases.random_batch(rng, 1, 140, hw, ragged=False)
    boxes, labels = np.concatenate([boxes, many]), np.concatenate([labels, many_labels])
    valid = np.concatenate([valid, many_valid])
    offsets = np.concatenate([[0], offsets, [offsets[-1] + 140]])  # image 0 empty
    sizes = rng.integers([24, 32], [49, 65], (5, 2))
    reg = retinanet_cases.check_parity(on_retinanet_cu, anchors, boxes, labels, offsets,
                                       valid=valid, image_sizes=sizes)
    assert (reg[..., 4] == 1).any(), f"seed {seed}"
    retinanet_cases.check_parity(on_retinanet_cu, anchors, boxes, labels, offsets, canvas=hw,
                                 cfg=rn.TargetConfig(force_match=True))
