"""The decode processes' buffer bookkeeping (detaug/decode_proc.py), on the CPU: regions never
overlap while alive, come back in any order, and requests too large are refused."""
import numpy as np
import pytest

from conftest import _gpu
from detaug.decode_proc import ALIGN, RingAllocator, packed_offsets


def test_packed_offsets_hand_computed():
    off, total = packed_offsets([(2, 3, 3), (1, 1, 1), (10, 30, 3)])
    # 18 -> 256, 1 -> 256, 900 -> 1024
    assert off.tolist() == [0, 256, 512] and total == 512 + 1024
    off, total = packed_offsets(np.zeros((0, 3)))
    assert len(off) == 0 and total == 0


def test_ring_regions_never_overlap_fresh_random(rng):
    ring = RingAllocator(10_000)
    live = {}
    for key in range(3000):
        if live and (rng.random() < 0.5 or len(live) > 6):
            k = list(live)[int(rng.integers(len(live)))]  # free in any order
            ring.free(k)
            del live[k]
            continue
        size = int(rng.integers(1, 4000))
        start = ring.alloc(key, size)
        if start is None:
            # refused only when no free gap of that size exists at the head or at 0
            for s0 in (ring.head, 0):
                assert s0 + size > 10_000 or any(not (s0 + size <= a or s0 >= b) for a, b in live.values())
            continue
        assert 0 <= start and start + size <= 10_000
        for a, b in live.values():
            assert start + size <= a or start >= b
        live[key] = (start, start + size)
    for k in list(live):
        ring.free(k)
    assert ring.alloc("all", 10_000) == 0


def test_ring_wraps_and_refuses_oversize():
    ring = RingAllocator(1000)
    assert ring.alloc(1, 600) == 0
    assert ring.alloc(2, 300) == 600
    assert ring.alloc(3, 200) is None   # 900 + 200 > 1000, and 0..200 is taken
    ring.free(1)
    assert ring.alloc(3, 200) == 0      # wrapped to the start
    with pytest.raises(ValueError, match="cannot fit"):
        ring.alloc(4, 1001)
    assert ALIGN == 256


def test_worker_that_cannot_start_is_a_clear_error():
    """Where a decode process cannot start (here: no GPU, or no cupy in the child), building
    the service fails with an error that says so and names the way out, instead of hanging."""
    pytest.importorskip("cupy")
    if _gpu():
        pytest.skip("a GPU is present: the worker would start")
    from detaug.decode_proc import DecodeService

    with pytest.raises(RuntimeError, match="did not start.*decode_processes=0"):
        DecodeService(2, 0, 16)  # two started together: both are stopped
