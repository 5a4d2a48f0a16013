"""detaug.ops.tfrecord (fn.readers.tfrecord) on hand-made shards: each sample's image bytes as
written and its boxes in pixels with their labels, the per-image label of image_label=, the label
map found beside the files (one folder only), a record changed after the index was built as a
sample error naming the file and byte offset (skipped and counted under on_error='skip'), and the
refusals naming the op, the file and the fault."""
import io

import numpy as np
import pytest
from PIL import Image

from detaug import Pipeline, fn
from detaug.core.errors import SampleError
from detaug.ops import tfrecord as TR
from readers.errors import DatasetError
from readers.tfrecord import bytes_feature, float_feature, frame, int64_feature, serialize_example

from helpers import boxes_of, images_of


@pytest.fixture(autouse=True)
def no_index_cache(monkeypatch):
    monkeypatch.setenv("DETAUG_TFRECORD_INDEX_CACHE", "0")


def png(rgb):
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG")
    return buf.getvalue()


def example(image, boxes, ids, **extra):
    h, w = image.shape[:2]
    b = np.asarray(boxes, np.float64).reshape(-1, 4) / [w, h, w, h]
    feats = {"image/encoded": bytes_feature([png(image)]), "image/format": bytes_feature([b"png"]),
             "image/width": int64_feature([w]), "image/height": int64_feature([h]),
             "image/object/class/label": int64_feature(ids), **extra}
    for j, k in enumerate(("xmin", "ymin", "xmax", "ymax")):
        feats[f"image/object/bbox/{k}"] = float_feature(b[:, j])
    return serialize_example(feats)


def make(tmp_path, rng, n=3):
    imgs = [rng.integers(0, 256, (int(rng.integers(4, 12)), int(rng.integers(4, 12)), 3), np.uint8)
            for _ in range(n)]
    boxes = [np.array([[0, 0, 2, 3], [1, 1, 4, 4], [2, 0, 3, 4]][:k + 1], np.float32) for k in range(n)]
    ids = [list(range(1, k + 2)) for k in range(n)]
    recs = [example(im, b, i, **{"image/class/label": int64_feature([10 + k])})
            for k, (im, b, i) in enumerate(zip(imgs, boxes, ids))]
    path = tmp_path / "d.tfrecord"
    path.write_bytes(b"".join(frame(r) for r in recs))
    return str(path), imgs, boxes, ids, recs


def run(path, n, **kw):
    pipe = Pipeline(batch_size=n, num_threads=1, seed=0, on_error=kw.pop("on_error", "raise"))
    with pipe:
        enc, second = fn.readers.tfrecord(path=path, random_shuffle=False, **kw)
        pipe.set_outputs(enc, fn.decoders.image(enc), second)
    try:
        return pipe, pipe.run()
    finally:
        pipe.close()


def test_images_boxes_and_labels_as_written(tmp_path, rng):
    path, imgs, boxes, ids, recs = make(tmp_path, rng)
    _, (enc, dec, bx) = run(path, 3)
    for k, (e, got) in enumerate(zip(enc.data, images_of(dec), strict=True)):
        assert bytes(np.asarray(e)) == png(imgs[k])
        np.testing.assert_array_equal(got, imgs[k])
    for k, got in enumerate(boxes_of(bx)):  # ids 1, 2, 3 are classes 0, 1, 2 (no label map)
        np.testing.assert_allclose(got["boxes"], boxes[k], atol=1e-4)
        assert np.asarray(got["labels"]).tolist() == [i - 1 for i in ids[k]]
    assert np.asarray(bx.offsets).tolist() == [0, 1, 3, 6]


def test_image_label_gives_the_per_image_int64(tmp_path, rng):
    path, *_ = make(tmp_path, rng)
    _, (_, _, labels) = run(path, 3, image_label="image/class/label")
    assert np.asarray(labels).tolist() == [10, 11, 12] and np.asarray(labels).dtype == np.int64
    with pytest.raises(DatasetError, match=r"d.tfrecord.*byte offset 0: image_label='image/nothing' "
                                           r"needs one int64 value per record"):
        run(path, 3, image_label="image/nothing")


def test_label_map_beside_the_files(tmp_path, rng):
    path, *_ = make(tmp_path, rng)
    assert TR._label_map_beside(path) is None
    (tmp_path / "label_map.pbtxt").write_text("item { id: 1 name: 'cat' }\nitem { id: 2 name: 'dog' }\n")
    assert TR._label_map_beside(path) == str(tmp_path / "label_map.pbtxt")
    other = tmp_path / "o"
    other.mkdir()
    (other / "e.tfrecord").write_bytes((tmp_path / "d.tfrecord").read_bytes())
    assert TR._label_map_beside([path, str(other / "e.tfrecord")]) is None  # two folders


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_record_changed_after_indexing_is_a_sample_error(tmp_path, rng, on_error):
    path, imgs, boxes, ids, recs = make(tmp_path, rng)
    pipe = Pipeline(batch_size=3, num_threads=1, seed=0, on_error=on_error)
    with pipe:
        enc, _ = fn.readers.tfrecord(path=path, random_shuffle=False)
        pipe.set_outputs(fn.decoders.image(enc))
    pipe.build()
    raw = bytearray(open(path, "rb").read())
    second = len(frame(recs[0]))
    raw[second + 12 + len(recs[1]) // 2] ^= 0xFF
    open(path, "wb").write(bytes(raw))
    if on_error == "raise":
        with pytest.raises(SampleError, match=rf"d.tfrecord.*{second}"):
            pipe.run()
    else:
        with pytest.warns(UserWarning, match="skipping"):
            (dec,) = pipe.run()
        for got, k in zip(images_of(dec), [0, 2, 2], strict=True):  # record 1 replaced by 2
            np.testing.assert_array_equal(got, imgs[k])
        assert pipe.stats["skipped"] == 1
    pipe.close()


def test_refusals(tmp_path):
    with pytest.raises(ValueError, match=r"readers.tfrecord\w*: path= is required"):
        run(None, 1)
