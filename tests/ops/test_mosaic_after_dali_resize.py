"""A resize in DALI's form (images alone: DALI's triangle filter) followed by fn.mosaic filters as
DALI's ops run one after the other: the mosaic resizes the resize's image (rounded to uint8), it
does not join the resize into one composed warp (ops/geometry.resamples_apart, through
ops/geometry.join_chain). Checked against the two steps run as pipelines of their own: the
resize alone (itself checked against the float64 model of DALI's filter, helpers.dali_refs),
then the mosaic fed its images; fixed and fresh random inputs, both CPU warps, the mosaic
resizing its tiles or not (``resize=False``: the tiles join the resize's chain, and its one
warp keeps DALI's filter); planned ahead for the GPU (the mosaic's launch reads the resize's
launch, DALI's filter; no kernels run); on the device
(``gpu``-marked) the same two ways within the device pipeline."""
from __future__ import annotations

import os

import numpy as np
import pytest

import detaug.fn as fn
from detaug import Pipeline
from helpers import COCO, fresh_seed, run_graph, run_images, to_np
from helpers.dali_refs import assert_rounded, dali_resize


def _case(seed):
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 256, (int(rng.integers(10, 30)), int(rng.integers(10, 30)), 3),
                         dtype=np.uint8) for _ in range(4)]
    rh, rw = (int(v) for v in rng.integers(17, 33, 2))  # longer side over s: the mosaic shrinks
    return imgs, (rh, rw), int(rng.integers(8, 16))


def _assert_same(got, want, s, resize):
    assert got.shape == want.shape == (2 * s, 2 * s, 3)
    if resize:
        np.testing.assert_array_equal(got, want)
    else:  # one filter through the composed map (resize, then the tile's shift): its sums
        # differ from the resize's alone in the last bits, so a half may round either way (the
        # box warp in place of the filter, as before join_chain, is off by up to ~24 here)
        assert np.abs(got.astype(int) - want).max() <= 1


@pytest.mark.parametrize("resize", [True, False])
@pytest.mark.parametrize("seed", [3, fresh_seed()])
def test_resize_then_mosaic_is_the_two_steps_apart(cpu_warp, seed, resize):
    imgs, size, s = _case(seed)
    (chained,) = run_images(imgs, lambda i: fn.mosaic(fn.resize(i, size=size), size=s,
                                                      resize=resize, partners="batch"))
    (resized,) = run_images(imgs, lambda i: fn.resize(i, size=size))
    resized = [np.asarray(to_np(resized.at(k))) for k in range(len(imgs))]
    for img, r in zip(imgs, resized):
        assert_rounded(r, dali_resize(img, *size))
    # the mosaic alone on the resized images: the identity flip keeps its random stream's
    # key (the op's position in the graph, seed 1 in both) as in the chained pipeline
    (apart,) = run_images(resized, lambda i: fn.mosaic(fn.flip(i, horizontal=0), size=s,
                                                       resize=resize, partners="batch"))
    for k in range(len(imgs)):
        got, want = np.asarray(to_np(chained.at(k))), np.asarray(to_np(apart.at(k)))
        _assert_same(got, want, s, resize)


def test_planned_ahead_the_mosaic_reads_the_resize_launch(monkeypatch):
    """A GPU-decode pipeline (stood in for: planned without cupy), DALI's resize then mosaic:
    the mosaic's canvases are a launch over the resize's own launch (DALI's filter, a
    ResampleLaunch of the group's decoded images), not one warp of the decoded images."""
    from detaug.core.batch import DeferredWarp, PlannedImages
    from detaug.core.deferred import DeferredLaunch
    from detaug.kernels import resample as R
    from helpers.cases import plan_without_cupy, stand_in_gpu

    stand_in_gpu(monkeypatch)
    pipe = Pipeline(batch_size=3, seed=fresh_seed(), device_id=0, host_processes=0,
                    decode_processes=1, prefetch_queue_depth=1, device_workers=1)
    with pipe:
        enc, _ = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                 annotations_file=os.path.join(COCO, "annotations.json"))
        img = fn.resize(fn.decoders.image(enc, device="mixed"), size=(37, 45))
        pipe.set_outputs(fn.mosaic(img, size=16, partners="batch"))
    pipe.build()
    try:
        assert pipe.plan_ahead
        plan = plan_without_cupy(pipe, (0, 1, 1))
        out = plan.values[(pipe._outputs[0].op.id, pipe._outputs[0].index)].raw
        assert isinstance(out, DeferredLaunch)
        (tiles,) = out.sources
        assert isinstance(tiles, DeferredWarp) and isinstance(tiles.launch, R.ResampleLaunch)
        # (the group's members taken from the batch first: a launch of pointers over the decode)
        taken = tiles.source
        assert isinstance(taken, DeferredLaunch) and isinstance(taken.source, PlannedImages)
        assert [tuple(sh) for sh in tiles.launch.shapes] == [(37, 45, 3)] * 12  # 3 x 4 members
    finally:
        pipe.close()


@pytest.mark.gpu
@pytest.mark.parametrize("resize", [True, False])
def test_gpu_resize_then_mosaic_is_the_two_steps_apart(resize):
    """On the device (resample.cu, then the mosaic's canvas warp or compose): the chained
    pipeline equals the device's resize alone followed by the device's mosaic of its images (bit
    for bit where the mosaic resizes)."""
    imgs, size, s = _case(fresh_seed())
    none = [np.zeros((0, 4))] * len(imgs)
    (chained,) = run_graph(imgs, none, lambda i, b: fn.mosaic(
        fn.resize(i, size=size), size=s, resize=resize, partners="batch"), device="gpu")
    (resized,) = run_graph(imgs, none, lambda i, b: fn.resize(i, size=size), device="gpu")
    resized = [np.asarray(to_np(resized.at(k))) for k in range(len(imgs))]
    (apart,) = run_graph(resized, none, lambda i, b: fn.mosaic(
        fn.flip(i, horizontal=0), size=s, resize=resize, partners="batch"), device="gpu")
    for k in range(len(imgs)):
        _assert_same(np.asarray(to_np(chained.at(k))), np.asarray(to_np(apart.at(k))), s, resize)
