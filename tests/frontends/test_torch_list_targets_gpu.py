"""DetaugIterator's list targets from a GPU pipeline (detaug/adapters/box_lists.py): equal, bit for
bit, to what the adapter made before (helpers/list_targets_before.py, on a host copy of the
batch taken before the adapter saw it), with masks made in the graph (fn.instance_masks, moved in
place where boxes were dropped) and made by the adapter from polygons (and bitmap masks); each target's masks a
view of the pipeline's own output; torch's allocator and the caller's cupy pool take nothing
over the batches; the adapter's share declared to the pipeline's plan. GPU only."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers import COCO as COCO_MINI  # noqa: E402
from helpers import close_pipelines, fresh_seed, track  # noqa: E402,F401  (autouse fixture)
from helpers.list_targets_before import previous_box_list, same_targets  # noqa: E402
from detaug import Pipeline, fn  # noqa: E402
from detaug.adapters import box_lists  # noqa: E402
from detaug.adapters.torch import DetaugIterator, consumer_share  # noqa: E402
from detaug.core.batch import BoxBatch  # noqa: E402
from detaug.core.tensor_list import detaug_value  # noqa: E402

ROOT, ANN = os.path.join(COCO_MINI, "images"), os.path.join(COCO_MINI, "annotations.json")


def _pipe(mode, outputs=1, size=256):
    """COCO mini's polygons on a ``size`` canvas (scale jitter crops boxes away, small ones are
    pruned: batches drop boxes); ``mode`` 'masks': fn.instance_masks in the graph; 'polygons':
    the adapter makes the masks; 'both': of polygons and bitmap masks (the crowds' RLE). The
    boxes are given ``outputs`` times."""
    pipe = Pipeline(batch_size=4, num_threads=1, seed=fresh_seed(), device_id=0)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=ROOT, annotations_file=ANN, polygons=True,
                                     bitmasks=mode == "both", random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed")
        img, boxes = fn.scale_jitter(img, boxes, size=(size, size), scale_range=(0.5, 2.0))
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        boxes = fn.prune_boxes(boxes, min_size=6.0)
        if mode == "masks":
            boxes = fn.instance_masks(boxes)
        pipe.set_outputs(img, *([boxes] * outputs))
    return track(pipe)


def _host_copy(bb):
    """A host BoxBatch with the values of the device batch ``bb`` (read on cupy's current
    stream, which the hand-out made wait for the batch)."""
    import cupy as cp

    def get(a):
        return None if a is None else cp.asnumpy(a) if hasattr(a, "__cuda_array_interface__") \
            else np.asarray(a)

    return BoxBatch(get(bb.boxes), get(bb.labels), bb.offsets, bb.canvas, "cpu",
                    {k: get(v) for k, v in bb.fields.items()}, valid=get(bb.valid))


def _recorded(pipe, monkeypatch):
    """``pipe.run`` recording each batch: (its outputs, host copies of its boxes outputs)."""
    seen, run = [], pipe.run

    def recording_run():
        out = run()
        values = [detaug_value(v) for v in out]
        seen.append((values, [_host_copy(v) if isinstance(v, BoxBatch) else None
                              for v in values]))
        return out

    monkeypatch.setattr(pipe, "run", recording_run)
    return seen


@pytest.mark.gpu
@pytest.mark.parametrize("mode, outputs", [("masks", 1), ("polygons", 1), ("both", 1),
                                           ("masks", 2)])
def test_targets_equal_the_previous_ones(mode, outputs, monkeypatch):
    """Also where one boxes output is given twice (it may not move in place: box_lists.movable)
    and with in-place moves of a few rows a run."""
    monkeypatch.setattr(box_lists, "IN_PLACE_MIN", 0)
    monkeypatch.setattr(box_lists, "IN_PLACE_CHUNK", 3 * 256 * 256)
    pipe = _pipe(mode, outputs)
    seen = _recorded(pipe, monkeypatch)
    names = ["images"] + [f"t{k}" for k in range(outputs)]
    it = iter(DetaugIterator(pipe, output_map=names, boxes_format="list", label_offset=1))
    dropped = 0
    for _ in range(6):
        batch = next(it)
        _, hosts = seen[-1]
        for k in range(outputs):
            want = previous_box_list(hosts[k + 1], 1, device_polygons=True)
            same_targets(batch[f"t{k}"], want)
            assert all(t["masks"].is_cuda and t["boxes"].is_cuda for t in batch[f"t{k}"])
        dropped += int((~hosts[1].valid).sum()) if hosts[1].valid is not None else 0
    assert dropped, "no batch dropped a box: the kept columns went untested"


@pytest.mark.gpu
def test_masks_targets_are_views_of_the_pipelines_output(monkeypatch):
    monkeypatch.setattr(box_lists, "IN_PLACE_MIN", 0)
    pipe = _pipe("masks")
    seen = _recorded(pipe, monkeypatch)
    it = iter(DetaugIterator(pipe, output_map=["images", "targets"], boxes_format="list"))
    for _ in range(4):
        batch = next(it)
        (images, raw), _ = seen[-1]
        assert batch["images"].data_ptr() == images.data.data.ptr  # (a dense batch)
        masks = raw.fields["masks"]
        row = 0
        for t in batch["targets"]:
            n = len(t["boxes"])
            if n:  # this sample's kept rows, moved to follow the samples before it
                assert t["masks"].data_ptr() == masks.data.ptr + row * masks.strides[0]
            row += n


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["masks", "polygons"])
def test_torch_and_the_callers_pool_take_nothing(mode):
    """Over 12 batches: torch's caching allocator allocates nothing (its reserve does not grow),
    cupy's default pool of the caller's thread holds no more than 1 MiB more; the adapter's
    share was set aside in the pipeline's plan (its masks made from polygons among it)."""
    import cupy as cp

    pipe = _pipe(mode, size=384)
    it = iter(DetaugIterator(pipe, output_map=["images", "targets"], boxes_format="list",
                             auto_reset=True))
    batch = next(it)  # (kernels compiled, torch's CUDA up)
    del batch
    bp = pipe.build_plan
    assert bp.reserved == consumer_share("list").bytes(bp.batch_bytes) > 0
    assert (bp.batch_bytes.planes > 0) == (mode == "polygons")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    cpool = cp.get_default_memory_pool()
    held = cpool.total_bytes()
    for _ in range(12):
        batch = next(it)
        assert all(t["masks"].shape[0] == len(t["boxes"]) for t in batch["targets"])
        del batch
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() == allocated
    assert torch.cuda.memory_reserved() == reserved
    assert cpool.total_bytes() - held <= 1 << 20


@pytest.mark.gpu
def test_in_place_kept_rows_on_the_device_equal_take(monkeypatch):
    import cupy as cp

    rng = np.random.default_rng(fresh_seed())
    for chunk in (1, 40, 1 << 20):
        monkeypatch.setattr(box_lists, "IN_PLACE_CHUNK", chunk)
        for _ in range(5):
            n = int(rng.integers(0, 40))
            a = cp.asarray(rng.integers(0, 255, (n, 3, 5)).astype(np.uint8))
            keep = np.flatnonzero(rng.random(n) < rng.random())
            want = cp.asnumpy(a)[keep]
            got = box_lists.kept(a, keep, cp.asarray(keep), in_place=True)
            assert got.data.ptr == a.data.ptr and np.array_equal(cp.asnumpy(got), want)
