"""Keras adapter: targets chosen by name, and the same batches for any number of thread workers,
across epoch ends (each batch is exactly ``run_batch(i, epoch=e)`` for the epoch it was asked
in)."""
import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import numpy as np
import pytest

from helpers import optional_module

keras = optional_module("keras")  # imported where a test uses it

from helpers import VOC  # noqa: E402
from helpers import close_pipelines, track  # noqa: E402,F401  (an autouse fixture)
from helpers.cases import _assert_same, voc_pipe  # noqa: E402

M = 12  # boxes per sample (padding)
ROOT = {"voc": VOC}


@pytest.fixture(autouse=True)
def _small_images(voc_small):
    """The sequences read the VOC sample at 1/8 size (conftest.voc_small): the same records,
    boxes and fields; the pipeline's output is 64 x 64 either way, and these tests compare
    batches with each other, so the full-size photographs only cost warp time."""
    ROOT["voc"] = voc_small


def _seq(cls=None, **kw):  # output_map: the default ("images", "targets")
    from detaug.adapters.keras import DetaugSequence

    pipe = track(voc_pipe(ROOT["voc"], batch_size=8, seed=3, num_threads=2))
    kw.setdefault("max_boxes", M)
    return pipe, (cls or DetaugSequence)(pipe, **kw)


def _trunk():
    inp = keras.Input((64, 64, 3), name="images")
    h = keras.layers.Conv2D(4, 3, strides=4, activation="relu")(inp)
    return inp, keras.layers.GlobalAveragePooling2D()(h)


def _mse(t, p):
    t = keras.ops.cast(t, "float32")
    return keras.ops.mean((keras.ops.reshape(t, keras.ops.shape(p)) - p) ** 2)


def _boxes_head(h, name=None):
    return keras.layers.Reshape((M, 4), name=name)(keras.layers.Dense(M * 4)(h))


def _fit(seq, model, loss, epochs=1, **kw):
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss)
    hist = model.fit(seq, epochs=epochs, verbose=0, **kw).history["loss"]
    assert len(hist) == epochs and np.isfinite(hist).all()
    return hist


# ---- target selection ---------------------------------------------------------------------------
def test_single_name_feeds_a_model_with_one_boxes_output():
    _, seq = _seq(x="images", y="boxes", max_batches=2)
    x, y = seq[0]
    assert x.shape == (8, 64, 64, 3) and isinstance(y, np.ndarray) and y.shape == (8, M, 4)
    inp, h = _trunk()
    _fit(seq, keras.Model(inp, _boxes_head(h)), _mse)


def test_tuple_of_names_gives_a_tuple_and_drops_the_rest():
    _, seq = _seq(x="images", y=("boxes", "labels"), max_batches=2)
    _, y = seq[0]
    assert isinstance(y, tuple) and y[0].shape == (8, M, 4) and y[1].shape == (8, M)
    full = _seq()[1][0][1]  # the default: the dict of padded arrays
    np.testing.assert_array_equal(y[1], full["labels"])
    assert set(full) >= {"boxes", "labels", "counts", "difficult", "truncated"}
    _, qualified = _seq(y=("targets.boxes", "targets.labels"))[1][0]
    _assert_same(qualified, y)
    inp, h = _trunk()
    model = keras.Model(inp, [_boxes_head(h), keras.layers.Dense(M)(h)])
    _fit(seq, model, [_mse, _mse])


def test_dict_maps_keras_output_names():
    _, seq = _seq(y={"b": "boxes", "n": "counts"}, max_batches=2)
    _, y = seq[0]
    assert set(y) == {"b", "n"} and y["n"].shape == (8,)
    inp, h = _trunk()
    model = keras.Model(inp, {"b": _boxes_head(h, "b"), "n": keras.layers.Dense(1, name="n")(h)})
    _fit(seq, model, {"b": _mse, "n": _mse})


def test_callable_target():
    _, seq = _seq(y=lambda out: out["targets"]["counts"].astype(np.float32), max_batches=2)
    _, y = seq[0]
    assert y.shape == (8,) and y.dtype == np.float32
    inp, h = _trunk()
    _fit(seq, keras.Model(inp, keras.layers.Dense(1)(h)), _mse)


def test_unknown_names_raise_and_list_the_available_ones():
    # (when the sequence is made, not at its first batch)
    for kw in ({"y": "nope"}, {"y": ("boxes", "nope")}, {"x": "image"}, {"y": {"a": "nope"}}):
        with pytest.raises(ValueError, match=r"not an output.*available.*'boxes'.*'images'"):
            _seq(**kw)


# ---- epochs and workers -------------------------------------------------------------------------
def _recording(log):
    from detaug.adapters.keras import DetaugSequence

    class Recording(DetaugSequence):
        def __getitem__(self, i):
            xy = super().__getitem__(i)
            log.append((self.epoch, int(i), xy))
            return xy

    return Recording


_ONE_WORKER = {}  # shuffle -> (log, loss, batches per epoch) of the one-worker reference fit


def _one_worker_fit(shuffle):
    """The one-worker fit, made once a module run (deterministic: seed 3, keras seed 0)."""
    if shuffle not in _ONE_WORKER:
        _, seq, log, loss = _fit_recorded(1, shuffle)
        _ONE_WORKER[shuffle] = log, loss, len(seq)
    return _ONE_WORKER[shuffle]


def _fit_recorded(workers, shuffle, processes=False):
    log = []
    pipe, seq = _seq(_recording(log), y="boxes", workers=workers, use_multiprocessing=processes)
    keras.utils.set_random_seed(0)
    inp, h = _trunk()
    loss = _fit(seq, keras.Model(inp, _boxes_head(h)), _mse, epochs=2, shuffle=shuffle)
    return pipe, seq, log, loss


@pytest.mark.parametrize("shuffle", [False, True])
def test_workers_1_and_2_train_on_the_same_batches_across_epochs(shuffle):
    log1, loss1, n = _one_worker_fit(shuffle)
    pipe2, seq2, log2, loss2 = _fit_recorded(2, shuffle)
    assert seq2.workers == 1 and seq2.thread_workers == 2  # Keras' enqueuer is not used
    # fit: one peeked batch of epoch 0, then epochs 1 and 2, every batch once, nothing else
    for log in (log1, log2):
        assert [e for e, _, _ in log] == [0] + [1] * n + [2] * n
        for e in (1, 2):
            assert sorted(i for ep, i, _ in log if ep == e) == list(range(n))
    assert [(e, i) for e, i, _ in log1] == [(e, i) for e, i, _ in log2]
    if not shuffle:
        assert [i for _, i, _ in log1[1:]] == list(range(n)) * 2
    for (e, i, a), (_, _, b) in zip(log1, log2):
        _assert_same(a, b)
        _assert_same(b, seq2.get_batch(i, epoch=e))  # exactly that batch of that epoch
        ref = pipe2.run_batch(i, epoch=e)[1].per_sample()
        np.testing.assert_array_equal(b[1][:, 0], np.stack([
            r["boxes"][0] if len(r["boxes"]) else np.zeros(4, np.float32) for r in ref]))
    assert loss1 == loss2


def test_process_workers_train_on_the_same_batches_as_one_worker_across_epochs():
    """use_multiprocessing=True, workers=2: the sequence's own processes compute batches ahead
    (Keras sees one worker, no processes), and fit trains on exactly the batches and in the
    order one worker gives, over two epochs, with the same losses."""
    import concurrent.futures as cf

    log1, loss1, n = _one_worker_fit(False)
    pipe2, seq2, log2, loss2 = _fit_recorded(2, False, processes=True)
    try:
        assert seq2.workers == 1 and seq2.use_multiprocessing is False
        assert seq2.process_workers == 2 and seq2.thread_workers == 0
        assert isinstance(seq2._ahead_pool, cf.ProcessPoolExecutor)
        assert len(seq2._ahead_pool._processes) == 2  # the batches ahead came from them
        assert [(e, i) for e, i, _ in log2] == [(e, i) for e, i, _ in log1] \
            == [(0, 0)] + [(e, i) for e in (1, 2) for i in range(n)]
        for (e, i, a), (_, _, b) in zip(log1, log2, strict=True):
            _assert_same(a, b)
            _assert_same(b, seq2.get_batch(i, epoch=e))  # exactly that batch of that epoch
        assert loss1 == loss2
    finally:
        seq2.close()
    assert seq2._ahead_pool is None


def test_process_workers_hand_out_batches_of_the_epoch_asked_for():
    """Batches computed ahead in a process are keyed by epoch: after on_epoch_end the ones of
    the old epoch are dropped, and seq[i] is run_batch(i, epoch=seq.epoch) in any case."""
    pipe, seq = _seq(workers=2, use_multiprocessing=True)
    try:
        e = seq.epoch
        first = seq[0]  # submits 1 and 2 of epoch e to the processes
        assert sorted(seq._ahead) == [(e, 1), (e, 2)]
        _assert_same(seq[1], seq.get_batch(1, epoch=e))  # from a process, same as computed here
        seq.on_epoch_end()
        assert not seq._ahead
        _assert_same(seq[2], seq.get_batch(2, epoch=e + 1))
        assert not np.array_equal(first[0], seq.get_batch(0, epoch=e + 1)[0])
    finally:
        seq.close()


def test_a_batch_computed_ahead_is_never_handed_out_for_another_epoch():
    pipe, seq = _seq(workers=3)
    e = seq.epoch
    first = seq[0]  # computes 1 and 2 of epoch e ahead
    assert sorted(seq._ahead) == [(e, 1), (e, 2)]
    _assert_same(first, seq.get_batch(0, epoch=e))
    seq.on_epoch_end()
    assert seq.epoch == e + 1 and not seq._ahead  # dropped
    moved = seq[1]
    _assert_same(moved, seq.get_batch(1, epoch=e + 1))
    assert not np.array_equal(moved[0], seq.get_batch(1, epoch=e)[0])
    # interleaved: batch i of epoch e asked after on_epoch_end is run_batch(i, epoch=e)
    for i in (2, 0, 3):
        ref = pipe.run_batch(i, epoch=e)
        np.testing.assert_array_equal(seq.get_batch(i, epoch=e)[0], ref[0].data
                                      if ref[0].is_dense else np.stack(ref[0].data))
    # a lookahead of the current epoch is used as that batch
    seq[0]
    assert (e + 1, 1) in seq._ahead
    _assert_same(seq[1], seq.get_batch(1, epoch=e + 1))
