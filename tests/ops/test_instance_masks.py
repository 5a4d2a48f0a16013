"""fn.instance_masks: each box's polygons, moved by the chain, rasterised on its canvas as
pycocotools does; the masks go with their boxes (dropped, padded, cut to each sample's canvas);
the GPU path (emulated here: boxes.cu, shapes.cu and masks.cu as host C++) equals the CPU's; the
memory plan counts the masks from the op's rule; a geometric op after the masks is refused."""
import types

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core import geometry as G
from detaug.core import instances as I
from detaug.core.batch import BoxBatch, _identity_geometry
from detaug.kernels import masks as km
from detaug.ops.instance_masks import instance_masks
from detaug.runtime import build_plan
from detaug.runtime.gpu import output_sizes
from helpers import cuda_emulation as emu
from helpers import fresh_seed, run_graph

SEEDS = [5, fresh_seed()]


def _reference(per_sample_dict, hw):
    """pycocotools on the sample's output polygons, box by box (float64 lists)."""
    from pycocotools import mask as coco_mask

    out = []
    for rows in per_sample_dict["polygons"]:
        pts, off, _ = I.ragged_polygons(rows[None])
        polys = [pts[off[j]:off[j + 1]].reshape(-1).tolist() for j in range(len(off) - 1)]
        m = np.zeros(hw, np.uint8)
        if polys:
            m = coco_mask.decode(coco_mask.merge(coco_mask.frPyObjects(polys, *hw)))
        out.append(m)
    return np.array(out, np.uint8).reshape(-1, *hw)


def _inputs(rng, n=3, h=40, w=60):
    imgs = [rng.integers(0, 256, (h, w, 3), np.uint8) for _ in range(n)]
    boxes, fields = [], []
    for _ in range(n):
        lo = rng.uniform([-5, -5], [w - 12, h - 12], (4, 2))
        lo[0] = (-40, -40)  # off the image: dropped at the first canvas, with its mask
        boxes.append(np.concatenate([lo, lo + rng.uniform(8, 20, (4, 2))], 1))
        polys = [[lo[i] + rng.uniform(0, 18, (int(rng.integers(3, 7)), 2))
                  for _ in range(int(rng.integers(0, 3)))] for i in range(4)]
        pts = [p for ps in polys for p in ps]
        fields.append({"polygons": I.dense_polygons(
            np.concatenate(pts) if pts else np.zeros((0, 2)),
            np.cumsum([0] + [len(p) for p in pts]), np.cumsum([0] + [len(ps) for ps in polys]))})
    return imgs, boxes, fields


def _graph(i, b):
    i, b = fn.flip(i, b, horizontal=fn.random.coin_flip())
    i, b = fn.rotate(i, b, angle=fn.random.uniform(range=(-25, 25)), expand=True)
    i, b = fn.resize(i, b, resize_shorter=fn.random.uniform(range=(30, 50)))
    i, b = fn.crop(i, b, crop=(32, 40))
    b = fn.prune_boxes(b, min_size=2.0)
    return i, fn.instance_masks(b), fn.pad_boxes(fn.instance_masks(b)), \
        fn.instance_masks(b, pixelwise=True)


@pytest.mark.parametrize("seed", SEEDS)
def test_masks_are_pycocotools_of_the_moved_polygons(seed):
    imgs, boxes, fields = _inputs(np.random.default_rng(seed))
    img, masked, padded, _ = run_graph(imgs, boxes, _graph, fields=fields, seed=seed)
    for s, d in enumerate(masked.per_sample()):
        hw = tuple(int(v) for v in masked.canvas[s])
        assert d["masks"].shape == (len(d["boxes"]),) + hw and d["masks"].dtype == np.uint8
        np.testing.assert_array_equal(d["masks"], _reference(d, hw))
    assert not masked.valid.all()  # boxes were dropped: their masks went with them
    # padded: 0 past each sample's boxes, the kept boxes' masks row for row
    for s, d in enumerate(masked.per_sample()):
        n = int(padded["counts"][s])
        np.testing.assert_array_equal(padded["masks"][s, :n], d["masks"])
        assert not padded["masks"][s, n:].any()


def test_pixelwise_is_dalis_label_map():
    """pixelwise=True: each pixel the label + 1 of the highest-labelled kept box covering it,
    0 elsewhere and outside a sample's canvas: painted here in ascending label order."""
    imgs, boxes, fields = _inputs(np.random.default_rng(3))
    labels = [np.array([2, 0, 1, 2]) for _ in boxes]

    def graph(i, b):
        i, b = fn.rotate(i, b, angle=fn.random.uniform(range=(-25, 25)), expand=True)
        b = fn.prune_boxes(b, min_size=2.0)
        return fn.instance_masks(b), fn.instance_masks(b, pixelwise=True)

    masked, label_map = run_graph(imgs, boxes, graph, labels=labels, fields=fields, seed=3)
    assert label_map.dtype == np.int32 and label_map.shape[-1] == 1
    assert label_map.shape[1:3] == tuple(masked.canvas.max(0))
    for s, d in enumerate(masked.per_sample()):
        want = np.zeros(label_map.shape[1:3], np.int32)
        for k in np.argsort(d["labels"], kind="stable"):
            h, w = d["masks"][k].shape
            want[:h, :w][d["masks"][k] != 0] = d["labels"][k] + 1
        np.testing.assert_array_equal(label_map[s, ..., 0], want)
    assert len(np.unique(label_map)) > 2


def test_a_geometric_op_after_the_masks_and_boxes_without_polygons_are_refused():
    imgs, boxes, fields = _inputs(np.random.default_rng(1))
    with pytest.raises(ValueError, match="after fn.instance_masks"):
        run_graph(imgs, boxes, lambda i, b: fn.flip(i, fn.instance_masks(b), horizontal=1),
                  fields=fields)
    with pytest.raises(ValueError, match="carry no polygons"):
        run_graph(imgs, boxes, lambda i, b: (i, fn.instance_masks(b)))


# ----------------------------------------------------------------------------- the GPU path
@pytest.mark.parametrize("seed", SEEDS)
def test_device_path_equals_the_cpu(shape_kernels, masks_cu, monkeypatch, seed):
    """The op on a (fake) device batch with a pending chain: the same masks as the CPU's, made
    by one launch of polygon_masks, and no device array read on the host for them."""
    emu.install_fake_cupy(monkeypatch, masks_cu, km)  # (shape_kernels: boxes.cu, shapes.cu)
    masks_cu.calls.clear()
    rng = np.random.default_rng(seed)
    imgs, boxes, fields = _inputs(rng, n=3)
    offsets = np.cumsum([0] + [len(b) for b in boxes])
    host = BoxBatch(np.concatenate(boxes).astype(np.float32), np.arange(offsets[-1]), offsets,
                    np.tile([40, 60], (3, 1)), "cpu",
                    {"polygons": I.dense_polygons(*I.ragged_polygons(
                        _stack_dense([f["polygons"] for f in fields])))})
    hw = np.tile([40, 60], (3, 1))
    g = _identity_geometry(hw, 3).then(G.flip(60, 40, rng.random(3) < 0.5, 0), hw)
    centre = np.tile([30, 20], (3, 1))
    g = g.then(G.linear_about(G.rotation_linear(rng.uniform(-30, 30, 3)), centre, centre), hw)
    g = g.then(G.translate(-rng.uniform(0, 9, 3), -rng.uniform(0, 9, 3)), np.tile([28, 44], (3, 1)))
    op = types.SimpleNamespace(name="instance_masks_0")
    want = instance_masks(None, op, [host.with_geometry(g)], {"pixelwise": False})
    dev = host.on_device([emu.dev(a) for a in host.device_arrays()])
    got = instance_masks(None, op, [dev.with_geometry(g)], {"pixelwise": False})
    np.testing.assert_array_equal(np.asarray(got.fields["masks"]), want.fields["masks"])
    assert want.fields["masks"].any()
    assert masks_cu.calls == ["polygon_masks"]
    want = instance_masks(None, op, [host.with_geometry(g)], {"pixelwise": True})
    got = instance_masks(None, op, [dev.with_geometry(g)], {"pixelwise": True})
    np.testing.assert_array_equal(np.asarray(got), want)
    assert masks_cu.calls[1:] == ["polygon_masks", "masks_to_labels"]


def _stack_dense(rows):
    width = max(r.shape[1] for r in rows)
    return np.concatenate([np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0)),
                                  constant_values=np.nan) for r in rows])


# ----------------------------------------------------------------------------- the memory plan
def test_the_memory_plan_counts_the_masks_from_the_rule():
    """A launch's outputs: the image, and boxes carrying one mask of the canvas per box the
    reader gives a sample (here 3 on average); without masks, the boxes' own bytes only."""
    pipe = Pipeline(batch_size=2)
    with pipe:
        enc, boxes = fn.readers.coco(file_root="x", annotations_file="x.json", polygons=True)
        img = fn.decoders.image(enc, device="mixed")
        img, boxes = fn.resize(img, boxes, size=(64, 80))
        pipe.set_outputs(img, fn.instance_masks(boxes), boxes)
    ops, outs = list(pipe.graph.ops), pipe._outputs
    got = output_sizes.batch_bytes(ops, outs, [[100, 120]], 4, boxes_per_sample=3.0)
    box = output_sizes.BOX_BYTES
    assert dict(got.parts)[outs[1].name] == 4 * (box + 3 * 64 * 80)
    assert dict(got.parts)[outs[2].name] == 4 * box
    assert got.outputs == 4 * (64 * 80 * 3 + box + 3 * 64 * 80 + box)
    unknown = output_sizes.batch_bytes(ops, outs, [[100, 120]], 4)
    assert dict(unknown.parts)[outs[1].name] == 4 * (box + output_sizes.BOXES_UNKNOWN * 64 * 80)
    with pipe:  # padded: every slot of max_boxes holds a mask
        padded = fn.pad_boxes(fn.instance_masks(boxes), max_boxes=5)
    got = output_sizes.batch_bytes(list(pipe.graph.ops), [padded], [[100, 120]], 4)
    assert got.outputs == 4 * 5 * (32 + 64 * 80)
    reader = types.SimpleNamespace(offsets=np.array([0, 2, 2, 7]))
    assert build_plan.boxes_per_sample({1: object(), 2: reader}) == pytest.approx(7 / 3)


# ----------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("seed", SEEDS)
def test_pipeline_masks_gpu_equal_cpu(seed):
    imgs, boxes, fields = _inputs(np.random.default_rng(seed), n=4)
    cpu = run_graph(imgs, boxes, _graph, fields=fields, seed=seed)
    gpu = run_graph(imgs, boxes, _graph, fields=fields, seed=seed, device="gpu")
    for want, got in zip(cpu[1].per_sample(), gpu[1].per_sample()):
        np.testing.assert_array_equal(got["masks"], want["masks"])
    np.testing.assert_array_equal(gpu[2]["masks"].get(), cpu[2]["masks"])
    np.testing.assert_array_equal(gpu[3].get(), cpu[3])
