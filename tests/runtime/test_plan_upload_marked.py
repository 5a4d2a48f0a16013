"""Planning ahead uploads what the planning side marked, and only that: a plain tensor that a
planned op puts on the device is a ``core.deferred.HostUpload`` until the launch is realised
(detaug/runtime/gpu/plan_ahead.py ``_realize``, one copy); any other host value of a plan stays
as it is. A device slice reads the marked tensors it is given (anchor and shape inputs, a plain
tensor) on the host and marks its own tensor output; the planned batches equal those of no
planning. Run without a GPU (the device stage's stand-in, warp.cu emulated)."""
from __future__ import annotations

import os
import pickle
from types import SimpleNamespace

import numpy as np

from detaug import ImageBatch, Pipeline, fn
from detaug.core import backend
from detaug.core.deferred import HostUpload, host_value
from detaug.runtime.gpu.plan_ahead import LaunchPlan, PlanAhead
from helpers import COCO, fresh_seed, to_np, track  # noqa: F401  (track: pipelines closed)
from helpers.cases import planned_and_plain
from helpers.warp import emulated_kernels  # noqa: F401 (a fixture)


def test_realize_uploads_the_marked_values_only(monkeypatch):
    rng = np.random.default_rng(fresh_seed())
    plain, ragged = rng.random((3, 2)), [rng.random((k, 4)) for k in (2, 0, 5)]
    dense = rng.integers(0, 9, (3, 2))
    values = {(1, 0): plain, (2, 0): list(ragged), (3, 0): HostUpload(dense),
              (4, 0): HostUpload(ragged), (5, 0): "not a tensor"}
    calls = []

    def upload_many(arrays, stream):
        calls.append([a.copy() for a in arrays])
        return [("on device", a.copy()) for a in arrays]

    monkeypatch.setattr(backend, "upload_many", upload_many)
    pa = PlanAhead.__new__(PlanAhead)
    pa.plan = SimpleNamespace(ahead=SimpleNamespace(planned_ids=frozenset(range(1, 6))))
    ctx = SimpleNamespace(values={}, stream=None)
    pa._realize(ctx, SimpleNamespace(values=values), {})
    assert len(calls) == 1  # one copy: the marked arrays, in order, nothing else
    assert [a.shape for a in calls[0]] == [(3, 2), (2, 4), (0, 4), (5, 4)]
    for got, want in zip(calls[0], [dense, *ragged]):
        np.testing.assert_array_equal(got, want)
    v = ctx.values
    assert v[(1, 0)] is plain and v[(2, 0)] is values[(2, 0)] and v[(5, 0)] == "not a tensor"
    assert v[(3, 0)][0] == "on device"
    np.testing.assert_array_equal(v[(3, 0)][1], dense)
    assert isinstance(v[(4, 0)], list) and len(v[(4, 0)]) == 3
    for (tag, a), want in zip(v[(4, 0)], ragged):
        assert tag == "on device"
        np.testing.assert_array_equal(a, want)


def test_the_mark_pickles_and_reads_back():
    a = np.arange(6.0).reshape(3, 2)
    for value in (a, [a, a[:1]], []):
        m = pickle.loads(pickle.dumps(HostUpload(value), protocol=5))
        assert m.ragged == isinstance(value, list)
        got = host_value(m)
        assert isinstance(got, list) == isinstance(value, list)
        for x, y in zip(got if m.ragged else [got], value if m.ragged else [value]):
            np.testing.assert_array_equal(x, y)
    assert host_value(a) is a


def _pipe(seed):
    pipe = Pipeline(batch_size=3, seed=seed, device_id=0, host_processes=0, decode_processes=1,
                    prefetch_queue_depth=1, device_workers=1)
    with pipe:
        enc, bb, lab = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                       annotations_file=os.path.join(COCO, "annotations.json"),
                                       ratio=True, ltrb=True, random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed")
        # a window of the images from uploaded anchor and shape tensors; a window of an
        # uploaded plain tensor (rows 1..2 of each sample's 4 x 3 numbers)
        win = fn.slice(img, fn.random.uniform(range=(0.0, 0.3), shape=2).gpu(),
                       np.array([0.5, 0.5], np.float32))
        rows = fn.slice(fn.random.uniform(range=(0, 9), shape=(4, 3)).gpu(),
                        np.array([1], np.int32), np.array([2], np.int32), axes=(0,))
        pipe.set_outputs(win, rows, lab.gpu())
    pipe.build()
    return pipe


def test_a_device_slice_reads_and_marks_plain_tensors(emulated_kernels, monkeypatch):
    with planned_and_plain(monkeypatch, emulated_kernels, _pipe) as (planned, plain):
        assert planned.plan_ahead and not plain.plan_ahead
        key = (0, 1, 1)
        plan = planned._planner.plan_or_not(key, planned._batches.prepare(key), None)
        assert isinstance(plan, LaunchPlan)
        rows, lab = (plan.values[(o.op.id, o.index)] for o in planned._outputs[1:])
        assert isinstance(rows, HostUpload) and not rows.ragged
        assert rows.arrays[0].shape == (3, 2, 3)
        assert isinstance(lab, HostUpload) and lab.ragged
        for b in (1, 3):
            got, want = planned.run_batch(b, epoch=0), plain.run_batch(b, epoch=0)
            for g, w in zip(got, want):
                gs = [to_np(a) for a in (g.data if isinstance(g, ImageBatch) else g)]
                ws = [to_np(a) for a in (w.data if isinstance(w, ImageBatch) else w)]
                assert len(gs) == len(ws) == 3
                for x, y in zip(gs, ws):
                    assert x.dtype == y.dtype
                    np.testing.assert_array_equal(x, y)
            assert got[0].data[0].shape[:2] != (0, 0)


def test_realized_padded_boxes_keep_each_batchs_width(monkeypatch):
    """Padded boxes planned for a launch of several batches come out of ``_realize`` (and a
    worker's pickle) with each batch's own width, so the split cuts them as when made alone."""
    from detaug.core.batch import PaddedBoxes, split_batches

    rng = np.random.default_rng(fresh_seed())
    counts = np.array([1, 3, 0, 2], np.int32)
    padded = PaddedBoxes(boxes=rng.random((4, 3, 4)).astype(np.float32),
                         labels=rng.integers(0, 5, (4, 3)), counts=counts)
    padded.widths = (3, 2)
    padded = pickle.loads(pickle.dumps(padded, protocol=5))
    monkeypatch.setattr(backend, "upload_many", lambda arrays, stream: [a.copy() for a in arrays])
    pa = PlanAhead.__new__(PlanAhead)
    pa.plan = SimpleNamespace(ahead=SimpleNamespace(planned_ids=frozenset({1})))
    ctx = SimpleNamespace(values={}, stream=None)
    pa._realize(ctx, SimpleNamespace(values={(1, 0): padded}), {})
    first, second = split_batches((ctx.values[(1, 0)],), [2, 2])
    assert first[0]["boxes"].shape == (2, 3, 4) and second[0]["boxes"].shape == (2, 2, 4)
    np.testing.assert_array_equal(second[0]["labels"], padded["labels"][2:, :2])
    np.testing.assert_array_equal(second[0]["counts"], counts[2:])
