"""DOTA oriented-box labels <-> canonical records.

Layout: ``root/images/<stem>.<ext>`` and ``root/labelTxt/<stem>.txt``. A label file may open
with ``imagesource:...`` and ``gsd:...`` lines (kept in ``extra["image_keys"]``); each other
line is ``x1 y1 x2 y2 x3 y3 x4 y4 class difficult``: the 4 corners in pixels (continuous
coordinates, docs/design.md), the class by name, ``difficult`` 0 or 1. The record's field
``obb`` (N, 4, 2) float32 holds the corners in the file's order; its box is their enclosing
box clipped to the image (corners may lie outside the image, as DOTA's do; they are kept).
"""
from __future__ import annotations

import os

import numpy as np

from ._common import ErrorSink, box_fault, header_size, real_dir, validate_boxes
from .errors import DatasetError
from .records import Dataset, DetectionRecord
from .writers import WriteReport, _check_labels, _image_base, _relname, place_image
from .yolo import _NUMBER, _relative_images, read_text

# DOTA v1.0's 15 classes, the order of its devkit
DOTA_CLASSES = ("plane", "ship", "storage-tank", "baseball-diamond", "tennis-court",
                "basketball-court", "ground-track-field", "harbor", "bridge", "large-vehicle",
                "small-vehicle", "helicopter", "roundabout", "soccer-ball-field", "swimming-pool")
_HEADER_KEYS = ("imagesource", "gsd")


def read_dota(root, *, classes=None, on_error="raise", progress=None) -> Dataset:
    """Read a DOTA tree.

    Args:
        root: folder holding ``images/`` and ``labelTxt/``.
        classes: the class names in label order; ``None``: DOTA v1.0's 15 classes;
            ``"discover"``: every name the label files use, sorted.
        on_error: ``"raise"`` or ``"skip"``: a bad line (not 8 numbers, a class and an
            optional difficult flag of 0 or 1; an unknown class; a non-finite corner; corners
            whose enclosing box lies outside the image or has no area) drops that box; a label
            file without its image is a fault.
        progress: optional ``callable(done, total)``.

    Returns:
        Dataset with the ``obb`` and ``difficult`` fields; ``image_id`` is the stem.
    """
    root = real_dir(root)
    images, labels = os.path.join(root, "images"), os.path.join(root, "labelTxt")
    if not os.path.isdir(images):
        raise DatasetError(root, f"no images folder {images}")
    sink = ErrorSink(on_error, "read_dota")
    rels = _relative_images(images)
    parsed = [(rel, _parse(os.path.join(labels, os.path.splitext(rel)[0] + ".txt"), sink))
              for rel in rels]
    if classes == "discover":
        names = sorted({row[1] for _, (rows, _) in parsed for row in rows})
    else:
        names = list(DOTA_CLASSES if classes is None else classes)
    index = {n: i for i, n in enumerate(names)}
    dataset = Dataset([], names, root=root)
    for done, (rel, (rows, header)) in enumerate(parsed, 1):
        record = _record(images, labels, rel, rows, header, index, sink, dataset)
        if record is not None:
            dataset.records.append(record)
        if progress is not None:
            progress(done, len(parsed))
    _orphans(labels, rels, sink)
    dataset.skipped = sink.finish()
    return dataset


def _parse(label_file, sink):
    """``(rows, header)``: rows ``(corners (8,), class name, difficult, line number)``."""
    rows, header = [], {}
    if not os.path.isfile(label_file):
        return rows, header
    for number, line in enumerate(read_text(label_file).split("\n"), 1):
        text = line.strip()
        if not text:
            continue
        key = text.split(":", 1)[0]
        if ":" in text and key in _HEADER_KEYS:
            header[key] = text.split(":", 1)[1]
            continue
        parts = text.split()
        if len(parts) not in (9, 10):
            sink.fault(label_file, f"line {number}: expected 'x1 y1 ... x4 y4 class difficult', "
                                   f"got {len(parts)} values")
            continue
        bad = next((p for p in parts[:8] if not _NUMBER.fullmatch(p)), None)
        if bad is not None:
            sink.fault(label_file, f"line {number}: {bad!r:.30} is not a decimal number")
            continue
        difficult = parts[9] if len(parts) == 10 else "0"
        if difficult not in ("0", "1"):
            sink.fault(label_file, f"line {number}: difficult is {difficult!r:.20}, not 0 or 1")
            continue
        rows.append((np.array([float(p) for p in parts[:8]]), parts[8], int(difficult), number))
    return rows, header


def _record(images, labels, rel, rows, header, index, sink, dataset):
    path = os.path.join(images, rel)
    label_file = os.path.join(labels, os.path.splitext(rel)[0] + ".txt")
    try:
        width, height = header_size(path)
    except DatasetError as exc:
        sink.fault(exc.file, exc.reason)
        return None
    known = []
    for corners, name, difficult, number in rows:
        if name not in index:
            sink.fault(label_file, f"line {number}: unknown class {name!r:.40} (not in the "
                                   f"{len(index)} classes)")
            continue
        known.append((corners, index[name], difficult, number))
    pts = np.array([r[0] for r in known], np.float64).reshape(-1, 4, 2)
    xyxy = np.concatenate([pts.min(1), pts.max(1)], 1) if len(pts) else np.zeros((0, 4))
    boxes, bad, clipped = validate_boxes(xyxy, width, height)
    for i in np.flatnonzero(bad):
        sink.fault(label_file, f"line {known[i][3]}: corners' " + box_fault(xyxy[i], width, height))
    dataset.clipped += clipped
    keep = ~bad
    fields = {"obb": pts[keep].astype(np.float32),
              "difficult": np.array([r[2] for r in known], np.uint8)[keep]}
    extra = {"image_keys": dict(header)} if header else {}
    labels_ = np.array([r[1] for r in known], np.int64)[keep]
    image_id = os.path.splitext(rel)[0].replace(os.sep, "/")
    return DetectionRecord(path, width, height, boxes[keep], labels_, fields, image_id, extra)


def _orphans(labels, rels, sink):
    if not os.path.isdir(labels):
        return
    stems = {os.path.splitext(rel)[0] for rel in rels}
    for f in sorted(os.listdir(labels)):
        if f.endswith(".txt") and f[:-4] not in stems:
            sink.fault(os.path.join(labels, f), "label file has no image in images/")


def write_dota(dataset, root, *, link=False, progress=None, dry_run=False) -> WriteReport:
    """Write a DOTA tree (``images/``, ``labelTxt/``, ``classes.txt``).

    Each box is written with its ``obb`` corners (float32's shortest decimals: read back,
    the same values); a box without them (a dataset of plain
    boxes) is written as its 4 corners ``(x0, y0) (x1, y0) (x1, y1) (x0, y1)`` and counted in
    the notes. ``difficult`` (else ``iscrowd``) is the last column. Class names may not hold
    whitespace (DOTA lines are split at it): DatasetError naming the class.
    """
    _check_labels(dataset)
    for k, name in enumerate(dataset.class_names):
        if not name or len(name.split()) != 1 or name != name.strip():
            raise DatasetError(os.path.join(os.fspath(root), "classes.txt"),
                               f"class {k} ({name!r:.40}): a DOTA line names the class in one "
                               "word (no whitespace)")
    report = WriteReport("dota", os.fspath(root), classes=dataset.num_classes)
    base = _image_base(dataset)
    images, labels = os.path.join(root, "images"), os.path.join(root, "labelTxt")
    if not dry_run:
        os.makedirs(images, exist_ok=True)
        os.makedirs(labels, exist_ok=True)
        with open(os.path.join(root, "classes.txt"), "w", encoding="utf-8") as f:
            f.writelines(f"{n}\n" for n in dataset.class_names)
    from_boxes, stems = 0, {}
    for n, record in enumerate(dataset.records, 1):
        rel = _relname(record.path, base)
        stem = os.path.splitext(rel)[0].replace(os.sep, "_")
        if stem in stems:
            raise DatasetError(record.path, f"DOTA stem {stem!r} is also {stems[stem]}'s")
        stems[stem] = record.path
        obb = record.fields.get("obb")
        if obb is None:
            b = record.boxes.astype(np.float64)
            obb = np.stack([b[:, [0, 1]], b[:, [2, 1]], b[:, [2, 3]], b[:, [0, 3]]], 1)
            from_boxes += record.num_boxes
        pts = np.asarray(obb, np.float32).reshape(-1, 8)
        flag = record.fields.get("difficult", record.fields.get("iscrowd"))
        flag = np.zeros(record.num_boxes, np.int64) if flag is None else np.asarray(flag)
        header = [f"{k}:{v}\n" for k, v in record.extra.get("image_keys", {}).items()
                  if k in _HEADER_KEYS]
        lines = header + [" ".join(str(v) for v in row) + f" {dataset.class_names[c]} {int(d)}\n"
                          for row, c, d in zip(pts, record.labels.tolist(), flag)]
        if not dry_run:
            place_image(record.path, os.path.join(images, stem + os.path.splitext(rel)[1]), link)
            with open(os.path.join(labels, stem + ".txt"), "w", encoding="utf-8") as f:
                f.writelines(lines)
        report.boxes += record.num_boxes
        for name, values in record.fields.items():
            if name in ("polygons", "rle", "keypoints"):
                from .instance_writers import instance_loss

                report.count(*instance_loss(name, values))
        if progress is not None:
            progress(n, len(dataset))
    if from_boxes:
        report.notes.append(f"{from_boxes} boxes without oriented corners written as their "
                            "axis-aligned corners")
    report.images = len(dataset)
    return report
