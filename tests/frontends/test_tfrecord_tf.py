"""TFRecords against TensorFlow itself: files detaug writes are read by tf.data.TFRecordDataset and
tf.io.parse_single_example, files TensorFlow writes are read by detaug; the tf.data adapter in a
short model.fit and DetaugSequence under KERAS_BACKEND=tensorflow (in subprocesses: the suite's
backend is torch). Skipped where tensorflow is not installed (CI installs tensorflow-cpu)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import optional_module

tf = optional_module("tensorflow")  # imported where a test uses it
pytestmark = pytest.mark.xdist_group("tensorflow")  # one worker imports it (conftest: loadgroup)

from helpers import COCO, REPO  # noqa: E402
from readers import read_coco  # noqa: E402
from readers.tfrecord_od import image_bytes, read_tfrecord, write_tfrecord  # noqa: E402

ANN = os.path.join(COCO, "annotations.json")
IMAGES = os.path.join(COCO, "images")


def spec():
    """tf.io.parse_single_example's features for what write_tfrecord writes (a function: made
    where a test runs, so that collecting this file does not import TensorFlow)."""
    return {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
        "image/source_id": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64),
        "image/width": tf.io.FixedLenFeature([], tf.int64),
        **{f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32)
           for k in ("xmin", "ymin", "xmax", "ymax")},
        "image/object/class/label": tf.io.VarLenFeature(tf.int64),
        "image/object/class/text": tf.io.VarLenFeature(tf.string),
        "image/object/is_crowd": tf.io.VarLenFeature(tf.int64),
    }


def test_tensorflow_reads_what_detaug_writes(tmp_path):
    coco = read_coco(ANN, IMAGES)
    write_tfrecord(coco, tmp_path, num_shards=2)
    files = sorted(str(p) for p in tmp_path.glob("*.tfrecord"))
    got = {}
    for raw in tf.data.TFRecordDataset(files):  # TensorFlow checks the CRCs as it reads
        ex = tf.io.parse_single_example(raw, spec())
        got[int(ex["image/source_id"].numpy())] = ex
    assert len(got) == len(coco)
    for r in coco.records:
        ex = got[r.image_id]
        w, h = int(ex["image/width"]), int(ex["image/height"])
        assert (w, h) == (r.width, r.height)
        assert ex["image/encoded"].numpy() == open(r.path, "rb").read()
        assert ex["image/filename"].numpy().decode() == os.path.basename(r.path)
        boxes = np.stack([tf.sparse.to_dense(ex[f"image/object/bbox/{k}"]).numpy()
                          for k in ("xmin", "ymin", "xmax", "ymax")], 1) * [w, h, w, h]
        np.testing.assert_allclose(boxes.reshape(-1, 4), r.boxes, atol=1e-4 * max(w, h))
        ids = tf.sparse.to_dense(ex["image/object/class/label"]).numpy()
        assert ids.tolist() == [coco.category_ids[i] for i in r.labels]
        texts = [t.decode() for t in tf.sparse.to_dense(ex["image/object/class/text"]).numpy()]
        assert texts == [coco.class_names[i] for i in r.labels]
        crowd = tf.sparse.to_dense(ex["image/object/is_crowd"]).numpy()
        np.testing.assert_array_equal(crowd, r.fields["iscrowd"])


def test_detaug_reads_what_tensorflow_writes(tmp_path, rng):
    """Random records written with tf.train.Example and tf.io.TFRecordWriter."""
    jpeg = open(os.path.join(IMAGES, sorted(os.listdir(IMAGES))[1]), "rb").read()
    names = {1: "cat", 2: "dog", 5: "bird"}
    want = []
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for k in range(12):
            n = int(rng.integers(0, 6))
            w, h = int(rng.integers(10, 2000)), int(rng.integers(10, 2000))
            lo = rng.uniform(0, 0.6, (n, 2))
            hi = lo + rng.uniform(0.05, 0.4, (n, 2))
            ids = rng.choice([1, 2, 5], n)
            f = tf.train.Feature
            feats = {
                "image/encoded": f(bytes_list=tf.train.BytesList(value=[jpeg])),
                "image/filename": f(bytes_list=tf.train.BytesList(value=[f"{k}.jpg".encode()])),
                "image/source_id": f(bytes_list=tf.train.BytesList(value=[str(k).encode()])),
                "image/width": f(int64_list=tf.train.Int64List(value=[w])),
                "image/height": f(int64_list=tf.train.Int64List(value=[h])),
                "image/object/bbox/xmin": f(float_list=tf.train.FloatList(value=lo[:, 0])),
                "image/object/bbox/ymin": f(float_list=tf.train.FloatList(value=lo[:, 1])),
                "image/object/bbox/xmax": f(float_list=tf.train.FloatList(value=hi[:, 0])),
                "image/object/bbox/ymax": f(float_list=tf.train.FloatList(value=hi[:, 1])),
                "image/object/class/label": f(int64_list=tf.train.Int64List(value=ids)),
                "image/object/class/text": f(bytes_list=tf.train.BytesList(
                    value=[names[i].encode() for i in ids])),
            }
            ex = tf.train.Example(features=tf.train.Features(feature=feats))
            writer.write(ex.SerializeToString())
            b = np.concatenate([lo, hi], 1).astype(np.float32).astype(np.float64)
            want.append((w, h, np.clip(b * [w, h, w, h], 0, [w, h, w, h]), ids))
    ds = read_tfrecord(path, label_map=names)
    assert ds.category_ids == [1, 2, 5] and ds.class_names == ["cat", "dog", "bird"]
    index = {1: 0, 2: 1, 5: 2}
    for k, (r, (w, h, boxes, ids)) in enumerate(zip(ds.records, want)):
        assert r.image_id == k and (r.width, r.height) == (w, h)
        np.testing.assert_allclose(r.boxes, boxes.reshape(-1, 4), rtol=1e-6, atol=1e-4)
        assert r.labels.tolist() == [index[i] for i in ids]
        assert image_bytes(r) == jpeg


FIT = r"""
import os, sys, numpy as np
os.environ["KERAS_BACKEND"] = "tensorflow"
sys.path.insert(0, {repo!r}); sys.path.insert(0, os.path.join({repo!r}, "tests"))
import keras, tensorflow as tf
from detaug import fn, pipeline_def
from detaug.adapters.tf import to_tf_dataset
from detaug.adapters.keras import DetaugSequence
from readers import read_coco
from readers.tfrecord_od import write_tfrecord
assert keras.backend.backend() == "tensorflow"
write_tfrecord(read_coco({ann!r}, {images!r}), {out!r}, num_shards=2)

@pipeline_def
def pipe():
    enc, boxes = fn.readers.tfrecord(path={out!r}, random_shuffle=True)
    img = fn.decoders.image(enc)
    img, boxes = fn.letterbox(img, boxes, size=(32, 32))
    return fn.normalize(img, mean=0, std=255), boxes

def model():
    m = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(4, 3),
                          keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1)])
    m.compile("sgd", "mse")
    return m

p = pipe(batch_size=8, num_threads=1, seed=4)
ds = to_tf_dataset(p, x="images", y="counts", max_boxes=40)
spec = ds.element_spec
assert spec[0].shape.as_list() == [None, 32, 32, 3] and spec[1].dtype == tf.int32, spec
full = to_tf_dataset(p, max_boxes=40).element_spec[1]
assert full["boxes"].shape.as_list() == [None, 40, 4] and full["labels"].dtype == tf.int64
# pass k of the dataset is pipeline epoch k: compare with run_batch
first = [(x.numpy(), y.numpy()) for x, y in ds.take(2)]
x0, y0 = first[0]
ref = p.run_batch(0, epoch=p.epoch)
assert np.array_equal(x0, np.stack([np.asarray(a) for a in ref[0].data])), "batch 0 differs"
second = [(x.numpy(), y.numpy()) for x, y in ds.take(1)]
assert not np.array_equal(second[0][0], x0), "the second pass repeats the first epoch"
h = model().fit(ds.prefetch(2), epochs=2, verbose=0)
assert len(h.history["loss"]) == 2 and np.isfinite(h.history["loss"]).all()
seq = DetaugSequence(pipe(batch_size=8, num_threads=1, seed=4), x="images", y="counts",
                     max_boxes=40, max_batches=3)
h2 = model().fit(seq, epochs=2, verbose=0)
assert len(h2.history["loss"]) == 2 and np.isfinite(h2.history["loss"]).all()
print("OK", h.history["loss"], h2.history["loss"], flush=True)
# the example as a user runs it, in this process: TensorFlow and keras are imported once
import runpy
sys.argv = ["tf_keras_classification.py", "--epochs", "2", "--batches", "2"]
os.chdir({repo!r})
sys.path.insert(0, os.path.join({repo!r}, "examples"))  # as `python examples/...py` puts it
runpy.run_path(os.path.join({repo!r}, "examples", "tf_keras_classification.py"), run_name="__main__")
"""


def test_tf_dataset_sequence_and_example_fit_under_tensorflow_backend(tmp_path, coco_small):
    """One subprocess under KERAS_BACKEND=tensorflow (importing TensorFlow and keras is most of
    its time): the tf.data adapter and DetaugSequence fit, then examples/tf_keras_classification.py
    runs as ``__main__`` with its command line. The records are the COCO sample at 1/8 size
    (conftest.coco_small): the model sees 32 x 32 either way, and the two fits decoded and
    warped some 250 full-size photographs."""
    code = FIT.format(repo=REPO, ann=os.path.join(coco_small, "annotations.json"),
                      images=os.path.join(coco_small, "images"), out=str(tmp_path / "tf"))
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=600)
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr[-3000:]
    assert "backend tensorflow: loss per epoch" in res.stdout, res.stdout
    losses = [float(v) for v in res.stdout.split("loss per epoch")[1].split()]
    assert len(losses) == 2 and all(np.isfinite(losses))


def test_import_detaug_imports_no_tensorflow():
    code = ("import sys, detaug, detaug.adapters.tf, readers; "
            "assert 'tensorflow' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
