"""Two resamplings in DALI's form filter twice, as DALI's ops run one after the other: the second
resize resamples the first's image (rounded to uint8), not the source through one composed
scale (ops/geometry.resamples_apart). Checked against a float64 model of DALI's triangle filter
(helpers.dali_refs): hand-computed cases; fresh random chains (resize, resize; resize, crop,
resize; resize, flip, resize; random_resized_crop, resize; resize, rotate; DALI's filter
argument with boxes) on both CPU warps, where the second step is checked against the model
applied to the pipeline's own first step; detaug's box-aware chains stay one warp; the GPU path planned ahead (resample.cu
emulated, two chained launches) and on the device (``gpu``-marked)."""
from __future__ import annotations

import os

import numpy as np
import pytest

import detaug.fn as fn
import detaug.ops as ops
import detaug.types as types
from detaug import Pipeline
from detaug.core import backend
from detaug.kernels import resample as R
from detaug.kernels import warp as W
from helpers import COCO, fresh_seed, run_graph, to_np
from helpers.dali_refs import assert_rounded, dali_resize, dali_u8


def _row_image(values):
    return np.repeat(np.asarray(values, np.uint8)[None, :, None], 3, 2)  # (1, n, 3)


def test_hand_computed(cpu_warp):
    """1 x 4 [0, 0, 0, 201] -> 1 x 2 -> 1 x 1. The first resize (radius 2) weighs the taps -1..2
    1/8, 3/8, 3/8, 1/8 (the first clamped onto pixel 0): [0, 0.5 * 201 = 100.5], stored 101
    (DALI's uint8: + 0.5, truncated); the second (radius 2, taps -1..2 clamped onto the two
    pixels: 1/2 each) gives 50.5 -> 51. One filter of the composed scale (radius 4, taps -2..5
    weighing 1/32, 3/32, ..., 7/32, ..., 1/32: 9/32 on pixel 3) would give 56.53 -> 57; without
    the uint8 step, 50.25 -> 50. The class API's Resize twice gives the same."""
    img = _row_image([0, 0, 0, 201])
    two, once = run_graph([img], [np.zeros((0, 4))], lambda i, b: (
        fn.resize(fn.resize(i, size=(1, 2)), size=(1, 1)), fn.resize(i, size=(1, 1))))
    assert np.asarray(two.at(0)).tolist() == [[[51, 51, 51]]]
    assert np.asarray(once.at(0)).tolist() == [[[57, 57, 57]]]
    np.testing.assert_allclose(dali_resize(dali_u8(dali_resize(img, 1, 2)), 1, 1), 50.5)
    np.testing.assert_allclose(dali_resize(img, 1, 1), 201 * 9 / 32)
    first, second = ops.Resize(resize_x=2, resize_y=1), ops.Resize(resize_x=1, resize_y=1)
    (cls,) = run_graph([img], [np.zeros((0, 4))], lambda i, b: (second(first(i)),))
    assert np.asarray(cls.at(0)).tolist() == [[[51, 51, 51]]]


def test_a_crop_between_copies_and_the_second_resize_reads_the_window(cpu_warp):
    """Hand case of resize, crop, resize: 1 x 8 [0 x 4, 200 x 4] -> 1 x 4 [0, 25, 175, 200]
    (radius 2: 1/8, 3/8, 3/8, 1/8); the crop keeps columns 1..3 [25, 175, 200] (crop_pos_x=1);
    its resize to 1 x 1 (radius 3, taps -1..3 clamped to the window: 2/9 + 1/9 on 25, 1/3 on
    175, 2/9 + 1/9 on 200) gives (25 + 175 + 200) / 3 = 133.33 -> 133."""
    img = _row_image([0] * 4 + [200] * 4)
    r, c, out = run_graph([img], [np.zeros((0, 4))], lambda i, b: (
        (r := fn.resize(i, size=(1, 4))), (c := fn.crop(r, crop=(1, 3), crop_pos_x=1.0)),
        fn.resize(c, size=(1, 1))))
    assert np.asarray(r.at(0))[0, :, 0].tolist() == [0, 25, 175, 200]
    assert np.asarray(c.at(0))[0, :, 0].tolist() == [25, 175, 200]
    assert np.asarray(out.at(0)).tolist() == [[[133, 133, 133]]]


def _chains(rng, imgs):
    """(graph, per-sample checks): each check(outputs, k, img) asserts sample k."""
    s1 = [tuple(int(v) for v in rng.integers(9, 30, 2)) for _ in range(3)]
    s2 = [tuple(int(v) for v in rng.integers(4, 14, 2)) for _ in range(3)]
    cw = (int(rng.integers(3, 9)), int(rng.integers(3, 9)))  # (h, w) of the crop, within s1[1]

    def graph(i, b):
        a1 = fn.resize(i, size=s1[0])
        c = fn.crop(fn.resize(i, size=s1[1]), crop=cw, crop_pos_x=0.0, crop_pos_y=1.0)
        f = fn.flip(fn.resize(i, size=s1[2]), horizontal=1)
        return (a1, fn.resize(a1, size=s2[0]), c, fn.resize(c, size=s2[1]), f,
                fn.resize(f, size=s2[2]), fn.resize(fn.resize(i, size=s1[0]), size=s2[0]))

    def check(outs, k, img):
        a1, a2, c, c2, f, f2, a2_again = (np.asarray(to_np(o.at(k))) for o in outs)
        # the first steps: DALI's filter of the image (the crop a window of it, the flip it
        # mirrored), rounded
        ref1 = dali_resize(img, *s1[0])
        assert_rounded(a1, ref1)
        h1 = s1[1][0]
        assert_rounded(c, dali_resize(img, *s1[1])[h1 - cw[0]:, :cw[1]])
        assert_rounded(f, dali_resize(img, *s1[2])[:, ::-1])
        # the second steps: DALI's filter of the first step's image (as made here)
        for first, second, size in ((a1, a2, s2[0]), (c, c2, s2[1]), (f, f2, s2[2])):
            assert second.shape == (*size, 3)
            assert_rounded(second, dali_resize(first, *size))
        np.testing.assert_array_equal(a2_again, a2)  # (the same chain, not an output's copy)
        # everywhere within a level of the float64 two steps; and not one filter of the
        # composed scale
        assert np.abs(a2 - dali_resize(dali_u8(ref1), *s2[0])).max() <= 1.0 + 1e-3
        return not np.array_equal(a2, dali_u8(dali_resize(img, *s2[0])))

    return graph, check


def test_fresh_random_chains_filter_twice(cpu_warp):
    rng = np.random.default_rng(fresh_seed())
    imgs = [rng.integers(0, 256, (int(h), int(w), 3), dtype=np.uint8)
            for h, w in rng.integers(20, 60, (3, 2))]
    graph, check = _chains(rng, imgs)
    outs = run_graph(imgs, [np.zeros((0, 4))] * 3, graph)
    differs = [check(outs, k, img) for k, img in enumerate(imgs)]
    assert any(differs)  # filtering once would not pass


def test_random_resized_crop_then_resize():
    """random_resized_crop of images alone (DALI's filter of its window) then a resize: the
    second filters the first's image. A window forced to the whole image makes the first a
    plain resize."""
    rng = np.random.default_rng(fresh_seed())
    img = rng.integers(0, 256, (30, 45, 3), dtype=np.uint8)
    kw = dict(size=(16, 24), random_area=(1.0, 1.0), random_aspect_ratio=(1.5, 1.5))
    first, out = run_graph([img], [np.zeros((0, 4))], lambda i, b: (
        (r := fn.random_resized_crop(i, **kw)), fn.resize(r, size=(7, 9))))
    assert_rounded(np.asarray(first.at(0)), dali_resize(img, 16, 24))
    assert_rounded(np.asarray(out.at(0)), dali_resize(np.asarray(first.at(0)), 7, 9))


def test_a_rotation_after_the_resize_warps_its_image(cpu_warp):
    """fn.resize(images) then fn.rotate(angle=) (detaug's canvas): the rotation warps the
    resize's image (DALI's filter, rounded), exactly as the rotation run on that image alone."""
    rng = np.random.default_rng(fresh_seed())
    img = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    angle = float(rng.uniform(10, 80))
    r, rot = run_graph([img], [np.zeros((0, 4))], lambda i, b: (
        (r := fn.resize(i, size=(15, 21))), fn.rotate(r, angle=angle, expand=False)))
    assert_rounded(np.asarray(r.at(0)), dali_resize(img, 15, 21))
    (alone,) = run_graph([np.asarray(r.at(0))], [np.zeros((0, 4))], lambda i, b: (
        fn.rotate(i, angle=angle, expand=False),))
    np.testing.assert_array_equal(np.asarray(rot.at(0)), np.asarray(alone.at(0)))


def test_filter_argument_with_boxes_filters_twice_and_boxes_follow():
    """fn.resize(images, boxes, interp_type=INTERP_LINEAR) twice (DALI's filter asked for, with
    detaug's boxes): the images filter twice; the boxes are the source boxes scaled by both."""
    rng = np.random.default_rng(fresh_seed())
    img = rng.integers(0, 256, (28, 40, 3), dtype=np.uint8)
    box = np.array([[4.0, 6.0, 30.0, 22.0]])
    lin = types.INTERP_LINEAR

    def graph(i, b):
        i1, b1 = fn.resize(i, b, size=(14, 20), interp_type=lin)
        return (i1, *fn.resize(i1, b1, size=(7, 8), interp_type=lin))

    first, second, boxes = run_graph([img], [box], graph)
    assert_rounded(np.asarray(first.at(0)), dali_resize(img, 14, 20))
    assert_rounded(np.asarray(second.at(0)), dali_resize(np.asarray(first.at(0)), 7, 8))
    got = boxes.per_sample()[0]["boxes"]
    np.testing.assert_allclose(got, box * [8 / 40, 7 / 28, 8 / 40, 7 / 28], atol=1e-5)


def test_detaug_box_form_stays_one_warp():
    """detaug's own fn.resize(images, boxes) twice (and a rotation between) is ONE warp of the
    composed map, as before (the recipes' batches do not move)."""
    rng = np.random.default_rng(fresh_seed())
    img = rng.integers(0, 256, (30, 44, 3), dtype=np.uint8)
    box = np.array([[3.0, 4.0, 20.0, 25.0]])
    before = backend.cpu_warp()
    backend.set_cpu_warp("reference")
    try:
        (out,) = run_graph([img], [box], lambda i, b: (
            fn.resize(*fn.resize(i, b, size=(20, 26)), size=(9, 13))[0],))
    finally:
        backend.set_cpu_warp(before)
    m = np.matmul(np.diag([13 / 26, 9 / 20, 1.0]), np.diag([26 / 44, 20 / 30, 1.0]))
    np.testing.assert_array_equal(np.asarray(out.at(0)), W.warp_numpy([img], m[None], [[9, 13]])[0])


# ------------------------------------------------------------------------- the GPU path
def _coco_graph(pipe, device):
    with pipe:
        enc, _ = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                 annotations_file=os.path.join(COCO, "annotations.json"),
                                 random_shuffle=True)
        r1 = fn.resize(fn.decoders.image(enc, device=device), size=(37, 45))
        pipe.set_outputs(r1, fn.resize(fn.flip(r1, horizontal=fn.random.coin_flip()),
                                       size=(19, 23)))


def test_planned_ahead_two_chained_launches(resample_cu, monkeypatch):
    """A GPU-decode pipeline with two resizes, planned ahead without a GPU: the second resize's
    launch (DALI's filter, a ResampleLaunch) reads the first's (chained: core/deferred.py);
    run through the device stage (resample.cu emulated, the decode by Pillow), its images equal
    those of no planning bit for bit, the first DALI's filter of the decoded image, the second
    DALI's filter of the first (mirrored where drawn)."""
    from detaug.core.batch import DeferredWarp
    from detaug.ops.decode import decode_pillow
    from detaug.ops.sources import read_files
    from helpers.cases import device_stage_stand_in, plan_without_cupy

    device_stage_stand_in(monkeypatch, resample_cu, R, W)

    def make(planned):
        monkeypatch.setenv("DETAUG_PLAN_AHEAD", "1" if planned else "0")
        pipe = Pipeline(batch_size=3, seed=4, device_id=0, host_processes=0, decode_processes=1,
                        prefetch_queue_depth=1, device_workers=1)
        _coco_graph(pipe, "mixed")
        pipe.build()
        return pipe

    planned, plain = make(True), make(False)
    try:
        assert planned.plan_ahead and not plain.plan_ahead
        plan = plan_without_cupy(planned, (0, 1, 1))
        second = plan.values[(planned._outputs[1].op.id, planned._outputs[1].index)].raw
        assert isinstance(second, DeferredWarp) and isinstance(second.launch, R.ResampleLaunch)
        assert isinstance(second.source, DeferredWarp)  # the first resize's launch
        assert isinstance(second.source.launch, R.ResampleLaunch)
        paths = second.source.source.enc.paths
        got, ref = planned.run_batch(1, epoch=0), plain.run_batch(1, epoch=0)
        a, b = ([to_np(x) for x in v.data] for v in got)
        for x, y in zip(got, ref):
            for u, v in zip(x.data, y.data):
                np.testing.assert_array_equal(to_np(u), to_np(v))
        decoded = [decode_pillow(buf) for buf in read_files(paths)]
        for k, img in enumerate(decoded):
            assert_rounded(a[k], dali_resize(img, 37, 45))
            ref2 = dali_resize(a[k], 19, 23)
            mirrored = dali_resize(a[k][:, ::-1], 19, 23)
            ok = [np.all(np.abs(b[k] - r) <= 0.5 + 1e-3) for r in (ref2, mirrored)]
            assert any(ok)
            assert_rounded(b[k], ref2 if ok[0] else mirrored)
    finally:
        planned.close()
        plain.close()


@pytest.mark.gpu
def test_gpu_two_resizes_equal_the_cpu_pipeline():
    """On the device (resample.cu, unplanned from an external source): the first resize within
    the float32 rule of the CPU pipeline's float64 value, the second DALI's filter of the
    device's own first step; the same chains as the CPU test."""
    rng = np.random.default_rng(fresh_seed())
    imgs = [rng.integers(0, 256, (int(h), int(w), 3), dtype=np.uint8)
            for h, w in rng.integers(20, 60, (3, 2))]
    graph, check = _chains(rng, imgs)
    outs = run_graph(imgs, [np.zeros((0, 4))] * 3, graph, device="gpu")
    assert any(check(outs, k, img) for k, img in enumerate(imgs))


@pytest.mark.gpu
def test_gpu_planned_two_resizes_equal_unplanned(monkeypatch):
    """The COCO pipeline with two resizes decoded on the device, planned ahead (in a host
    worker) and not: the same images bit for bit."""
    pytest.importorskip("nvidia.nvimgcodec")
    runs = []
    for planned in (True, False):
        monkeypatch.setenv("DETAUG_PLAN_AHEAD", "1" if planned else "0")
        pipe = Pipeline(batch_size=4, seed=9, device_id=0, decode_processes=1,
                        host_processes=2 if planned else None)
        _coco_graph(pipe, "mixed")
        pipe.build()
        assert pipe.plan_ahead == planned
        try:
            runs.append([[to_np(t.at(k)) for t in pipe.run() for k in range(4)] for _ in range(3)])
        finally:
            pipe.close()
    for x, y in zip(*runs):
        for u, v in zip(x, y):
            np.testing.assert_array_equal(u, v)
