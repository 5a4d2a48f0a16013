"""partners='pool' (runtime/partners.py): mosaic and mixup partners drawn from the output's batch
and the k batches before it in the epoch order, each drawn position decoded once. The same
batches from random access in any order, after a resume, in launches of several batches and
with 1 or 2 host workers; every partner inside its sample's window; the decodes a batch makes
computed here from the keyed draws; the memory plan's samples per output; the spread of
partners over an epoch measured beside 'batch' and 'epoch'."""
import os

import numpy as np
import pytest

from detaug import fn, pipeline_def
from detaug.core.rng import SampleRNG
from detaug.runtime.partners import LaunchLevels
from helpers import close_pipelines, track  # noqa: F401 (fixture)
from helpers.cases import assert_same_host_batch, flat_pipe, host_batch


def yolo_pipe(root, partners="pool", k=1, **kw):
    kw.setdefault("batch_size", 4)

    @pipeline_def(seed=77, **kw)
    def p():
        enc, boxes = fn.readers.coco(annotations_file=os.path.join(root, "annotations.json"),
                                     file_root=os.path.join(root, "images"), random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed" if kw.get("device_id") is not None else "cpu")
        img, boxes = fn.mosaic(img, boxes, size=48, partners=partners, pool_batches=k)
        img, boxes = fn.affine(img, boxes, rotate=fn.random.uniform(range=(-10, 10)), fill=114.0)
        img, boxes = fn.mixup(img, boxes, probability=0.5, partners=partners, pool_batches=k)
        img = fn.hsv(img, hue=fn.random.uniform(range=(-10, 10)))
        img, boxes = fn.letterbox(img, boxes, size=(64, 64))
        return img, fn.prune_boxes(boxes, min_size=1.0)
    return track(p())


def test_pool_random_access_resume_launches_and_workers(coco_small):
    pipe = yolo_pipe(coco_small, host_processes=0)
    seq = [host_batch(pipe.run()) for _ in range(4)]
    other = yolo_pipe(coco_small, host_processes=0)
    for i in (3, 0, 2, 1):
        assert_same_host_batch(host_batch(other.run_batch(i)), seq[i])
    first = yolo_pipe(coco_small, host_processes=0)
    first.run()
    first.run()
    resumed = yolo_pipe(coco_small, host_processes=0)
    resumed.load_state_dict(first.state_dict())
    assert_same_host_batch(host_batch(resumed.run()), seq[2])
    assert_same_host_batch(host_batch(resumed.run()), seq[3])
    grouped = yolo_pipe(coco_small, host_processes=0, batches_per_launch=3)
    for i in range(4):
        assert_same_host_batch(host_batch(grouped.run()), seq[i])
    many = yolo_pipe(coco_small, host_processes=2, num_threads=2)
    for i in range(4):
        assert_same_host_batch(host_batch(many.run()), seq[i])


def read_per_batch(pipe, epoch, b):
    """The samples the source reads for batch ``b`` (those of its level): what a decoder there
    would decode (``partners.decoded_per_batch`` counts the decoders' levels alike)."""
    idx, pos, sizes = pipe.schedule.batches(epoch, b, 1)
    src = next(op for op in pipe._needed_ops() if op.schema.kind == "source")
    return len(LaunchLevels(pipe.graph, pipe.schedule, epoch, idx, pos, sizes).get(pipe.build_plan.levels.get(src.id, ()))
               .sample_index)


@pytest.mark.parametrize("k", [0, 1, 3])
def test_every_partner_lies_in_its_window(k):
    n, bsz = 40, 4
    pipe = flat_pipe(n, bsz, k, mixup=True)
    pipe.build()
    pos_of = np.argsort(pipe.schedule.shard_order(0))  # record -> its place in epoch 0's order
    earlier = 0
    for b in range(n // bsz):
        _, bx = pipe.run_batch(b)
        for d in bx.per_sample():
            p = pos_of[np.asarray(d["labels"], np.int64)] // bsz  # each box's batch
            # a mixup partner's mosaic draws from ITS batch's window: k more batches back
            assert p.max() <= b and p.min() >= b - 2 * k
            earlier += int((p < b).sum())
    assert (earlier > 0) == (k > 0)


@pytest.mark.parametrize("k", [0, 2])
def test_decodes_are_the_distinct_positions_drawn(k):
    """A mosaic alone: the batch's positions and its partners' (uniform over the window, drawn
    from the mosaic's keyed stream as ops/multi.py defines), each once."""
    n, bsz = 30, 5
    pipe = flat_pipe(n, bsz, k)
    pipe.build()
    mosaic = next(op for op in pipe.graph.ops if op.schema.name == "mosaic")
    order = pipe.schedule.shard_order(0)
    for b in range(n // bsz):
        pos = np.arange(b * bsz, (b + 1) * bsz)
        u = SampleRNG(5, mosaic.rng_id, 0, order[pos]).uniform(4)
        start = max(b - k, 0) * bsz
        size = (b + 1) * bsz - start
        picks = start + np.minimum((u[:, 1:] * size).astype(np.int64), size - 1)
        assert (u[:, 0] < 1.0).all()  # probability 1: every sample is a mosaic
        want = len(set(pos.tolist()) | set(picks.ravel().tolist()))
        assert read_per_batch(pipe, 0, b) == want
    if k == 0:  # the batch alone: nothing more than the batch is decoded, as 'batch'
        assert read_per_batch(pipe, 0, 2) == bsz


def test_memory_plan_counts_the_windows():
    """Samples per output: 'epoch' 4 (mosaic) x 2 (mixup) = 8; a pool at most 1 + k + k."""
    for partners, k, want in (("epoch", 1, 8), ("pool", 1, 3), ("pool", 2, 5), ("pool", 5, 8)):
        pipe = flat_pipe(20, 4, k, partners=partners, mixup=True)
        pipe.build()
        assert pipe.build_plan.fan_out == want, (partners, k)


def test_bad_pool_arguments_are_refused():
    with pytest.raises(ValueError, match="pool_batches"):
        flat_pipe(8, 4, -1).build()
    with pytest.raises(ValueError, match="'epoch' or 'batch' \\(or 'pool'\\)"):
        flat_pipe(8, 4, 1, partners="buffer").build()


def test_spread_of_partners_over_an_epoch():
    """Measured (printed with -s): per mode, the share of records drawn as a partner at least
    once in an epoch, the mean distance (in batches) from the output's batch to its partners'
    and the decodes per output. A pool's partners stay within k batches back; its decodes lie
    between 'batch' (1) and 'epoch' (about 4 for a mosaic)."""
    n, bsz = 96, 8
    rows = {}
    for partners, k in (("batch", 1), ("pool", 1), ("pool", 3), ("epoch", 1)):
        pipe = flat_pipe(n, bsz, k, partners=partners)
        pipe.build()
        pos_of = np.argsort(pipe.schedule.shard_order(0))
        drawn, dist = set(), []
        for b in range(n // bsz):
            _, bx = pipe.run_batch(b)
            for d in bx.per_sample():
                labels = np.asarray(d["labels"], np.int64)[1:]  # the partners' records
                drawn.update(labels.tolist())
                dist.extend((b - pos_of[labels] // bsz).tolist())
        decodes = np.mean([read_per_batch(pipe, 0, b) for b in range(n // bsz)]) / bsz
        rows[(partners, k)] = (len(drawn) / n, float(np.mean(np.abs(dist))), decodes)
        print(f"partners={partners} k={k}: {100 * len(drawn) / n:.0f}% of records drawn, "
              f"mean |distance| {np.mean(np.abs(dist)):.2f} batches, {decodes:.2f} decodes/output")
    assert rows[("batch", 1)][1] == 0 and rows[("batch", 1)][2] == 1
    for k in (1, 3):
        share, dist, decodes = rows[("pool", k)]
        assert 0 < dist <= k and 1 < decodes < rows[("epoch", 1)][2]
        assert share > 0.8  # the windows slide over the whole epoch


def _has_gpu():
    try:
        import cupy as cp

        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no cupy, no driver, no device
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA device")
def test_pool_cpu_equals_gpu(coco_small):
    """The same groups, weights and boxes on both devices (the pool's level decoded on the GPU);
    pixels within the warp's tolerance (OpenCV on the CPU, warp.cu on the GPU)."""
    cpu = yolo_pipe(coco_small, host_processes=0)
    gpu = yolo_pipe(coco_small, device_id=0)
    for i in (0, 2, 1):
        a, (gi, gb) = host_batch(cpu.run_batch(i)), gpu.run_batch(i)
        g = [np.asarray(x.get()) for x in gi.data], gb.per_sample()
        for x, y in zip(a[0], g[0]):
            assert np.abs(x.astype(int) - y.astype(int)).mean() < 1.0
        for x, y in zip(a[1], g[1]):
            assert x["labels"].tolist() == y["labels"].tolist()
            np.testing.assert_allclose(x["boxes"], y["boxes"], atol=2e-3)
            np.testing.assert_allclose(x["mixup_weight"], y["mixup_weight"])
