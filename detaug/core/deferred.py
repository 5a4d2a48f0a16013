"""Launches planned on the host over images that do not exist yet, chained.

While a GPU launch is planned ahead (detaug/runtime/gpu/plan_ahead.py), the decode's images are
a :class:`~detaug.core.batch.PlannedImages` (shapes, no pixels) and the warp that ends a
geometric chain is a :class:`~detaug.core.batch.DeferredWarp` (its launch's metadata, host
arrays). A :class:`DeferredLaunch` is the same for any other launch whose metadata the host
plans from sizes and draws alone, over one or more planned values: a mosaic's tiles warped into
their canvases, a mixup's blend, the samples of a batch taken by index (no launch: pointers).
Its result may be the source of a later warp, so a chain such as decode -> mosaic -> affine ->
mixup -> letterbox plans whole, and the device only launches (:func:`realize`). A plain tensor
that a planned op puts on the device stays on the host, marked a :class:`HostUpload`: what the
device side uploads, in the launch's one copy (no other host value of a plan goes up).

A launch object (``DeferredLaunch.launch``) is picklable and holds host arrays only; it answers
``B``, ``shapes`` (B (H, W, C) tuples), ``out_dtype``, ``dense`` and ``run(inputs, stream)``,
which makes its output from its sources made into :class:`~detaug.core.batch.DeviceImages`.
"""
from __future__ import annotations

import numpy as np

from .batch import DeferredWarp, DeviceImages, PlannedImages


class DeferredLaunch(DeferredWarp):
    """A planned launch over the planned values ``sources`` (PlannedImages or deferred
    launches); ``source`` is the first of them. Pixels are read only after :func:`realize`."""

    __slots__ = ("sources",)

    def __init__(self, sources, launch):
        sources = tuple(sources)
        super().__init__(sources[0] if sources else None, launch)
        self.sources = sources


class HostUpload:
    """A plain tensor planned ahead to go up to the device when its launch is realised: the
    mark a planning op (an upload, a device op over plain tensors) puts on what must be
    uploaded. ``arrays``: its host arrays (a tuple); ``ragged``: the value is their list (a
    ragged batch: each sample a view of the one copy), else the one array. Uploaded as a host
    BoxBatch is (:meth:`device_arrays`, then :meth:`on_device`)."""

    __slots__ = ("arrays", "ragged")

    def __init__(self, value):
        self.ragged = isinstance(value, (list, tuple))
        self.arrays = tuple(np.asarray(a) for a in value) if self.ragged else (np.asarray(value),)

    def host(self):
        """The value as the host holds it (what a planning op reads)."""
        return list(self.arrays) if self.ragged else self.arrays[0]

    def device_arrays(self) -> tuple:
        """The host arrays an upload takes (``arrays``)."""
        return self.arrays

    def on_device(self, dev):
        """The value on the device from ``dev``, the upload of :meth:`device_arrays` (in its
        order)."""
        return list(dev) if self.ragged else dev[0]


def host_value(v):
    """``v``, or the host value of a :class:`HostUpload` (what a planning op reads of it)."""
    return v.host() if isinstance(v, HostUpload) else v


def is_planned(raw) -> bool:
    """Whether ``raw`` (what an ImageBatch holds) is images planned ahead, not made yet."""
    return isinstance(raw, (PlannedImages, DeferredWarp))


def sources_of(raw) -> tuple:
    """The planned values a deferred value reads (none for PlannedImages or made images)."""
    if isinstance(raw, DeferredLaunch):
        return raw.sources
    if isinstance(raw, DeferredWarp):
        return (raw.source,)
    return ()


def planned_sources(raw, seen=None) -> list:
    """The PlannedImages under ``raw`` (itself, or the sources of its launches, all the way
    down), each once, in the order they are first met."""
    seen = {} if seen is None else seen
    stack = [raw]
    while stack:
        r = stack.pop()
        if isinstance(r, PlannedImages):
            seen.setdefault(id(r), r)
        else:
            stack.extend(reversed(sources_of(r)))
    return list(seen.values())


def stand_in(raw) -> DeviceImages:
    """The shapes and row pitches of planned images, as a DeviceImages without pointers: what
    a launch is planned on (the pitches of a launch's output are its packed rows; the real
    ones are passed when it runs)."""
    if isinstance(raw, DeviceImages):
        return raw
    if np.dtype(raw.launch.out_dtype) != np.uint8:
        from .errors import NotPlannable

        raise NotPlannable("a launch over planned images that are not uint8 HWC")
    shapes = np.asarray(raw.launch.shapes, np.int64).reshape(-1, 3)
    return DeviceImages(np.zeros(len(shapes), np.uint64), shapes, shapes[:, 1] * shapes[:, 2],
                        None, 0)


def as_device_images(value) -> DeviceImages:
    """A made launch's output (a dense cupy array, a list of cupy arrays, or a DeviceImages)
    as a DeviceImages (its pointers, shapes and pitches; it keeps the arrays alive)."""
    if isinstance(value, DeviceImages):
        return value
    if hasattr(value, "ndim") and not isinstance(value, (list, tuple)):
        value = [value[b] for b in range(value.shape[0])]
    return DeviceImages.from_arrays(list(value))


def realize(raw, decoded: dict, stream, memo: dict):
    """The images ``raw`` plans, made: a PlannedImages is its decode (``decoded``: id -> the
    DeviceImages the decode made), a deferred warp or launch runs once its sources are made (each
    value once per ``memo``, so that two readers of one planned value share its launch). Made
    images are returned as they are."""
    if isinstance(raw, PlannedImages):
        return decoded[id(raw)]
    if not isinstance(raw, DeferredWarp):
        return raw
    out = memo.get(id(raw))
    if out is None:
        inputs = [as_device_images(realize(s, decoded, stream, memo)) for s in sources_of(raw)]
        out = memo[id(raw)] = raw.launch.run(inputs, stream)
        memo.setdefault("keep", []).append((raw, inputs))  # alive until the launches are queued
    return out
