"""The fast TFRecord index (readers.tfrecord_scan) and its cache (readers.tfrecord_cache)
against the reference parser (tfrecord_od._read_reference: iter_records + parse_example, record
by record): same records in the same order, same faults, on fresh random shards that mix clean
records with every kind of fault and every wire form the fast path hands to the reference."""
import os
import struct
import warnings

import numpy as np
import pytest

from helpers import COCO
from readers import read_coco
from readers import tfrecord as T
from readers import tfrecord_cache as C
from readers import tfrecord_od as O
from readers.errors import DatasetError
from readers.tfrecord_scan import index_shard, masked_crc_rows

JPEG = open(os.path.join(COCO, "images", sorted(os.listdir(os.path.join(COCO, "images")))[0]),
            "rb").read()[:3000]
NAMES = {1: "cat", 2: "dog", 3: "bird", 7: "caf\u00e9"}


def _raw_entry(name, feature):
    key = T._len_field(1, name.encode())
    return T._len_field(1, key + T._len_field(2, feature))


def _record(rng, k):
    """One random Example (bytes) and what it is meant to exercise."""
    n = int(rng.integers(0, 6))
    w, h = int(rng.integers(1, 900)), int(rng.integers(1, 900))
    lo = rng.uniform(-0.1, 0.9, (n, 2))
    hi = lo + rng.uniform(0.001, 0.5, (n, 2))
    ids = rng.choice(list(NAMES), n)
    f = {"image/encoded": T.bytes_feature([JPEG[:int(rng.integers(10, 3000))]]),
         "image/width": T.int64_feature([w]), "image/height": T.int64_feature([h]),
         "image/object/bbox/xmin": T.float_feature(lo[:, 0]),
         "image/object/bbox/ymin": T.float_feature(lo[:, 1]),
         "image/object/bbox/xmax": T.float_feature(hi[:, 0]),
         "image/object/bbox/ymax": T.float_feature(hi[:, 1]),
         "image/object/class/label": T.int64_feature(ids)}
    if rng.random() < .7:
        f["image/filename"] = T.bytes_feature([rng.choice(["", "/abs.jpg", f"d/{k}.png",
                                                           f"{k}.jpg", "\u00e9.jpg"])])
    if rng.random() < .7:
        f["image/source_id"] = T.bytes_feature([rng.choice(["", "007", str(k), f"s{k}",
                                                            str(2**63), "0"])])
    if rng.random() < .4:
        f["image/format"] = T.bytes_feature([rng.choice(["jpeg", "png", ""])])
    if rng.random() < .7:
        f["image/object/class/text"] = T.bytes_feature([NAMES[i] for i in ids])
    for key in ("difficult", "truncated", "is_crowd"):
        if rng.random() < .4:
            f[f"image/object/{key}"] = T.int64_feature(rng.integers(0, 2, n))
    if rng.random() < .3:
        f["image/object/area"] = T.float_feature(rng.uniform(0, 1e4, n))
    if rng.random() < .3:
        f["image/key/sha256"] = T.bytes_feature(["ab" * 32])
    fault = rng.choice(["none"] * 12 + ["label", "flag", "length", "nan", "unknown", "kind",
                                        "neg", "no_image", "two_images", "no_size", "text",
                                        "unpacked", "twice", "big", "malformed", "bad_utf8"])
    if fault == "label" and n:
        f["image/object/class/label"] = T.int64_feature([5] * n)
    elif fault == "flag" and n:
        f["image/object/difficult"] = T.int64_feature([2] * n)
    elif fault == "length":
        f["image/object/bbox/xmax"] = T.float_feature(hi[:, 0].tolist() + [0.5])
    elif fault == "nan" and n:
        f["image/object/bbox/ymin"] = T.float_feature([float("nan")] * n)
    elif fault == "unknown":
        f["image/class/label"] = T.int64_feature([k % 5])
        f["image/misc"] = T.float_feature([0.25, -1.5])
        f["image/class/synset"] = T.bytes_feature([f"n{k:08d}", b"\xff\x00"])
    elif fault == "kind":
        f["image/width"] = T.float_feature([float(w)])
    elif fault == "neg" and n:
        f["image/object/class/label"] = T.int64_feature([-1] * n)
    elif fault == "no_image":
        del f["image/encoded"]
    elif fault == "two_images":
        f["image/encoded"] = T.bytes_feature([JPEG[:50], JPEG[:60]])
    elif fault == "no_size":
        del f["image/width"]
    elif fault == "text" and n:
        f["image/object/class/text"] = T.bytes_feature(["zebra"] * n)
    elif fault == "unpacked":  # Int64List with unpacked values: legal, not canonical
        f["image/object/class/label"] = T._len_field(3, b"".join(
            b"\x08" + T._enc_varint(int(i)) for i in ids))
    elif fault == "big":
        f["image/height"] = T.int64_feature([2**40])
    elif fault == "bad_utf8":
        f["image/filename"] = T._len_field(1, T._len_field(1, b"\xff\xfe.jpg"))
    body = b"".join(_raw_entry(name, feat) for name, feat in f.items())
    if fault == "twice":  # a map key given twice: the last value wins
        body += _raw_entry("image/width", T.int64_feature([w + 1]))
    data = T._len_field(1, body)
    if fault == "malformed":
        data = data[:-3]
    return data


def _shard(path, rng, n, damage=True):
    data = [_record(rng, k) for k in range(n)]
    blob = bytearray(b"".join(T.frame(d) for d in data))
    if damage and rng.random() < .5:  # a data byte flipped: a data CRC mismatch
        k = int(rng.integers(0, n))
        off = sum(16 + len(d) for d in data[:k]) + 12 + int(rng.integers(0, len(data[k])))
        blob[off] ^= 0x40
    if damage and rng.random() < .3:  # the end cut off: a truncated record
        blob = blob[:-int(rng.integers(1, 40))]
    path.write_bytes(bytes(blob))


def assert_same(a, b):
    assert (len(a), a.class_names, a.category_ids, a.root) == (len(b), b.class_names,
                                                              b.category_ids, b.root)
    assert (a.clipped, a.emptied, a.dropped, a.skipped) == (b.clipped, b.emptied, b.dropped,
                                                           b.skipped)
    for r, s in zip(a.records, b.records):
        assert (r.path, r.width, r.height, r.image_id) == (s.path, s.width, s.height, s.image_id)
        assert type(r.image_id) is type(s.image_id) and type(r.width) is type(s.width)
        for x, y in [(r.boxes, s.boxes), (r.labels, s.labels)] + [
                (r.fields[k], s.fields.get(k)) for k in r.fields]:
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
        assert list(r.fields) == list(s.fields)
        assert r.extra == s.extra


def _both(call):
    """``("ok", dataset, warnings)`` or ``("error", message)`` of ``call``."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            ds = call()
        except DatasetError as exc:
            return ("error", str(exc))
    return ("ok", ds, [str(w.message) for w in seen])


@pytest.fixture
def settled(monkeypatch):
    """Cache shards written a moment ago (each test writes a shard once before reading it,
    or changes its size or mtime)."""
    monkeypatch.setattr(C, "RACY_NS", -10**12)


@pytest.mark.parametrize("label_map", [None, NAMES])
def test_fast_path_equals_reference_on_random_shards(tmp_path, rng, label_map, settled):
    for trial in range(4):
        folder = tmp_path / f"t{trial}"
        folder.mkdir()
        for s in range(int(rng.integers(1, 4))):
            _shard(folder / f"x-{s}.tfrecord", rng, int(rng.integers(1, 40)))
        for on_error in ("raise", "skip"):
            for kw in ({}, {"skip_empty": True}):
                kw = dict(kw, label_map=label_map, on_error=on_error)
                ref = _both(lambda: O._read_reference(folder, **kw))
                for cache in (False, None, None):  # no cache, cache written, cache read
                    got = _both(lambda: O.read_tfrecord(folder, index_cache=cache, **kw))
                    assert got[0] == ref[0], (got[:2], ref[:2])
                    if ref[0] == "error":
                        assert got[1] == ref[1]
                    else:
                        assert_same(got[1], ref[1])
                        assert got[2] == ref[2]


def test_clean_shards_take_the_fast_path(tmp_path, rng):
    """Records without a fault are read by the scan, not handed to the reference."""
    path = tmp_path / "c.tfrecord"
    data = []
    while len(data) < 30:
        d = _record(rng, len(data))
        try:
            ds = O._read_reference(_write(tmp_path / "one.tfrecord", [d]), label_map=NAMES)
        except DatasetError:
            continue
        if ds.records:
            data.append(d)
    data.append(T.serialize_example({  # the ImageNet layout: features this one does not model
        "image/encoded": T.bytes_feature([JPEG[:99]]), "image/width": T.int64_feature([5]),
        "image/height": T.int64_feature([6]), "image/class/label": T.int64_feature([-3, 2**40]),
        "image/class/synset": T.bytes_feature([b"n01", b"\xff"]),
        "image/misc": T.float_feature([0.1, 2.5])}))
    T.write_records(path, data)
    ix = index_shard(path)
    assert ix["terminal"] is None
    assert len(ix["offset"]) + len(ix["slow_offset"]) == 31
    assert len(ix["offset"]) >= 25  # only unpacked / repeated-key forms go to the reference
    assert ix["others"][-1] == {"image/class/label": [-3, 2**40],
                                "image/class/synset": [b"n01", b"\xff"],
                                "image/misc": [float(np.float32(0.1)), 2.5]}
    assert_same(O.read_tfrecord(path, label_map=NAMES, index_cache=False),
                O._read_reference(path, label_map=NAMES))


def _write(path, data):
    T.write_records(path, data)
    return path


def test_coco_records_unchanged(tmp_path, settled):
    """The test data written as TFRecords: the pipeline's records are what they were."""
    coco = read_coco(os.path.join(COCO, "annotations.json"), os.path.join(COCO, "images"))
    O.write_tfrecord(coco, tmp_path, num_shards=3)
    lm = tmp_path / "label_map.pbtxt"
    ref = O._read_reference(tmp_path, label_map=lm)
    assert_same(O.read_tfrecord(tmp_path, label_map=lm, index_cache=False), ref)
    assert_same(O.read_tfrecord(tmp_path, label_map=lm), ref)  # writes the cache
    assert_same(O.read_tfrecord(tmp_path, label_map=lm), ref)  # reads it
    assert len(os.listdir(tmp_path / ".detaug-index")) == 3


def test_masked_crc_rows_equal_the_reference(rng):
    rows = rng.integers(0, 256, (50, 8), dtype=np.uint8)
    want = [T.masked_crc(r.tobytes()) for r in rows]
    assert masked_crc_rows(rows).tolist() == want


def test_corrupt_and_truncated_found_by_the_scan(tmp_path, rng):
    data = [T.serialize_example({"image/encoded": T.bytes_feature([JPEG[:100 + k]]),
                                 "image/width": T.int64_feature([3]),
                                 "image/height": T.int64_feature([2])}) for k in range(5)]
    blob = bytearray(b"".join(T.frame(d) for d in data))
    size = [16 + len(d) for d in data]
    blob[size[0] + 20] ^= 1  # record 1: data
    blob[sum(size[:3]) + 9] ^= 1  # record 3: its length CRC
    path = tmp_path / "c.tfrecord"
    path.write_bytes(bytes(blob))
    ix = index_shard(path)
    assert ix["slow_offset"].tolist() == [size[0]]  # the data CRC: the reference names it
    assert ix["offset"].tolist() == [0, size[0] + size[1]]
    assert ix["terminal"] == (sum(size[:3]), "length CRC mismatch: not a TFRecord file, or "
                              "corrupt at this record (the rest of the file cannot be located)")
    with pytest.raises(DatasetError, match=f"byte offset {size[0]}: data CRC mismatch"):
        O.read_tfrecord(path, index_cache=False)
    path.write_bytes(bytes(blob[:sum(size[:3]) - 5]))  # record 2 cut short
    ix = index_shard(path)
    assert ix["terminal"][0] == size[0] + size[1] and "truncated record" in ix["terminal"][1]


def _shard_with_boxes(path, x0):
    feats = {"image/encoded": T.bytes_feature([JPEG[:200]]), "image/width": T.int64_feature([100]),
             "image/height": T.int64_feature([100]),
             "image/object/bbox/xmin": T.float_feature([x0]),
             "image/object/bbox/ymin": T.float_feature([0.1]),
             "image/object/bbox/xmax": T.float_feature([0.9]),
             "image/object/bbox/ymax": T.float_feature([0.9]),
             "image/object/class/label": T.int64_feature([1])}
    T.write_records(path, [T.serialize_example(feats)] * 3)


def test_cache_is_used_and_invalidated_by_size_and_mtime(tmp_path, monkeypatch, settled):
    path = tmp_path / "a.tfrecord"
    _shard_with_boxes(path, 0.25)
    assert O.read_tfrecord(path).records[0].boxes[0, 0] == 25
    cache = tmp_path / ".detaug-index" / "a.tfrecord.index"
    assert cache.is_file()
    calls = []
    real = C.index_shard
    monkeypatch.setattr(C, "index_shard", lambda p: calls.append(p) or real(p))
    assert O.read_tfrecord(path).records[0].boxes[0, 0] == 25 and calls == []  # cached
    _shard_with_boxes(path, 0.5)  # same size, new content, new mtime
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert O.read_tfrecord(path).records[0].boxes[0, 0] == 50 and len(calls) == 1
    with open(path, "ab") as f:  # one more record: a new size
        f.write(T.frame(T.serialize_example({"image/encoded": T.bytes_feature([JPEG[:9]]),
                                             "image/width": T.int64_feature([4]),
                                             "image/height": T.int64_feature([4])})))
    assert len(O.read_tfrecord(path)) == 4 and len(calls) == 2
    assert len(O.read_tfrecord(path)) == 4 and len(calls) == 2


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flip", "wrong_key", "empty",
                                    "header"])
def test_corrupt_cache_is_rebuilt(tmp_path, damage, settled):
    path = tmp_path / "a.tfrecord"
    _shard_with_boxes(path, 0.25)
    want = O.read_tfrecord(path, index_cache=False)
    O.read_tfrecord(path)
    cache = tmp_path / ".detaug-index" / "a.tfrecord.index"
    blob = bytearray(cache.read_bytes())
    if damage == "garbage":
        blob = bytearray(b"not a cache" * 10)
    elif damage == "truncated":
        blob = blob[:len(blob) // 2]
    elif damage == "flip":  # a byte of the boxes (the last array): their CRC no longer matches
        blob[-10] ^= 0x10
    elif damage == "wrong_key":  # another shard's cache under this name
        other = tmp_path / "b.tfrecord"
        _shard_with_boxes(other, 0.5)
        O.read_tfrecord(other)
        blob = bytearray((tmp_path / ".detaug-index" / "b.tfrecord.index").read_bytes())
    elif damage == "header":  # a record's name in the header changed: its CRC says so
        at = blob.index(b'"name": ["') + 10
        blob[at] ^= 0x20
    else:
        blob = bytearray()
    cache.write_bytes(bytes(blob))
    assert_same(O.read_tfrecord(path), want)
    assert C._load(str(cache), C.shard_key(path), str(path)) is not None  # rewritten, valid


def test_unwritable_folder_uses_the_user_cache(tmp_path, monkeypatch, settled):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home"))
    data = tmp_path / "data"
    data.mkdir()
    _shard_with_boxes(data / "a.tfrecord", 0.25)
    (data / ".detaug-index").write_bytes(b"")  # a file where the cache folder would go
    want = O.read_tfrecord(data, index_cache=False)
    assert_same(O.read_tfrecord(data), want)
    user = tmp_path / "home" / "detaug" / "tfrecord-index"
    assert len(os.listdir(user)) == 1
    assert_same(O.read_tfrecord(data), want)
    monkeypatch.setenv("DETAUG_TFRECORD_INDEX_CACHE", "0")
    assert not C.enabled(None) and C.enabled(str(tmp_path))
    assert struct.calcsize("<Q") == 8


def test_a_shard_changed_just_now_is_not_cached(tmp_path):
    path = tmp_path / "a.tfrecord"
    _shard_with_boxes(path, 0.25)
    O.read_tfrecord(path)
    assert not (tmp_path / ".detaug-index").exists()


def test_vectorised_primitives_equal_the_reference(rng):
    """Varints, packed int64 and byte-string numbering against readers.tfrecord's loop and
    plain bytes, on fresh random data (spans up to the buffer's last byte included)."""
    from readers import tfrecord_scan as S

    values = [int(v) for v in rng.integers(-2**63, 2**63 - 1, 300, dtype=np.int64)] + \
        [int(v) for v in rng.integers(0, 2**21, 300)] + [0, 1, 127, 128, 2**63 - 1, -1]
    enc = [T._enc_varint(v) for v in values]
    buf = np.frombuffer(b"".join(enc), np.uint8)
    pos = np.cumsum([0] + [len(e) for e in enc[:-1]]).astype(np.int64)
    end = np.full(len(pos), len(buf), np.int64)
    short = np.flatnonzero(np.array([len(e) for e in enc]) <= 5)
    got, nxt, ok = S._varint(buf, pos[short], end[short])
    for k, i in enumerate(short.tolist()):
        want, after = T._varint(bytes(buf), int(pos[i]), len(buf))
        assert ok[k] and got[k] == want and nxt[k] == after
    # packed int64 lists: a random split of the values into lists, one empty
    cuts = np.sort(rng.choice(np.arange(1, len(enc)), 20, replace=False))
    starts = np.r_[0, pos[cuts], len(buf)].astype(np.int64)
    lists, counts, ok = S._int64s(buf, starts[:-1], starts[1:])
    assert ok.all() and lists.tolist() == values and counts.sum() == len(values)
    bad = buf.copy()
    bad[-1] |= 0x80  # the last varint runs past its list
    assert not S._int64s(bad, starts[:-1], starts[1:])[2][-1]
    for size in (3, 9, 2000):
        data = rng.integers(0, 4, size).astype(np.uint8)
        a = rng.integers(0, size, 3000)
        b = np.minimum(a + rng.integers(0, 20, 3000), size)
        codes, table = S.unique_spans(data, a, b)
        assert len(set(table)) == len(table)
        assert all(table[c] == data[i:j].tobytes() for c, i, j in zip(codes, a, b))


@pytest.mark.parametrize("workers", [1, 3])
def test_missing_file_among_others_is_raised_in_file_order(tmp_path, rng, workers):
    """Shards indexed in threads: the faults and the missing file come out as the reference
    meets them (a bad record of the first file before the missing second one)."""
    _shard(tmp_path / "a.tfrecord", rng, 20)
    _shard(tmp_path / "c.tfrecord", rng, 20)
    files = [tmp_path / "a.tfrecord", tmp_path / "b.tfrecord", tmp_path / "c.tfrecord"]
    for on_error in ("raise", "skip"):
        ref = _both(lambda: O._read_reference(files, on_error=on_error))
        got = _both(lambda: O.read_tfrecord(files, on_error=on_error, index_cache=False,
                                            index_workers=workers))
        assert got[:2] == ref[:2] and ref[0] == "error"
    files.pop(1)
    ref = _both(lambda: O._read_reference(files, on_error="skip"))
    got = _both(lambda: O.read_tfrecord(files, on_error="skip", index_workers=workers))
    assert got[0] == ref[0]
    if ref[0] == "ok":
        assert_same(got[1], ref[1])
    else:
        assert got[1] == ref[1]
