"""Instance shapes on the GPU: the box materialisation (graph/materialize.py) moves keypoints,
oriented boxes and polygons through the pending chain with kernels/shapes.py, a tight box follows
its polygons, and pad_fields pads the shaped fields on the device; equal to the CPU path.

Without a GPU the device branch runs with shapes.cu and boxes.cu compiled as host C++
(tests/helpers/cuda_emulation.py): the same host code, the same kernels, fake device arrays. The
``gpu``-marked tests run whole pipelines on both backends and compare them."""
import numpy as np
import pytest

from detaug import fn
from detaug.core import instances as I
from detaug.core.batch import BoxBatch, _identity_geometry
from detaug.core import geometry as G
from detaug.graph import materialize as M
from detaug.kernels import boxes as kb
from detaug.kernels import shapes as ks
from detaug.kernels.launch import launch_counts, reset_launch_counts
from detaug.ops.instance_fields import pad_fields
from helpers import cuda_emulation as emu
from helpers import fresh_seed, run_graph

SEEDS = [11, fresh_seed()]
FLIP = np.array([0, 2, 1, 3])


def _batch(rng, b=3, h=40, w=60):
    """b samples of 5 boxes each with 4 keypoints (a mirror pairing), an oriented box, 0-2
    polygons (some overhanging the image) and tight_box set on every other box."""
    boxes, polys, kps, obbs = [], [], [], []
    for _ in range(b):
        lo = rng.uniform([-5, -5], [w - 10, h - 10], (5, 2))
        boxes.append(np.concatenate([lo, lo + rng.uniform(6, 20, (5, 2))], 1))
        for x0, y0 in lo:
            polys.append([np.array([[x0, y0], [x0 + rng.uniform(5, 20), y0 + 2],
                                    [x0 + 8, y0 + rng.uniform(5, 20)], [x0 + 2, y0 + 9]])
                          for _ in range(int(rng.integers(0, 3)))])
        kp = np.zeros((5, 4, 3), np.float32)
        kp[..., :2] = rng.uniform(-5, w + 5, (5, 4, 2))
        kp[..., 2] = rng.integers(0, 3, (5, 4))
        kp[kp[..., 2] == 0] = 0
        kps.append(kp)
        c = lo[:, None] + np.array([[0, 0], [8, 0], [8, 5], [0, 5]])
        obbs.append(c.astype(np.float32))
    n = 5 * b
    pts = [p for ps in polys for p in ps]
    dense = I.dense_polygons(np.concatenate(pts), np.cumsum([0] + [len(p) for p in pts]),
                             np.cumsum([0] + [len(ps) for ps in polys]))
    fields = {"keypoints": np.concatenate(kps), "keypoint_flip": np.tile(FLIP, (n, 1)),
              "obb": np.concatenate(obbs), "polygons": dense,
              "tight_box": (np.arange(n) % 2).astype(np.uint8)}
    offsets = np.arange(0, n + 1, 5, dtype=np.int64)
    return BoxBatch(np.concatenate(boxes).astype(np.float32), np.arange(n), offsets,
                    np.tile([h, w], (b, 1)), "cpu", fields)


def _chain(rng, b, h=40, w=60):
    """flip, rotate about the centre (expand=False), crop, resize: per-sample parameters."""
    hw = np.tile([h, w], (b, 1))
    g = _identity_geometry(hw, 3)
    g = g.then(G.flip(w, h, rng.random(b) < 0.5, 0), hw)
    centre = np.tile([w / 2, h / 2], (b, 1))
    g = g.then(G.linear_about(G.rotation_linear(rng.uniform(-40, 40, b)), centre, centre), hw)
    xy = rng.uniform(0, 8, (b, 2))
    g = g.then(G.translate(-xy[:, 0], -xy[:, 1]), np.tile([30, 44], (b, 1)))
    return g.then(np.tile(G.scale(72 / 44, 48 / 30), (b, 1, 1)), np.tile([48, 72], (b, 1)))


def _assert_same_fields(got, want, trim=True):
    """``trim``: the device's polygons are cut to the CPU's width here (else already cut)."""
    assert set(got) == set(want)
    for name in want:
        g, w = np.asarray(got[name]), np.asarray(want[name])
        if name == "polygons":
            g = I.trim_polygons(g) if trim else g
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("seed", SEEDS)
def test_prune_on_the_device_equals_the_cpu(shape_kernels, seed):
    rng = np.random.default_rng(seed)
    host = _batch(rng)
    g = _chain(rng, host.batch_size)
    want, got = emu.prune_on_host_and_device(host, g, min_size=1.0)
    np.testing.assert_array_equal(np.asarray(got.valid), want.valid)
    np.testing.assert_allclose(np.asarray(got.boxes), want.boxes, rtol=0, atol=1e-4)
    _assert_same_fields(got.fields, want.fields)
    assert got.fields["polygons"].shape[1] > want.fields["polygons"].shape[1]  # capacity
    for g, w in zip(got.per_sample(), want.per_sample()):  # the CPU's width on the way out
        _assert_same_fields(g, w, trim=False)
    # one launch per shape kind for the whole batch
    assert sorted(shape_kernels.calls) == ["keypoints_transform", "obb_transform",
                                           "polygons_transform"]
    # the tight boxes took their polygons' enclosing box (tighter than the turned corners')
    use = (want.fields["tight_box"] != 0) & ~np.isnan(want.fields["polygons"][:, 0, 0])
    assert use.any()


@pytest.mark.parametrize("seed", SEEDS)
def test_clip_without_a_chain_on_the_device_equals_the_cpu(shape_kernels, seed):
    host = _batch(np.random.default_rng(seed))
    want = M.prune(host)
    got = M.prune(emu.on_fake_device(host))
    _assert_same_fields(got.fields, want.fields)
    assert sorted(shape_kernels.calls) == ["keypoints_transform", "polygons_transform"]


@pytest.mark.parametrize("max_boxes", [2, 7])
def test_pad_fields_on_the_device_equals_the_cpu(shape_kernels, max_boxes):
    rng = np.random.default_rng(4)
    b = M.prune(_batch(rng).with_geometry(_chain(rng, 3)))
    fields = {"labels": b.labels, "difficult": rng.random(b.num_boxes) < 0.5, **b.fields}
    want = pad_fields(b.boxes, fields, b.valid, b.offsets, max_boxes)
    dev = {k: emu.dev(v) for k, v in fields.items()}
    dev["polygons"] = emu.dev(np.pad(fields["polygons"], ((0, 0), (0, 9), (0, 0)),
                                     constant_values=np.nan))  # wider, as the device leaves it
    got = pad_fields(emu.dev(b.boxes), dev, emu.dev(b.valid), b.offsets, max_boxes,
                     device="gpu", pad=kb.pad_boxes_cupy)
    np.testing.assert_array_equal(np.asarray(got[0]), want[0])
    np.testing.assert_array_equal(np.asarray(got[2]), want[2])
    assert list(got[1]) == list(want[1])
    for name in want[1]:
        np.testing.assert_array_equal(np.asarray(got[1][name]), want[1][name], err_msg=name)
    assert shape_kernels.calls == ["pad_shaped"]


def test_an_overflowed_row_is_refused_at_the_output(shape_kernels):
    """A box whose clipped polygons did not fit (the marker row) is refused by name where the
    polygons leave the device: per_sample and padding (never a truncated polygon)."""
    host = _batch(np.random.default_rng(2))
    dev = M.prune(emu.on_fake_device(host).with_geometry(_chain(np.random.default_rng(3), 3)))
    rows = np.array(dev.fields["polygons"])
    rows[4, 0] = [I.POLYGON_OVERFLOW, -I.POLYGON_OVERFLOW]
    dev = dev.replace(fields=dict(dev.fields, polygons=emu.dev(rows)))
    with pytest.raises(RuntimeError, match="'polygons'"):
        dev.per_sample()
    fields = {"labels": dev.labels, **dev.fields}
    with pytest.raises(RuntimeError, match="'polygons'"):
        pad_fields(dev.boxes, fields, dev.valid, dev.offsets, 5, device="gpu",
                   pad=kb.pad_boxes_cupy)


# ----------------------------------------------------------------------------- GPU
def _pipeline_inputs(rng, n=4, h=40, w=60):
    imgs = [rng.integers(0, 256, (h, w, 3), np.uint8) for _ in range(n)]
    b = _batch(rng, n, h, w)
    boxes = [b.boxes[5 * i:5 * i + 5] for i in range(n)]
    fields = [{k: v[5 * i:5 * i + 5] for k, v in b.fields.items() if k != "tight_box"}
              for i in range(n)]
    return imgs, boxes, fields


def _graph(i, b):
    i, b = fn.flip(i, b, horizontal=fn.random.coin_flip())
    i, b = fn.rotate(i, b, angle=fn.random.uniform(range=(-30, 30)), expand=False)
    i, b = fn.crop(i, b, window=(2, 3, 50, 36))
    i, b = fn.resize(i, b, size=(64, 80))
    return i, b, fn.pad_boxes(b, max_boxes=6)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", SEEDS)
def test_pipeline_shapes_gpu_equal_cpu(seed):
    imgs, boxes, fields = _pipeline_inputs(np.random.default_rng(seed))
    cpu = run_graph(imgs, boxes, _graph, fields=fields, seed=seed)
    gpu = run_graph(imgs, boxes, _graph, fields=fields, seed=seed, device="gpu")
    for want, got in zip(cpu[1].per_sample(), gpu[1].per_sample()):
        np.testing.assert_allclose(got["boxes"], want["boxes"], rtol=0, atol=1e-3)
        _assert_same_fields({k: v for k, v in got.items() if k not in ("boxes", "labels")},
                            {k: v for k, v in want.items() if k not in ("boxes", "labels")},
                            trim=False)
    padded_cpu, padded_gpu = cpu[2], gpu[2]
    for name in padded_cpu:
        got = padded_gpu[name]
        got = got.get() if hasattr(got, "get") else np.asarray(got)
        assert got.shape == padded_cpu[name].shape, name
        np.testing.assert_allclose(got, padded_cpu[name], rtol=0, atol=1e-3, err_msg=name)


MORE = {  # ops that move boxes by other routes: tiles, windows drawn on the host, warps
    "mosaic": lambda i, b: fn.mosaic(i, b, size=32, partners="batch"),
    "letterbox": lambda i, b: fn.letterbox(i, b, size=(40, 40)),
    "iou_crop": lambda i, b: fn.random_iou_crop(i, b),
    "zoom_out": lambda i, b: fn.zoom_out(i, b),
    "affine": lambda i, b: fn.warp_affine(i, b, matrix=[1.1, 0.3, -4, -0.2, 0.9, 3],
                                          inverse_map=False, fill_value=0),  # (GPU: a fill)
    "perspective": lambda i, b: fn.perspective(
        i, b, startpoints=[[0, 0], [60, 0], [60, 40], [0, 40]],
        endpoints=[[3, -2], [57, 4], [62, 37], [-4, 41]]),
}


@pytest.mark.gpu
@pytest.mark.parametrize("op", sorted(MORE))
def test_more_ops_shapes_gpu_equal_cpu(op):
    imgs, boxes, fields = _pipeline_inputs(np.random.default_rng(7))
    cpu = run_graph(imgs, boxes, MORE[op], fields=fields, seed=5)[1]
    gpu = run_graph(imgs, boxes, MORE[op], fields=fields, seed=5, device="gpu")[1]
    for want, got in zip(cpu.per_sample(), gpu.per_sample()):
        np.testing.assert_allclose(got["boxes"], want["boxes"], rtol=0, atol=1e-3)
        _assert_same_fields({k: v for k, v in got.items() if k not in ("boxes", "labels")},
                            {k: v for k, v in want.items() if k not in ("boxes", "labels")},
                            trim=False)


@pytest.mark.gpu
def test_shape_launches_per_batch_not_per_sample():
    """Batch sizes 1 and 16: the same number of shape-kernel launches (one per kind each time
    the boxes are materialised)."""
    counts = []
    for n in (1, 16):
        imgs, boxes, fields = _pipeline_inputs(np.random.default_rng(n), n)
        reset_launch_counts()
        run_graph(imgs, boxes, _graph, fields=fields, device="gpu")
        counts.append({k: v for k, v in launch_counts().items()
                       if k in ("keypoints_transform", "obb_transform", "polygons_transform",
                                "pad_shaped")})
    assert counts[0] == counts[1] and counts[0].get("polygons_transform", 0) >= 1
