"""Index 100,000 TFRecord records (OD layout, one 11.6 kB JPEG each, 3 boxes) and time
readers.read_tfrecord: cold (no index cache: framing, both CRCs, the Example scan), cached (the
index cache beside the shards), the reference parser record by record (``--reference``), and
the bounds of a pass in Python over the same bytes: the header walk alone, and the data CRCs
alone (google-crc32c over each record).

    python benchmarks/bench_tfrecord_index.py [IMAGE.jpg] [--records 100000] [--shards 10]
        [--repeat 3] [--reference]

Without IMAGE, a 128 x 96 JPEG of seeded noise at quality 95 (11,710 bytes) is made.

Prints one line per measurement, microseconds per record (best of ``--repeat``).
"""
from __future__ import annotations

import argparse
import mmap
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from readers import tfrecord as T  # noqa: E402
from readers import tfrecord_cache  # noqa: E402
from readers.tfrecord_od import _read_reference, read_tfrecord  # noqa: E402


def write_shards(folder, jpeg, n, shards, seed=0):
    """``n`` OD-layout records (3 boxes each, the same JPEG) in ``shards`` files under ``folder``."""
    rng = np.random.default_rng(seed)
    for s in range(shards):
        exs = []
        for k in range(s, n, shards):
            lo = rng.uniform(0, .5, (3, 2))
            hi = lo + .2
            exs.append(T.serialize_example({
                "image/encoded": T.bytes_feature([jpeg]), "image/filename": T.bytes_feature([f"{k}.jpg"]),
                "image/source_id": T.bytes_feature([str(k)]), "image/width": T.int64_feature([640]),
                "image/height": T.int64_feature([480]),
                "image/object/bbox/xmin": T.float_feature(lo[:, 0]),
                "image/object/bbox/ymin": T.float_feature(lo[:, 1]),
                "image/object/bbox/xmax": T.float_feature(hi[:, 0]),
                "image/object/bbox/ymax": T.float_feature(hi[:, 1]),
                "image/object/class/label": T.int64_feature([1, 2, 3]),
                "image/object/class/text": T.bytes_feature(["a", "b", "c"])}))
        T.write_records(os.path.join(folder, f"train-{s:05d}-of-{shards:05d}.tfrecord"), exs)


def _noise_jpeg():
    import io

    from PIL import Image

    rng = np.random.default_rng(0)
    pixels = (rng.integers(0, 256, (96, 128, 3)) // 2 + 64).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=95)
    return out.getvalue()


def _best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def _walk(files, check):
    """The sequential part of the index, over the mapped files as read_tfrecord maps them: one
    header unpack a record and, with ``check``, its data CRC (a copy of the data and one
    google-crc32c call); nothing else."""
    n, unpack, crc = 0, T._HEADER.unpack_from, T.crc32c
    for path in files:
        with open(path, "rb") as f:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        off, size = 0, len(buf)
        while off < size:
            length = unpack(buf, off)[0]
            if check:
                crc(buf[off + 12:off + 12 + length])
            off += 16 + length
            n += 1
        buf.close()
    return n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("image", nargs="?", help="a JPEG file, stored in every record")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reference", action="store_true",
                    help="also time the reference parser (slow: ~300 us a record)")
    args = ap.parse_args(argv)
    if T.CRC_IMPLEMENTATION.startswith("pure"):
        sys.exit("google-crc32c is not installed: the CRC-32C would run in pure Python (a few "
                 "MB/s); pip install google-crc32c (detaug[tfrecord]) first")
    jpeg = _noise_jpeg() if args.image is None else open(args.image, "rb").read()
    tfrecord_cache.RACY_NS = -10**12  # the shards are not written to during the run
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        write_shards(d, jpeg, args.records, args.shards)
        files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".tfrecord"))
        size = sum(os.path.getsize(f) for f in files)
        print(f"wrote {args.records} records ({len(jpeg)}-byte JPEG each), {size / 1e6:.0f} MB, "
              f"in {time.perf_counter() - t:.1f} s; CRC: {T.CRC_IMPLEMENTATION}; "
              f"{os.cpu_count()} cores")
        n = args.records

        def line(what, seconds):
            print(f"{what:<52} {seconds:7.2f} s {seconds / n * 1e6:8.1f} us/record")

        line("bound: header walk alone", _best(lambda: _walk(files, False), args.repeat)[0])
        line("bound: header walk + data CRCs", _best(lambda: _walk(files, True), args.repeat)[0])
        dt, ds = _best(lambda: read_tfrecord(d, index_cache=False, index_workers=1), args.repeat)
        line(f"read_tfrecord cold, 1 thread ({sum(r.num_boxes for r in ds.records)} boxes)", dt)
        workers = min(args.shards, os.cpu_count() or 1, 8)
        if workers > 1:
            dt, _ = _best(lambda: read_tfrecord(d, index_cache=False, index_workers=workers),
                          args.repeat)
            line(f"read_tfrecord cold, {workers} threads (index_workers={workers})", dt)
        dt, _ = _best(lambda: read_tfrecord(d), 1)
        line("read_tfrecord, first read (writes the cache)", dt)
        dt, cached = _best(lambda: read_tfrecord(d), args.repeat)
        line("read_tfrecord cached", dt)
        assert len(cached) == len(ds) == n
        if args.reference:
            dt, ref = _best(lambda: _read_reference(d), 1)
            line("reference parser (record by record)", dt)
            same = all(a.path == b.path and (a.boxes == b.boxes).all() and
                       (a.labels == b.labels).all() for a, b in zip(ds.records, ref.records))
            print(f"fast == reference: {same and len(ref) == len(ds)}")


if __name__ == "__main__":
    main()
