"""``readers.voc`` as it was at 050ee4a (one tuple of Python values per object, one
``DetectionRecord`` checked by its constructor per file), frozen here as the reference that
tests/readers/test_voc_parity.py holds the columnar reader to: same records, same faults, same counts.
Only the imports changed (absolute), and the functions and constants the columnar reader kept
word for word are imported from it rather than copied. Not a test module (no ``test_`` prefix).

Pascal VOC XML -> canonical records (lxml, parsed without entity expansion or network).

VOC boxes are 1-based inclusive integer pixel indices; pixel ``i`` covers ``[i - 1, i]`` in
continuous coordinates, so ``(xmin, ymin, xmax, ymax)`` maps to
``[xmin - 1, ymin - 1, xmax, ymax]`` (float32). ``xmax == width`` maps to ``x1 == width``.
"""
from __future__ import annotations

import os
import sys

import numpy as np
from lxml import etree

from readers._common import (ErrorSink, FileIndex, box_fault, count_drop, group_offsets,
                             header_size, outside_root_reason, real_dir, resolve_under,
                             validate_boxes)
from readers import limits
from readers.errors import DatasetError
from readers.records import Dataset, DetectionRecord
# What the columnar reader kept unchanged is taken from it, not copied:
from readers.voc import (_COORDS, VOC_CLASSES, _image_path, _list_ids, _size, read_voc_classes,
                         safe_parser)


# Elements with a canonical slot; every other child of <annotation> / <object> is kept in
# ``extra["image_keys"]`` / ``extra["box_keys"]`` (e.g. <source>, <segmented>, <pose>, <part>).
_IMAGE_TAGS = {"folder", "filename", "size", "object"}
_OBJECT_TAGS = {"name", "bndbox", "difficult", "truncated"}


def read_voc(root, split="trainval", classes=None, *, skip_difficult=False, on_error="raise",
             check_images=True, progress=None) -> Dataset:
    """The old ``readers.voc.read_voc`` (its arguments and result: the reader's docstring)."""
    if isinstance(classes, os.PathLike) or (isinstance(classes, str) and classes != "discover"):
        classes = read_voc_classes(classes)  # (a str is a path: never a list of its letters)
    root = real_dir(root)
    sink = ErrorSink(on_error, "read_voc")
    parsed = _parse_all(root, _list_ids(root, split, sink), sink, check_images, progress)
    if classes == "discover":
        classes = sorted({o[0] for p in parsed for o in p["objects"] if o[4] is None})
    names = list(VOC_CLASSES if classes is None else classes)
    if len(set(names)) < len(names):  # objects name their class: two would read as one
        raise ValueError(f"read_voc: classes names {sorted({n for n in names if names.count(n) > 1})}"
                         " more than once")
    dataset = Dataset([], names, root=root)
    dataset.records = _build(parsed, names, skip_difficult, sink, dataset)
    dataset.skipped = sink.finish()
    return dataset


def _parse_all(root, ids, sink, check_images, progress):
    parser, index = safe_parser(), FileIndex()
    images = os.path.join(root, "JPEGImages")
    parsed = []
    for done, image_id in enumerate(ids, 1):
        xml_path = resolve_under(os.path.join(root, "Annotations"), image_id + ".xml")
        if xml_path is None:
            sink.fault(image_id, outside_root_reason(image_id, root))
            continue
        try:
            p = _parse_file(xml_path, image_id, images, parser, index, check_images)
        except DatasetError as exc:
            sink.fault(exc.file, exc.reason)
            p = None
        if p is not None:
            parsed.append(p)
        if progress is not None:
            progress(done, len(ids))
    return parsed


def _parse_file(xml_path, image_id, images, parser, index, check_images):
    """Parse one annotation file; raise DatasetError for a fault of the whole file."""
    try:
        data = limits.read_bytes(xml_path)
    except FileNotFoundError:
        raise DatasetError(xml_path, "annotation file not found") from None
    except OSError as exc:
        raise DatasetError(xml_path, f"cannot read the annotation file ({exc})") from None
    try:
        ann = etree.fromstring(data, parser)
    except (etree.XMLSyntaxError, OSError, ValueError) as exc:  # OSError: bad bytes for encoding
        raise DatasetError(xml_path, f"malformed XML ({exc})") from None
    if ann is None:
        raise DatasetError(xml_path, "malformed XML (no root element)")
    if ann.tag != "annotation":
        raise DatasetError(xml_path, f"root element is <{ann.tag}>, not <annotation>")
    # Changed since the freeze: an entity reference, whose text was lost, is refused
    entity = next(ann.iter(etree.Entity), None)
    if entity is not None:
        raise DatasetError(xml_path, f"entity reference {entity.text} in <{entity.getparent().tag}>: "
                                     "entities are not expanded (for safety), so the text around "
                                     "it would be read without it; write the text itself")
    # One pass over the children (ElementPath's findtext("size/width") costs more than the rest)
    filename = size = None
    objects, counts = [], {"filename": 0, "size": 0}
    for child in ann:
        tag = child.tag
        if tag == "object":
            objects.append(child)
        elif tag in counts:
            counts[tag] += 1
            if tag == "filename" and filename is None:
                filename = child
            elif tag == "size" and size is None:
                size = child
    twice = next((t for t in ("filename", "size") if counts[t] > 1), None) or \
        _repeated(size, ("width", "height"), "size/")
    if twice:
        raise DatasetError(xml_path, f"<{twice}> is given twice: which one counts is unknown")
    path = _image_path(None if filename is None else filename.text, image_id, images, index,
                       xml_path, check_images)
    width, height = (_size(None if size is None else size.findtext(key), xml_path, key)
                     for key in ("width", "height"))
    if width <= 0 or height <= 0:
        width, height = header_size(path)
    return {"xml": xml_path, "id": image_id, "path": path, "width": width, "height": height,
            "objects": [_object(obj) for obj in objects],
            "image_keys": element_dict(ann, _IMAGE_TAGS)}


def element_value(el):
    """An element as JSON-like data: its stripped text, or a dict of its children (a tag
    that repeats gives a list)."""
    children = [c for c in el if isinstance(c.tag, str)]  # comments have a non-str tag
    if not children:
        # Interned: a dataset repeats a few values ("Unspecified", "0") 100,000 times
        return sys.intern((el.text or "").strip())
    return element_dict(el, ())


def element_dict(el, skip):
    out = {}
    for child in el:
        if not isinstance(child.tag, str) or child.tag in skip:
            continue
        value, tag = element_value(child), sys.intern(child.tag)
        if tag not in out:
            out[tag] = value
        elif isinstance(out[tag], list):  # element_value never gives a list itself
            out[tag].append(value)
        else:
            out[tag] = [out[tag], value]
    return out


def _repeated(el, tags, prefix=""):
    """The first of ``tags`` that ``el`` has more than one child of (with ``prefix``), or None."""
    if el is None:
        return None
    found = [c.tag for c in el if c.tag in tags]
    return next((prefix + t for t in tags if found.count(t) > 1), None)


def _object(obj):
    """(name, [xmin, ymin, xmax, ymax] as given, difficult, truncated, fault or None,
    dict of the other elements).

    Reads the direct children and the ``bndbox`` children in one pass (4x faster than a
    findtext per key); nested ``<part>`` elements (VOC person layout) are not descended into.
    The coordinates are the ``bndbox``'s only: a stray ``<xmin>`` directly under ``<object>``
    is one of the other elements (it overrode the box when it came after the ``bndbox``, as
    write_voc puts the other elements, so a VOC -> VOC round trip changed the box).
    """
    values, box, twice, others = {}, {}, None, []
    for child in obj:
        tag = child.tag
        if tag == "bndbox":
            if "bndbox" in values:
                twice = "bndbox"
            values["bndbox"] = None
            for coord in child:
                if coord.tag in box and coord.tag in _COORDS:
                    twice = f"bndbox/{coord.tag}"
                box[coord.tag] = coord.text
        else:
            if tag in _OBJECT_TAGS:
                if tag in values:
                    twice = tag
            elif isinstance(tag, str):  # (a comment's tag is a function)
                others.append(child)
            values[tag] = child.text
    name = sys.intern((values.get("name") or "").strip())
    if not name:  # also what an unexpanded entity reference leaves behind
        return name, _NAN_BOX, 0, 0, "object without a <name>", {}
    if twice:
        return name, _NAN_BOX, 0, 0, f"object {name!r}: <{twice}> is given twice", {}
    try:
        coords = tuple([float(box[k]) for k in _COORDS])
    except (KeyError, TypeError, ValueError):
        given = [box.get(k) for k in _COORDS]
        return name, _NAN_BOX, 0, 0, f"object {name!r}: bndbox is not 4 numbers {given}", {}
    flags = [0, 0]
    for i, key in enumerate(("difficult", "truncated")):
        text = (values.get(key) or "0").strip()
        if text not in ("0", "1"):
            return name, coords, 0, 0, f"object {name!r}: <{key}> is {text!r}, not 0 or 1", {}
        flags[i] = int(text)
    return name, coords, flags[0], flags[1], None, element_dict(others, ())


_NAN_BOX = [float("nan")] * 4


def _build(parsed, names, skip_difficult, sink, dataset):
    """All files' objects in one table: 1-based inclusive -> continuous, validate and clip in
    one vectorised pass, then slice back into one record per file."""
    objects = [o for p in parsed for o in p["objects"]]
    counts = np.array([len(p["objects"]) for p in parsed], dtype=np.int64)
    owner = np.repeat(np.arange(len(parsed)), counts)
    sizes = np.array([(p["width"], p["height"]) for p in parsed] or [(0, 0)], dtype=np.float64)
    xyxy = np.array([o[1] for o in objects], dtype=np.float64).reshape(-1, 4) - (1, 1, 0, 0)
    w, h = sizes[owner, 0], sizes[owner, 1]
    boxes, bad, _ = validate_boxes(xyxy, w, h)
    label_of = {n: i for i, n in enumerate(names)}
    labels = np.array([label_of.get(o[0], -1) for o in objects], dtype=np.int64)
    difficult = np.array([o[2] for o in objects], dtype=np.uint8)
    keep = ~bad & (labels >= 0) & np.array([o[4] is None for o in objects], dtype=bool)
    for i in np.flatnonzero(~keep):
        sink.fault(parsed[owner[i]]["xml"], _fault(objects[i], labels[i], xyxy[i], w[i], h[i],
                                                   len(names)))
    good = np.bincount(owner[keep], minlength=len(parsed))
    faulty = np.bincount(owner[~keep], minlength=len(parsed))
    dataset.emptied = int(((faulty > 0) & (good == 0)).sum())
    if skip_difficult:
        keep = count_drop(dataset, keep, difficult > 0, "difficult objects (skip_difficult)")
    dataset.clipped += validate_boxes(xyxy[keep], w[keep], h[keep])[2]
    fields = {"difficult": difficult,
              "truncated": np.array([o[3] for o in objects], dtype=np.uint8)}
    box_keys = [objects[i][5] for i in np.flatnonzero(keep)] if any(o[5] for o in objects) \
        else None
    return _records(parsed, owner[keep], boxes[keep], labels[keep],
                    {k: v[keep] for k, v in fields.items()}, box_keys)


def _fault(obj, label, xyxy, width, height, n_classes):
    if obj[4] is not None:
        return obj[4]
    if label < 0:
        return f"object {obj[0]!r}: unknown class (not in the {n_classes} given classes)"
    return f"object {obj[0]!r}: " + box_fault(xyxy, int(width), int(height))


def _records(parsed, owner, boxes, labels, fields, box_keys):
    offsets = group_offsets(owner, len(parsed))
    records = []
    for k, p in enumerate(parsed):
        s, e = int(offsets[k]), int(offsets[k + 1])
        extra = {"image_keys": p["image_keys"]} if p["image_keys"] else {}
        if box_keys is not None:
            extra["box_keys"] = box_keys[s:e]
        records.append(DetectionRecord(p["path"], p["width"], p["height"], boxes[s:e],
                                       labels[s:e], {n: v[s:e] for n, v in fields.items()},
                                       p["id"], extra))
    return records
