"""readers.tfrecord_example, the reference decode of an Object Detection API record: image ids
(canonical decimals only), a hand-made shard's rows (boxes scaled to pixels, ids, flags, the
image's place in the file, features the layout does not model kept as written), and each fault
sent to the sink naming the file, byte offset and feature; a class named twice differently is
refused by name."""
import numpy as np
import pytest

from readers.errors import DatasetError
from readers.tfrecord import bytes_feature, float_feature, frame, int64_feature, serialize_example
from readers.tfrecord_example import image_id, reference_rows


class Sink:
    def __init__(self):
        self.faults = []

    def fault(self, file, reason):
        self.faults.append((str(file), reason))


def example(boxes, ids, texts=None, w=40, h=20, name="a.jpg", source_id="7", **extra):
    b = np.asarray(boxes, np.float64).reshape(-1, 4) / [max(w, 1), h, max(w, 1), h]
    feats = {"image/encoded": bytes_feature([b"\xff\xd8\xffJPEGDATA"]),
             "image/filename": bytes_feature([name]), "image/source_id": bytes_feature([source_id]),
             "image/width": int64_feature([w]), "image/height": int64_feature([h])}
    for j, k in enumerate(("xmin", "ymin", "xmax", "ymax")):
        feats[f"image/object/bbox/{k}"] = float_feature(b[:, j])
    feats["image/object/class/label"] = int64_feature(ids)
    if texts is not None:
        feats["image/object/class/text"] = bytes_feature(texts)
    feats.update(extra)
    return serialize_example(feats)


def shard(tmp_path, *examples):
    path = tmp_path / "s.tfrecord"
    path.write_bytes(b"".join(frame(e) for e in examples))
    return str(path)


@pytest.mark.parametrize("given,want", [("7", 7), ("0", 0), ("007", "007"), ("\u0667", "\u0667"),
                                        ("-3", "-3"), ("img_1", "img_1"), ("", None), (None, None),
                                        (str(2**63), str(2**63)), (str(2**63 - 1), 2**63 - 1)])
def test_image_id_is_an_int_only_for_a_canonical_decimal(given, want):
    got = image_id(given)
    assert got == want and type(got) is type(want)


def test_reference_rows_decode_a_hand_made_shard(tmp_path):
    e1 = example([[4, 2, 20, 10], [0, 0, 40, 20]], [1, 3], [b"cat", b"dog"],
                 **{"image/object/difficult": int64_feature([0, 1]),
                    "image/class/label": int64_feature([5]), "my/note": bytes_feature([b"x"])})
    e2 = example([], [], w=8, h=6, name="/sub/b.png", source_id="b-01")
    file = shard(tmp_path, e1, e2)
    sink = Sink()
    rows, names, clipped = reference_rows([file], None, sink, "raise")
    assert sink.faults == [] and clipped == 0 and names == {1: "cat", 3: "dog"}
    r1, r2 = rows
    assert r1["path"] == f"{file}/a.jpg" and (r1["width"], r1["height"]) == (40, 20)
    np.testing.assert_allclose(r1["boxes"], [[4, 2, 20, 10], [0, 0, 40, 20]], atol=1e-4)
    assert r1["ids"].tolist() == [1, 3] and r1["image_id"] == 7
    assert r1["fields"]["difficult"].tolist() == [0, 1] and r1["fields"]["difficult"].dtype == np.uint8
    f, offset, length, start, stop = r1["extra"]["tfrecord_image"]
    assert (f, offset, length) == (file, 0, len(e1))
    assert e1[start:stop] == b"\xff\xd8\xffJPEGDATA"
    assert r1["extra"]["tfrecord_features"] == {"image/class/label": [5], "my/note": [b"x"]}
    assert r2["path"] == f"{file}/sub/b.png" and r2["image_id"] == "b-01"
    assert r2["boxes"].shape == (0, 4) and r2["extra"]["tfrecord_image"][1] == len(frame(e1))


@pytest.mark.parametrize("bad,fault", [
    (example([[1, 1, 5, 5]], [-2]), "image/object/class/label holds the negative id -2"),
    (example([[1, 1, 5, 5], [2, 2, 6, 6]], [1]), "per-box features differ in length"),
    (example([[1, 1, 5, 5]], [1], **{"image/object/is_crowd": int64_feature([2])}),
     "image/object/is_crowd holds [2], not 0 or 1"),
    (example([[1, 1, 5, 5]], [1], w=0), "image/width x image/height is 0 x 20"),
    (example([[1, 1, 5, 5]], [1], **{"image/format": bytes_feature([b"a", b"b"])}),
     "image/format holds 2 values, not 1"),
    (b"\x0a\x05garbage", "malformed tf.train.Example"),
])
def test_a_bad_record_is_a_fault_naming_file_offset_and_feature(tmp_path, bad, fault):
    good = example([[1, 1, 5, 5]], [1])
    file = shard(tmp_path, good, bad, good)
    sink = Sink()
    rows, _, _ = reference_rows([file], None, sink, "skip")
    assert len(rows) == 2 and [r["extra"]["tfrecord_image"][1] for r in rows] == \
        [0, len(frame(good)) + len(frame(bad))]
    ((f, reason),) = sink.faults
    assert f == file and reason.startswith(f"byte offset {len(frame(good))}") and fault in reason


def test_label_map_and_class_names_are_checked(tmp_path):
    file = shard(tmp_path, example([[1, 1, 5, 5]], [1], [b"cat"]), example([[1, 1, 5, 5]], [2]))
    sink = Sink()
    rows, names, _ = reference_rows([file], {1: "cat"}, sink, "skip")
    assert len(rows) == 1 and names == {1: "cat"}
    assert "class id 2 is not in the label map" in sink.faults[0][1]
    file = shard(tmp_path, example([[1, 1, 5, 5]], [1], [b"cat"]),
                 example([[1, 1, 5, 5]], [1], [b"dog"]))
    with pytest.raises(DatasetError, match="class id 1 is named 'dog' here and 'cat' before"):
        reference_rows([file], None, Sink(), "raise")


def test_a_corrupt_frame_is_a_fault_and_progress_is_reported(tmp_path):
    good = example([[1, 1, 5, 5]], [1])
    raw = bytearray(frame(good) * 2)
    raw[len(frame(good)) + 14] ^= 0xFF  # a byte of the second record's data: its CRC fails
    file = tmp_path / "c.tfrecord"
    file.write_bytes(bytes(raw))
    sink, seen = Sink(), []
    rows, _, _ = reference_rows([str(file)], None, sink, "skip",
                                progress=lambda k, n: seen.append((k, n)))
    assert len(rows) == 1 and seen == [(1, 1)]
    assert len(sink.faults) == 1 and sink.faults[0][0] == str(file)
