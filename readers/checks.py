"""Dataset-wide checks and box policies that the converter applies between reading and
writing: image sizes against the image headers, and dropping flagged (crowd / difficult)
boxes. Each returns counts, so that nothing changes without a line in the summary."""
from __future__ import annotations

import numpy as np

from .errors import DatasetError


def check_image_headers(dataset, on_error="raise") -> int:
    """Check each record's size against its image header (Pillow reads the header only; no
    decode): an unreadable header, or a size other than the record's, is a fault.

    Args:
        dataset: a ``readers.Dataset``; records with a fault are removed under ``"skip"`` and
            listed in ``dataset.skipped``.
        on_error: ``"raise"`` (DatasetError naming the image) or ``"skip"``.

    Returns:
        The number of records removed.
    """
    from PIL import Image

    kept, removed = [], 0
    for record in dataset.records:
        reason = None
        try:
            with Image.open(record.path) as im:
                size = im.size
        except Exception as exc:  # Pillow raises several types for a bad header
            reason = f"cannot read the image header ({exc})"
        else:
            if record.width > 0 and record.height > 0 and size != (record.width, record.height):
                reason = (f"the annotation gives the size {record.width}x{record.height}, the "
                          f"image header {size[0]}x{size[1]}")
        if reason is None:
            kept.append(record)
            continue
        if on_error == "raise":
            raise DatasetError(record.path, reason)
        dataset.skipped.append((record.path, reason))
        removed += 1
    dataset.records = kept
    return removed


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
