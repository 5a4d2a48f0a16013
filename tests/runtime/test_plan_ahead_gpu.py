"""Planning ahead (detaug/plan_ahead.py) on the GPU: a launch planned in host worker processes,
in threads, or not at all gives the same batches; the ops that cannot be planned run after the
decode; a bad file is replaced as without planning. Run on the device."""
import os
import shutil

import numpy as np
import pytest

from detaug import ImageBatch, Pipeline, fn
from conftest import COCO
from helpers import close_pipelines, to_np, track  # noqa: F401  (autouse fixture)

pytestmark = pytest.mark.gpu
R = fn.random


def _pipe(monkeypatch, planned, host_processes=None, decode_processes=1, root=None, extra=None,
          on_error="raise", batches_per_launch=1):
    """A COCO detection pipeline; ``planned`` False turns planning ahead off (DETAUG_PLAN_AHEAD)."""
    pytest.importorskip("nvidia.nvimgcodec")
    monkeypatch.setenv("DETAUG_PLAN_AHEAD", "1" if planned else "0")
    root = root or COCO
    pipe = Pipeline(batch_size=8, num_threads=2, seed=11, device_id=0, prefetch_queue_depth=3,
                    decode_processes=decode_processes, host_processes=host_processes,
                    on_error=on_error, batches_per_launch=batches_per_launch)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(root, "images"),
                                     annotations_file=os.path.join(root, "annotations.json"),
                                     random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed")
        img, boxes = fn.random_iou_crop(img, boxes)
        img, boxes = fn.flip(img, boxes, horizontal=R.coin_flip())
        if extra == "colour":  # an op that reads pixels mid-chain: the rest runs after the decode
            img = fn.brightness_contrast(img, brightness=R.uniform(range=(0.7, 1.3)))
        img, boxes = fn.resize(img, boxes, size=(96, 128))
        boxes = fn.prune_boxes(boxes, min_size=1)
        outs = [fn.normalize(img, mean=[124, 116, 104], std=[58, 57, 57], output_layout="CHW"),
                fn.pad_boxes(boxes, max_boxes=32)]
        if extra == "retinanet":
            outs += list(fn.retinanet_encode(boxes, num_classes=80))
        pipe.set_outputs(*outs)
    monkeypatch.setenv("DETAUG_PLAN_AHEAD", "1" if planned else "0")
    pipe.build()
    monkeypatch.delenv("DETAUG_PLAN_AHEAD")
    return track(pipe)


def _epochs(pipe, n=2):
    out = []
    for _ in range(n):
        for batch in pipe:
            out.append([{k: to_np(a) for k, a in v.items()} if isinstance(v, dict)
                        else to_np(v.data) if isinstance(v, ImageBatch) else to_np(v) for v in batch])
        pipe.reset()
    pipe.close()
    return out


def _assert_same(a, b, exact_boxes=True):
    assert len(a) == len(b) == 2 * 9  # 68 images, batches of 8, two epochs
    for x, y in zip(a, b, strict=True):
        assert len(x) == len(y)
        for u, v in zip(x, y, strict=True):
            if isinstance(u, dict):
                assert u.keys() == v.keys()
                for k in u:
                    if k == "boxes" and not exact_boxes:
                        # the GPU box kernel against its NumPy twin
                        np.testing.assert_allclose(v[k], u[k], atol=1e-4)
                    else:
                        np.testing.assert_array_equal(v[k], u[k], err_msg=k)
            elif u.dtype.kind == "f" and not exact_boxes and u.ndim == 3:
                np.testing.assert_allclose(v, u, atol=1e-4)  # RetinaNet's encoded box targets
            else:
                np.testing.assert_array_equal(v, u)


def test_planned_in_processes_in_threads_and_unplanned_agree(monkeypatch):
    """Planned in 2 host worker processes, in this process's threads, with one decode process
    or decoded in this process, and not planned: the same images (bit for bit), labels and
    counts; boxes equal between the planned runs and within 1e-4 px of the unplanned one (its
    box math runs in the GPU kernels, planned in their NumPy twins)."""
    procs = _pipe(monkeypatch, True, host_processes=2)
    assert procs.plan_ahead and procs.host_processes == 2
    assert [op.schema.name for op in procs._rest_ops] == []
    ref = _epochs(procs)
    threads = _pipe(monkeypatch, True, host_processes=0)
    assert threads.plan_ahead and threads.host_processes == 0
    _assert_same(ref, _epochs(threads))
    in_thread = _pipe(monkeypatch, True, host_processes=2, decode_processes=0)
    assert in_thread.plan_ahead and in_thread._decode_service is None
    _assert_same(ref, _epochs(in_thread))
    plain = _pipe(monkeypatch, False)
    assert not plain.plan_ahead and plain.host_processes == 0
    _assert_same(ref, _epochs(plain), exact_boxes=False)
    # launches of several batches plan as one
    _assert_same(ref, _epochs(_pipe(monkeypatch, True, host_processes=2, batches_per_launch=3)))


def test_random_access_of_a_planned_pipeline(monkeypatch):
    """run_batch of a planned pipeline (planned in a worker) is the batch iteration gives."""
    pipe = _pipe(monkeypatch, True, host_processes=2)
    it = []
    for batch in pipe:
        it.append(batch)
    for b in (4, 0, 7):
        got = pipe.run_batch(b, epoch=0)
        np.testing.assert_array_equal(to_np(got[0].data), to_np(it[b][0].data))
        for k in it[b][1]:
            np.testing.assert_array_equal(to_np(got[1][k]), to_np(it[b][1][k]))


@pytest.mark.parametrize("extra", ["colour", "retinanet"])
def test_ops_that_cannot_be_planned_run_after_the_decode(monkeypatch, extra):
    """A colour op mid-chain (it reads pixels) or a RetinaNet encoder on the GPU: the ops up to
    it are planned, it and what follows run after the decode, with the batches of no planning."""
    pipe = _pipe(monkeypatch, True, host_processes=2, extra=extra)
    rest = [op.schema.name for op in pipe._rest_ops]
    if extra == "colour":
        assert set(rest) == {"brightness_contrast", "resize", "prune_boxes", "normalize", "pad_boxes"}
    else:
        assert rest == ["retinanet_encode"]
    _assert_same(_epochs(_pipe(monkeypatch, False, extra=extra)), _epochs(pipe), exact_boxes=False)


def test_a_bad_file_is_replaced_as_without_planning(monkeypatch, tmp_path):
    """on_error='skip': a truncated file, met by the decode of a planned launch, is replaced by
    the next record of the epoch, the launch re-planned; batches and counts as unplanned."""
    root = tmp_path / "coco"
    shutil.copytree(COCO, root)
    victim = sorted(os.listdir(root / "images"))[9]
    data = (root / "images" / victim).read_bytes()
    (root / "images" / victim).write_bytes(data[:len(data) // 3])
    runs = []
    for planned in (True, False):
        pipe = _pipe(monkeypatch, planned, host_processes=2 if planned else None, root=str(root),
                     on_error="skip")
        with pytest.warns(UserWarning, match=victim):
            runs.append(_epochs(pipe))
        assert pipe.stats["skipped"] == 2  # once per epoch
    _assert_same(runs[0], runs[1], exact_boxes=False)


def test_images_of_unknown_size_run_unplanned(monkeypatch, tmp_path):
    """A reader that does not know the images' sizes (a file reader): every launch runs whole in
    this process, with the batches of no planning."""
    pytest.importorskip("nvidia.nvimgcodec")
    root = tmp_path / "files" / "a"
    root.mkdir(parents=True)
    for name in sorted(os.listdir(os.path.join(COCO, "images")))[:20]:
        shutil.copy(os.path.join(COCO, "images", name), root / name)

    def make(planned):
        monkeypatch.setenv("DETAUG_PLAN_AHEAD", "1" if planned else "0")
        pipe = Pipeline(batch_size=4, num_threads=2, seed=2, device_id=0, decode_processes=1)
        with pipe:
            enc, label = fn.readers.file(file_root=str(tmp_path / "files"))
            img = fn.decoders.image(enc, device="mixed")
            img = fn.resize(img, size=(40, 40))
            pipe.set_outputs(fn.normalize(img, mean=[0, 0, 0], std=[1, 1, 1]), label)
        pipe.build()
        return track(pipe)

    a, b = make(True), make(False)
    assert a.plan_ahead and not b.plan_ahead
    for _ in range(5):
        (x, lx), (y, ly) = a.run(), b.run()
        np.testing.assert_array_equal(to_np(x.data), to_np(y.data))
        np.testing.assert_array_equal(to_np(lx), to_np(ly))
