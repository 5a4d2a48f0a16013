"""Bitmap masks on the GPU: the box materialisation warps the per-box field ``bitmasks`` with
the mask warp kernel (kernels/shapes.py ``bitmasks_warp_cupy`` over shapes.cu ``masks_warp``,
one launch for the batch) and pads it on the device, equal to the CPU path
(core/instances.py ``warp_bitmasks``).

Without a GPU the device branch runs with shapes.cu and boxes.cu compiled as host C++
(tests/helpers/cuda_emulation.py). The ``gpu``-marked tests run whole pipelines on both
backends and compare them."""
import numpy as np
import pytest

from detaug import fn
from detaug.core import geometry as G
from detaug.core.batch import BoxBatch, _identity_geometry
from detaug.kernels import boxes as kb
from detaug.ops.instance_fields import pad_fields
from helpers import cuda_emulation as emu
from helpers import fresh_seed, run_graph

SEEDS = [7, fresh_seed()]


def _batch(rng, sizes):
    """Samples of the given canvases, 0-3 boxes each, each box a random mask on its canvas at
    the top left of the batch's plane (0 beyond, as a reader leaves it)."""
    counts = rng.integers(0, 4, len(sizes))
    counts[0] = 2
    plane = np.max(sizes, 0)
    boxes, masks = [], []
    for (h, w), n in zip(sizes, counts):
        lo = rng.uniform([0, 0], [w - 4, h - 4], (n, 2))
        boxes.append(np.concatenate([lo, lo + rng.uniform(2, 12, (n, 2))], 1))
        m = np.zeros((n, *plane), np.uint8)
        m[:, :h, :w] = rng.random((n, h, w)) < rng.uniform(0.2, 0.8)
        masks.append(m)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = int(offsets[-1])
    return BoxBatch(np.concatenate(boxes).astype(np.float32), np.arange(n), offsets,
                    np.asarray(sizes, np.int64), "cpu", {"bitmasks": np.concatenate(masks)})


def _chain(rng, sizes):
    """flip, rotate about the centre, crop, resize: per-sample parameters and canvases."""
    hw = np.asarray(sizes, np.int64)
    b = len(hw)
    g = _identity_geometry(hw, 3)
    g = g.then(G.flip(hw[:, 1], hw[:, 0], rng.random(b) < 0.5, rng.random(b) < 0.3), hw)
    centre = hw[:, ::-1] / 2.0
    g = g.then(G.linear_about(G.rotation_linear(rng.uniform(-40, 40, b)), centre, centre), hw)
    xy = rng.uniform(0, 6, (b, 2))
    crop = np.maximum(hw - 8, 4)
    g = g.then(G.translate(-xy[:, 0], -xy[:, 1]), crop)
    out = np.stack([rng.integers(20, 50, b), rng.integers(20, 50, b)], 1)
    return g.then(G.scale(out[:, 1] / crop[:, 1], out[:, 0] / crop[:, 0]), out)


@pytest.mark.parametrize("seed", SEEDS)
def test_bitmasks_warp_on_the_device_equals_the_cpu(shape_kernels, seed):
    rng = np.random.default_rng(seed)
    sizes = [(int(rng.integers(12, 40)), int(rng.integers(12, 40))) for _ in range(4)]
    host = _batch(rng, sizes)
    g = _chain(rng, sizes)
    want, got = emu.prune_on_host_and_device(host, g)
    assert shape_kernels.calls == ["masks_warp"]  # one launch for every mask of the batch
    np.testing.assert_array_equal(np.asarray(got.fields["bitmasks"]), want.fields["bitmasks"])
    assert want.fields["bitmasks"].any()
    for a, b in zip(got.per_sample(), want.per_sample()):
        np.testing.assert_array_equal(a["bitmasks"], b["bitmasks"])


def test_pad_fields_pads_bitmasks_on_the_device(shape_kernels):
    rng = np.random.default_rng(3)
    host = _batch(rng, [(20, 30), (25, 18), (16, 16)])
    keep = np.ones(host.num_boxes, bool)
    keep[0] = False
    fields = {"labels": host.labels, **host.fields}
    want = pad_fields(host.boxes, fields, keep, host.offsets, 3)
    got = pad_fields(emu.dev(host.boxes), {k: emu.dev(v) for k, v in fields.items()},
                     emu.dev(keep), host.offsets, 3, device="gpu", pad=kb.pad_boxes_cupy)
    np.testing.assert_array_equal(np.asarray(got[1]["bitmasks"]), want[1]["bitmasks"])


# ----------------------------------------------------------------------------- GPU
def _inputs(rng, n=4):
    imgs, boxes, fields = [], [], []
    for _ in range(n):
        h, w = int(rng.integers(30, 60)), int(rng.integers(30, 60))
        imgs.append(rng.integers(0, 256, (h, w, 3), np.uint8))
        lo = rng.uniform([0, 0], [w - 10, h - 10], (3, 2))
        boxes.append(np.concatenate([lo, lo + rng.uniform(4, 10, (3, 2))], 1))
        fields.append({"bitmasks": (rng.random((3, h, w)) < 0.5).astype(np.uint8)})
    return imgs, boxes, fields


def _graph(i, b):
    i, b = fn.flip(i, b, horizontal=fn.random.coin_flip())
    i, b = fn.rotate(i, b, angle=fn.random.uniform(range=(-30, 30)), expand=False)
    i, b = fn.random_resized_crop(i, b, size=(40, 48))
    return i, b, fn.pad_boxes(b, max_boxes=4), fn.instance_masks(b)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", SEEDS)
def test_pipeline_bitmasks_gpu_equal_cpu(seed):
    imgs, boxes, fields = _inputs(np.random.default_rng(seed))
    cpu = run_graph(imgs, boxes, _graph, fields=fields, seed=seed)
    gpu = run_graph(imgs, boxes, _graph, fields=fields, seed=seed, device="gpu")
    for want, got in zip(cpu[1].per_sample(), gpu[1].per_sample()):
        np.testing.assert_array_equal(got["bitmasks"], want["bitmasks"])
    np.testing.assert_array_equal(gpu[2]["bitmasks"].get(), cpu[2]["bitmasks"])
    for want, got in zip(cpu[3].per_sample(), gpu[3].per_sample()):
        np.testing.assert_array_equal(got["masks"], want["masks"])
