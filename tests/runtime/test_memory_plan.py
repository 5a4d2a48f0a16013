"""The GPU pipeline's memory plan (detaug/runtime/gpu/memory_plan.py) and the executor's ordered
output slots: pure arithmetic and threading, checked on the CPU against hand-computed values;
the plan sized by a launch's real bytes (on the CPU with a stand-in for the decode
processes); and, ``gpu``-marked, the RetinaNet pipeline within the default budget on a device."""
import dataclasses
import gc
import os
import sys
import threading

import numpy as np
import pytest

from detaug.runtime.executor import Cancelled, OutputSlots
from detaug.runtime.gpu.allocator import device_pool, free_cached
from detaug.runtime.gpu import memory_plan as mp
from detaug.runtime.gpu import output_sizes
from helpers import REPO, close_pipelines, fresh_seed  # noqa: F401  (autouse fixture)

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import bench_gpu  # noqa: E402  (the benchmark's pipeline: one definition for tests and benches)


def test_budget_parsing(monkeypatch):
    assert mp.budget_from(2e9) == 2_000_000_000
    assert mp.budget_from("2GB") == 2_000_000_000
    assert mp.budget_from("1536MiB") == 1536 * 2**20
    assert mp.budget_from(" 1.5e9 ") == 1_500_000_000
    monkeypatch.setenv("DETAUG_DEVICE_MEMORY_BUDGET", "3GB")
    assert mp.budget_from(None) == 3_000_000_000
    monkeypatch.delenv("DETAUG_DEVICE_MEMORY_BUDGET")
    assert mp.budget_from(None) == mp.DEFAULT_BUDGET
    with pytest.raises(ValueError, match="not a number of bytes"):
        mp.budget_from("lots")
    with pytest.raises(ValueError, match="positive"):
        mp.budget_from(0)


def test_launch_image_bytes_hand_computed():
    sizes = [[10, 10], [20, 30], [5, 5]]
    # the two largest, each 256-aligned: 20*30*3 = 1800 -> 2048, 10*10*3 = 300 -> 512
    assert mp.launch_image_bytes(sizes, 3, 2) == 2048 + 512
    # more images than the dataset: the whole set (2048 + 512 + 256) scaled by 4/3
    assert mp.launch_image_bytes(sizes, 3, 4) == (2048 + 512 + 256) * 4 // 3
    assert mp.launch_image_bytes(None, 3, 5) == 5 * mp.FALLBACK_IMAGE_BYTES


def test_launch_image_bytes_random_against_sort():
    rng = np.random.default_rng()
    for _ in range(20):
        n, k = int(rng.integers(1, 50)), int(rng.integers(1, 50))
        hw = rng.integers(1, 2000, (n, 2))
        per = sorted((-(-(int(h) * int(w) * 3) // 256) * 256 for h, w in hw), reverse=True)
        m = min(k, n)
        assert mp.launch_image_bytes(hw, 3, k) == sum(per[:m]) * k // m


def test_plan_decode_defaults_and_large_budget():
    launch = 64 * 990_000  # a launch of 64 images of about 660 x 500
    p = mp.plan_decode(2_000_000_000, launch)
    ring = -(-mp.RING_SLOTS * launch // 2**20) * 2**20
    # four decoders: two processes (no shared GIL) of two threads (three processes do not fit)
    assert (p.processes, p.threads, p.ring_bytes) == (2, 2, ring)
    assert p.bytes == 2 * (mp.CONTEXT_BYTES + 2 * mp.DECODER_BYTES + ring)
    assert p.bytes <= mp.DECODE_SHARE * 2_000_000_000
    # 2 x (280 + 2 x 80 + 3 x 63.4 MB rounded to MiB) = 1,262 MB
    assert abs(p.bytes - 1_261_681_664) < 1e6
    assert 3 * (mp.CONTEXT_BYTES + mp.DECODER_BYTES + ring) > mp.DECODE_SHARE * 2_000_000_000
    big = mp.plan_decode(8_000_000_000, launch)
    assert (big.processes, big.threads) == (3, 2)
    tiny = mp.plan_decode(100_000_000, launch)  # nothing fits: the cheapest, one decoder
    assert (tiny.processes, tiny.threads) == (1, 1)
    # explicit values are kept, even beyond the budget
    one = mp.plan_decode(2_000_000_000, launch, processes=1)
    assert one.processes == 1 and one.threads == 2
    assert mp.plan_decode(2_000_000_000, launch, threads=1).threads == 1
    assert mp.plan_decode(2e9, launch, ring_bytes=256 << 20).ring_bytes == 256 << 20


def test_output_slots_and_batches_per_launch():
    # 2 GB, a decode side of 1.27 GB, launches of 315 MB: room for one launch besides the
    # two batches the caller holds (the one in use, the one before it in a for loop)
    assert mp.CALLER_LAUNCHES == 2
    assert mp.output_slots(2_000_000_000, 1_270_000_000, 315_000_000, 6) == 1
    assert mp.output_slots(8_000_000_000, 3_800_000_000, 315_000_000, 6) == 6  # capped by depth
    # (8 - 3.8 - 2 x 1.26) // 1.26 = 1
    assert mp.output_slots(8_000_000_000, 3_800_000_000, 1_260_000_000, 6) == 1
    assert mp.output_slots(8_000_000_000, 3_000_000_000, 1_260_000_000, 6) == 1
    # the pool takes 1.26 GB as 38 chunks of 32 MiB (1,275,068,416 bytes); the caller's two and
    # the launch being freed: (8 - 1 - 3 x 1.275) // 1.275 = 2
    assert mp.output_slots(8_000_000_000, 1_000_000_000, 1_260_000_000, 6) == 2
    assert mp.output_slots(10**9, 2 * 10**9, 10**8, 4) == 1  # never below one
    assert mp.batches_per_launch(2_000_000_000) == 1 and mp.batches_per_launch(8e9) == 4
    # planned ahead, a launch's host work is out of the pipeline's process: one batch a launch
    assert mp.batches_per_launch(8e9, planned=True) == 1
    # more launches in flight per decode process where the budget is large
    assert mp.ring_launches(2e9) == 2 and mp.ring_launches(8e9) == 4
    big = mp.plan_decode(8_000_000_000, 64 * 990_000)
    assert big.launches == 4 and big.slots == 5
    assert big.ring_bytes == -(-5 * 64 * 990_000 // 2**20) * 2**20


class _Watched(threading.Condition):
    """An OutputSlots' condition that tells the test when a waiter has blocked (a condition of
    its own, so the test waits for that event instead of sleeping). A waiter counted here holds
    the lock until it is inside wait(), so a release() after the count is seen reaches it."""

    def __init__(self):
        super().__init__()
        self.blocked = 0
        self.watch = threading.Condition()

    def _count(self, d):
        with self.watch:
            self.blocked += d
            self.watch.notify_all()

    def wait(self, timeout=None):
        self._count(1)
        try:
            return super().wait(timeout)
        finally:
            self._count(-1)

    def until(self, pred, what):
        with self.watch:
            assert self.watch.wait_for(pred, timeout=10), what


def test_output_slots_admit_in_order_and_bound():
    slots = OutputSlots(2)
    slots.cond = cond = _Watched()
    order = []

    def take(seq):
        slots.acquire(seq, 0)
        with cond.watch:
            order.append(seq)
            cond.watch.notify_all()

    ts = [threading.Thread(target=take, args=(s,)) for s in (3, 2, 1, 0)]
    for t in ts:
        t.start()
    # in order, two at once, although 3 and 2 asked first: they wait
    cond.until(lambda: len(order) == 2 and cond.blocked == 2, (order, cond.blocked))
    assert order == [0, 1]
    slots.release(1)
    cond.until(lambda: len(order) == 3 and cond.blocked == 1, (order, cond.blocked))
    assert order == [0, 1, 2]
    slots.release(0)
    for t in ts:
        t.join(5)
    assert order == [0, 1, 2, 3] and slots.peak == 2
    slots.release(2)
    slots.release(2)  # twice: no effect
    assert slots.held == {3}


def test_output_slots_reset_cancels_waiters():
    slots = OutputSlots(1)
    slots.cond = cond = _Watched()
    slots.acquire(0, 0)
    got = []

    def wait():
        try:
            slots.acquire(1, 0)
            got.append("admitted")
        except Cancelled:
            got.append("cancelled")

    t = threading.Thread(target=wait)
    t.start()
    cond.until(lambda: cond.blocked == 1, "the second acquire never waited")
    slots.reset(5)
    t.join(5)
    assert got == ["cancelled"]
    slots.acquire(5, slots.epoch)  # admission starts again at the given number
    assert slots.held == {5}
    slots.resize(3)
    assert slots.n == 3


# ------------------------------------------------- the budget: a launch's real bytes


# RetinaNet's anchors on a 640 x 640 canvas, by hand: P3-P7 at strides 8..128 give 80^2, 40^2,
# 20^2, 10^2 and 5^2 cells, 9 anchors each
ANCHORS_640 = (6400 + 1600 + 400 + 100 + 25) * 9


assert ANCHORS_640 == 76_725


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("det"))
    bench_gpu.make_dataset(root, 8, 1)
    return root


def _needed(pipe):
    with pipe:
        pass
    return pipe._needed_ops()


def test_retinanet_batch_bytes_hand_computed(data):
    pipe = bench_gpu.make_det_pipe(data, "mixed", retinanet=True, batch_size=64)
    b = output_sizes.batch_bytes(_needed(pipe), pipe._outputs, [[480, 640]], 64)
    image = 3 * 640 * 640 * 4                    # float32 CHW after normalize
    regression = ANCHORS_640 * 5 * 4             # (A, 5) float32
    labels = ANCHORS_640 * 81 * 4                # (A, 80 + 1) float32 one-hot
    padded = 64 * 32                             # max_boxes=64
    assert dict(b.parts) == {"normalize_9": 64 * image, "pad_boxes_11": 64 * padded,
                             "retinanet_encode_10[0]": 64 * regression,
                             "retinanet_encode_10[1]": 64 * labels}
    assert b.outputs == 64 * (image + regression + labels + padded)
    assert 2_003_000_000 < b.outputs < 2_005_000_000  # the "2 GB a batch"
    # crop -> flip -> rotate -> resize -> normalize is one warp on the GPU: nothing held besides
    # but the pool's fragmentation slack: one block of the largest of several large outputs
    assert b.working == 64 * labels == output_sizes.pool_slack(b.parts)
    assert output_sizes.pool_slack([("a", 300 << 20), ("b", 1 << 10)]) == 0  # one large output
    assert output_sizes.pool_slack([("a", 20 << 20), ("b", 30 << 20), ("c", 1 << 20)]) == 30 << 20


def test_plain_pipeline_and_unknown_sizes(data):
    pipe = bench_gpu.make_det_pipe(data, "mixed", batch_size=8, dtype="float16")
    b = output_sizes.batch_bytes(_needed(pipe), pipe._outputs, None, 8)
    assert b.outputs == 8 * (3 * 640 * 640 * 2 + 64 * 32)
    from detaug import fn, pipeline_def

    @pipeline_def
    def shorter():  # the shorter side to 400: the other follows each image's aspect
        enc, boxes = fn.readers.coco(file_root=os.path.join(data, "images"),
                                     annotations_file=os.path.join(data, "annotations.json"))
        img = fn.decoders.image(enc, device="mixed")
        img, boxes = fn.resize(img, boxes, resize_shorter=400)
        return img, boxes

    p = shorter(batch_size=4)
    assert output_sizes.batch_bytes(_needed(p), p._outputs, [[480, 640]], 4) is None

    def resized(**kw):
        @pipeline_def
        def one():
            enc, boxes = fn.readers.coco(file_root=os.path.join(data, "images"),
                                         annotations_file=os.path.join(data, "annotations.json"))
            img = fn.decoders.image(enc, device="mixed")
            img, boxes = fn.resize(img, boxes, **kw)
            return img
        p = one(batch_size=2)
        b = output_sizes.batch_bytes(_needed(p), p._outputs, [[480, 640]], 2)
        return None if b is None else b.outputs

    assert resized(size=(300, 200)) == 2 * 300 * 200 * 3
    assert resized(size=(300, 200), mode="not_larger") == 2 * 300 * 200 * 3  # at most
    assert resized(size=(300, 200), mode="not_smaller") is None  # larger along one side
    assert resized(resize_longer=500) == 2 * 500 * 500 * 3  # at most
    assert resized(size=(0, 300)) is None  # the height follows each image's aspect


def test_mosaic_and_hsv_working_memory(data):
    from detaug import fn, pipeline_def

    @pipeline_def
    def yolo():
        enc, boxes = fn.readers.coco(file_root=os.path.join(data, "images"),
                                     annotations_file=os.path.join(data, "annotations.json"))
        img = fn.decoders.image(enc, device="mixed")
        img, boxes = fn.mosaic(img, boxes, size=320)
        img = fn.hsv(img, hue=10.0)
        img = fn.brightness_contrast(img, brightness=1.1)
        img, boxes = fn.letterbox(img, boxes, size=(320, 320))
        return img, boxes

    p = yolo(batch_size=2)
    from detaug.runtime.partners import plan_levels

    ops = _needed(p)
    b = output_sizes.batch_bytes(ops, p._outputs, [[500, 660], [440, 600]], 2,
                                 plan_levels(ops, p._outputs))
    canvas = 640 * 640 * 3            # the 2s x 2s mosaic canvas, uint8
    # held until the launch is collected: the mosaic's canvas (read by hsv), hsv's output (read
    # by brightness_contrast), brightness_contrast's (read by letterbox's warp); no tiles (warped
    # straight into the canvas: ops/multi_plan.py). The mosaic's inputs (decoded images) are
    # the decode side's.
    assert b.working == 2 * 3 * canvas
    assert b.outputs == 2 * (320 * 320 * 3 + output_sizes.BOX_BYTES)


def test_plan_arithmetic_hand_computed():
    # a launch of 2,004 MB of outputs: being made + 2 held = 6,012 MB; with 100 MB working: 6,112
    assert mp.minimum_outputs(2_004_000_000, 100_000_000) == 6_112_000_000
    assert mp.minimum_bytes(500_000_000, 2_004_000_000) == 6_512_000_000
    # the decode side gets DECODE_SHARE (0.75) of 2 GB, or what outputs leave, whichever is less
    assert mp.decode_cap(2_000_000_000, None) == 1_500_000_000
    assert mp.decode_cap(2_000_000_000, 501_000_000) == 497_000_000
    assert mp.decode_cap(2_000_000_000, 100_000_000, 50_000_000) == 1_500_000_000
    # the pool takes a large launch's outputs in whole 32 MiB chunks: 48 MiB takes 64; 1 GB
    # takes 30 chunks (1,006,632,960 bytes); below a chunk, the bytes themselves
    assert mp.pool_bytes(48 << 20) == 64 << 20 and mp.pool_bytes(64 << 20) == 64 << 20
    assert mp.pool_bytes(1_000_000_000) == 30 * 2**25 and mp.pool_bytes(10 << 20) == 10 << 20
    # output slots: (budget - decode - (2 held + 1 freeing)) // (outputs + working), outputs as
    # the pool takes them: (6e9 - 3 x 1,006,632,960) // 1,506,632,960 = 1;
    # // 1,006,632,960 = 2 (4 by bytes, without the launch freeing)
    assert (mp.CALLER_LAUNCHES, mp.FREEING_LAUNCHES) == (2, 1)
    assert mp.output_slots(8_000_000_000, 2_000_000_000, 1_000_000_000, 12, 500_000_000) == 1
    assert mp.output_slots(8_000_000_000, 2_000_000_000, 1_000_000_000, 12) == 2
    # small launches: 6e9 - 3 x 10 MB leaves 598 launches of 10 MB: the depth bounds them
    assert mp.output_slots(8_000_000_000, 2_000_000_000, 10_000_000, 12) == 12
    rng = np.random.default_rng(fresh_seed())
    for n in rng.integers(1, 4 << 30, 200):
        got = mp.pool_bytes(int(n))
        if n < mp.POOL_CHUNK:
            assert got == n
        else:
            assert got % mp.POOL_CHUNK == 0 and n <= got < n + mp.POOL_CHUNK, n
    # batches per launch: 4 at 8 GB unless one launch's minimum passes half the budget
    assert mp.batches_per_launch(8e9, False, 315_000_000) == 4      # 3 x 1.26 GB <= 4 GB
    assert mp.batches_per_launch(8e9, False, 2_004_000_000) == 1    # 3 x 2 x 2.0 GB > 4 GB
    assert mp.batches_per_launch(8e9, False, 600_000_000) == 2      # 3: 5.4 GB; 2: 3.6 GB
    assert mp.batches_per_launch(8e9, False, None) == 4
    # in-thread decode: 2 threads x 182 MB, 10 launches of 60 MB
    assert mp.in_thread_decode_bytes(2, 60_000_000) == 364_000_000 + 600_000_000


def test_plan_decode_shrinks_for_large_outputs():
    launch = 16 * 990_000  # 16 images of 660 x 500
    ring = 64 << 20        # MIN_RING: 3 launches of 15.8 MB are less
    cap = mp.decode_cap(2_500_000_000, 501_000_000)  # batch 16 of RetinaNet targets
    p = mp.plan_decode(2_500_000_000, launch, cap=cap)
    # cap 2,500 - 3 x 501 = 997 MB; 2 x 2: 2 x (280 + 160 + 67.1) = 1,014 MB > 997;
    # 2 x 1: 2 x (280 + 80 + 67.1) = 854 MB
    assert (p.processes, p.threads) == (2, 1)
    assert p.bytes == 2 * (280_000_000 + 80_000_000 + ring)
    assert p.bytes + 3 * 501_000_000 <= 2_500_000_000
    # with this process decoding the first launches while the processes come up: its decoder
    # and two launches of images (95 MB) beside the processes' contexts and rings
    e = mp.plan_decode(2_500_000_000, launch, cap=cap, early=True)
    assert e.early == 80_000_000 + 2 * launch
    assert (e.processes, e.threads) == (2, 1)  # 2 x (280 + 67.1) + max(2 x 80, 111.7) MB
    assert e.bytes == 2 * (280_000_000 + ring) + 160_000_000
    e1 = mp.plan_decode(2_500_000_000, 8 * launch, cap=2_000_000_000, early=True)
    # launches of 127 MB: early 80 + 2 x 127 = 333 MB > the decoders' 2 x 2 x 80 = 320 MB
    assert e1.bytes == e1.processes * (280_000_000 + e1.ring_bytes) + 80_000_000 + 16 * launch
    # nothing fits: the cheapest (1 x 1), which check_budget then refuses
    tiny = mp.plan_decode(2_000_000_000, launch, cap=-1)
    assert (tiny.processes, tiny.threads) == (1, 1)


def test_check_budget_message():
    mp.check_budget(6_500_000_000, 400_000_000, "x", 2_000_000_000, 100_000_000)  # fits: no error
    with pytest.raises(mp.BudgetError) as e:
        mp.check_budget(2_000_000_000, 427_000_000, "1 decode process(es) x 1", 2_004_000_000, 0,
                        [("labels", 1_591_000_000)], batches=2, fixed_decode=True)
    msg = str(e.value)
    # 427 + 3 x 2,004 = 6,439 MB; the setting rounded up to 0.1 GB
    assert "6,439 MB" in msg and "device_memory_budget='6.5GB'" in msg
    assert "labels 1,591 MB" in msg and "batch_size" in msg and "batches_per_launch=1" in msg
    assert "decode_processes" in msg and "2.00 GB" in msg
    assert "2 launches the caller holds" in msg
    assert isinstance(e.value, ValueError) and e.value.need == 6_439_000_000


class _Started(Exception):
    pass


@pytest.fixture
def fake_gpu(monkeypatch):
    """build() without a GPU: the GPU check passes; the decode processes record their plan and
    stop the build there (nothing after them is tested here)."""
    from detaug.core import backend
    from detaug.runtime.gpu import decode_proc

    class Log(list):  # what was started; .early: the early start's stand-in
        pass

    started = Log()

    class Early:
        """The decode processes started early (before the readers index, their rings unknown):
        configured with the plan at the end of build (recorded; the build stops there), or
        closed where the build is refused."""
        closed = []

        def __init__(self, processes):
            self.processes = processes

        def configure(self, processes, ring_bytes, threads, slots, warm_first=False):
            started.append((processes, threads, ring_bytes))
            raise _Started()

        def close(self):
            Early.closed.append(self.processes)

        stop = close

    def service(processes, device_id, ring_bytes, threads=1, slots=None):
        if ring_bytes is None:  # the early start (detaug.runtime.startup.early())
            return Early(processes)
        started.append((processes, threads, ring_bytes))
        raise _Started()

    started.early = Early

    monkeypatch.setattr(backend, "gpu_missing", lambda **k: None)
    monkeypatch.setattr(decode_proc, "DecodeService", service)
    monkeypatch.delenv("DETAUG_DEVICE_MEMORY_BUDGET", raising=False)
    monkeypatch.delenv("DETAUG_DECODE_PROCESSES", raising=False)
    return started


def test_build_refuses_retinanet_batch_64_at_the_default_budget(data, fake_gpu):
    pipe = bench_gpu.make_det_pipe(data, "mixed", retinanet=True, batch_size=64, seed=0)
    with pytest.raises(mp.BudgetError) as e:
        pipe.build()
    assert fake_gpu == []  # refused before any decode process was given its plan
    # and those started early (if any) are stopped: one, where the guess made before the
    # readers index refuses the budget too (build_plan.early_guess)
    assert fake_gpu.early.closed in ([], [1])
    msg = str(e.value)
    assert "device_memory_budget 2.30 GB" in msg and "retinanet_encode_10[1] 1,591 MB" in msg
    # the figure: 1 x 1 decode (context 280 MB + decoder 80 MB + a ring of launches of 64
    # images: the 8 of the data set, each 256-aligned, 8 times; rounded up to MiB) + 3 x 2,004 MB
    # of outputs (one being made, two the caller holds) + the pool's fragmentation slack (one block of its largest output, the one-hot
    # labels). The need is over 6 GB, where the plan's ring holds 4 launches + 1 instead of 2 + 1
    # (memory_plan.ring_launches): the figure given is the plan's at that budget
    import json

    with open(os.path.join(data, "annotations.json")) as f:
        every = sum(-(-im["height"] * im["width"] * 3 // 256) * 256 for im in json.load(f)["images"])
    ring = -(-(mp.BIG_RING_LAUNCHES + 1) * 8 * every // 2**20) * 2**20
    # (this process decodes the first launches while the processes come up: its decoder and
    # two launches of images, more than the one decoder thread's 80 MB)
    assert "the first launches' decoder here" in msg
    first = mp.early_decoder_bytes(8 * every)
    assert first == 80_000_000 + 2 * 8 * every
    need = 280_000_000 + first + ring + 3 * 2_003_881_472 + 64 * ANCHORS_640 * 81 * 4
    assert need > mp.BIG_BUDGET
    assert f"{need / 1e6:,.0f} MB" in msg, (need, msg)
    assert f"device_memory_budget='{-(-need // 10**8) / 10:.1f}GB'" in msg
    # at that budget it builds (up to the decode processes)
    pipe = bench_gpu.make_det_pipe(data, "mixed", retinanet=True, batch_size=64, seed=0,
                                   device_memory_budget=need)
    with pytest.raises(_Started):
        pipe.build()
    # (a second decoder thread costs nothing more there: the early decoder's part is the larger)
    assert first > 2 * mp.DECODER_BYTES and fake_gpu == [(1, 2, ring)]


def test_build_refuses_retinanet_batch_16_at_the_default_budget_then_fits_its_figure(data, fake_gpu):
    """Measured at 2 GB, the RetinaNet input at batch 16 took 2,209-2,465 MB: three launches of
    501 MB (one being made, two in the caller's hands in a for loop), the pool's slack and the
    decode side do not fit 2 GB; refused with the figure, it builds there."""
    pipe = bench_gpu.make_det_pipe(data, "mixed", retinanet=True, batch_size=16, seed=0)
    with pytest.raises(mp.BudgetError) as e:
        pipe.build()
    from detaug.runtime import build_plan as bpm
    from detaug.runtime.gpu import output_sizes

    needed = pipe._needed_ops()  # (build got as far as its plan: the readers are made)
    b = output_sizes.batch_bytes(needed, pipe._outputs, bpm.decoded_sizes(needed, pipe._sources, True),
                                 16, {})
    assert b.working == 16 * ANCHORS_640 * 81 * 4  # (the pool's slack: one 398 MB block)
    ring = 64 << 20  # MIN_RING
    # the decoders' part: this process's decoder of the first launches and two launches of 16
    # images (the data set's 8, twice), more than one decoder thread's 80 MB
    launch = mp.launch_image_bytes(bpm.decoded_sizes(needed, pipe._sources), 3, 16)
    first = 80_000_000 + 2 * launch
    need = 280_000_000 + first + ring + 3 * b.outputs + b.working
    assert e.value.need == need and f"{need / 1e6:,.0f} MB" in str(e.value)
    assert fake_gpu == []
    pipe = bench_gpu.make_det_pipe(data, "mixed", retinanet=True, batch_size=16, seed=0,
                                   device_memory_budget=need)
    with pytest.raises(_Started):
        pipe.build()
    assert fake_gpu == [(1, 1, ring)]
    assert pipe.memory_plan.bytes + 3 * b.outputs + b.working <= need
    assert pipe.batches_per_launch == 1 and pipe.output_slots == 1


def test_build_plain_pipeline_keeps_its_plan(data, fake_gpu):
    # 315 MB a batch of float32 images, three launches of them (one being made, two in the
    # caller's hands): 2 GB leaves 1,055 MB for the decode side, one process of 2 threads
    # (2 x 1 takes 2 x (280 + 80 + 3 launches of the data set's images); measured with 2 x 2 in
    # a for loop: 2,104-2,142 MB, benchmarks/RESULTS.md)
    pipe = bench_gpu.make_det_pipe(data, "mixed", batch_size=64, seed=0, device_memory_budget="2GB")
    with pytest.raises(_Started):
        pipe.build()
    assert [(p, t) for p, t, _ in fake_gpu] == [(1, 2)]
    # at the default, 2.3 GB, it keeps its 2 x 2 (measured: 2,142 MB on an H200)
    fake_gpu.clear()
    pipe = bench_gpu.make_det_pipe(data, "mixed", batch_size=64, seed=0)
    with pytest.raises(_Started):
        pipe.build()
    assert [(p, t) for p, t, _ in fake_gpu] == [(2, 2)]
    # and at 8 GB: 3 x 2 with launches of 4 batches (not planned ahead here? then 1)
    fake_gpu.clear()
    pipe = bench_gpu.make_det_pipe(data, "mixed", batch_size=64, seed=0, device_memory_budget="8GB")
    with pytest.raises(_Started):
        pipe.build()
    assert [(p, t) for p, t, _ in fake_gpu] == [(3, 2)]


def test_outputs_measured_on_the_first_launch_are_checked_then():
    """Where the graph does not fix a launch's bytes, the first launch's measured outputs set
    the output slots, and a launch that cannot fit twice beside the decode side is refused
    then, with the figure (the pipeline's part: runtime/gpu/output_budget.py)."""
    from detaug.runtime.build_plan import BuildPlan
    from detaug.runtime.executor import OutputSlots
    from detaug.runtime.gpu.output_budget import OutputBudget

    # what build decided: outputs not known (as for a resize to each image's aspect)
    plan = BuildPlan(seed=0, budget=2_000_000_000, decode_bytes=500_000_000, prefetch_queue_depth=12)
    slots, budget = OutputSlots(1), OutputBudget(plan)
    budget.after_launch_out(slots)  # nothing measured yet: nothing changes
    assert budget.slots == 1 and slots.n == 1
    budget.measured(150_000_000)
    budget.measured(200_000_000)  # the most a launch took
    budget.measured(100_000_000)
    budget.after_launch_out(slots)
    # 200 MB take 6 of the pool's 32 MiB chunks (201,326,592 bytes): (2,000 - 500 - 3 x 201.3)
    # // 201.3 = 4 launches of outputs at once (two in the caller's hands, one being freed)
    assert budget.slots == 4 and slots.n == 4 and budget.launch_bytes == 200_000_000
    budget = OutputBudget(plan)
    budget.measured(600_000_000)  # 500 + 3 x 600 = 2,300 MB > 2,000
    with pytest.raises(mp.BudgetError, match="2,300 MB") as e:
        budget.after_launch_out(slots)
    assert e.value.need == 2_300_000_000


def test_build_refuses_in_thread_decode_too(data, fake_gpu):
    """decode_processes=0: the decode side is the device-stage threads' decoders and the
    decoded images they keep (memory_plan.in_thread_decode_bytes), checked at build as well."""
    pipe = bench_gpu.make_det_pipe(data, "mixed", retinanet=True, batch_size=64, seed=0,
                                   decode_processes=0)
    with pytest.raises(mp.BudgetError, match=r"decode in 2 device-stage threads") as e:
        pipe.build()
    assert fake_gpu == []
    # 2 threads x 182 MB + (8 kept + 2 in use) launches of 64 images (the data set's 8, 8
    # times, each 256-aligned) + 3 x 2,004 MB of outputs
    import json

    with open(os.path.join(data, "annotations.json")) as f:
        every = sum(-(-im["height"] * im["width"] * 3 // 256) * 256 for im in json.load(f)["images"])
    assert e.value.need == (2 * 182_000_000 + 10 * 8 * every + 3 * 2_003_881_472
                            + 64 * ANCHORS_640 * 81 * 4)  # (the pool's slack)


# ------------------------------------------------------------------------------------------ GPU
sys.path.insert(0, os.path.join(REPO, "benchmarks"))


BATCHES = 60


@pytest.fixture(scope="module")
def gpu_data(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("det"))
    bench_gpu.make_dataset(root, 256, 2)
    return root


def _free(sync=True):
    import cupy as cp

    if sync:
        cp.cuda.runtime.deviceSynchronize()
    return cp.cuda.runtime.memGetInfo()[0]


def _settle():
    """This process's context up and its pool empty, so the drop measured is the pipeline's."""
    import cupy as cp

    cp.zeros(1).sum()
    gc.collect()
    free_cached(0)
    return _free()


@pytest.mark.gpu
@pytest.mark.parametrize("batch_size", [16])
def test_retinanet_within_its_budget(gpu_data, batch_size, monkeypatch):
    """Built at the default budget, or refused there with the figure it needs and built at
    that figure; it then holds it over a for loop (the previous batch still bound while the next
    is asked for: the two batches in the caller's hands the plan counts)."""
    from detaug.runtime.gpu import memory_plan

    monkeypatch.delenv("DETAUG_DEVICE_MEMORY_BUDGET", raising=False)
    before = _settle()
    budget = memory_plan.DEFAULT_BUDGET
    pipe = bench_gpu.make_det_pipe(gpu_data, "mixed", retinanet=True, batch_size=batch_size,
                                   device_id=0, seed=0)
    try:
        pipe.build()
    except memory_plan.BudgetError as e:
        pipe.close()
        budget = e.need
        pipe = bench_gpu.make_det_pipe(gpu_data, "mixed", retinanet=True, batch_size=batch_size,
                                       device_id=0, seed=0, device_memory_budget=budget)
        pipe.build()
    lowest = _free()
    try:
        out = None
        for _ in range(BATCHES):  # the for-loop idiom: ``out`` bound while the next is made
            try:
                out = pipe.run()
            except StopIteration:  # (16 batches an epoch)
                pipe.reset()
                out = pipe.run()
            assert out[3].shape == (batch_size, 76_725, 81)
            lowest = min(lowest, _free(sync=False))  # (allocations show without a sync)
        del out
        lowest = min(lowest, _free())
        drop = before - lowest
        import cupy as cp

        pool = device_pool(0)
        assert drop <= budget, (
            f"{drop / 1e6:,.0f} MB over {BATCHES} batches at a {budget / 1e6:,.0f} MB budget; "
            f"plan {pipe.memory_plan.describe()}, launch outputs {pipe._output_budget.launch_bytes / 1e6:,.0f}"
            f" MB, output slots {pipe.output_slots} (peak {pipe.output_slots_peak}), device threads' pool "
            f"{pool.total_bytes() / 1e6:,.0f} MB ({pool.used_bytes() / 1e6:,.0f} in use), "
            f"batches held at once {pipe._handout.held.peak}")
    finally:
        pipe.close()


@pytest.mark.gpu
def test_retinanet_batch_64_refused_at_the_default_budget(gpu_data, monkeypatch):
    from detaug.runtime.gpu.memory_plan import BudgetError

    monkeypatch.delenv("DETAUG_DEVICE_MEMORY_BUDGET", raising=False)
    before = _settle()
    pipe = bench_gpu.make_det_pipe(gpu_data, "mixed", retinanet=True, batch_size=64, device_id=0, seed=0)
    # 3 x 2,004 MB of outputs, the pool's slack (1,591 MB of one-hot labels) and the decode side
    with pytest.raises(BudgetError, match=r"device_memory_budget='8\.\dGB'"):
        pipe.build()
    # refused, and the decode processes started early closed: nothing held (a few MB of slack
    # for the driver)
    drop = before - _free()
    import cupy as cp

    assert drop < 32_000_000, (
        f"{drop:,} bytes held after the refusal: device threads' pool "
        f"{device_pool(0).total_bytes():,} (in use {device_pool(0).used_bytes():,}), cupy's default "
        f"pool {cp.get_default_memory_pool().total_bytes():,}, decode service {pipe._decode_service}")
    assert pipe._decode_service is None
