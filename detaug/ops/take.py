"""Samples of a batch taken by index (repeats allowed), pending chain and all: how a multi-sample
op drawing its partners from the batch (``partners='batch'``) lines up its tiles. No pixel is
copied: images are taken as references (a list, or a DeviceImages' pointers), boxes as rows (on
the GPU from the host copy, in one upload)."""
from __future__ import annotations

import numpy as np

from ..core.batch import BoxBatch, DeviceImages, Geometry, ImageBatch, Step
from ..core.deferred import DeferredLaunch, is_planned, stand_in


def take_geometry(g: Geometry | None, idx) -> Geometry | None:
    """The chain of the samples ``idx`` (every per-sample array of every step indexed)."""
    if g is None:
        return None
    steps = tuple(Step(s.matrix[idx], s.composed[idx], s.sizes[idx], s.fill[idx], s.ellipse,
                       s.roi)
                  for s in g.steps)
    return Geometry(g.matrices[idx], g.sizes[idx], g.fill[idx], g.source_sizes[idx], steps,
                    g.antialias, g.filter)


def take_images(images: ImageBatch, idx) -> ImageBatch:
    """Samples ``idx`` (B',) of ``images``, in that order, as references to the same pixels."""
    idx = np.asarray(idx, np.int64)
    raw = images.raw
    if is_planned(raw):  # planned ahead: the same references, taken once the images are made
        taken = DeferredLaunch((raw,), TakeLaunch(raw, idx))
    elif isinstance(raw, DeviceImages):
        taken = DeviceImages(raw.ptrs[idx], raw.shapes[idx], raw.pitches[idx], raw.owners,
                             raw.device_id)
    else:
        taken = [raw[int(i)] for i in idx]
    return ImageBatch(taken, images.device, images.layout, take_geometry(images.geometry, idx))


class TakeLaunch:
    """Samples ``idx`` of planned images (core/deferred.py): no kernel, their pointers taken
    once they are made."""

    __slots__ = ("idx", "B", "shapes", "out_dtype", "dense")

    def __init__(self, raw, idx):
        self.idx = np.asarray(idx, np.int64)
        self.shapes = [tuple(int(v) for v in s) for s in stand_in(raw).shapes[self.idx]]
        self.B, self.out_dtype, self.dense = len(self.idx), np.dtype(np.uint8), False

    def run(self, inputs, stream=None):
        d = inputs[0]
        return DeviceImages(d.ptrs[self.idx], d.shapes[self.idx], d.pitches[self.idx], d.owners,
                            d.device_id)


def rows_of(offsets, idx) -> tuple:
    """(rows (N',), offsets (B' + 1,)): the box rows of samples ``idx``, in order."""
    offsets = np.asarray(offsets, np.int64)
    counts = offsets[idx + 1] - offsets[idx]
    out = np.zeros(len(idx) + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    rows = np.repeat(offsets[idx] - out[:-1], counts) + np.arange(out[-1])
    return rows, out


def take_boxes(b: BoxBatch, idx, ctx=None) -> BoxBatch:
    """Samples ``idx`` of ``b``: their rows (boxes, labels, fields, valid flags), canvases,
    content regions and pending chain. On the GPU from the host copy, uploaded in one copy."""
    idx = np.asarray(idx, np.int64)
    if b.device == "gpu":
        host = b.host
        if host is None:
            raise RuntimeError("boxes on the GPU without their host copy cannot be taken by "
                               "sample (they were not uploaded by detaug)")
        return take_boxes(host, idx).to_device(ctx)
    rows, offsets = rows_of(b.offsets, idx)
    return BoxBatch(b.boxes[rows], b.labels[rows], offsets, b.canvas[idx], "cpu",
                    {k: v[rows] for k, v in b.fields.items()},
                    None if b.valid is None else np.asarray(b.valid)[rows],
                    take_geometry(b.geometry, idx), None, b.fmt,
                    None if b.region is None else b.region[idx])
