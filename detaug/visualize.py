"""Draw boxes and class names on images, for looking at what a pipeline produced (``detaug demo``
uses it). Needs only numpy and Pillow.

    from detaug.visualize import draw_boxes
    images, boxes = pipe.run()
    t = boxes.per_sample()[0]   # a BoxBatch's, or fn.pad_boxes' PaddedBoxes
    draw_boxes(images.data[0], t["boxes"], t["labels"], pipe.class_names).save("sample.png")

A pipeline that ends in ``fn.normalize(..., mean=m, std=s)`` is drawn with ``draw_boxes(...,
mean=m, std=s)``: the float image, HWC or CHW, is taken back to 0-255.

Boxes are xyxy in the image's continuous pixel coordinates (the image covers [0, W] x [0, H], as
every detaug box); a box's outline runs through the pixels at ``round(corner)`` on its top/left
side and ``round(corner) - 1`` on its bottom/right side, so it lies on the box's own pixels.
Each box's class-name tag is filled with the class colour and written in black or white,
whichever contrasts more with it (WCAG's contrast ratio); tags are placed so that no two
overlap (:func:`place_tags`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, Union

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

import numpy as np

from .core.backend import to_host

# distinct, saturated colours; class k is drawn in PALETTE[k % len(PALETTE)]
PALETTE = ((230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
           (145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212),
           (0, 128, 128), (220, 190, 255), (170, 110, 40), (255, 250, 200), (128, 0, 0),
           (170, 255, 195), (128, 128, 0), (255, 215, 180), (0, 0, 128), (128, 128, 128))
BLACK, WHITE = (0, 0, 0), (255, 255, 255)
RGB = Sequence[int]  # an sRGB colour, 0-255 per channel
ImageLike = Union[np.ndarray, "PILImage"]  # uint8 HWC / HW (or normalised float) array, or Pillow

__all__ = ["PALETTE", "class_color", "contrast_ratio", "text_color", "place_tags", "draw_boxes",
           "draw_grid"]


def class_color(label: int) -> tuple:
    """The outline and tag colour of class ``label``."""
    return PALETTE[int(label) % len(PALETTE)]


def _luminance(rgb: RGB) -> float:
    """WCAG 2 relative luminance of an sRGB colour (0-255 per channel)."""
    c = np.asarray(rgb, np.float64) / 255.0
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(lin @ np.array([0.2126, 0.7152, 0.0722]))


def contrast_ratio(a: RGB, b: RGB) -> float:
    """WCAG 2 contrast ratio of two sRGB colours, from 1 (same) to 21 (black on white)."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def text_color(fill: RGB) -> tuple:
    """Black or white, whichever reads better on ``fill`` (the larger contrast ratio)."""
    return BLACK if contrast_ratio(BLACK, fill) >= contrast_ratio(WHITE, fill) else WHITE


def _overlaps(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_tags(anchors: Sequence, sizes: Sequence, canvas: tuple) -> list:
    """Positions of rectangular tags that do not overlap, each as near its anchor as can be.

    Args:
        anchors: per tag, the box's (x0, y0, x1, y1) in pixels; a tag prefers to sit just above
            the box's top-left corner, then just inside it, then below the box.
        sizes: per tag, its (width, height) in pixels.
        canvas: (width, height) the tags must stay inside.

    Returns:
        per tag, its rectangle (x0, y0, x1, y1) (exclusive far corner). Tags are placed in order;
        each takes the free spot nearest its preferred one (the preferred spots first, then
        every spot of a grid of the tag's own height and width), inside the canvas and clear of
        the tags before it. Only where no free spot is left does a tag overlap another.
    """
    cw, ch = int(canvas[0]), int(canvas[1])
    placed = []
    for (bx0, by0, bx1, by1), (w, h) in zip(anchors, sizes):
        w, h = min(int(w), cw), min(int(h), ch)
        bx0, by0, bx1, by1 = (int(round(float(v))) for v in (bx0, by0, bx1, by1))
        x = min(max(bx0, 0), cw - w)
        preferred = [(x, by0 - h), (x, by0), (x, by1)]
        grid = [(gx, gy) for gy in range(0, ch - h + 1, max(h, 1))
                for gx in sorted({x, *range(0, cw - w + 1, max(w, 1))})]
        grid.sort(key=lambda p: (p[0] - x) ** 2 + (p[1] - (by0 - h)) ** 2)
        spot = None
        for px, py in preferred + grid:
            rect = (px, py, px + w, py + h)
            if 0 <= py and py + h <= ch and 0 <= px and px + w <= cw and \
                    not any(_overlaps(rect, r) for r in placed):
                spot = rect
                break
        if spot is None:  # the canvas is full of tags: the preferred spot, clipped in
            py = min(max(by0 - h, 0), ch - h)
            spot = (x, py, x + w, py + h)
        placed.append(spot)
    return placed


def _pil(image: ImageLike, mean=None, std=None) -> "PILImage":
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    a = to_host(image)  # a GPU pipeline's sample (cupy) comes to the host
    if a.ndim == 3 and a.shape[0] in (1, 3) and a.shape[2] not in (1, 3):
        a = a.transpose(1, 2, 0)  # CHW (a normalize with output_layout="CHW") to HWC
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.dtype != np.uint8:
        if not np.issubdtype(a.dtype, np.floating) or mean is None or std is None:
            raise TypeError(f"draw_boxes: image must be uint8 HWC (got {a.dtype}), or float from "
                            "fn.normalize with the mean= and std= it was normalised with")
        # fn.normalize gave (x - mean) / std: undo it, back to 0-255
        m, d = (np.asarray(v, np.float64).reshape(-1) for v in (mean, std))
        a = np.clip(np.rint(a.astype(np.float64) * d + m), 0, 255).astype(np.uint8)
    elif mean is not None or std is not None:
        raise ValueError("draw_boxes: mean/std undo fn.normalize; this image is uint8 already")
    return Image.fromarray(np.ascontiguousarray(a)).convert("RGB")


def draw_boxes(image: ImageLike, boxes: Any, labels: Any = None,
               class_names: Sequence[str] | None = None, *, width: int = 2,
               tags: bool = True, mean: Sequence[float] | None = None,
               std: Sequence[float] | None = None) -> "PILImage":
    """A Pillow RGB image: ``image`` with ``boxes`` outlined and tagged with their class names.

    Args:
        image: uint8 (H, W, 3) or (H, W) array (a pipeline's sample, on the host or the GPU),
            or a Pillow image; or fn.normalize's float output, (H, W, C) or (C, H, W) (C of 1 or 3, the
            axes told apart by where C sits) with ``mean`` and ``std``, drawn as
            ``x * std + mean`` rounded and clipped to 0-255; not modified.
        boxes: (N, 4) xyxy in the image's pixels.
        labels: (N,) class indices (None: all 0, no tags).
        class_names: name of each label (a label outside it is written as its number).
        width: outline width in pixels.
        tags: write the class names.
        mean, std: the per-channel ``mean`` and ``std`` a float image was normalised with
            (both required for one, refused for a uint8 image).

    Returns:
        a new ``PIL.Image.Image``.
    """
    from PIL import ImageDraw

    im = _pil(image, mean, std).copy()
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    named = labels is not None
    labels = np.zeros(len(boxes), np.int64) if labels is None else np.asarray(labels).reshape(-1)
    if len(labels) != len(boxes):
        raise ValueError(f"draw_boxes: {len(boxes)} boxes but {len(labels)} labels")
    draw = ImageDraw.Draw(im)
    for box, label in zip(boxes, labels):
        x0, y0, x1, y1 = (int(round(v)) for v in box)
        if x1 > x0 and y1 > y0:
            draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=class_color(label), width=width)
    if not (tags and named and len(boxes)):
        return im
    names = [class_names[int(k)] if class_names is not None and 0 <= int(k) < len(class_names)
             else str(int(k)) for k in labels]
    sizes = []
    for name in names:
        l, t, r, b = draw.textbbox((0, 0), name)
        sizes.append((r - min(l, 0) + 4, b - min(t, 0) + 2))
    for rect, name, label in zip(place_tags(boxes, sizes, im.size), names, labels):
        fill = class_color(label)
        draw.rectangle([rect[0], rect[1], rect[2] - 1, rect[3] - 1], fill=fill)
        draw.text((rect[0] + 2, rect[1]), name, fill=text_color(fill))
    return im


def draw_grid(images: Sequence[ImageLike], targets: Sequence[dict],
              class_names: Sequence[str] | None = None, cols: int = 4, cell: int = 256,
              rows: int | None = None) -> "PILImage":
    """A grid of ``cols`` columns of ``cell`` x ``cell`` cells: sample k (an image and its target
    ``{"boxes", "labels"}``, as ``BoxBatch.per_sample()`` gives) sits in cell (k // cols, k % cols),
    resized to the cell with its boxes scaled along. ``rows`` defaults to what the samples fill."""
    from PIL import Image

    rows = -(-len(images) // cols) if rows is None else int(rows)
    grid = Image.new("RGB", (cols * cell, rows * cell), (0, 0, 0))
    for k, (img, tgt) in enumerate(zip(images, targets)):
        if k >= rows * cols:
            break
        im = _pil(img)
        sx, sy = cell / im.width, cell / im.height
        boxes = np.asarray(tgt["boxes"], np.float64).reshape(-1, 4) * [sx, sy, sx, sy]
        im = im.resize((cell, cell), Image.BILINEAR) if im.size != (cell, cell) else im
        grid.paste(draw_boxes(im, boxes, tgt.get("labels"), class_names),
                   ((k % cols) * cell, (k // cols) * cell))
    return grid
