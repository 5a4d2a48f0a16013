"""detaug.ops.take (samples of a batch taken by index, repeats allowed, pending chain and all: how a
multi-sample op lines up its partners): the rows of each taken sample in order, boxes with their
labels, fields, valid flags, canvases and content regions; images as references to the same
pixels; every per-sample array of every step of a pending chain indexed; refusals."""
import numpy as np
import pytest

from detaug.core.batch import BoxBatch, Geometry, ImageBatch, PlannedImages, Step
from detaug.core.errors import NotPlannable
from detaug.ops.take import rows_of, take_boxes, take_geometry, take_images


def test_rows_of_follows_the_offsets_with_repeats_and_empty_samples():
    offsets = [0, 2, 2, 5, 6]  # samples of 2, 0, 3 and 1 boxes
    rows, out = rows_of(offsets, np.array([2, 0, 2, 1, 3]))
    assert rows.tolist() == [2, 3, 4, 0, 1, 2, 3, 4, 5] and out.tolist() == [0, 3, 5, 8, 8, 9]
    rows, out = rows_of(offsets, np.array([], np.int64))
    assert rows.tolist() == [] and out.tolist() == [0]


def chain(rng, b):
    m = rng.normal(size=(b, 3, 3))
    return Geometry(m, rng.integers(1, 99, (b, 2)), rng.uniform(0, 255, (b, 3)), rng.integers(1, 99, (b, 2)),
                    (Step(m, m + 1, rng.integers(1, 99, (b, 2)), rng.uniform(0, 9, (b, 3)), True),
                     Step(m * 2, m * 3, rng.integers(1, 99, (b, 2)), rng.uniform(0, 9, (b, 3)), False)),
                    False)


def test_take_geometry_indexes_every_per_sample_array(rng):
    g = chain(rng, 4)
    idx = np.array([3, 3, 0])
    t = take_geometry(g, idx)
    for name in ("matrices", "sizes", "fill", "source_sizes"):
        np.testing.assert_array_equal(getattr(t, name), getattr(g, name)[idx])
    for s, ts in zip(g.steps, t.steps, strict=True):
        for name in ("matrix", "composed", "sizes", "fill"):
            np.testing.assert_array_equal(getattr(ts, name), getattr(s, name)[idx])
        assert ts.ellipse == s.ellipse
    assert t.antialias is False and take_geometry(None, idx) is None


def test_take_boxes_takes_rows_canvases_regions_and_chain(rng):
    offsets = np.array([0, 2, 2, 5])
    boxes = rng.uniform(0, 50, (5, 4)).astype(np.float32)
    labels = np.arange(5, dtype=np.int64) * 10
    area = rng.uniform(0, 1, 5)
    valid = np.array([True, False, True, True, False])
    canvas = np.array([[10, 20], [30, 40], [50, 60]])
    region = rng.uniform(0, 9, (3, 4))
    b = BoxBatch(boxes, labels, offsets, canvas, fields={"area": area}, valid=valid,
                 geometry=chain(rng, 3), fmt="xywh", region=region)
    idx = np.array([2, 1, 0, 2])
    t = take_boxes(b, idx)
    rows = [2, 3, 4, 0, 1, 2, 3, 4]
    np.testing.assert_array_equal(t.boxes, boxes[rows])
    np.testing.assert_array_equal(t.labels, labels[rows])
    np.testing.assert_array_equal(t.fields["area"], area[rows])
    np.testing.assert_array_equal(t.valid, valid[rows])
    assert t.offsets.tolist() == [0, 3, 3, 5, 8]
    np.testing.assert_array_equal(t.canvas, canvas[idx])
    np.testing.assert_array_equal(t.region, region[idx])
    np.testing.assert_array_equal(t.geometry.matrices, b.geometry.matrices[idx])
    assert t.fmt == "xywh" and t.device == "cpu"
    bare = take_boxes(BoxBatch(boxes, labels, offsets, canvas), np.array([1]))
    assert bare.valid is None and bare.region is None and bare.geometry is None and len(bare.boxes) == 0


def test_take_images_are_references_to_the_same_pixels(rng):
    imgs = [rng.integers(0, 256, (4 + k, 5, 3), dtype=np.uint8) for k in range(3)]
    g = chain(rng, 3)
    t = take_images(ImageBatch(imgs, "cpu", "HWC", g), [2, 0, 2])
    assert [a is imgs[k] for a, k in zip(t.data, (2, 0, 2))] == [True] * 3  # no pixel copied
    assert t.layout == "HWC" and t.device == "cpu"
    np.testing.assert_array_equal(t.geometry.sizes, g.sizes[[2, 0, 2]])


def test_images_not_decoded_yet_are_taken_once_made():
    """A take of planned images is planned too (core/deferred.py): their shapes now, their
    pointers once the images are made; their pixels cannot be read before."""
    from detaug.core.batch import DeviceImages
    from detaug.core.deferred import DeferredLaunch, planned_sources, realize

    planned = PlannedImages(np.array([[10, 12, 3], [8, 9, 3]]), None, "RGB", 64, None)
    t = take_images(ImageBatch(planned, "gpu", "HWC"), [1, 0, 1])
    assert isinstance(t.raw, DeferredLaunch) and planned_sources(t.raw) == [planned]
    assert t.sizes().tolist() == [[8, 9], [10, 12], [8, 9]]
    with pytest.raises(NotPlannable):
        t.data
    made = DeviceImages([111, 222], [[10, 12, 3], [8, 9, 3]], [40, 32], None)
    got = realize(t.raw, {id(planned): made}, None, {})
    assert got.ptrs.tolist() == [222, 111, 222] and got.pitches.tolist() == [32, 40, 32]
