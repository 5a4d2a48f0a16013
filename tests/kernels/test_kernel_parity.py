"""The CUDA box, colour and RetinaNet kernels (detaug/kernels/boxes.cu, color.cu, retinanet.cu)
compiled with g++ and run on the CPU (tests/helpers/cuda_emulation.py), through their modules'
own ``*_cupy`` host code, against the NumPy twins: on the boundary cases of
tests/ops/test_boundaries.py (exactly) and on fresh random batches. The box and colour kernels on
the GPU are the ``gpu``-marked tests below; RetinaNet's are in tests/targets/test_retinanet.py."""
import numpy as np
import pytest

from detaug.kernels import boxes as kb
from detaug.kernels import boxes as K
from detaug.kernels import color as kc
from detaug.kernels import color as C
from detaug.kernels.launch import reset_launch_counts, total_launches
from detaug.targets import retinanet as rn
from helpers import cuda_emulation as emu
from helpers import cupy as cp  # imported on first use: by a gpu test, where there is a GPU
from helpers import fresh_seed, random_images
from helpers import retinanet_cases
from helpers.cases import PRUNE_CASES, RN_ANCHORS, RN_BOX, RN_STATES

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


# ------------------------------------------------------------------------------------------ GPU
BOX_ATOL = 1e-3


def random_offsets(rng, b, hi):
    return np.concatenate([[0], np.cumsum(rng.integers(0, hi, b))]).astype(np.int64)


def random_boxes(rng, n, lo=-30.0, hi=330.0):
    p = rng.uniform(lo, hi, (n, 2))
    return np.concatenate([p, p + rng.uniform(0.5, 90, (n, 2))], axis=1).astype(np.float32)


def random_affine(rng, b):
    m = np.tile(np.eye(3), (b, 1, 1))
    m[:, :2, :2] = rng.normal(0, 1.0, (b, 2, 2))
    m[:, :2, 2] = rng.uniform(-50, 250, (b, 2))
    return m


def assert_u8_close(got, ref):
    got = cp.asnumpy(got)
    assert got.dtype == np.uint8 and got.shape == ref.shape
    assert np.abs(got.astype(int) - ref.astype(int)).max(initial=0) <= 1


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["corners", "ellipse"])
@pytest.mark.parametrize("clip", [True, False])
def test_box_transform_parity(mode, clip):
    rng = np.random.default_rng(10)
    offsets = random_offsets(rng, 16, 300)
    si = K.sample_index_from_offsets(offsets)
    n = int(offsets[-1])
    boxes, mats = random_boxes(rng, n), random_affine(rng, 16)
    canvas = rng.uniform(50, 400, (16, 2))
    valid = rng.random(n) < 0.9
    kw = dict(mode=mode, clip=clip, min_size=2.0, min_area=40.0, min_visibility=0.3)
    ref_b, ref_k = K.box_transform_numpy(boxes, si, mats, canvas, valid=valid, **kw)
    d_boxes, d_si, d_valid = cp.asarray(boxes), cp.asarray(si), cp.asarray(valid)
    out, keep = K.box_transform_cupy(d_boxes, d_si, mats, canvas, valid=d_valid, **kw)
    assert out.dtype == cp.float32 and keep.dtype == cp.bool_
    np.testing.assert_allclose(cp.asnumpy(out), ref_b, atol=BOX_ATOL, rtol=0)
    np.testing.assert_array_equal(cp.asnumpy(keep), ref_k)
    assert 0 < ref_k.sum() < n
    np.testing.assert_array_equal(cp.asnumpy(d_boxes), boxes)   # input not mutated
    # a host sample index and valid=None give the same
    out2, keep2 = K.box_transform_cupy(d_boxes, si, mats, canvas, **kw)
    ref_b2, ref_k2 = K.box_transform_numpy(boxes, si, mats, canvas, **kw)
    np.testing.assert_allclose(cp.asnumpy(out2), ref_b2, atol=BOX_ATOL, rtol=0)
    np.testing.assert_array_equal(cp.asnumpy(keep2), ref_k2)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", [13, None])
def test_box_transform_staged_parity(seed):
    """A chain of K stages (clip at every canvas, per-stage corner / ellipse rule, visibility
    against the unclipped chain): one launch, equal to the twin."""
    seed = int(np.random.default_rng().integers(2**31)) if seed is None else seed
    rng = np.random.default_rng(seed)
    offsets = random_offsets(rng, 12, 200)
    si = K.sample_index_from_offsets(offsets)
    n, k = int(offsets[-1]), int(rng.integers(2, 6))
    boxes = random_boxes(rng, n)
    mats = np.stack([0.3 * random_affine(rng, 12) + 0.7 * np.eye(3) for _ in range(k)])
    mats[:, :, 2] = [0, 0, 1]
    canvases = rng.uniform(50, 400, (k, 12, 2))
    modes = [str(rng.choice(["corners", "ellipse"])) for _ in range(k)]
    valid = rng.random(n) < 0.9
    for clip in (True, False):
        kw = dict(mode=modes, clip=clip, min_size=1.0, min_area=20.0, min_visibility=0.2)
        ref_b, ref_k = K.box_transform_numpy(boxes, si, mats, canvases, valid=valid, **kw)
        reset_launch_counts()
        out, keep = K.box_transform_cupy(cp.asarray(boxes), cp.asarray(si), mats, canvases,
                                         valid=cp.asarray(valid), **kw)
        assert total_launches() == 1
        np.testing.assert_array_equal(cp.asnumpy(keep), ref_k, err_msg=f"seed {seed}")
        np.testing.assert_allclose(cp.asnumpy(out)[ref_k], ref_b[ref_k], atol=BOX_ATOL,
                                   err_msg=f"seed {seed}")
        assert 0 < ref_k.sum() < n


@pytest.mark.gpu
def test_box_transform_crafted_on_gpu():
    boxes = cp.asarray(np.array([[150, 10, 170, 30], [-10, 0, 10, 20], [10, 10, 12, 50]], np.float32))
    si = cp.zeros(3, cp.int32)
    out, keep = K.box_transform_cupy(boxes, si, np.eye(3)[None], [[100, 100]], min_visibility=0.4)
    np.testing.assert_array_equal(cp.asnumpy(out), [[100, 10, 100, 30], [0, 0, 10, 20], [10, 10, 12, 50]])
    assert cp.asnumpy(keep).tolist() == [False, True, True]
    _, keep = K.box_transform_cupy(boxes, si, np.eye(3)[None], [[100, 100]], min_visibility=0.6)
    assert cp.asnumpy(keep).tolist() == [False, False, True]


@pytest.mark.gpu
def test_box_transform_empty_and_stream():
    out, keep = K.box_transform_cupy(cp.zeros((0, 4), cp.float32), cp.zeros(0, cp.int32),
                                     np.tile(np.eye(3), (2, 1, 1)), np.ones((2, 2)))
    assert out.shape == (0, 4) and keep.shape == (0,)
    rng = np.random.default_rng(11)
    boxes, mats = random_boxes(rng, 50), random_affine(rng, 1)
    si = np.zeros(50, np.int32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        d_boxes, d_si = cp.asarray(boxes), cp.asarray(si)
    out, keep = K.box_transform_cupy(d_boxes, d_si, mats, [[300, 300]], stream=stream)
    stream.synchronize()
    ref_b, ref_k = K.box_transform_numpy(boxes, si, mats, [[300, 300]])
    np.testing.assert_allclose(cp.asnumpy(out), ref_b, atol=BOX_ATOL, rtol=0)
    np.testing.assert_array_equal(cp.asnumpy(keep), ref_k)


FIELD_DTYPES = [np.bool_, np.uint8, np.int16, np.int32, np.int64, np.float32, np.float64]


@pytest.mark.gpu
@pytest.mark.parametrize("max_boxes", [0, 7, 300, 2500])
def test_pad_boxes_parity(max_boxes):
    rng = np.random.default_rng(12)
    # sizes up to a few thousand: the per-sample scan walks several chunks of the block
    sizes = np.array([0, 1, 255, 256, 257, 3000, 40, 1100])
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    boxes = random_boxes(rng, n)
    fields = {f"f{i}": (rng.integers(0, 100, n)).astype(dt) for i, dt in enumerate(FIELD_DTYPES)}
    fields["id"] = np.arange(n, dtype=np.int64)
    keep = rng.random(n) < 0.7
    kw = dict(fill=-3.5, field_fill={"f2": 77, "f5": -9.25})
    ref = K.pad_boxes_numpy(boxes, fields, keep, offsets, max_boxes, **kw)
    got = K.pad_boxes_cupy(cp.asarray(boxes), {k: cp.asarray(v) for k, v in fields.items()},
                           cp.asarray(keep), offsets, max_boxes, **kw)
    np.testing.assert_array_equal(cp.asnumpy(got[0]), ref[0])
    for name in fields:
        assert got[1][name].dtype == ref[1][name].dtype
        np.testing.assert_array_equal(cp.asnumpy(got[1][name]), ref[1][name], err_msg=name)
    np.testing.assert_array_equal(cp.asnumpy(got[2]), ref[2])
    assert got[2].dtype == cp.int32
    # keep=None
    ref = K.pad_boxes_numpy(boxes, fields, None, offsets, max_boxes)
    got = K.pad_boxes_cupy(cp.asarray(boxes), {k: cp.asarray(v) for k, v in fields.items()},
                           None, offsets, max_boxes)
    np.testing.assert_array_equal(cp.asnumpy(got[0]), ref[0])
    np.testing.assert_array_equal(cp.asnumpy(got[1]["id"]), ref[1]["id"])
    np.testing.assert_array_equal(cp.asnumpy(got[2]), ref[2])


@pytest.mark.gpu
def test_pad_boxes_empty_and_hand_case():
    padded, f, counts = K.pad_boxes_cupy(cp.zeros((0, 4), cp.float32), {"l": cp.zeros(0, cp.int64)},
                                         None, [0], 3)
    assert padded.shape == (0, 3, 4) and f["l"].shape == (0, 3) and counts.shape == (0,)
    padded, f, counts = K.pad_boxes_cupy(cp.zeros((0, 4), cp.float32), {"l": cp.zeros(0, cp.int64)},
                                         None, [0, 0, 0], 3)
    assert cp.asnumpy(counts).tolist() == [0, 0] and (cp.asnumpy(f["l"]) == -1).all()
    assert (cp.asnumpy(padded) == 0).all()
    boxes = np.arange(12, dtype=np.float32).reshape(3, 4)
    padded, f, counts = K.pad_boxes_cupy(cp.asarray(boxes), {}, cp.asarray([False, True, True]),
                                         [0, 1, 3], 2, fill=5.0)
    assert f == {} and cp.asnumpy(counts).tolist() == [0, 2]
    np.testing.assert_array_equal(cp.asnumpy(padded), [[[5] * 4] * 2, boxes[1:]])


@pytest.mark.gpu
def test_iou_parity():
    rng = np.random.default_rng(14)
    a, b = random_boxes(rng, 300, 0, 200), random_boxes(rng, 70, 0, 200)
    b[:3] = 0  # zero-area boxes: union may be 0
    np.testing.assert_allclose(cp.asnumpy(K.iou_matrix_cupy(cp.asarray(a), cp.asarray(b))),
                               K.iou_matrix_numpy(a, b), atol=1e-6)
    assert K.iou_matrix_cupy(cp.zeros((0, 4), cp.float32), cp.asarray(b)).shape == (0, 70)
    offsets = np.array([0, 5, 5, 40, 41], np.int64)
    boxes = random_boxes(rng, 41, 0, 200)
    windows = random_boxes(rng, 4 * 30, 0, 200).reshape(4, 30, 4)
    ref = K.windows_iou_numpy(windows, boxes, offsets)
    got = K.windows_iou_cupy(cp.asarray(windows), cp.asarray(boxes), offsets)
    assert got.shape == ref.shape == (4, 30, 35)
    np.testing.assert_allclose(cp.asnumpy(got), ref, atol=1e-6)
    assert K.windows_iou_cupy(cp.zeros((0, 3, 4), cp.float32), cp.zeros((0, 4), cp.float32),
                              [0]).shape == (0, 3, 0)


@pytest.mark.gpu
def test_color_parity_ragged_and_dense():
    rng = np.random.default_rng(15)
    shapes = [(37, 53, 3), (1, 1, 3), (0, 4, 3), (64, 17, 3), (120, 200, 3)]
    batch = random_images(rng, shapes)
    d_batch = [cp.asarray(im) for im in batch]
    br, ct = rng.uniform(0.5, 1.5, 5), rng.uniform(0.5, 1.5, 5)
    h, s, v = rng.uniform(-180, 180, 5), rng.uniform(0, 2, 5), rng.uniform(0.5, 1.5, 5)
    for got, ref in ((C.brightness_contrast_cupy(d_batch, br, ct, contrast_center=100.0),
                      C.brightness_contrast_numpy(batch, br, ct, contrast_center=100.0)),
                     (C.hsv_cupy(d_batch, h, s, v), C.hsv_numpy(batch, h, s, v)),
                     (C.hsv_cupy(d_batch, cp.asarray(h), cp.asarray(s), cp.asarray(v)),
                      C.hsv_numpy(batch, h, s, v))):
        assert isinstance(got, list) and len(got) == 5
        for g, r in zip(got, ref):
            assert_u8_close(g, r)
    for d, im in zip(d_batch, batch):   # not mutated
        np.testing.assert_array_equal(cp.asnumpy(d), im)
    dense = np.stack(random_images(rng, [(33, 45, 3)] * 4))
    got = C.hsv_cupy(cp.asarray(dense), h[:4], s[:4], v[:4])
    assert isinstance(got, cp.ndarray)
    assert_u8_close(got, C.hsv_numpy(dense, h[:4], s[:4], v[:4]))
    got = C.brightness_contrast_cupy(cp.asarray(dense), br[:4], ct[:4])
    assert_u8_close(got, C.brightness_contrast_numpy(dense, br[:4], ct[:4]))
    # identity stays exact on the GPU too
    ident = C.hsv_cupy(cp.asarray(dense), np.zeros(4), np.ones(4), np.ones(4))
    np.testing.assert_array_equal(cp.asnumpy(ident), dense)


@pytest.mark.gpu
def test_color_empty():
    assert C.hsv_cupy([], [], [], []) == []
    assert C.brightness_contrast_cupy(cp.zeros((0, 4, 4, 3), cp.uint8), [], []).shape == (0, 4, 4, 3)


def _calls(b, rng):
    offsets = np.concatenate([[0], np.cumsum(rng.integers(1, 20, b))]).astype(np.int64)
    n = int(offsets[-1])
    si = cp.asarray(K.sample_index_from_offsets(offsets))
    boxes = cp.asarray(random_boxes(rng, n))
    keep = cp.asarray(rng.random(n) < 0.5)
    imgs = [cp.asarray(im) for im in random_images(rng, [(8 + i % 5, 9, 3) for i in range(b)])]
    ones = np.ones(b)
    return {
        "box_transform": lambda: K.box_transform_cupy(boxes, si, random_affine(rng, b),
                                                      np.full((b, 2), 300.0)),
        "pad_boxes": lambda: K.pad_boxes_cupy(boxes, {"l": cp.arange(n)}, keep, offsets, 8),
        "iou_matrix": lambda: K.iou_matrix_cupy(boxes, boxes),
        "windows_iou": lambda: K.windows_iou_cupy(cp.asarray(random_boxes(rng, b * 3)).reshape(b, 3, 4),
                                                  boxes, offsets),
        "brightness_contrast": lambda: C.brightness_contrast_cupy(imgs, ones, ones),
        "hsv": lambda: C.hsv_cupy(imgs, ones * 10, ones, ones),
    }


@pytest.mark.gpu
def test_one_launch_per_call_for_any_batch_size():
    rng = np.random.default_rng(16)
    small, large = _calls(1, rng), _calls(64, rng)
    for name in small:
        counts = []
        for calls in (small, large):
            reset_launch_counts()
            calls[name]()
            counts.append(total_launches())
        assert counts == [1, 1], name
    cp.cuda.get_current_stream().synchronize()


@pytest.mark.gpu
def test_upload_many_round_trips_ragged_arrays_in_one_buffer(rng):
    """backend.upload_many (the kernels' metadata and the pipeline's ragged host-image uploads):
    values, dtypes and shapes survive, every view starts 16-byte aligned inside one device
    buffer, the copy is ordered on the given stream, and an empty array is allowed."""
    from detaug.core.backend import upload_many

    arrays = random_images(rng, [(int(rng.integers(1, 50)), int(rng.integers(1, 60)), 3) for _ in range(5)])
    arrays += [rng.standard_normal((7, 3)), np.arange(5, dtype=np.int64), np.zeros((0, 4), np.float32),
               rng.random(3).astype(np.float32)]
    s = cp.cuda.Stream(non_blocking=True)
    got = upload_many(arrays, s)
    s.synchronize()
    assert len(got) == len(arrays)
    base = got[0].data.mem.ptr
    for g, a in zip(got, arrays):
        assert g.dtype == a.dtype and g.shape == a.shape
        np.testing.assert_array_equal(cp.asnumpy(g), a)
        if a.size:
            assert g.data.mem.ptr == base and g.data.ptr % 16 == 0
