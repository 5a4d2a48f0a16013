"""TFRecord inputs that once cost unbounded time or memory, or hung: a zero-filled
tail (a cut-short copy), a huge or crafted index cache, a cache header nested past Python's
stack, a FIFO at the cache path. Each runs in a child under a memory cap and a time limit."""
import os

import numpy as np
import pytest

from helpers.bounded import run_bounded
from helpers.reader_files import write_detection_shard
from readers import tfrecord as T
from readers import tfrecord_cache as C
from readers import tfrecord_scan as S
from readers.tfrecord_scan import frame_shard

FRAME_CHECK_EVERY = getattr(S, "FRAME_CHECK_EVERY", 4096)

def _shard(tmp_path, n=5):
    return write_detection_shard(str(tmp_path / "train.tfrecord"), n)


def test_zero_filled_tail_stops_at_the_first_bad_length_crc(tmp_path):
    path = _shard(tmp_path)
    good = os.path.getsize(path)
    os.truncate(path, good + 512 * 2**20)  # a sparse tail of zeros: no disk used
    proc = run_bounded(f"""
        import time
        from readers import read_tfrecord
        t = time.time()
        ds = read_tfrecord({path!r}, on_error="skip", index_cache=False)
        print(len(ds), ds.skipped, round(time.time() - t, 2))
    """, mem_mb=400, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    n, rest = proc.stdout.split(" ", 1)
    assert int(n) == 5
    assert f"offset {good}" in rest or str(good) in rest, rest
    assert "length CRC mismatch" in rest
    assert float(rest.rsplit(" ", 1)[1]) < 20


def test_frame_shard_bounds_its_walk_on_fresh_random_corruption(rng, tmp_path):
    """The chunked walk finds the same first bad header as checking every header: records of
    random lengths, then random garbage or zeros at a random record boundary."""
    for trial in range(6):
        payloads = [rng.integers(0, 256, int(rng.integers(0, 40)), np.uint8).tobytes()
                    for _ in range(int(rng.integers(1, 3 * FRAME_CHECK_EVERY // 2)))]
        framed = [T.frame(p) for p in payloads]
        cut = int(rng.integers(0, len(framed) + 1))
        tail = (bytes(16 * int(rng.integers(1, 3 * FRAME_CHECK_EVERY))) if trial % 2 else
                rng.integers(0, 256, int(rng.integers(12, 400)), np.uint8).tobytes())
        buf = b"".join(framed[:cut]) + tail
        offs, lens, ok, terminal = frame_shard("x", buf)
        assert len(offs) == cut and ok.all()
        assert list(lens) == [len(p) for p in payloads[:cut]]
        at = sum(len(f) for f in framed[:cut])
        assert terminal is not None and terminal[0] == at, (terminal, at)


def _plant(path, blob_or_size):
    place = C.cache_paths(path)[0]
    os.makedirs(os.path.dirname(place), exist_ok=True)
    if isinstance(blob_or_size, int):
        with open(place, "wb") as f:
            f.write(C.MAGIC + (10).to_bytes(8, "little") + bytes(4) + b"{}" * 5)
        os.truncate(place, blob_or_size)
    else:
        with open(place, "wb") as f:
            f.write(blob_or_size)
    return place


def test_huge_cache_file_is_not_read(tmp_path):
    path = _shard(tmp_path)
    place = _plant(path, 8 * 2**30)  # sparse
    assert os.path.getsize(place) > 64 * os.path.getsize(path) + 2**20
    proc = run_bounded(f"""
        from readers import read_tfrecord
        ds = read_tfrecord({path!r})
        print(len(ds), sorted(r.path.rsplit('/', 1)[-1] for r in ds.records))
    """, mem_mb=600, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split(" ", 1)[0] == "5"


def test_deeply_nested_cache_header_is_rebuilt(tmp_path):
    path = _shard(tmp_path)
    head = b"[" * 200_000 + b"]" * 200_000
    _plant(path, C.MAGIC + len(head).to_bytes(8, "little") + T.crc32c(head).to_bytes(4, "little")
           + head)
    from readers import read_tfrecord

    ds = read_tfrecord(path)
    assert [os.path.basename(r.path) for r in ds.records] == [f"{k}.jpg" for k in range(5)]
    assert [r.boxes.tolist() for r in ds.records] == [[[6.4, 4.8, 32.0, 28.8]]] * 5 or \
        np.allclose(np.stack([r.boxes for r in ds.records]), [[[6.4, 4.8, 32.0, 28.8]]], atol=1e-4)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_at_the_cache_path_does_not_block(tmp_path):
    path = _shard(tmp_path)
    place = C.cache_paths(path)[0]
    os.makedirs(os.path.dirname(place), exist_ok=True)
    os.mkfifo(place)
    proc = run_bounded(f"""
        from readers import read_tfrecord
        print(len(read_tfrecord({path!r})))
    """, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "5"
