"""readers.read_tfrecord / write_tfrecord (Object Detection API layout), the converter's
--from/--to tfrecord, and fn.readers.tfrecord: values against the COCO source and hand-made
records, and the bad-input rules (named file and byte offset, or counted skips)."""
import os
import struct
import warnings

import numpy as np
import pytest

from helpers import COCO
from readers import read_coco
from readers import tfrecord as T
from readers.errors import DatasetError
from readers.tfrecord_od import (extract_images, image_bytes, read_label_map, read_tfrecord,
                                 write_tfrecord)

ANN = os.path.join(COCO, "annotations.json")
IMAGES = os.path.join(COCO, "images")
JPEG = open(os.path.join(IMAGES, sorted(os.listdir(IMAGES))[0]), "rb").read()


@pytest.fixture(scope="module")
def coco():
    return read_coco(ANN, IMAGES)


def _by_id(ds):
    return {r.image_id: r for r in ds.records}


def _same(ds, back):
    assert back.class_names == ds.class_names and back.category_ids == ds.category_ids
    got = _by_id(back)
    assert sorted(got) == sorted(r.image_id for r in ds.records)
    for r in ds.records:
        b = got[r.image_id]
        assert (b.width, b.height) == (r.width, r.height)
        assert np.abs(b.boxes - r.boxes).max(initial=0) <= 1e-4 * max(r.width, r.height)
        np.testing.assert_array_equal(b.labels, r.labels)
        np.testing.assert_array_equal(b.fields["iscrowd"], r.fields["iscrowd"])
        assert image_bytes(b) == open(r.path, "rb").read()


def test_coco_round_trip_sharded(tmp_path, coco):
    report = write_tfrecord(coco, tmp_path, num_shards=4)
    names = sorted(os.listdir(tmp_path))
    assert names == ["label_map.pbtxt"] + [f"train-0000{i}-of-00004.tfrecord" for i in range(4)]
    counts = [sum(1 for _ in T.iter_records(tmp_path / n)) for n in names[1:]]
    assert counts == [17, 17, 17, 17]  # 68 records dealt in turn
    assert report.images == 68 and report.boxes == sum(r.num_boxes for r in coco.records)
    assert report.not_held["annotation ids"] == report.boxes and report.max_shift_px < 1e-3
    back = read_tfrecord(str(tmp_path / "*.tfrecord"), label_map=tmp_path / "label_map.pbtxt")
    _same(coco, back)
    # record k of the source is record k // 4 of shard k % 4
    first = [r.image_id for r in back.records[:17]]
    assert first == [r.image_id for r in coco.records[0::4]]


def test_hand_made_record_values(tmp_path, rng):
    w, h = 640, 480
    n = 5
    x0, y0 = rng.uniform(0, 0.5, n), rng.uniform(0, 0.5, n)
    x1, y1 = x0 + rng.uniform(0.01, 0.5, n), y0 + rng.uniform(0.01, 0.5, n)
    ids = rng.integers(1, 4, n)
    names = {1: "cat", 2: "dog", 3: "bird"}
    difficult = rng.integers(0, 2, n)
    ex = T.serialize_example({
        "image/encoded": T.bytes_feature([JPEG]), "image/filename": T.bytes_feature(["a.jpg"]),
        "image/source_id": T.bytes_feature(["a7"]), "image/width": T.int64_feature([w]),
        "image/height": T.int64_feature([h]),
        "image/object/bbox/xmin": T.float_feature(x0), "image/object/bbox/ymin": T.float_feature(y0),
        "image/object/bbox/xmax": T.float_feature(x1), "image/object/bbox/ymax": T.float_feature(y1),
        "image/object/class/label": T.int64_feature(ids),
        "image/object/class/text": T.bytes_feature([names[i] for i in ids]),
        "image/object/difficult": T.int64_feature(difficult),
        "image/class/label": T.int64_feature([9]),
    })
    path = tmp_path / "x.tfrecord"
    T.write_records(path, [ex])
    ds = read_tfrecord(path, label_map=names)
    assert ds.class_names == ["cat", "dog", "bird"] and ds.category_ids == [1, 2, 3]
    r = ds.records[0]
    f32 = lambda v: np.float32(v).astype(np.float64)  # noqa: E731
    want = np.stack([f32(x0) * w, f32(y0) * h, f32(x1) * w, f32(y1) * h], 1)
    np.testing.assert_allclose(r.boxes, np.clip(want, 0, [w, h, w, h]), rtol=1e-6)
    np.testing.assert_array_equal(r.labels, ids - 1)
    np.testing.assert_array_equal(r.fields["difficult"], difficult)
    assert r.image_id == "a7" and r.path == os.path.join(str(path), "a.jpg")
    assert r.extra["tfrecord_features"] == {"image/class/label": [9]}
    assert image_bytes(r) == JPEG
    # without a label map: the ids used, named by class/text
    ds2 = read_tfrecord(path)
    used = sorted(set(ids.tolist()))
    assert ds2.category_ids == used and ds2.class_names == [names[i] for i in used]


def _one_record_file(tmp_path, **over):
    feats = {"image/encoded": T.bytes_feature([JPEG]), "image/width": T.int64_feature([100]),
             "image/height": T.int64_feature([50]),
             "image/object/bbox/xmin": T.float_feature([0.1]),
             "image/object/bbox/ymin": T.float_feature([0.1]),
             "image/object/bbox/xmax": T.float_feature([0.5]),
             "image/object/bbox/ymax": T.float_feature([0.5]),
             "image/object/class/label": T.int64_feature([1])}
    feats.update(over)
    good = T.serialize_example({k: v for k, v in feats.items() if v is not None})
    path = tmp_path / "one.tfrecord"
    return path, good


@pytest.mark.parametrize("over,what", [
    ({"image/object/bbox/xmax": T.float_feature([0.05])}, "x1 < x0"),
    ({"image/object/bbox/xmin": T.float_feature([1.5]),
      "image/object/bbox/xmax": T.float_feature([2.0])}, "lies wholly outside the 100x50 image"),
    ({"image/object/bbox/xmin": T.float_feature([float("nan")])}, "non-finite"),
    ({"image/object/class/label": T.int64_feature([1, 2])}, "per-box features differ"),
    ({"image/encoded": None}, "image/encoded holds 0 values"),
    ({"image/width": T.int64_feature([0])}, "image/width x image/height is 0 x 50"),
    ({"image/object/difficult": T.int64_feature([2])}, "not 0 or 1"),
])
def test_bad_records_are_named_or_counted(tmp_path, over, what):
    path, bad = _one_record_file(tmp_path, **over)
    _, good = _one_record_file(tmp_path)
    T.write_records(path, [good, bad, good])
    offset = 16 + len(good)
    with pytest.raises(DatasetError, match=f"byte offset {offset}.*{what}") as e:
        read_tfrecord(path)
    assert e.value.file == str(path)
    with pytest.warns(UserWarning, match="skipped 1 bad item"):
        ds = read_tfrecord(path, on_error="skip")
    assert len(ds.skipped) == 1 and str(offset) in ds.skipped[0][1]
    assert sum(r.num_boxes for r in ds.records) == 2


def test_corrupt_and_truncated_files_under_skip(tmp_path):
    _, good = _one_record_file(tmp_path)
    path = tmp_path / "c.tfrecord"
    T.write_records(path, [good] * 4)
    data = bytearray(path.read_bytes())
    size = 16 + len(good)
    data[size + 40] ^= 0xFF  # a byte inside record 1's data
    path.write_bytes(bytes(data[:-7]))  # and record 3 cut short
    with pytest.raises(DatasetError, match=f"byte offset {size}: data CRC mismatch"):
        read_tfrecord(path)
    with pytest.warns(UserWarning, match="skipped 2 bad item"):
        ds = read_tfrecord(path, on_error="skip")
    assert len(ds) == 2
    reasons = [why for _, why in ds.skipped]
    assert f"byte offset {size}: data CRC mismatch" in reasons[0]
    assert f"byte offset {3 * size}: truncated record" in reasons[1]
    assert "the rest of the file is skipped" in reasons[1]


def test_bad_protobuf_names_offset(tmp_path):
    _, good = _one_record_file(tmp_path)
    path = tmp_path / "p.tfrecord"
    T.write_records(path, [good, b"\x0a\x7f\x01"])
    with pytest.raises(DatasetError, match=f"byte offset {16 + len(good)}: malformed "
                                           "tf.train.Example"):
        read_tfrecord(path)


def test_label_map_rules(tmp_path):
    pb = tmp_path / "label_map.pbtxt"
    pb.write_text("item {\n id: 2\n name: 'dog'\n}\nitem { name: \"cat\" id: 1 }\n")
    assert read_label_map(pb) == {2: "dog", 1: "cat"}
    path, good = _one_record_file(tmp_path, **{"image/object/class/label": T.int64_feature([3])})
    T.write_records(path, [good])
    with pytest.raises(DatasetError, match="class id 3 is not in the label map"):
        read_tfrecord(path, label_map=pb)
    path, good = _one_record_file(tmp_path, **{"image/object/class/text": T.bytes_feature(["x"])})
    T.write_records(path, [good])
    with pytest.raises(DatasetError, match="class/text 'x' for id 1, the label map says 'cat'"):
        read_tfrecord(path, label_map=pb)
    pb.write_text("item { id: 1 name: 'a' }\nitem { id: 1 name: 'b' }\n")
    with pytest.raises(DatasetError, match="defined twice"):
        read_label_map(pb)


def test_extract_refuses_names_leaving_the_folder(tmp_path):
    path, good = _one_record_file(tmp_path, **{"image/filename": T.bytes_feature(["../../x.jpg"])})
    T.write_records(path, [good])
    ds = read_tfrecord(path)
    with pytest.raises(DatasetError, match="points outside the folder"):
        extract_images(ds, tmp_path / "out")
    path, good = _one_record_file(tmp_path, **{"image/filename": T.bytes_feature(["s/a.jpg"])})
    T.write_records(path, [good, good])
    ds = read_tfrecord(path)
    assert extract_images(ds, tmp_path / "out2") == 1
    assert sorted(os.listdir(tmp_path / "out2" / "s")) == ["a.jpg", "a_1.jpg"]
    assert open(ds.records[1].path, "rb").read() == JPEG


def test_converter_round_trip_coco_tfrecord_coco(tmp_path, coco):
    from detaug.cli.convert import main

    assert main([ANN, str(tmp_path / "tf"), "--from", "coco", "--to", "tfrecord",
                 "--num-shards", "3"]) == 0
    assert len([f for f in os.listdir(tmp_path / "tf") if f.endswith("-of-00003.tfrecord")]) == 3
    assert main([str(tmp_path / "tf"), str(tmp_path / "coco"), "--from", "tfrecord",
                 "--to", "coco"]) == 0
    back = read_coco(tmp_path / "coco" / "annotations.json", tmp_path / "coco" / "images")
    _same(coco, back)
    assert [os.path.basename(r.path) for r in back.records] != []
    leftovers = [f for f in os.listdir(tmp_path) if "detaug" in f]
    assert not leftovers  # the staged images are removed


def test_converter_voc_to_tfrecord_shifts_ids(tmp_path):
    from helpers import VOC
    from detaug.cli.convert import main

    assert main([VOC, str(tmp_path / "tf"), "--from", "voc", "--to", "tfrecord"]) == 0
    back = read_tfrecord(tmp_path / "tf", label_map=tmp_path / "tf" / "label_map.pbtxt")
    from readers import read_voc

    src = read_voc(VOC)
    assert back.category_ids == [i + 1 for i in src.category_ids]
    assert back.class_names == src.class_names
    for r, b in zip(src.records, back.records):
        np.testing.assert_allclose(b.boxes, r.boxes, atol=1e-4 * max(r.width, r.height))
        np.testing.assert_array_equal(b.labels, r.labels)
        np.testing.assert_array_equal(b.fields["difficult"], r.fields["difficult"])


def test_converter_bad_tfrecord_is_one_line(tmp_path, capsys):
    from detaug.cli.convert import main

    path = tmp_path / "src" / "b.tfrecord"
    path.parent.mkdir()
    path.write_bytes(b"\x05" + b"\x00" * 20)
    assert main([str(path), str(tmp_path / "out"), "--from", "tfrecord", "--to", "coco"]) == 2
    err = capsys.readouterr().err
    assert "b.tfrecord: byte offset 0: length CRC mismatch" in err and "Traceback" not in err
    assert main([str(tmp_path / "none*.tfrecord"), str(tmp_path / "o"), "--from", "tfrecord",
                 "--to", "coco"]) == 2


# ---- the pipeline source ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def shards(tmp_path_factory, coco):
    folder = tmp_path_factory.mktemp("tf")
    write_tfrecord(coco, folder, num_shards=2)
    return str(folder)


def _pipe(path, **kw):
    from detaug import fn, pipeline_def

    @pipeline_def
    def p():
        enc, boxes = fn.readers.tfrecord(path=path, **kw)
        return fn.decoders.image(enc), boxes

    return p


def test_fn_readers_tfrecord_matches_coco_reader(shards, coco):
    from helpers import track

    back = read_tfrecord(shards, label_map=os.path.join(shards, "label_map.pbtxt"))
    pipe = track(_pipe(shards)(batch_size=8, num_threads=1, seed=1))
    pipe.build()
    by_id = _by_id(coco)
    for b in range(len(pipe)):
        images, boxes = pipe.run()
        for k, s in enumerate(boxes.per_sample()):
            rec = back.records[(b * 8 + k) % len(back)]  # the last batch wraps around (fill)
            src = by_id[rec.image_id]
            assert images.data[k].shape[:2] == (src.height, src.width)
            np.testing.assert_allclose(s["boxes"], src.boxes, atol=1e-4 * src.width)
            np.testing.assert_array_equal(s["labels"], src.labels)


def test_fn_readers_tfrecord_shards_and_shuffle(shards):
    from helpers import track

    seen = []
    for sid in range(2):
        pipe = track(_pipe(shards, random_shuffle=True, shard_id=sid, num_shards=2)(
            batch_size=4, num_threads=1, seed=2))
        pipe.build()
        for _ in range(len(pipe)):
            _, boxes = pipe.run()
            seen += [len(s["boxes"]) for s in boxes.per_sample()]
    assert len(seen) >= 68


def test_record_corrupted_after_indexing_is_a_named_sample_error(tmp_path, coco):
    from helpers import track

    write_tfrecord(coco, tmp_path)
    file = tmp_path / "train-00000-of-00001.tfrecord"
    ds = read_tfrecord(file)
    loc = ds.records[1].extra["tfrecord_image"]
    pipe = track(_pipe(str(file))(batch_size=4, num_threads=1, seed=1))
    pipe.build()
    skip = track(_pipe(str(file))(batch_size=4, num_threads=1, seed=1, on_error="skip"))
    skip.build()
    with open(file, "r+b") as f:  # flip an image byte of record 1 after the index was built
        f.seek(loc[1] + 12 + loc[3] + 100)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(Exception, match=f"byte offset {loc[1]}: data CRC mismatch"):
        pipe.run()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        images, boxes = skip.run()
    assert len(images.data) == 4 and skip.stats["skipped"] >= 1


def test_image_label_output(tmp_path):
    from helpers import track

    exs = [T.serialize_example({"image/encoded": T.bytes_feature([JPEG]),
                                "image/class/label": T.int64_feature([k % 3])})
           for k in range(6)]
    T.write_records(tmp_path / "c.tfrecord", exs)
    pipe = track(_pipe(str(tmp_path / "c.tfrecord"), image_label="image/class/label")(
        batch_size=3, num_threads=1, seed=0))
    pipe.build()
    _, labels = pipe.run()
    assert np.asarray(labels).tolist() == [0, 1, 2]
    assert struct.calcsize("<Q") == 8
