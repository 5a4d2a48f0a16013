"""Helpers every reader shares: the error policy, box validation and clipping, path safety,
cheap image-existence checks and header-only image sizes. Each rule is written once, here."""
from __future__ import annotations

import gc
import os
import warnings

import numpy as np

from . import limits
from .errors import DatasetError

# A box may overshoot an edge by float noise (COCO's x + w is often 640.00001); clipping that is
# not worth a count. Overshoot beyond this many pixels is counted in Dataset.clipped.
CLIP_TOLERANCE_PX = 1e-3

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


class ErrorSink:
    """The ``on_error`` policy of one read: raise at the first fault, or record and go on.

    Args:
        on_error: ``"raise"`` (raise DatasetError) or ``"skip"`` (record ``(file, reason)`` in
            ``skipped`` and warn once, at :meth:`finish`, with the count).
        who: name of the reader, for the warning.
    """

    def __init__(self, on_error: str, who: str):
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        self.on_error = on_error
        self.who = who
        self.skipped: list = []

    def fault(self, file, reason: str) -> None:
        """Raise ``DatasetError(file, reason)``, or record it when skipping."""
        if self.on_error == "raise":
            raise DatasetError(file, reason)
        self.skipped.append((str(file), reason))

    def finish(self) -> list:
        """Warn once naming how many items were skipped (the list has them all); return it."""
        if self.skipped:
            file, reason = self.skipped[0]
            warnings.warn(
                f"{self.who}: skipped {len(self.skipped)} bad item(s) under on_error='skip' "
                f"(first: {file}: {reason}); every one is listed in Dataset.skipped",
                stacklevel=3,
            )
        return self.skipped


def validate_boxes(boxes, widths, heights):
    """Find bad boxes and clip the rest to their images.

    A box ``[x0, y0, x1, y1]`` is bad when a coordinate is not finite, when ``x1 <= x0`` or
    ``y1 <= y0`` (reversed, zero or negative size), or when it lies wholly outside its image
    ``[0, W] x [0, H]`` (``x0 >= W or x1 <= 0 or y0 >= H or y1 <= 0``). A good box is clipped to
    ``[0, W] x [0, H]``; a size of 0 means unknown and disables the image checks on that axis.

    Args:
        boxes: (N, 4) xyxy, any float dtype.
        widths, heights: (N,) or scalar image size of each box's image.

    Returns:
        ``(clipped, bad, n_clipped)``: float32 (N, 4) boxes clipped to their images (bad rows are
        left as given), bool (N,) mask of bad boxes, and the number of good boxes moved by more
        than ``CLIP_TOLERANCE_PX``.
    """
    clipped, bad, moved = validate_boxes_mask(boxes, widths, heights)
    return clipped, bad, int(np.count_nonzero(moved))


class gc_paused:
    """Pause the cyclic garbage collector while a reader builds objects none of which is
    garbage (a JSON tree, columns, records: collecting meanwhile only walks them, ~30 % of a
    COCO parse, ~5 % of a VOC read); restored on exit as it was."""

    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            gc.enable()


_ROWS = 1 << 16  # boxes checked at a time by validate_boxes_mask


def validate_boxes_mask(boxes, widths, heights):
    """:func:`validate_boxes`, giving the bool (N,) mask of the good boxes that clipping moved by
    more than ``CLIP_TOLERANCE_PX`` in place of their count. Works ``_ROWS`` boxes at a time, so
    that its temporaries stay a few MB however many boxes there are (for a million boxes they
    had raised read_coco's peak memory past its JSON parse's). ``widths`` / ``heights`` are
    (N,) or scalars, or callables ``f(lo, hi)`` giving the sizes of boxes ``lo:hi`` (a caller
    with a million boxes then never holds a size vector of them all)."""
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    n = len(b)
    clipped = np.empty((n, 4), dtype=np.float32)
    bad, moved = np.empty(n, dtype=bool), np.empty(n, dtype=bool)
    for lo in range(0, n, _ROWS):
        hi = min(lo + _ROWS, n)
        sizes = [_rows(size, lo, hi) for size in (widths, heights)]
        _check_rows(b[lo:hi], sizes, clipped[lo:hi], bad[lo:hi], moved[lo:hi])
    return clipped, bad, moved


def _rows(size, lo, hi):
    """The sizes of boxes ``lo:hi`` (see :func:`validate_boxes_mask`), as (hi - lo,) float64."""
    if callable(size):
        size = size(lo, hi)
    else:
        size = np.asarray(size, dtype=np.float64)
        size = size if size.ndim == 0 else size[lo:hi]
    return np.broadcast_to(np.asarray(size, dtype=np.float64), (hi - lo,))


def _check_rows(b, sizes, clipped, bad, moved):
    """:func:`validate_boxes_mask` on the rows ``b``, into the out arrays given."""
    moved[:] = False
    column, diff = np.empty(len(b)), np.empty(len(b))
    with np.errstate(invalid="ignore"):
        bad[:] = ~np.isfinite(b).all(axis=1)
        bad |= (b[:, 2] <= b[:, 0]) | (b[:, 3] <= b[:, 1])
        for axis, size in enumerate(sizes):
            known = size > 0  # a size of 0 is unknown: no check, no upper clip on that axis
            bad |= known & ((b[:, axis] >= size) | (b[:, axis + 2] <= 0))
            for j in (axis, axis + 2):  # = np.clip(b[:, j], 0, size where known else inf)
                np.maximum(b[:, j], 0.0, out=column)
                np.minimum(column, size, out=column, where=known)
                np.subtract(column, b[:, j], out=diff)
                np.abs(diff, out=diff)
                moved |= diff > CLIP_TOLERANCE_PX
                clipped[:, j] = column
    clipped[bad] = b[bad]  # bad rows are left as given
    moved &= ~bad


def box_fault(box, width, height) -> str:
    """Say in words why :func:`validate_boxes` called ``box`` bad (for error messages)."""
    x0, y0, x1, y1 = (float(v) for v in box)
    text = f"box [{x0:g}, {y0:g}, {x1:g}, {y1:g}]"
    if not np.isfinite([x0, y0, x1, y1]).all():
        return f"{text} has a non-finite coordinate (NaN or inf)"
    if x1 < x0 or y1 < y0:
        return f"{text} has x1 < x0 or y1 < y0"
    if x1 == x0 or y1 == y0:
        return f"{text} has zero width or height"
    return f"{text} lies wholly outside the {width}x{height} image"


def resolve_under(root: str, name: str):
    """Join ``name`` to ``root`` and return the normalised path, or None if it leaves ``root``.

    ``root`` must already be absolute and normalised (``os.path.realpath`` once per dataset).
    The check is lexical (``..`` and absolute names are caught without a system call per file,
    which matters for 100k images); symbolic links inside the root are the owner's choice and
    are followed, even where they point outside it, unless
    ``readers.limits.FOLLOW_SYMLINKS_OUTSIDE_ROOT`` is False (for datasets from untrusted
    sources): then the resolved path must lie under the root too.
    """
    prefix = root.rstrip(os.sep) + os.sep
    if limits.FOLLOW_SYMLINKS_OUTSIDE_ROOT and name and name not in (".", "..") \
            and os.sep not in name and not (os.altsep and os.altsep in name):
        return prefix + name  # a plain name: what normpath(join(root, name)) gives, 3x sooner
    path = os.path.normpath(os.path.join(root, name))
    if path == root or not path.startswith(prefix):
        return None
    if not limits.FOLLOW_SYMLINKS_OUTSIDE_ROOT:  # untrusted datasets: one realpath per file
        real = os.path.realpath(path)
        if real == root or not real.startswith(prefix):
            return None
    return path


def outside_root_reason(name: str, root: str) -> str:
    return f"file name {name!r} points outside the dataset root {root}; refused"


class FileIndex:
    """Existence checks by one directory listing per folder, instead of one stat per file."""

    def __init__(self):
        self._dirs: dict = {}

    def exists(self, path: str) -> bool:
        folder, name = os.path.split(path)
        names = self._dirs.get(folder)
        if names is None:
            try:
                names = set(os.listdir(folder))
            except OSError:
                names = set()
            self._dirs[folder] = names
        return name in names


def header_size(path: str):
    """Return ``(width, height)`` from the image file's header (Pillow opens lazily: no decode).

    Raises:
        DatasetError: the file cannot be identified as an image.
    """
    with open_image(path) as im:
        return im.size


def header_bands(path) -> int:
    """The number of channels the image header declares (1 for grayscale, 3 for RGB, ...).

    Raises:
        DatasetError: the file cannot be identified as an image.
    """
    with open_image(path) as im:
        return len(im.getbands())


def open_image(path):
    """Pillow's lazily opened image (header only), or DatasetError naming the file: a bad
    header, or more pixels than ``readers.limits.MAX_IMAGE_PIXELS`` (a decompression bomb)."""
    from PIL import Image

    try:
        limits.check_file(path, None, "image file")
        im = Image.open(path)
    except DatasetError:
        raise
    except Image.DecompressionBombError as exc:  # over Pillow's own limit (2x MAX_IMAGE_PIXELS)
        raise DatasetError(path, f"image header declares too many pixels ({exc}); refused") \
            from None
    except Exception as exc:  # Pillow raises several types for a bad header
        raise DatasetError(path, f"cannot read the image header ({exc})") from None
    try:
        limits.check_pixels(path, im.size)
    except DatasetError:
        im.close()
        raise
    return im


def real_dir(path) -> str:
    return os.path.realpath(os.fspath(path))


def count_drop(dataset, keep, mask, what):
    """``keep`` without the ``mask`` entries; the ones it held are counted in
    ``dataset.dropped[what]`` (nothing is dropped silently)."""
    n = int((keep & mask).sum())
    if n:
        dataset.dropped[what] = dataset.dropped.get(what, 0) + n
    return keep & ~mask


def group_offsets(owner, n) -> np.ndarray:
    """(n + 1,) offsets of rows grouped by ``owner`` (indices < n, rows sorted by owner)."""
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=offsets[1:])
    return offsets
