"""YOLO text labels -> canonical records.

Layout: ``root/images/<rel>.<ext>`` with ``root/labels/<rel>.txt`` beside it (optionally one
level of split folder: ``images/<split>/``, ``labels/<split>/``). Each label line is
``class cx cy w h`` normalised by the image size, so the box is
``[(cx - w/2) W, (cy - h/2) H, (cx + w/2) W, (cy + h/2) H]``.
"""
from __future__ import annotations

import os
import re

import numpy as np

from ._common import (IMAGE_EXTENSIONS, ErrorSink, box_fault, header_size, real_dir,
                      validate_boxes)
from . import limits
from .errors import DatasetError
from .records import Dataset, DetectionRecord


def read_yolo(root, classes_file=None, *, split=None, classes=None, on_error="raise",
              progress=None) -> Dataset:
    """Read a YOLO tree.

    Args:
        root: folder holding ``images/`` and ``labels/``.
        classes_file: text file of class names, one a line (label ``i`` is line ``i``). Default:
            ``root/classes.txt``, else the ``names`` of ``root/data.yaml`` (list or ``i: name``).
        split: sub-folder of ``images/`` and ``labels/`` to read (e.g. ``"train"``).
        classes: the class names, given directly (overrides the files).
        on_error: ``"raise"`` or ``"skip"``: a bad line drops that box; an unreadable image
            header or a label file with no image is a fault of that file; a label file that
            is not UTF-8 is a fault that drops its image; images sharing a stem (``b.jpg``,
            ``b.png``, which would share ``labels/b.txt``) are each a fault naming the others,
            and are dropped. A class list that is not UTF-8 always raises.
        progress: optional ``callable(done, total)`` called after each image.

    Returns:
        Dataset (``category_ids[i] == i``), one record per image sorted by relative path;
        ``image_id`` is the relative path without extension. An image without a label file
        has zero boxes. Image sizes come from the image headers (no decode).
    """
    root = real_dir(root)
    images = os.path.join(root, "images", split or "")
    labels = os.path.join(root, "labels", split or "")
    if not os.path.isdir(images):
        raise DatasetError(root, f"no images folder {images}")
    names = list(classes) if classes is not None else _class_names(root, classes_file)
    sink = ErrorSink(on_error, "read_yolo")
    all_rels = _relative_images(images)
    rels = _same_stem(all_rels, images, labels, sink)
    dataset = Dataset([], names, root=root)
    for done, rel in enumerate(rels, 1):
        record = _record(images, labels, rel, len(names), sink, dataset)
        if record is not None:
            dataset.records.append(record)
        if progress is not None:
            progress(done, len(rels))
    _orphans(labels, all_rels, sink)
    dataset.skipped = sink.finish()
    return dataset


def _class_names(root, classes_file):
    path = classes_file or os.path.join(root, "classes.txt")
    if os.path.isfile(path):
        return [line.strip() for line in read_text(path).splitlines() if line.strip()]
    yaml = os.path.join(root, "data.yaml")
    if classes_file is None and os.path.isfile(yaml):
        names = yaml_names(read_text(yaml))
        if names:
            return names
    raise DatasetError(path, "class list not found (need classes.txt or data.yaml 'names')")


def read_text(path) -> str:
    """The file as UTF-8 text; DatasetError naming the file when it is not."""
    try:
        return limits.read_bytes(path, what="text file").decode("utf-8")
    except OSError as exc:
        raise DatasetError(path, f"cannot read the file ({exc})") from None
    except UnicodeDecodeError as exc:
        raise DatasetError(path, f"not UTF-8 text ({exc})") from None


def _same_stem(rels, images, labels, sink):
    """Drop images that share a stem (``b.jpg``, ``b.png``): they would share one label file,
    so which image its boxes belong to is unknown. Each is a fault naming the others."""
    by_stem = {}
    for rel in rels:
        by_stem.setdefault(os.path.splitext(rel)[0], []).append(rel)
    shared = {stem: group for stem, group in by_stem.items() if len(group) > 1}
    for stem, group in shared.items():
        for rel in group:
            others = ", ".join(os.path.join(images, r) for r in group if r != rel)
            sink.fault(os.path.join(images, rel),
                       f"shares the stem {stem!r} with {others}: both would read "
                       f"{_label_path(labels, rel)}; rename one")
    return [rel for rel in rels if os.path.splitext(rel)[0] not in shared]


def yaml_names(text: str):
    """The ``names`` of a simple YOLO data.yaml, without a YAML dependency.

    Understands ``names: [a, 'b']``, a block of ``- a`` items, or a block of ``0: a`` items.
    Returns None when there is no ``names`` key.
    """
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^names\s*:\s*(.*?)\s*$", line)
        if not m:
            continue
        if m.group(1).startswith("["):
            return [_unquote(v) for v in m.group(1).strip("[]").split(",") if v.strip()]
        items = {}
        for item in lines[i + 1:]:
            if item.strip() and not item[:1].isspace():
                break
            keyed = re.match(r"^\s+(?:-\s*|(\d+)\s*:\s*)(.+?)\s*$", item)
            if keyed:
                items[int(keyed.group(1)) if keyed.group(1) else len(items)] = _unquote(keyed.group(2))
        return [items[k] for k in sorted(items)]
    return None


def _unquote(value: str) -> str:
    return value.strip().strip("'\"")


def _relative_images(images):
    rels = []
    for folder, _, files in os.walk(images):
        rels += [os.path.relpath(os.path.join(folder, f), images) for f in files
                 if f.lower().endswith(IMAGE_EXTENSIONS)]
    return sorted(rels)


def _label_path(labels, rel):
    return os.path.join(labels, os.path.splitext(rel)[0] + ".txt")


def _record(images, labels, rel, num_classes, sink, dataset):
    path, label_file = os.path.join(images, rel), _label_path(labels, rel)
    try:
        width, height = header_size(path)
    except DatasetError as exc:
        sink.fault(exc.file, exc.reason)
        return None
    try:
        rows = _read_lines(label_file, num_classes, sink)
    except DatasetError as exc:  # a label file that is not text: the image's boxes are unknown
        sink.fault(exc.file, exc.reason + f"; image {path} dropped")
        return None
    cls = np.array([r[0] for r in rows], dtype=np.int64)
    norm = np.array([r[1] for r in rows], dtype=np.float64).reshape(-1, 4)
    centre, half = norm[:, :2] * (width, height), norm[:, 2:] / 2 * (width, height)
    xyxy = np.concatenate([centre - half, centre + half], axis=1)
    boxes, bad, clipped = validate_boxes(xyxy, width, height)
    for i in np.flatnonzero(bad):
        sink.fault(label_file, f"line {rows[i][2]}: " + box_fault(xyxy[i], width, height))
    dataset.clipped += clipped
    image_id = os.path.splitext(rel)[0].replace(os.sep, "/")
    return DetectionRecord(path, width, height, boxes[~bad], cls[~bad], {}, image_id)


def _read_lines(label_file, num_classes, sink):
    """Rows ``(class, (cx, cy, w, h), line number)``; bad lines go to the sink."""
    if not os.path.isfile(label_file):
        return []
    rows = []
    for number, line in enumerate(read_text(label_file).split("\n"), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            if len(parts) != 5:
                raise ValueError(f"expected 5 values 'class cx cy w h', got {len(parts)}")
            cls, values = int(parts[0]), [float(v) for v in parts[1:]]
        except ValueError as exc:
            sink.fault(label_file, f"line {number}: {exc}")
            continue
        if not 0 <= cls < num_classes:
            sink.fault(label_file, f"line {number}: unknown class {cls} "
                                   f"(the class list has {num_classes})")
            continue
        rows.append((cls, values, number))
    return rows


def _orphans(labels, rels, sink):
    """A label file whose image is missing is a fault too: nothing is dropped silently."""
    if not os.path.isdir(labels):
        return
    expected = {_label_path(labels, rel) for rel in rels}
    for folder, _, files in os.walk(labels):
        for f in sorted(files):
            path = os.path.join(folder, f)
            if f.endswith(".txt") and path not in expected:
                sink.fault(path, "label file has no image in images/")
