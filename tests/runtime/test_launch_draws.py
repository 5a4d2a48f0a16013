"""``partners.decoded_per_batch`` over a launch of several batches (what bench_yolo counts as
drawn on the GPU): an image drawn by two batches of one launch is decoded once, so a launch's
count is the union of its batches' drawn images, computed here from each batch's keyed levels
on its own."""
import os

import numpy as np
import pytest

from detaug import fn, pipeline_def
from detaug.runtime.partners import LaunchLevels, decoded_per_batch
from helpers import close_pipelines, track  # noqa: F401 (fixture)


def _pipe(root, partners):
    @pipeline_def(seed=5, batch_size=4, host_processes=0)
    def p():
        enc, boxes = fn.readers.coco(annotations_file=os.path.join(root, "annotations.json"),
                                     file_root=os.path.join(root, "images"), random_shuffle=True)
        img, boxes = fn.mosaic(fn.decoders.image(enc, device="cpu"), boxes, size=32,
                               partners=partners, pool_batches=1)
        img, boxes = fn.mixup(img, boxes, probability=0.5, partners=partners, pool_batches=1)
        return img, boxes
    return track(p())


def _drawn(pipe, epoch, b):
    """Per decoder level, the record positions batch ``b`` alone decodes (its own launch)."""
    idx, pos, sizes = pipe.schedule.batches(epoch, b, 1)
    lv = LaunchLevels(pipe.graph, pipe.schedule, epoch, idx, pos, sizes)
    levels = {pipe.build_plan.levels.get(op.id, ()) for op in pipe._needed_ops()
              if op.schema.has("decoder")}
    return {p: set(np.asarray(lv.get(p).positions).tolist()) for p in levels}


@pytest.mark.parametrize("partners", ["pool", "batch"])
def test_a_launch_decodes_the_union_of_its_batches_draws(coco_small, partners):
    pipe = _pipe(coco_small, partners)
    pipe.build()
    for k in (1, 2, 3):
        first = 2
        parts = [_drawn(pipe, 0, first + j) for j in range(k)]
        want = sum(len(set().union(*(d[p] for d in parts))) for p in parts[0])
        got = decoded_per_batch(pipe, 0, first, k)
        assert got == want, (partners, k)
        if partners == "batch":  # no partner outside the batch: one decode an output
            assert got == 4 * k
    assert decoded_per_batch(pipe, 0, first, 2) <= (decoded_per_batch(pipe, 0, first)
                                                     + decoded_per_batch(pipe, 0, first + 1))
