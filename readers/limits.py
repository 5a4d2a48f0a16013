"""Resource limits for untrusted dataset files: settable module attributes, read at each call.

A file over its limit is refused with a :class:`~readers.errors.DatasetError` that names the
file, its size and the limit (and the attribute to raise), before any of it is read, so a
huge or hostile file ends in a named error instead of the kernel's out-of-memory killer.

Set them for a run, e.g. ``readers.limits.MAX_ANNOTATION_BYTES = 4 << 30`` (``None``: no limit).

- ``MAX_ANNOTATION_BYTES``: one COCO JSON file (default 1 GiB; COCO train2017's instances
  file is 448 MB, and the parsed JSON needs several times its size in memory).
- ``MAX_LABEL_FILE_BYTES``: one VOC XML, YOLO label file, split file or class list (default
  16 MiB; real ones are a few kB).
- ``MAX_IMAGE_PIXELS``: width x height that an image header may declare where a reader reads
  it (default 178,956,970, Pillow's own hard limit; a 30,000 x 30,000 PNG bomb is refused).
  The pipeline's decoder has its own limit, ``detaug.ops.decode.MAX_PIXELS``.

- ``MAX_CLASSES``: a class label of a file list (``read_file_list``) must be below it (default
  1,048,576): the class list ``"0" .. str(max label)`` is built from the largest.

- ``FOLLOW_SYMLINKS_OUTSIDE_ROOT``: a file name that stays inside the dataset root but is a
  symbolic link to a file outside it is followed (default True: links are the owner's choice);
  set False for datasets from untrusted sources, and such a file is refused like a name with
  ``..`` in it.

Only regular files are read: a FIFO, device or folder in place of an annotation file is
refused (reading a FIFO would block forever).
"""
from __future__ import annotations

import os
import stat

from .errors import DatasetError

MAX_ANNOTATION_BYTES = 1 << 30
MAX_LABEL_FILE_BYTES = 16 << 20
MAX_IMAGE_PIXELS = 178_956_970
MAX_CLASSES = 1 << 20
FOLLOW_SYMLINKS_OUTSIDE_ROOT = True


def check_file(path, limit_name="MAX_LABEL_FILE_BYTES", what="annotation file"):
    """Raise DatasetError unless ``path`` is a regular file within the named limit; return its
    ``os.stat`` result.

    Raises FileNotFoundError (for the caller to name) when it does not exist.
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise DatasetError(path, f"{what} is not a regular file (a folder, FIFO or device); "
                                 "refused")
    limit = globals()[limit_name] if limit_name else None
    if limit is not None and st.st_size > limit:
        raise DatasetError(path, f"{what} is {st.st_size:,} bytes, over the limit of "
                                 f"{limit:,} (readers.limits.{limit_name}); refused")
    return st


def read_bytes(path, limit_name="MAX_LABEL_FILE_BYTES", what="annotation file") -> bytes:
    """The file's bytes after :func:`check_file`; at most the limit is read even if the file
    grows meanwhile."""
    size = check_file(path, limit_name, what).st_size
    limit = globals()[limit_name]
    with open(path, "rb") as f:
        # Sized from the stat: a read of limit + 1 bytes maps and unmaps a 16 MiB buffer for
        # each 1 kB VOC file (two thirds of its read time). A file that grew is read on.
        data = f.read(size + 1)
        if len(data) > size:
            data += f.read() if limit is None else f.read(max(0, limit + 1 - len(data)))
    if limit is not None and len(data) > limit:
        raise DatasetError(path, f"{what} grew over the limit of {limit:,} bytes "
                                 f"(readers.limits.{limit_name}) while read; refused")
    return data


def check_pixels(path, size) -> None:
    """Raise DatasetError when an image header declares more than ``MAX_IMAGE_PIXELS``."""
    limit = MAX_IMAGE_PIXELS
    if limit is not None and size[0] * size[1] > limit:
        raise DatasetError(path, f"image header declares {size[0]} x {size[1]} = "
                                 f"{size[0] * size[1]:,} pixels, over the limit of {limit:,} "
                                 "(readers.limits.MAX_IMAGE_PIXELS): a decompression bomb?; "
                                 "refused")
