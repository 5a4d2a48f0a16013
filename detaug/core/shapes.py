"""Symbolic values of a graph, for the output rules ops declare (detaug/graph/trace.py:
``OpSchema.rule``) and the memory plan that reads them (detaug/runtime/gpu/output_sizes.py).

A value is followed from the reader's annotated image sizes without running anything: an image
as its canvas (``hw``, the same for every sample: after resize, letterbox, a fixed crop, mosaic)
or an upper bound of it (``bound``: after a random crop, a flip, a rotation that keeps the
canvas), its channels and bytes per channel; boxes carry the canvas of their images (so an
anchor encoder knows its anchor count); arrays their bytes per sample; a reader's encoded
output the bound of the images it decodes to. None stands for a value whose size is not known
before the graph runs (a resize to a per-sample size).

An op's rule is ``rule(ins, args) -> Out``: ``ins`` the values of its positional inputs (None
where unknown), ``args`` its arguments (defaults filled in; a per-sample argument is its
DataNode). ``Out.values`` holds one value per output (None: unknown); ``Out.working`` the bytes
the op holds per output sample while it runs besides its outputs (mosaic's tiles, say).
"""
from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Img:
    hw: tuple | None        # the canvas of every sample, or None
    bound: tuple | None     # an upper bound of each sample's (h, w), or None (unknown)
    channels: int = 3
    itemsize: int = 1

    def sample_bytes(self):
        hw = self.hw or self.bound
        return None if hw is None else int(hw[0]) * int(hw[1]) * self.channels * self.itemsize


@dataclasses.dataclass(frozen=True)
class Boxes:
    """Boxes with the canvas of their images; ``box_bytes``: what each box carries beyond its
    row (an instance mask: its canvas's pixels), counted per box the reader gives a sample;
    ``masks``: each box carries a bitmap mask of its canvas that moves with it (a reader's
    ``bitmasks``), counted by :meth:`bytes_per_box` on whatever canvas the boxes are on;
    ``polygons``: each box carries polygons that move with it (a reader's ``polygons``), a few
    bytes a box here, but what a consumer may rasterise to a mask of the canvas each
    (:meth:`shapes_to_rasterise`)."""
    canvas: Img | None
    box_bytes: int = 0
    masks: bool = False
    polygons: bool = False

    def bytes_per_box(self):
        """``box_bytes``, plus a mask of the canvas (1 byte a pixel) where ``masks``; None
        where that canvas is not known."""
        if not self.masks:
            return self.box_bytes
        hw = None if self.canvas is None else (self.canvas.hw or self.canvas.bound)
        return None if hw is None else self.box_bytes + int(hw[0]) * int(hw[1])

    def shapes_to_rasterise(self) -> bool:
        """The boxes carry shapes (polygons, bitmap masks) and no mask made of them yet
        (``box_bytes`` 0): a consumer that hands out masks (the torch adapter's list targets)
        makes a plane of the canvas for each box."""
        return (self.polygons or self.masks) and not self.box_bytes

    def on(self, canvas: Img | None) -> "Boxes":
        """These boxes moved to ``canvas`` (a geometric op's output): their masks and polygons
        go along, a mask made for the old canvas (``box_bytes``) does not."""
        return Boxes(canvas, 0, self.masks, self.polygons)


@dataclasses.dataclass(frozen=True)
class Array:
    sample_bytes: int


@dataclasses.dataclass(frozen=True)
class Encoded:
    """A reader's encoded images: ``bound`` an upper bound of the (h, w) they decode to."""
    bound: tuple | None


@dataclasses.dataclass(frozen=True)
class Out:
    """An op's outputs by its rule: one value per output (None: unknown before it runs) and the
    bytes it holds per output sample while it runs, besides them."""
    values: tuple
    working: int = 0


def pair(v):
    """(h, w) from an int or a pair of constants; None for anything else (a DataNode, None)."""
    if isinstance(v, (bool, np.bool_)) or v is None:
        return None
    if isinstance(v, (int, float, np.integer, np.floating)):
        return (int(round(v)), int(round(v))) if v > 0 else None
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(
            isinstance(x, (int, float, np.integer, np.floating)) and x > 0 for x in v):
        return (int(round(v[0])), int(round(v[1])))
    return None


def first_image(ins) -> Img | None:
    return next((v for v in ins if isinstance(v, Img)), None)


def fixed(img: Img, hw) -> Img | None:
    """``img``'s channels and dtype on the canvas ``hw`` (None where ``hw`` is None)."""
    return Img(tuple(hw), None, img.channels, img.itemsize) if hw else None


def within(img: Img, hw) -> Img:
    """``img``'s channels and dtype on a canvas of at most ``hw`` (None: unknown)."""
    return Img(None, None if hw is None else tuple(hw), img.channels, img.itemsize)


def follow(ins, new: Img | None) -> Out:
    """The outputs of an op whose outputs follow its inputs one to one: each image input becomes
    ``new``, each boxes input boxes on ``new``'s canvas, anything else unknown."""
    return Out(tuple(new if isinstance(v, Img) else v.on(new) if isinstance(v, Boxes) else None
                     for v in ins))


def image_rule(fn):
    """A rule from ``fn(img, args) -> Img | None``, the image output from the image input (called
    only where that input is known): images and boxes follow (:func:`follow`)."""
    def rule(ins, args):
        img = first_image(ins)
        return follow(ins, None if img is None else fn(img, args))

    rule.__doc__ = fn.__doc__
    rule.__name__ = getattr(fn, "__name__", "rule")
    return rule


@image_rule
def same_canvas(img, args):
    """The image keeps its canvas (a flip, a colour op, a crop window kept in the canvas): at most
    the input's size."""
    return within(img, img.hw or img.bound)


def unknown(ins, args) -> Out:
    """Outputs whose sizes are known only once the op runs."""
    return Out((None,) * max(len(ins), 1))


def boxes_follow(ins, args) -> Out:
    """A box op: its boxes inputs pass through with their canvas (boxes when it takes none)."""
    kept = tuple(v if isinstance(v, Boxes) else None for v in ins)
    return Out(kept if any(kept) else (Boxes(None),))
