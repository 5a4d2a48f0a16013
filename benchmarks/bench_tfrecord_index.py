"""Index 100,000 TFRecord records (OD layout, one 11.6 kB JPEG each, 3 boxes) and time
readers.read_tfrecord. Usage: python benchmarks/bench_tfrecord_index.py IMAGE.jpg"""
import os, sys, time, tempfile
import numpy as np
from readers import tfrecord as T
from readers.tfrecord_od import read_tfrecord
N, SHARDS = 100_000, 10
rng = np.random.default_rng(0)
jpeg = open(sys.argv[1], "rb").read()
d = tempfile.mkdtemp()
t = time.perf_counter()
for s in range(SHARDS):
    exs = []
    for k in range(s, N, SHARDS):
        n = 3
        lo = rng.uniform(0, .5, (n, 2)); hi = lo + .2
        exs.append(T.serialize_example({
            "image/encoded": T.bytes_feature([jpeg]), "image/filename": T.bytes_feature([f"{k}.jpg"]),
            "image/source_id": T.bytes_feature([str(k)]), "image/width": T.int64_feature([640]),
            "image/height": T.int64_feature([480]),
            "image/object/bbox/xmin": T.float_feature(lo[:, 0]), "image/object/bbox/ymin": T.float_feature(lo[:, 1]),
            "image/object/bbox/xmax": T.float_feature(hi[:, 0]), "image/object/bbox/ymax": T.float_feature(hi[:, 1]),
            "image/object/class/label": T.int64_feature([1, 2, 3]),
            "image/object/class/text": T.bytes_feature(["a", "b", "c"])}))
    T.write_records(os.path.join(d, f"train-{s:05d}-of-{SHARDS:05d}.tfrecord"), exs)
size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
print(f"wrote {N} records, {size/1e6:.0f} MB, in {time.perf_counter()-t:.1f} s; CRC: {T.CRC_IMPLEMENTATION}")
for _ in range(2):
    t = time.perf_counter()
    ds = read_tfrecord(d)
    dt = time.perf_counter() - t
    print(f"read_tfrecord: {len(ds)} records, {sum(r.num_boxes for r in ds.records)} boxes indexed in {dt:.2f} s ({dt/len(ds)*1e6:.1f} us/record)")
