"""Dataset-wide checks and box policies that the converter applies between reading and
writing: image sizes against the image headers, and dropping flagged (crowd / difficult)
boxes. Each returns counts, so that nothing changes without a line in the summary."""
from __future__ import annotations

import os

import numpy as np

from ._common import open_image
from .errors import DatasetError


def check_image_headers(dataset, on_error="raise") -> int:
    """Check each record's image: its header must be readable and give the record's size, and a
    JPEG or PNG must end with its end marker (a truncated file is undecodable although its header
    reads). Header only, plus the file's last bytes; a file without its end marker is decoded
    once to tell data after the marker (which decodes) from a truncation. Only regular files
    within ``readers.limits.MAX_IMAGE_PIXELS`` are opened (a FIFO would block).

    Args:
        dataset: a ``readers.Dataset``; records with a fault are removed under ``"skip"`` and
            listed in ``dataset.skipped``.
        on_error: ``"raise"`` (DatasetError naming the image) or ``"skip"``.

    Returns:
        The number of records removed.
    """
    kept, removed = [], 0
    for record in dataset.records:
        try:
            reason = _image_fault(record)
        except DatasetError as exc:  # not a regular file, over the pixel limit, bad header
            reason = exc.reason
        if reason is None:
            kept.append(record)
            continue
        if on_error == "raise":
            raise DatasetError(record.path, reason)
        dataset.skipped.append((record.path, reason))
        removed += 1
    dataset.records = kept
    return removed


_END_MARKERS = {"JPEG": b"\xff\xd9", "PNG": b"IEND\xaeB`\x82"}


def _image_fault(record):
    """Why the record's image is unusable, or None."""
    with open_image(record.path) as im:
        size = im.size
        if record.width > 0 and record.height > 0 and size != (record.width, record.height):
            return (f"the annotation gives the size {record.width}x{record.height}, the "
                    f"image header {size[0]}x{size[1]}")
        marker = _END_MARKERS.get(im.format)
        if marker is None:
            return None
        with open(record.path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 64))
            if f.read().rstrip(b"\0").endswith(marker):
                return None
        try:  # no end marker: truncated, or data after the marker (decodes)
            im.load()
        except Exception as exc:  # noqa: BLE001  (Pillow raises several types)
            return f"the image data is truncated or corrupt ({type(exc).__name__}: {exc})"
    return None


def count_flagged(dataset, name) -> int:
    """Boxes whose per-box field ``name`` (e.g. ``iscrowd``, ``difficult``) is non-zero."""
    return sum(int(np.count_nonzero(r.fields[name])) for r in dataset.records
               if name in r.fields)


def drop_flagged(dataset, name, what) -> int:
    """Remove the boxes whose field ``name`` is non-zero (with their fields and per-box
    extras), counted in ``dataset.dropped[what]``; return the number of images this left with
    no boxes."""
    dropped = emptied = 0
    for k, record in enumerate(dataset.records):
        flags = record.fields.get(name)
        if flags is None or not np.count_nonzero(flags):
            continue
        keep = np.asarray(flags) == 0
        dataset.records[k] = record.subset(keep)
        dropped += int((~keep).sum())
        emptied += int(not keep.any())
    if dropped:
        dataset.dropped[what] = dataset.dropped.get(what, 0) + dropped
    return emptied
