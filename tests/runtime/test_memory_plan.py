"""The GPU pipeline's memory plan (detaug/memory_plan.py) and the executor's ordered output
slots: pure arithmetic and threading, checked on the CPU against hand-computed values."""
import threading

import numpy as np
import pytest

from detaug.runtime.gpu import memory_plan as mp
from detaug.runtime.executor import Cancelled, OutputSlots


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
    # batch the caller holds
    assert mp.output_slots(2_000_000_000, 1_270_000_000, 315_000_000, 6) == 1
    assert mp.output_slots(8_000_000_000, 3_800_000_000, 315_000_000, 6) == 6  # capped by depth
    assert mp.output_slots(8_000_000_000, 3_800_000_000, 1_260_000_000, 6) == 2
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
