"""GPU backend: per-op parity with the CPU backend, decode, no device sync in the graph, one
launch per op per batch, stable memory, zero-copy hand-over to torch. Run on the device."""
import gc
import os
import time

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core import backend
from detaug.runtime.gpu.allocator import device_pool
from detaug.runtime.gpu.decode_proc import _Lease
from detaug.runtime.gpu.memory_plan import DEFAULT_BUDGET
from detaug.kernels import launch as L
from helpers import COCO, VOC
from helpers import close_pipelines, run_graph, to_np, track  # noqa: F401  (autouse fixture)

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def reference_cpu_warp():
    backend.set_cpu_warp("reference")  # compare the GPU with the twins, not with OpenCV
    yield
    backend.set_cpu_warp("opencv")
    gc.collect()  # pipelines left open stop their decode processes


def _data(seed, n=6):
    rng = np.random.default_rng(seed)
    imgs, boxes, fields = [], [], []
    for k in range(n):
        h, w = int(rng.integers(30, 70)), int(rng.integers(30, 90))
        imgs.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        m = int(rng.integers(0, 7))
        xy = rng.uniform(0, [w - 2, h - 2], (m, 2))
        wh = rng.uniform(1, [w / 2, h / 2], (m, 2))
        boxes.append(np.concatenate([xy, xy + wh], 1))
        fields.append({"annotation_id": rng.integers(0, 1 << 40, m)})
    return imgs, boxes, fields


R = fn.random
OPS = {
    "flip": lambda i, b: fn.flip(i, b, horizontal=R.coin_flip(), vertical=R.coin_flip()),
    "crop": lambda i, b: fn.crop(i, b, crop=(24, 28), crop_pos_x=R.uniform(range=(0, 1)),
                                   crop_pos_y=R.uniform(range=(0, 1))),
    "rotate": lambda i, b: fn.rotate(i, b, angle=R.uniform(range=(-40, 40)), fill=7),
    "rotate_expand": lambda i, b: fn.rotate(i, b, angle=R.uniform(range=(-90, 90)), expand=True),
    "resize": lambda i, b: fn.resize(i, b, size=(50, 70)),
    "resize_down": lambda i, b: fn.resize(i, b, resize_shorter=11),
    "affine": lambda i, b: fn.affine(i, b, rotate=R.uniform(range=(-20, 20)), scale=R.uniform(range=(0.6, 1.5)),
                                     shear_x=R.uniform(range=(-10, 10))),
    "zoom_out": lambda i, b: fn.zoom_out(i, b, fill=100),
    "letterbox": lambda i, b: fn.letterbox(i, b, size=(64, 64)),
    "random_iou_crop": lambda i, b: fn.random_iou_crop(i, b),
    "random_resized_crop": lambda i, b: fn.random_resized_crop(i, b, size=(32, 32)),
    "prune_boxes": lambda i, b: (i, fn.prune_boxes(fn.rotate(i, b, angle=30)[1], min_size=3, min_visibility=0.5)),
    "clip_boxes": lambda i, b: (i, fn.clip_boxes(fn.zoom_out(i, b)[1])),
    "box_convert": lambda i, b: (i, fn.box_convert(b, fmt="cxcywh", normalized=True)),
    "pad_boxes": lambda i, b: (i, fn.pad_boxes(fn.prune_boxes(fn.random_iou_crop(i, b)[1]), max_boxes=5)),
    "normalize": lambda i, b: (fn.normalize(fn.resize(i, size=(40, 40)), mean=[120, 110, 100],
                                            std=[60, 50, 40], output_layout="CHW"), b),
    "normalize_f16": lambda i, b: (fn.normalize(i, mean=128, std=64, dtype="float16"), b),
    "crop_mirror_normalize": lambda i, b: fn.crop_mirror_normalize(i, b, crop=(20, 20), mirror=R.coin_flip(),
                                                                   mean=[1, 2, 3], std=[50, 60, 70]),
    "brightness_contrast": lambda i, b: (fn.brightness_contrast(i, brightness=R.uniform(range=(0.5, 1.5)),
                                                                contrast=R.uniform(range=(0.5, 1.5))), b),
    "hsv": lambda i, b: (fn.hsv(i, hue=R.uniform(range=(-30, 30)), saturation=R.uniform(range=(0.5, 1.5)),
                                value=R.uniform(range=(0.7, 1.2))), b),
    "detection_chain": lambda i, b: _chain(i, b),
    "retinanet_encode": lambda i, b: fn.retinanet_encode(fn.letterbox(i, b, size=(128, 128), center=False)[1],
                                                         num_classes=8),
}


def _chain(i, b):
    i, b = fn.random_iou_crop(i, b)
    i, b = fn.flip(i, b, horizontal=R.coin_flip())
    i, b = fn.rotate(i, b, angle=R.uniform(range=(-10, 10)))
    i, b = fn.resize(i, b, size=(64, 64))
    b = fn.prune_boxes(b, min_size=1)
    return fn.normalize(i, mean=[124, 116, 104], std=[58, 57, 57], output_layout="CHW"), fn.pad_boxes(b)


def _compare(c, g, name):
    from detaug import BoxBatch, ImageBatch

    if isinstance(c, ImageBatch):
        assert g.device == "gpu"
        assert len(c.data) == len(g.data), name
        for a, b in zip(c.data, g.data, strict=True):
            a, b = to_np(a), to_np(b)
            assert a.shape == b.shape and a.dtype == b.dtype, name
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64)).max(initial=0)
            tol = 1 if a.dtype == np.uint8 else (2e-3 if a.dtype == np.float16 else 1e-3)
            assert diff <= tol, f"{name}: image differs by {diff}"
    elif isinstance(c, BoxBatch):
        cs, gs = c.per_sample(), g.per_sample()
        assert len(cs) == len(gs), name
        for a, b in zip(cs, gs, strict=True):
            assert set(b) == set(a), f"{name}: fields {sorted(b)} against {sorted(a)}"
            np.testing.assert_allclose(b["boxes"], a["boxes"], atol=1e-3, err_msg=name)
            for k in a:
                if k != "boxes":
                    np.testing.assert_array_equal(b[k], a[k], err_msg=f"{name}: {k}")
    elif isinstance(c, dict):
        assert set(g) == set(c), f"{name}: keys {sorted(g)} against {sorted(c)}"
        for k in c:
            if k == "boxes":
                np.testing.assert_allclose(to_np(g[k]), to_np(c[k]), atol=1e-3, err_msg=name)
            else:
                np.testing.assert_array_equal(to_np(g[k]), to_np(c[k]), err_msg=f"{name}: {k}")
    elif np.issubdtype(np.asarray(to_np(c)).dtype, np.floating):
        np.testing.assert_allclose(to_np(g), to_np(c), atol=1e-4, rtol=1e-5, err_msg=name)
    else:
        np.testing.assert_array_equal(to_np(g), to_np(c))


@pytest.mark.parametrize("name", sorted(OPS))
def test_op_parity_with_cpu(name):
    for seed in (1, 4242):
        imgs, boxes, fields = _data(seed)
        cpu = run_graph(imgs, boxes, OPS[name], fields=fields, seed=seed)
        gpu = run_graph(imgs, boxes, OPS[name], fields=fields, seed=seed, device="gpu")
        assert len(cpu) == len(gpu)
        for c, g in zip(cpu, gpu, strict=True):
            _compare(c, g, f"{name} (seed {seed})")


def _decode_pipe(device, root, files=None):
    pipe = Pipeline(batch_size=8, num_threads=4, seed=0, device_id=0, on_error="raise")
    with pipe:
        enc, _ = fn.readers.voc(root=root) if files is None else (fn.readers.file(files=files, file_root=root), None)
        pipe.set_outputs(fn.decoders.image(enc, device=device))
    return track(pipe)


def test_gpu_decode_close_to_cpu_decode():
    pytest.importorskip("nvidia.nvimgcodec")
    cpu, gpu = _decode_pipe("cpu", VOC), _decode_pipe("mixed", VOC)
    diffs = []
    for _ in range(len(cpu)):
        (a,), (b,) = cpu.run(), gpu.run()
        assert len(a.data) == len(b.data) == 8
        for x, y in zip(a.data, b.data, strict=True):
            y = to_np(y)
            assert x.shape == y.shape
            diffs.append(np.abs(x.astype(int) - y.astype(int)))
    mean = float(np.mean([d.mean() for d in diffs]))
    mx = int(max(d.max() for d in diffs))
    print(f"\nGPU vs CPU decode on {len(diffs)} VOC images: mean abs diff {mean:.3f}, max {mx}")
    assert mean < 2


def test_gpu_decode_reports_truncated_and_garbage(tmp_path):
    pytest.importorskip("nvidia.nvimgcodec")
    from detaug.core.errors import SampleError

    src = os.path.join(VOC, "JPEGImages", sorted(os.listdir(os.path.join(VOC, "JPEGImages")))[0])
    data = open(src, "rb").read()
    (tmp_path / "trunc.jpg").write_bytes(data[:2000])
    (tmp_path / "junk.jpg").write_bytes(b"\xff\xd8 this is not a jpeg" * 10 + b"\xff\xd9")
    for name in ("trunc.jpg", "junk.jpg"):
        pipe = track(Pipeline(batch_size=1, seed=0, device_id=0))
        with pipe:
            enc, _ = fn.readers.file(files=[name], file_root=str(tmp_path))
            pipe.set_outputs(fn.decoders.image(enc, device="mixed"))
        with pytest.raises(SampleError, match=name):
            pipe.run()


def _spin_kernel():
    import cupy as cp

    return cp.RawKernel(r'''extern "C" __global__ void spin(long long cycles) {
        long long t0 = clock64(); while (clock64() - t0 < cycles) { } }''', "spin")


def _bench_pipe(batch_size, depth=2, max_boxes=32, h=480, w=640, device_workers=None):
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(8)]

    def src(info):
        k = info.idx_in_epoch % 8
        return imgs[k], {"boxes": np.array([[10, 20, 200, 300], [300, 100, 500, 400]], np.float32),
                         "labels": np.array([1, 2])}

    pipe = Pipeline(batch_size=batch_size, num_threads=4, seed=0, device_id=0, prefetch_queue_depth=depth,
                    device_workers=device_workers)
    with pipe:
        i, b = fn.external_source(source=src, batch=False, num_outputs=2, size=100000)
        i, b = fn.random_iou_crop(i.gpu(), b.gpu())
        i, b = fn.flip(i, b, horizontal=R.coin_flip())
        i, b = fn.resize(i, b, size=(640, 640))
        b = fn.prune_boxes(b, min_size=1)
        i = fn.normalize(i, mean=[124, 116, 104], std=[58, 57, 57], output_layout="CHW")
        pipe.set_outputs(i, fn.pad_boxes(b, max_boxes=max_boxes))
    return track(pipe)


def _never_waits(pipe, label, runs=None):
    import cupy as cp

    for _ in range(6):
        pipe.run()
    cp.cuda.runtime.deviceSynchronize()
    rate_khz = cp.cuda.runtime.getDeviceProperties(0)["clockRate"]
    spin = _spin_kernel()
    for s in pipe._streams + [pipe._out_stream]:  # about 1 s on each of the pipeline's streams
        with s:
            spin((1,), (1,), (np.int64(rate_khz * 1000),))
    times = []
    # enough batches that some were launched after the spin (k batches come from one launch)
    for _ in range(runs or 5 + 2 * pipe.batches_per_launch * (pipe.prefetch_queue_depth + 1)):
        t = time.perf_counter()
        try:
            pipe.run()
        except StopIteration:
            pipe.reset()
            pipe.run()
        times.append(time.perf_counter() - t)
    busy = not pipe.last_event.done
    cp.cuda.runtime.deviceSynchronize()
    print(f"\nrun() times with a 1 s kernel queued ({label}): {[round(x * 1000, 1) for x in times]} ms")
    pipe.close()
    assert busy, "the spin finished early: the check proves nothing"
    # a device wait would last the spin (1 s); a call that starts a launch of k batches does k
    # batches of host work (seen: up to 127 ms for 4 batches of 16 fresh 640x480 uploads)
    assert max(times) < 0.1 * pipe.batches_per_launch


def test_graph_never_waits_for_the_device():
    _never_waits(_bench_pipe(16, depth=2), "augmentation graph")


def test_decode_processes_never_wait_for_the_device():
    """The same with the GPU decoder in worker processes: their stream waits (device-side) for
    the pipeline's streams before reusing a region, but no host thread waits for the device."""
    pytest.importorskip("nvidia.nvimgcodec")
    # (prefetch 1: the runs that the rings' room allows reach past the launches made before
    # the spin, so that the last batch is one launched behind it)
    pipe = _coco_decode_pipe(2, prefetch=1).build()
    # Once the processes are up: until then this process's own decoder serves the first
    # launches (early_decode.py), and its decode may wait for the device.
    pipe._decode_service.wait_connected()
    # while their rings have room: a ring slot comes back once the batch's work is done (memory
    # is bounded, so a pipeline far ahead of the device does wait for it): the launches in
    # flight at the spin plus these runs stay within the 2 x 4 slots
    _never_waits(pipe, "decode processes", runs=pipe.decode_slots - pipe.prefetch_queue_depth)


def test_one_launch_per_op_per_batch():
    counts = {}
    for bs in (1, 64):
        pipe = _bench_pipe(bs)
        pipe.run_batch(0)  # compile; run_batch computes just that batch (no prefetch running)
        L.reset_launch_counts()
        pipe.run_batch(1)
        pipe.run_batch(2)
        counts[bs] = L.launch_counts()
        pipe.close()
    print(f"\nlaunches per 2 batches: B=1 {counts[1]}, B=64 {counts[64]}")
    assert counts[1] == counts[64]
    assert all(v <= 2 * 2 for v in counts[1].values())  # each kernel at most twice per batch


def test_memory_stable_over_1000_batches():
    import cupy as cp

    # one batch in flight, one worker: the same number of batches alive at both marks
    pipe = _bench_pipe(4, h=64, w=80, depth=1)
    pool = device_pool(0)
    marks = {}
    for k in range(1, 1001):
        pipe.run()
        if k in (100, 1000):
            for _, fut, _ in pipe._executor.queue:  # same in-flight state at both marks
                fut.result()
            gc.collect()
            cp.cuda.runtime.deviceSynchronize()
            pipe._handout.held.poll()  # every batch handed out was dropped: none is held
            assert len(pipe._handout.held) == 0
            pool.free_all_blocks()  # count memory in use, not the pool's cache of free blocks
            marks[k] = (pool.used_bytes(), pool.total_bytes(), cp.cuda.runtime.memGetInfo()[0],
                        backend._RING.count)
    print(f"\nmemory at batch 100 / 1000 (pool used, pool total, device free, pinned slots): {marks}")
    assert marks[100][0] == marks[1000][0]
    # (pool total after free_all_blocks is in-use blocks plus partly used chunks: printed, not
    # asserted; in-use bytes and the device's free memory are)
    # device-wide free memory: nothing of ours grew with the batches (other tests' leftovers in
    # the same process may still release memory in between, so it may rise). The pool's chunks
    # may differ by one launch's outputs: a batch handed out is held until the next poll after
    # the caller dropped it (detaug/runtime/gpu/handout.py), so when a launch is admitted its
    # predecessor's
    # block may still be held, and the pool then keeps a partly used chunk of that size (seen:
    # 20 MiB = one launch of these outputs, rounded to 2 MiB pages, between the marks)
    launch = -(-pipe._output_budget.launch_bytes // 2**21) * 2**21
    assert marks[1000][2] >= marks[100][2] - launch
    # pinned staging buffers are reused: a handful, however many batches (thousands of uploads)
    assert marks[1000][3] - marks[100][3] <= 2  # (the ring is process-wide: earlier tests fill it)


def test_output_pool_caches_at_most_one_launch_more_than_in_use():
    """A launch's outputs are allocated before the caller drops the batch its slot held, and
    cupy's default pool keeps freed blocks per stream: made on one stream per output slot, that
    pool held as many launches again as were in use (bench_train at 8 GB, launches of 4 batches:
    7.6 GB held for 3.8 GB in use); on the one output stream, no more than was in use at once.
    The same bound holds for the pool the device threads allocate from now (the stream-ordered
    one, or cupy's with DETAUG_DEVICE_ALLOCATOR=pool: runtime/gpu/allocator.py)."""
    import cupy as cp

    gc.collect()
    pool = device_pool(0)
    pool.free_all_blocks()
    # one device worker: one launch's intermediates at a time (several workers' could be cached
    # together); the old stream per slot still cached about 6 launches with it
    pipe = _bench_pipe(16, depth=6, device_workers=1)
    prev = None
    for _ in range(60):  # the caller holds the previous batch while it asks for the next
        out = pipe.run()
        prev, out = out, None
    for _, fut, _ in pipe._executor.queue:
        fut.result()
    cp.cuda.runtime.deviceSynchronize()
    launch, used, held = pipe._output_budget.launch_bytes, pool.used_bytes(), pool.total_bytes()
    print(f"\noutput slots {pipe.output_slots}, launch {launch / 2**20:.0f} MiB: pool in use "
          f"{used / 2**20:.0f} MiB, held {held / 2**20:.0f} MiB")
    assert pipe.output_slots == 6 and prev is not None
    assert used >= 6 * launch  # (the queue is full: the slots' outputs and the caller's batch)
    # cached free blocks: at most the launch that waited for the caller's batch, and one launch's
    # intermediates (its upload, about a fifth of a launch; one stream per slot: about 6 launches)
    assert held - used <= 2 * launch


def test_torch_gets_device_tensors_without_copy(monkeypatch):
    torch = pytest.importorskip("torch")
    from detaug.adapters.torch import DetaugIterator

    pipe = _bench_pipe(8)
    handed = []  # what the pipeline itself returned for each batch the iterator asked for
    run = pipe.run

    def recording_run():
        handed.append(run())
        return handed[-1]

    monkeypatch.setattr(pipe, "run", recording_run)
    it = DetaugIterator(pipe, output_map=("images", "boxes"), size=64)
    batch = next(iter(it))
    img = batch["images"]
    assert img.is_cuda and img.shape == (8, 3, 640, 640) and img.dtype == torch.float32
    assert torch.isfinite(img).all()
    # no copy: the tensor's memory is the pipeline's own dense output buffer of this batch
    assert len(handed) == 1
    own = handed[0][0]
    assert own.device == "gpu" and own.is_dense
    assert img.device.index == own.data.device.id
    assert img.data_ptr() == own.data.data.ptr, "the tensor is a copy of the pipeline's output"


class _NoHold:
    """The hand-out without detaug/runtime/gpu/handout.py: nothing held past the caller's own
    references."""

    peak = 0

    def __len__(self):
        return 0

    def hold(self, outs, streams, made_on):
        pass

    def poll(self):
        return 0

    def drain(self, streams=()):
        pass


def _settle(pipe):
    """Every launch in the pipeline's queue made (host side): the device worker is idle, so the
    blocks allocated from here on follow this thread's requests and drops alone (the same
    sequence in every trial, whatever the threads' timing)."""
    for _, fut, _ in list(pipe._executor.queue):
        fut.result()


def _warm_iter(pipe):
    """The torch iterator over ``pipe``, 4 batches in (kernels compiled, the pool's blocks
    made), the queue's launches made."""
    import torch

    from detaug.adapters.torch import DetaugIterator

    it = iter(DetaugIterator(pipe, output_map=("images", "boxes"), size=100000))
    for _ in range(4):
        _take(pipe, it)
    torch.cuda.synchronize()
    return it


def _take(pipe, it):
    """One batch taken and dropped, its successor's launch made while it is still held (so the
    launch's allocations never race the drop)."""
    b = next(it)
    _settle(pipe)
    del b


def _pool_in_use(pipe):
    """(bytes in use, bytes held) of the device threads' pool once the GPU is idle, the queue's launches
    made and every batch the caller dropped let go."""
    import cupy as cp
    import torch

    torch.cuda.synchronize()
    _settle(pipe)
    cp.cuda.runtime.deviceSynchronize()
    gc.collect()
    pipe._handout.held.poll()
    pool = device_pool(0)
    return pool.used_bytes(), pool.total_bytes()


def _step_behind(pipe, it, ahead=False, sleep_s=0.5):
    """A training step the GPU has not run when the loop moves on. On torch's stream the step
    reads batch k (``before``), sleeps ``sleep_s`` on the GPU, and reads batch k again
    (``after``); ``ahead``: batch k+1 was requested before the step was queued, as a loop that
    fetches one batch ahead does. The loop drops batch k, the drop is let go (``poll``, as the
    next request does), an event is recorded on the output stream (where every later launch's
    outputs are made, so where the pool may hand batch k's block out again), and 6 later batches
    are taken (each launch made, with no drop racing its allocations: :func:`_take`) while the
    step still sleeps.

    Returns ``before``, ``after``, ``busy`` (the step was still running when the 6 later launches
    had been made: they were queued while it could still read batch k) and ``ordered`` (the
    output stream's event completed only after the step: whatever reuses batch k's block runs
    after the step). None of it depends on which free block the pool hands out."""
    import cupy as cp
    import torch

    rate_khz = cp.cuda.runtime.getDeviceProperties(0)["clockRate"]
    batch = next(it)
    img = batch["images"]
    nxt = next(it) if ahead else None
    _settle(pipe)
    before = img.clone()
    torch.cuda._sleep(int(rate_khz * 1000 * sleep_s))
    after = img.clone()
    step = torch.cuda.Event()
    step.record()
    del batch, img
    quiet = cp.cuda.Event()  # the output stream's own work up to now has run (a host wait)
    quiet.record(pipe._out_stream)
    quiet.synchronize()
    pipe._handout.held.poll()
    out_ev = cp.cuda.Event()
    out_ev.record(pipe._out_stream)
    for _ in range(6):
        _take(pipe, it)
    busy = not step.query()
    out_ev.synchronize()
    ordered = step.query()  # (held: the step ran first; not held: it still sleeps)
    del nxt
    torch.cuda.synchronize()
    return {"before": before, "after": after, "busy": busy, "ordered": ordered}


def test_a_dropped_batch_is_not_reused_while_the_callers_queued_work_may_read_it():
    """Zero-copy batches go back to the device threads' pool when the caller drops them; the pipeline keeps
    each one's memory until the caller has dropped it and then lets it go only behind a wait of
    the output stream, on the device, for an event recorded on torch's stream, so a later launch
    that reuses the block runs after a queued training step that still reads it, also when the
    loop fetches one batch ahead. What is checked, without depending on which free block the
    pool hands out (an assertion on that choice fails 1 run in 3):

    - the step reads its own batch: what it read after the GPU sleep equals what it read before,
      while 6 later launches were made during the sleep;
    - the memory is reused behind the caller's work and not before: an event recorded on the
      output stream right after the drop completes only after the step;
    - it is reused: after a second trial the pool holds and uses no more than after the first
      (a batch never let go, or let go where the output stream cannot reuse it, grows it by a
      batch, 39 MB, each trial).

    The control (a hand-out that holds nothing) shows the same measurement fails
    without the hold: the output stream's event completes while the step still sleeps."""
    torch = pytest.importorskip("torch")
    batch_bytes = 8 * 3 * 640 * 640 * 4
    for ahead in (False, True):
        pipe = _bench_pipe(8, depth=6, device_workers=1)
        it = _warm_iter(pipe)
        pools = []
        for trial in range(2):
            r = _step_behind(pipe, it, ahead)
            pools.append(_pool_in_use(pipe))
            print(f"\nheld (ahead={ahead}, trial {trial}): busy {r['busy']}, ordered "
                  f"{r['ordered']}, pool used/held {pools[-1]}")
            assert r["busy"], "the GPU sleep ended before the later launches: the check proves nothing"
            assert r["ordered"], "the output stream did not wait for the step before reusing"
            assert torch.equal(r["before"], r["after"]), "the step read another batch's pixels"
        (used0, held0), (used1, held1) = pools
        assert used1 - used0 < batch_bytes, f"the pool's bytes in use grew from {used0} to {used1}"
        assert held1 - held0 < batch_bytes, f"the pool grew from {held0} to {held1} bytes"
        assert len(pipe._handout.held) == 0  # every dropped batch let go
        pipe.close()
    # the control: without the hold, the output stream does not wait for the step
    pipe = _bench_pipe(8, depth=6, device_workers=1)
    pipe.build()
    pipe._handout.held = _NoHold()
    r = _step_behind(pipe, _warm_iter(pipe))
    print(f"not held: busy {r['busy']}, ordered {r['ordered']}, mean abs diff "
          f"{float((r['before'] - r['after']).abs().mean()):.3f} (nonzero where the pool gave "
          "the block to a later launch)")
    assert r["busy"] and not r["ordered"]


def test_to_host_copies_after_the_batch_event():
    """The iterator's small host copies (counts, valid flags: adapters.torch._to_host) run on a
    stream of their own that waits for the batch's event on the device (no host wait on the
    event): values written on another stream behind a 0.2 s kernel, then the event, are what
    the host gets, C-ordered from a transposed view too; an empty array gives an empty one."""
    import cupy as cp

    from detaug.adapters.torch import _to_host

    rate_khz = cp.cuda.runtime.getDeviceProperties(0)["clockRate"]
    want = np.arange(64 * 3, dtype=np.int32).reshape(64, 3)
    with cp.cuda.Device(0):
        a = cp.zeros((64, 3), cp.int32)
        cp.cuda.runtime.deviceSynchronize()
        side = cp.cuda.Stream(non_blocking=True)
        with side:
            _spin_kernel()((1,), (1,), (np.int64(rate_khz * 200),))  # about 0.2 s
            a[...] = cp.asarray(want)
            event = side.record()
        assert not event.done, "the spin finished early: the check proves nothing"
        got = _to_host(a, event)
        assert isinstance(got, np.ndarray) and got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)
        t = _to_host(a.T, event)
        assert t.flags.c_contiguous and t.shape == (3, 64)
        np.testing.assert_array_equal(t, want.T)
        empty = _to_host(cp.zeros((0, 4), cp.float32), event)
        assert empty.shape == (0, 4) and empty.dtype == np.float32
        np.testing.assert_array_equal(_to_host(a, None), want)


def test_gpu_decode_skip_corrupt_file(tmp_path):
    """on_error='skip' with the GPU decoder: the truncated file is replaced by the next record of
    the epoch, batches keep their size, and the skip is counted once per batch handed out."""
    pytest.importorskip("nvidia.nvimgcodec")
    import shutil

    root = tmp_path / "voc"
    shutil.copytree(VOC, root)
    victim = sorted(os.listdir(root / "JPEGImages"))[5]
    data = (root / "JPEGImages" / victim).read_bytes()
    (root / "JPEGImages" / victim).write_bytes(data[:len(data) // 2])
    pipe = track(Pipeline(batch_size=8, num_threads=2, seed=0, device_id=0, on_error="skip"))
    with pipe:
        enc, boxes = fn.readers.voc(root=str(root))
        img = fn.decoders.image(enc, device="mixed")
        img, boxes = fn.resize(img, boxes, size=(32, 32))
        pipe.set_outputs(img, boxes, enc)
    n = 0
    with pytest.warns(UserWarning, match=victim):
        for img, boxes, enc in pipe:
            assert img.batch_size == 8 and len(boxes.per_sample()) == 8
            assert victim not in [os.path.basename(p) for p in enc.paths]
            n += 1
    pipe.close()
    assert n == 5 and pipe.stats["skipped"] == 1


def _coco_decode_pipe(decode_processes, batches_per_launch=1, output_type="RGB", raw=False,
                      prefetch=2):
    pipe = Pipeline(batch_size=8, num_threads=2, seed=3, device_id=0, prefetch_queue_depth=prefetch,
                    decode_processes=decode_processes, batches_per_launch=batches_per_launch)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"),
                                     random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed", output_type=output_type)
        if raw:
            pipe.set_outputs(img)
            return track(pipe)
        img, boxes = fn.random_iou_crop(img, boxes)
        img, boxes = fn.flip(img, boxes, horizontal=R.coin_flip())
        img, boxes = fn.resize(img, boxes, size=(96, 128))
        boxes = fn.prune_boxes(boxes, min_size=1)
        img = fn.normalize(img, mean=[124, 116, 104], std=[58, 57, 57], output_layout="CHW")
        pipe.set_outputs(img, fn.pad_boxes(boxes, max_boxes=32))
    return track(pipe)


def _epochs(pipe, n=2):
    out = []
    for _ in range(n):
        for batch in pipe:
            out.append([to_np(v.data) if not isinstance(v, dict) else {k: to_np(a) for k, a in v.items()}
                        for v in batch])
        pipe.reset()
    pipe.close()
    return out


def _assert_same_epochs(threads, procs):
    assert len(threads) == len(procs) == 2 * 9  # 68 images, batches of 8
    for a, b in zip(threads, procs, strict=True):
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1].keys() == b[1].keys()
        for key in a[1]:
            np.testing.assert_array_equal(a[1][key], b[1][key])


@pytest.mark.parametrize("k", [1, 3])
def test_decode_processes_give_the_same_batches(k):
    """Decoding in worker processes (files read there, images handed over through a CUDA IPC
    buffer) gives exactly the batches of decoding in the pipeline's threads: pixels, boxes,
    labels, over two epochs, with one and several batches per launch."""
    pytest.importorskip("nvidia.nvimgcodec")
    threads = _epochs(_coco_decode_pipe(0))
    procs_pipe = _coco_decode_pipe(2, batches_per_launch=k)
    procs_pipe.build()
    assert procs_pipe._decode_service is not None and procs_pipe._paths_only
    _assert_same_epochs(threads, _epochs(procs_pipe))


def test_decode_process_defaults_follow_the_budget_and_give_the_same_batches(monkeypatch):
    """With every default (the 2.3 GB budget), this small pipeline (96 x 128 outputs) runs three
    decode processes with two decoder threads each, 12 launches in flight (6 device workers), 1
    batch per launch, its output slots set from the first launch's measured size, and gives the
    batches of the in-thread decode; a 2 GB budget leaves room for two processes only, and an
    8 GB budget runs 3 processes and 12 launches in flight, with the same batches."""
    pytest.importorskip("nvidia.nvimgcodec")
    for v in ("DETAUG_DECODE_PROCESSES", "DETAUG_DECODE_THREADS", "DETAUG_DEVICE_MEMORY_BUDGET"):
        monkeypatch.delenv(v, raising=False)
    threads = _epochs(_coco_decode_pipe(0))
    pipe = _coco_decode_pipe(None, batches_per_launch=None, prefetch=None).build()
    assert pipe.device_memory_budget == DEFAULT_BUDGET
    assert (len(pipe._decode_service.workers), pipe._decode_service.threads) == (3, 2)
    assert (pipe.prefetch_queue_depth, pipe.device_workers, pipe.batches_per_launch) == (12, 6, 1)
    got = _epochs(pipe)
    _assert_same_epochs(threads, got)
    # outputs of 8 x 3 x 96 x 128 float32 plus padded boxes: small, so every launch in flight
    assert pipe._output_budget.launch_bytes >= 8 * 3 * 96 * 128 * 4
    assert pipe.output_slots == pipe.prefetch_queue_depth
    assert 1 <= pipe.output_slots_peak <= pipe.output_slots
    two = _coco_decode_pipe(None, batches_per_launch=None, prefetch=None)
    two.device_memory_budget = 2_000_000_000
    two.build()
    assert (len(two._decode_service.workers), two._decode_service.threads) == (2, 2)
    two.close()
    big = _coco_decode_pipe(None, batches_per_launch=None, prefetch=None)
    big.device_memory_budget = 8_000_000_000
    big.build()
    assert (len(big._decode_service.workers), big._decode_service.threads) == (3, 2)
    # planned ahead, one batch a launch; rings of 4 launches per process, all of them in flight
    assert big.plan_ahead and big.batches_per_launch == 1
    assert big.decode_slots == 12 and big.prefetch_queue_depth == big.device_workers == 12
    _assert_same_epochs(threads, _epochs(big))
    plain = _coco_decode_pipe(0, batches_per_launch=None, prefetch=None).build()
    assert (plain.prefetch_queue_depth, plain.device_workers) == (2, 2)
    plain.close()


def test_output_slots_bound_the_launches_with_outputs():
    """A budget that leaves room for one launch of outputs: never more than one launch made and
    not handed out at once, whatever the prefetch depth, and the same batches as without it.
    Less than that is refused at build, with the figure that would do (memory_plan.BudgetError)."""
    from detaug.runtime.gpu.memory_plan import BudgetError

    pytest.importorskip("nvidia.nvimgcodec")
    ref = _epochs(_coco_decode_pipe(1, prefetch=6))
    small = _coco_decode_pipe(1, prefetch=6)
    small.device_memory_budget = 1
    with pytest.raises(BudgetError) as e:
        small.build()
    assert small._decode_service is None  # refused before a decode process started
    pipe = _coco_decode_pipe(1, prefetch=6)
    pipe.device_memory_budget = e.value.need  # the least it runs with: one slot
    got = _epochs(pipe)
    assert pipe.output_slots == 1 and pipe.output_slots_peak == 1
    _assert_same_epochs(ref, got)


def test_a_killed_decode_process_is_a_named_error_within_seconds():
    """A decode process killed (SIGKILL) mid-epoch: run() raises within seconds, naming the
    process (and its signal, where it was reaped in time); close() still returns, the process
    reaped, killed by that signal."""
    import signal

    pytest.importorskip("nvidia.nvimgcodec")
    pipe = _coco_decode_pipe(1, prefetch=3)
    pipe.run()
    pipe._decode_service.wait_connected()  # (a process killed before its handshake: "did not
    pipe.run()                              # start", tested in test_early_decode.py)
    w = pipe._decode_service.workers[0]
    os.kill(w.proc.pid, signal.SIGKILL)
    t0 = time.perf_counter()
    # (the signal, where the process is reaped in time: one whose ring is still mapped here may
    # not be until close() unmaps it)
    with pytest.raises(RuntimeError, match=r"decode worker process .*died \((killed by signal 9|"
                                           r"exit status not known yet)\) with request"):
        for _ in range(200):  # the launches decoded before the kill may still come out
            try:
                pipe.run()
            except StopIteration:
                pipe.reset()
    assert time.perf_counter() - t0 < 10
    t0 = time.perf_counter()
    pipe.close()
    assert time.perf_counter() - t0 < 15
    # reaped and its process object closed (close_ends), its exit status kept
    assert w.exited is not None and w.exited[1] == -signal.SIGKILL


@pytest.mark.parametrize("output_type", ["RGB", "BGR", "GRAY"])
def test_decode_processes_raw_output_is_a_copy(output_type):
    """Decoded images handed to the user straight from a decode process are copies (the
    process's buffer is reused), equal to the in-thread decode."""
    pytest.importorskip("nvidia.nvimgcodec")
    a = _coco_decode_pipe(0, output_type=output_type, raw=True)
    b = _coco_decode_pipe(2, output_type=output_type, raw=True)
    for _ in range(3):
        (x,), (y,) = a.run(), b.run()
        # copies, not views of the worker's buffer
        assert not isinstance(getattr(y.raw, "owners", None), _Lease)
        assert len(x.data) == len(y.data) == 8
        for u, v in zip(x.data, y.data, strict=True):
            np.testing.assert_array_equal(to_np(u), to_np(v))
    a.close()
    b.close()
