"""Keras adapter: DetaugSequence fits a model with thread workers; random access is order- and
thread-independent within an epoch; on_epoch_end moves on; boxes come padded with counts."""
import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import concurrent.futures as cf
import subprocess
import sys

import numpy as np
import pytest

from helpers import optional_module

keras = optional_module("keras")  # imported where a test uses it

from detaug import fn, pipeline_def  # noqa: E402
from helpers import REPO, VOC  # noqa: E402

from helpers import close_pipelines, track  # noqa: E402,F401  (an autouse fixture)
from helpers.cases import NUM_CLASSES, _assert_same, _flat, voc_pipe


ROOT = {"voc": VOC}


@pytest.fixture(autouse=True)
def _small_images(voc_small):
    """The sequences read the VOC sample at 1/8 size (conftest.voc_small): the same records,
    boxes and fields; the outputs are 64 x 64 (128 x 128) either way, and these tests compare
    batches with each other and with the pipeline, so full-size photographs only cost warp time."""
    ROOT["voc"] = voc_small


def _sequence(**kw):
    from detaug.adapters.keras import DetaugSequence

    pipe_kw = {k: kw.pop(k) for k in ("batch_size", "seed", "encode", "num_threads") if k in kw}
    pipe = track(voc_pipe(ROOT["voc"], **{"batch_size": 8, "seed": 3, "num_threads": 2, **pipe_kw}))
    return pipe, DetaugSequence(pipe, **kw)


def test_import_does_not_import_keras():
    code = ("import sys, detaug, detaug.adapters.keras; "
            "assert 'keras' not in sys.modules, 'keras imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_len_is_batches_per_epoch():
    pipe, seq = _sequence(batch_size=8)
    assert len(seq) == len(pipe) == 5 and seq.num_batches == 5
    _, seq16 = _sequence(batch_size=16)
    assert len(seq16) == 3  # 40 records, last batch filled (the pipeline's policy)
    with pytest.raises(IndexError):
        seq16[3]
    _assert_same(seq16[-1], seq16[2])


def test_fit_one_epoch_with_thread_workers():
    """A tiny model trained on the RetinaNet class targets, reduced to 'which classes are in the
    image' inside the loss (keras.ops), with two Keras thread workers."""
    _, seq = _sequence(batch_size=8, encode=True, output_map=("images", "classification"),
                       workers=2, use_multiprocessing=False, max_queue_size=4)
    x, y = _sequence(batch_size=8, encode=True, output_map=("images", "classification"))[1][0]
    assert x.shape == (8, 64, 64, 3) and x.dtype == np.float32
    assert y.shape[0] == 8 and y.shape[2] == NUM_CLASSES + 1

    def presence_loss(y_true, y_pred):
        present = keras.ops.max(y_true[..., :NUM_CLASSES], axis=1)  # (B, C) from (B, A, C + 1)
        return keras.ops.mean(keras.losses.binary_crossentropy(present, y_pred, from_logits=True))

    model = keras.Sequential([keras.Input((64, 64, 3)),
                              keras.layers.Conv2D(4, 3, strides=4, activation="relu"),
                              keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(NUM_CLASSES)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=presence_loss)
    hist = model.fit(seq, epochs=2, verbose=0)
    loss = hist.history["loss"]
    assert len(loss) == 2 and np.isfinite(loss).all() and min(loss) > 0
    # fit calls on_epoch_end after peeking at the data and after each epoch
    assert seq.epoch == 3


def test_random_access_in_any_order_and_thread_gives_the_same_batches(rng):
    _, seq = _sequence(batch_size=8, output_map=("images", "boxes"))
    n = len(seq)
    in_order = [seq[i] for i in range(n)]
    order = rng.permutation(n).tolist() * 2
    with cf.ThreadPoolExecutor(3) as pool:  # as Keras' thread workers call it
        shuffled = list(pool.map(lambda i: (i, seq[i]), order))
    for i, batch in shuffled:
        _assert_same(batch, in_order[i])
    # a fresh sequence over a fresh pipeline with the same seed agrees too (nothing cached)
    _, again = _sequence(batch_size=8, output_map=("images", "boxes"))
    _assert_same(again[3], in_order[3])

    seq.on_epoch_end()
    moved = [seq[i] for i in range(n)]
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(moved, in_order))
    _assert_same(seq[1], moved[1])


def test_epochs_shuffle_false_keeps_epochs_identical():
    _, seq = _sequence(batch_size=8, output_map=("images", "boxes"), epochs_shuffle=False)
    first = seq[2]
    seq.on_epoch_end()
    _assert_same(seq[2], first)


def test_boxes_are_padded_with_counts_and_match_the_pipeline():
    pipe, seq = _sequence(batch_size=8, output_map=("images", "boxes"))
    x, y = seq[1]
    ref = pipe.run_batch(1, epoch=seq.epoch)[1].per_sample()
    assert set(y) >= {"boxes", "labels", "counts", "difficult", "truncated"}
    assert y["boxes"].shape == (8, max(len(r["boxes"]) for r in ref), 4)
    np.testing.assert_array_equal(y["counts"], [len(r["boxes"]) for r in ref])
    for s, r in enumerate(ref):
        c = len(r["boxes"])
        np.testing.assert_array_equal(y["boxes"][s, :c], r["boxes"])
        np.testing.assert_array_equal(y["labels"][s, :c], r["labels"])
        assert (y["labels"][s, c:] == -1).all() and (y["boxes"][s, c:] == 0).all()
    _, fixed = _sequence(batch_size=8, output_map=("images", "boxes"), max_boxes=12)
    assert fixed[1][1]["boxes"].shape == (8, 12, 4)


def test_batches_are_fresh_copies():
    _, seq = _sequence(batch_size=8, output_map=("images", "boxes"))
    a = seq[0]
    keep = [v.copy() for v in _flat(a)]
    for v in _flat(a):
        v[...] = 0  # writeable, and owned by the caller
    for u, v in zip(keep, _flat(seq[0])):
        np.testing.assert_array_equal(u, v)


def test_retinanet_targets_tuple_dict_and_backend_tensors():
    from detaug.adapters.keras import DetaugSequence

    @pipeline_def(batch_size=4, num_threads=1, seed=0)
    def rn(root):
        enc, boxes = fn.readers.voc(root=root)
        img = fn.decoders.image(enc)
        img, boxes = fn.letterbox(img, boxes, size=(128, 128), center=False)
        reg, cls = fn.retinanet_encode(boxes, num_classes=NUM_CLASSES)
        return fn.normalize(img, mean=0, std=255), reg, cls

    names = ("images", "regression", "classification")
    pipe = track(rn(ROOT["voc"]))
    x, y = DetaugSequence(pipe, output_map=names)[0]
    assert isinstance(y, tuple) and y[0].shape[-1] == 5 and y[1].shape[-1] == NUM_CLASSES + 1
    _, yd = DetaugSequence(pipe, output_map=names, targets_format="dict")[0]
    assert set(yd) == {"regression", "classification"}
    np.testing.assert_array_equal(yd["classification"], y[1])
    xt, yt = DetaugSequence(pipe, output_map=names, backend_tensors=True)[0]
    assert keras.ops.is_tensor(xt) and all(keras.ops.is_tensor(t) for t in yt)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(yt[0]), y[0])
    with pytest.raises(ValueError, match="output_map"):
        DetaugSequence(pipe, output_map=("images", "targets"))[0]


def test_process_workers_rebuild_the_pipeline():
    """use_multiprocessing: each worker process rebuilds the pipeline from serialize()."""
    pipe, seq = _sequence(batch_size=8, output_map=("images", "boxes"), workers=2,
                          use_multiprocessing=True)
    expected = [seq[i] for i in range(len(seq))]
    import pickle

    clone = pickle.loads(pickle.dumps(seq))  # what a spawned worker receives
    track(clone.pipeline)
    for i in (4, 0, 2):
        _assert_same(clone[i], expected[i])

    # forked workers (Linux's default): the parent's pipeline already has live thread pools
    _, seq = _sequence(batch_size=8, encode=True, output_map=("images", "classification"),
                       workers=2, use_multiprocessing=True, max_batches=2)
    model = keras.Sequential([keras.Input((64, 64, 3)), keras.layers.Conv2D(4, 3, strides=4),
                              keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(NUM_CLASSES)])
    model.compile(optimizer="sgd",
                  loss=lambda t, p: keras.ops.mean((p - t[:, 0, :NUM_CLASSES]) ** 2))
    assert np.isfinite(model.fit(seq, epochs=1, verbose=0).history["loss"]).all()


def test_a_bad_selection_name_is_reported_when_the_sequence_is_made():
    """y='nmae' is refused when DetaugSequence(...) is made, not at the first batch."""
    with pytest.raises(ValueError, match="y='nmae' is not an output of this pipeline"):
        _sequence(output_map=("images", "boxes"), x="images", y="nmae")
    with pytest.raises(ValueError, match="x='boxes.nope' is not an output"):
        _sequence(output_map=("images", "boxes"), x="boxes.nope", y="images")
    _, seq = _sequence(output_map=("images", "boxes"), x="images", y=("boxes.boxes", "labels"))
    x, (b, lab) = seq[0]
    assert x.shape[0] == b.shape[0] == lab.shape[0] == 8
