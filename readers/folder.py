"""Classification inputs in the manner of DALI's FileReader: class folders, or a file list.

These have one label per image and no boxes, so they are not a ``Dataset`` of detection records
but a :class:`FolderDataset` of parallel ``paths`` and ``labels``.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import numpy as np

from ._common import (IMAGE_EXTENSIONS, ErrorSink, FileIndex, outside_root_reason, real_dir,
                      resolve_under)
from . import limits
from .errors import DatasetError

_LABEL = re.compile(r"[0-9]+")


@dataclass
class FolderDataset:
    """Images with one class label each.

    Attributes:
        paths: absolute image paths, in a stable order (the sample index is the position).
        labels: int64 (N,), 0-based; ``class_names[labels[i]]`` names the class of ``paths[i]``.
        class_names: name of each label.
        root: the folder every path lies under.
        skipped: (file, reason) for each entry skipped under ``on_error="skip"``.
    """

    paths: list
    labels: np.ndarray
    class_names: list
    root: str = ""
    skipped: list = field(default_factory=list)

    def __post_init__(self):
        self.labels = np.asarray(self.labels, dtype=np.int64).reshape(-1)
        if len(self.labels) != len(self.paths):
            raise ValueError(f"{len(self.paths)} paths but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.paths)


def read_folder(root, extensions=IMAGE_EXTENSIONS) -> FolderDataset:
    """Read ``root/<class>/<image>`` folders: one sub-folder a class.

    Args:
        root: the folder holding one sub-folder per class.
        extensions: image file endings to take (compared case-insensitively).

    Returns:
        FolderDataset whose class names are the sorted sub-folder names (label ``i`` is the i-th)
        and whose images are sorted by name within each class (files nested deeper are taken
        too, sorted by relative path).
    """
    root = real_dir(root)
    if not os.path.isdir(root):
        raise DatasetError(root, "not a folder")
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    extensions = tuple(e.lower() for e in extensions)
    paths, labels = [], []
    for label, name in enumerate(classes):
        found = []
        for folder, _, files in os.walk(os.path.join(root, name)):
            found += [os.path.join(folder, f) for f in files if f.lower().endswith(extensions)]
        found.sort()
        paths += found
        labels += [label] * len(found)
    return FolderDataset(paths, labels, classes, root)


def read_file_list(file_list, root=None, *, on_error="raise") -> FolderDataset:
    """Read a DALI-style file list: each line ``relative/path label`` (label a 0-based int).

    Args:
        file_list: the text file. Blank lines and lines starting with ``#`` are ignored; the
            label is the last whitespace-separated token, so paths may hold spaces.
        root: folder the paths are relative to (default: the list's own folder).
        on_error: ``"raise"`` or ``"skip"``; a bad line (no int label, path outside ``root``,
            missing file) is a fault.

    Returns:
        FolderDataset in file order; ``class_names`` are ``"0" .. str(max label)``, since a list
        carries no names.
    """
    file_list = os.fspath(file_list)
    root = real_dir(root if root is not None else os.path.dirname(os.path.abspath(file_list)))
    sink, index = ErrorSink(on_error, "read_file_list"), FileIndex()
    try:
        text = limits.read_bytes(file_list, what="file list").decode("utf-8-sig")
    except FileNotFoundError:
        raise DatasetError(file_list, "file list not found") from None
    except OSError as exc:
        raise DatasetError(file_list, f"cannot read the file list ({exc})") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(file_list, f"not UTF-8 text ({exc})") from None
    # lines end at \n, \r\n or \r (str.splitlines would also split a path at U+2028, ...)
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    paths, labels = [], []
    for number, line in enumerate(lines, 1):
        entry = _entry(line, root, index, f"{file_list}:{number}", sink)
        if entry is not None:
            paths.append(entry[0])
            labels.append(entry[1])
    top = max(labels, default=-1)
    return FolderDataset(paths, labels, [str(i) for i in range(top + 1)], root, sink.finish())


def _entry(line, root, index, where, sink):
    """Parse one line into (path, label), or send its fault to the sink and return None."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    parts = text.rsplit(maxsplit=1)
    if len(parts) != 2 or not _LABEL.fullmatch(parts[1]):  # ASCII: "\u00b2".isdigit() too
        sink.fault(where, f"expected 'path label' with a non-negative int label, got {text!r}")
        return None
    if int(parts[1]) >= limits.MAX_CLASSES:
        sink.fault(where, f"label {parts[1]} is over readers.limits.MAX_CLASSES "
                          f"({limits.MAX_CLASSES:,}): the class list is built up to it")
        return None
    path = resolve_under(root, parts[0])
    if path is None:
        sink.fault(where, outside_root_reason(parts[0], root))
        return None
    if not index.exists(path):
        sink.fault(path, f"image file not found (listed at {where})")
        return None
    return path, int(parts[1])
