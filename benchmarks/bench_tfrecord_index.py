"""Index 100,000 TFRecord records (OD layout, one 11.6 kB JPEG each, 3 boxes) and time
readers.read_tfrecord (its index: one pass over the record headers, CRCs checked).

    python benchmarks/bench_tfrecord_index.py IMAGE.jpg [--records 100000] [--shards 10]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from readers import tfrecord as T  # noqa: E402
from readers.tfrecord_od import read_tfrecord  # noqa: E402


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("image", help="a JPEG file, stored in every record")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=10)
    args = ap.parse_args(argv)
    with open(args.image, "rb") as f:
        jpeg = f.read()
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        write_shards(d, jpeg, args.records, args.shards)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f"wrote {args.records} records, {size / 1e6:.0f} MB, in {time.perf_counter() - t:.1f} s; "
              f"CRC: {T.CRC_IMPLEMENTATION}")
        for _ in range(2):
            t = time.perf_counter()
            ds = read_tfrecord(d)
            dt = time.perf_counter() - t
            print(f"read_tfrecord: {len(ds)} records, {sum(r.num_boxes for r in ds.records)} boxes "
                  f"indexed in {dt:.2f} s ({dt / len(ds) * 1e6:.1f} us/record)")


if __name__ == "__main__":
    main()
