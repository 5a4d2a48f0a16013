"""Canonical records -> COCO JSON, Pascal VOC XML, YOLO text. Used by ``detaug-convert``.

Each writer inverts its reader's box mapping (docs/design.md coordinates):
COCO ``[x, y, w, h] = [x0, y0, x1 - x0, y1 - y0]``; VOC ``xmin = round(x0) + 1``,
``ymin = round(y0) + 1``, ``xmax = round(x1)``, ``ymax = round(y1)``; YOLO
``cx = (x0 + x1) / 2W``, ``cy = (y0 + y1) / 2H``, ``w = (x1 - x0) / W``, ``h = (y1 - y0) / H``.
Images are never re-encoded: they are copied (``shutil.copy2``) or hard-linked (``link=True``).
Each writer returns a :class:`WriteReport` that names everything the target could not hold.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass, field

import numpy as np
from lxml import etree

from ._common import IMAGE_EXTENSIONS, header_bands, header_size
from .errors import DatasetError
from .instance_writers import (coco_categories_keypoints, coco_instance_keys, instance_loss,
                               is_instance_field, mask_area)

# Digits kept in COCO JSON coordinates: a shift of at most 5e-5 px, and "10.5" stays "10.5"
# instead of the float32 expansion "10.499999523162842".
COCO_DECIMALS = 4
YOLO_DECIMALS = 6
# Per-box fields each target stores (anything else is reported as not held).
_HELD_FIELDS = {"coco": None, "voc": {"difficult", "truncated", "rle"}, "yolo": set()}
# Keys that COCO entries model; extra keys of the same name are never written over them.
_COCO_IMAGE_KEYS = {"id", "file_name", "width", "height"}
_COCO_ANNOTATION_KEYS = {"id", "image_id", "category_id", "bbox", "iscrowd", "segmentation"}
_XML_NAME = re.compile(r"^(?![Xx][Mm][Ll])[A-Za-z_][\w.-]*$")
_XML_BAD_CHARS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


@dataclass
class WriteReport:
    """What a writer wrote, and what the target format could not hold.

    Attributes:
        format: "coco", "voc", "yolo" or "tfrecord" (``readers.tfrecord_od``).
        path: the file or folder written.
        images, boxes, classes: counts written.
        not_held: ``{description: count}`` of things left out or changed because the target
            cannot hold them, e.g. ``{"segmentation on annotations": 123}``.
        max_shift_px: largest distance, in pixels, that rounding moved any box coordinate.
        notes: other facts a user should know (ids renumbered, boxes widened to 1 px, ...).
    """

    format: str
    path: str
    images: int = 0
    boxes: int = 0
    classes: int = 0
    not_held: dict = field(default_factory=dict)
    max_shift_px: float = 0.0
    notes: list = field(default_factory=list)

    def count(self, what: str, n: int) -> None:
        if n:
            self.not_held[what] = self.not_held.get(what, 0) + int(n)

    def summary_lines(self) -> list:
        """Human-readable lines for the converter's summary."""
        name = FORMAT_NAMES.get(self.format, self.format.upper())
        lines = [f"wrote {self.images} images, {self.boxes} boxes, {self.classes} classes "
                 f"as {name} to {self.path}",
                 f"largest rounding shift: {self.max_shift_px:.4g} px"]
        lines += [f"{what}: {n} not written as such: {name} cannot hold it"
                  for what, n in self.not_held.items()]
        return lines + self.notes


# each format as its own documentation writes it (TFRecord, not TFRECORD)
FORMAT_NAMES = {"coco": "COCO", "voc": "VOC", "yolo": "YOLO", "tfrecord": "TFRecord",
                "yolo-seg": "YOLO-seg", "yolo-pose": "YOLO-pose", "yolo-obb": "YOLO-OBB",
                "dota": "DOTA"}


def write_coco(dataset, path, *, images_dir=None, link=False, progress=None,
               dry_run=False) -> WriteReport:
    """Write a COCO instances JSON file.

    Args:
        dataset: a ``readers.Dataset`` with contiguous 0-based labels.
        path: the JSON file to write.
        images_dir: when given, images are copied there and ``file_name`` is relative to it;
            otherwise ``file_name`` is relative to the folder all images share (named in notes).
        link: hard-link instead of copying.
        progress: optional ``callable(done, total)``.
        dry_run: build the report only; no file or folder is written or created.

    Returns:
        WriteReport. Categories keep ``dataset.category_ids`` and names; int image ids are kept
        when unique, otherwise images are numbered 1..N (``file_name`` kept); annotations keep
        their ``annotation_id`` when every box has a unique one, else are numbered 1..M;
        ``area`` is the source's where it has one (a COCO mask area), else ``w * h``; the
        fields ``difficult``/``truncated`` (and any other per-box field) ride as extra
        annotation keys; ``extra["segmentation"]`` is written where present, and every other
        extra unchanged: ``box_keys`` into annotations, ``image_keys`` into images,
        ``Dataset.extra`` (``info``, ``licenses``, ``category_keys``) at the top / categories.
    """
    _check_labels(dataset)
    report = WriteReport("coco", os.fspath(path), classes=dataset.num_classes)
    base = _image_base(dataset)
    image_ids = _coco_image_ids(dataset, report)
    ann_ids = _coco_annotation_ids(dataset, report)
    images, annotations, n = [], [], 0
    if images_dir is not None and not dry_run:  # even with no image: a dataset reads back
        os.makedirs(images_dir, exist_ok=True)
    for k, (record, image_id) in enumerate(zip(dataset.records, image_ids)):
        name = _relname(record.path, base)
        if images_dir is not None and not dry_run:
            place_image(record.path, os.path.join(images_dir, name), link)
        width, height = _size(record)
        entry = {"id": image_id, "file_name": name.replace(os.sep, "/"),
                 "width": width, "height": height}
        entry.update({k: v for k, v in record.extra.get("image_keys", {}).items()
                      if k not in _COCO_IMAGE_KEYS})
        images.append(entry)
        annotations += _coco_annotations(record, image_id, ann_ids[n:n + record.num_boxes],
                                         dataset.category_ids, report)
        n += record.num_boxes
        _unheld_extra(record, {"segmentation", "box_keys", "image_keys"}, report)
        if progress is not None:
            progress(k + 1, len(dataset))
    if images_dir is None:
        report.notes.append(f"file_name entries are relative to {base}")
    category_keys = dataset.extra.get("category_keys") or [{}] * dataset.num_classes
    categories = [{"id": int(i), "name": str(name), **{k: v for k, v in keys.items()
                                                        if k not in ("id", "name")}}
                  for i, name, keys in zip(dataset.category_ids, dataset.class_names,
                                           category_keys)]
    coco_categories_keypoints(dataset, categories)
    top = {k: v for k, v in dataset.extra.items()
           if k not in ("category_keys", "images", "annotations", "categories")}
    if not dry_run:
        _write_json(path, {**top, "images": images, "annotations": annotations,
                           "categories": categories})
    report.images, report.boxes = len(images), len(annotations)
    return report


def _coco_image_ids(dataset, report):
    ids = [r.image_id for r in dataset.records]
    if all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in ids) \
            and len(set(ids)) == len(ids):
        return [int(i) for i in ids]
    report.notes.append(f"image ids renumbered 1..{len(ids)} (COCO ids are ints); "
                        "file_name kept")
    return list(range(1, len(ids) + 1))


def _coco_annotation_ids(dataset, report):
    have = [r.fields.get("annotation_id") for r in dataset.records]
    total = sum(r.num_boxes for r in dataset.records)
    if all(h is not None for h in have):
        ids = np.concatenate([np.asarray(h, np.int64) for h in have] or [np.zeros(0, np.int64)])
        if len(np.unique(ids)) == total and (ids >= 0).all():
            return ids.tolist()
    if total:
        report.notes.append(f"annotation ids numbered 1..{total}")
    return list(range(1, total + 1))


def _coco_annotations(record, image_id, ann_ids, category_ids, report):
    b = record.boxes.astype(np.float64)
    xywh = np.round(np.concatenate([b[:, :2], b[:, 2:] - b[:, :2]], axis=1), COCO_DECIMALS)
    _shift(report, np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1) - b)
    area = np.round(xywh[:, 2] * xywh[:, 3], COCO_DECIMALS)
    crowd = record.fields.get("iscrowd", np.zeros(record.num_boxes, np.uint8))
    others = {k: np.asarray(v).tolist() for k, v in record.fields.items()
              if k not in ("iscrowd", "annotation_id") and not is_instance_field(k)}
    if "obb" in record.fields:
        report.count(*instance_loss("obb", record.fields["obb"]))
    segmentation = record.extra.get("segmentation") or [None] * record.num_boxes
    box_keys = record.extra.get("box_keys") or [{}] * record.num_boxes
    out = []
    for i in range(record.num_boxes):
        ann = {"id": ann_ids[i], "image_id": image_id,
               "category_id": int(category_ids[record.labels[i]]), "bbox": xywh[i].tolist(),
               "area": float(area[i]), "iscrowd": int(crowd[i])}
        ann.update({k: v[i] for k, v in others.items()})
        keys = {k: v for k, v in (box_keys[i] or {}).items() if k not in _COCO_ANNOTATION_KEYS}
        if "area" in keys and not _is_number(keys["area"]):
            report.count("non-numeric area on annotations (written as w * h)", 1)
            del keys["area"]
        ann.update(keys)
        if segmentation[i] is not None:
            ann["segmentation"] = segmentation[i]
        shapes = coco_instance_keys(record, i)
        ann.update(shapes)
        if "area" not in keys and "segmentation" in shapes:  # COCO's area: the mask's
            ann["area"] = float(mask_area(record, i))
        out.append(ann)
    return out


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def write_voc(dataset, root, *, split="trainval", link=False, progress=None,
              dry_run=False) -> WriteReport:
    """Write a Pascal VOC tree: ``Annotations/<id>.xml``, ``JPEGImages/``,
    ``ImageSets/Main/<split>.txt``, and ``classes.txt`` (the class names in label order).

    Args:
        dataset: a ``readers.Dataset`` with contiguous 0-based labels.
        root: the folder to write (created).
        split: name of the id list written under ``ImageSets/Main``.
        link: hard-link images instead of copying.
        progress: optional ``callable(done, total)``.
        dry_run: build the report only; no file or folder is written or created.

    Returns:
        WriteReport. ``xmin = round(x0) + 1``, ``ymin = round(y0) + 1``, ``xmax = round(x1)``,
        ``ymax = round(y1)`` (round half to even); a box that would round to zero size is
        widened to 1 px (counted in notes); ``max_shift_px`` is the largest rounding move.
        The id of an image is its ``image_id`` where that is a string, else its file stem.
        Crowd boxes are written with ``difficult=1`` (VOC evaluation ignores them, as COCO
        ignores crowds) and counted under ``not_held``; so are ids, segmentation, category ids.
        ``extra["image_keys"]`` / ``extra["box_keys"]`` whose values are text (or nested dicts
        and lists of text, as the VOC reader gives: ``<source>``, ``<segmented>``, ``<pose>``,
        ``<part>``, ...) are written back as elements; others (numbers such as COCO's ``area``
        or ``license``) are counted under ``not_held``. ``<pose>`` defaults to Unspecified;
        ``<depth>``: the header's band count; masks (``rle``): ``SegmentationObject/<id>.png``.
    """
    _check_labels(dataset)
    _check_class_names(dataset, "voc", os.path.join(os.fspath(root), "classes.txt"))
    report = WriteReport("voc", os.fspath(root), classes=dataset.num_classes)
    base, stems, widened = _image_base(dataset), {}, 0
    for folder in ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main")):
        if not dry_run:
            os.makedirs(os.path.join(root, folder), exist_ok=True)
    for k, record in enumerate(dataset.records):
        stem = _voc_stem(record, base)
        if not stem or stem != stem.strip() or "\n" in stem or "\r" in stem:
            raise DatasetError(record.path, f"VOC id {stem!r} is empty, has a line break, or "
                                            "starts or ends with whitespace: a split file "
                                            "line cannot hold it; rename the image")
        if stem in stems:
            raise DatasetError(record.path, f"VOC id {stem!r} is also the id of {stems[stem]}")
        stems[stem] = record.path
        filename = stem + os.path.splitext(record.path)[1]
        xml, n_widened = _voc_xml(record, filename, dataset.class_names, report)
        widened += n_widened
        if not dry_run:
            place_image(record.path, os.path.join(root, "JPEGImages", filename), link)
            etree.ElementTree(xml).write(os.path.join(root, "Annotations", stem + ".xml"),
                                         pretty_print=True, encoding="utf-8")
        report.boxes += record.num_boxes
        if progress is not None:
            progress(k + 1, len(dataset))
    if not dry_run:
        with open(os.path.join(root, "ImageSets", "Main", f"{split}.txt"), "w",
                  encoding="utf-8") as f:
            f.writelines(s + "\n" for s in stems)
        # VOC files carry no class list; this sidecar lets detaug-convert read the tree back
        # with the same classes in the same order (read_voc(root, classes=<its lines>)).
        with open(os.path.join(root, "classes.txt"), "w", encoding="utf-8") as f:
            f.writelines(f"{name}\n" for name in dataset.class_names)
    report.images = len(stems)
    if widened:
        report.notes.append(f"{widened} boxes under 1 px widened to 1 px by integer rounding")
    if any("rle" in r.fields for r in dataset.records):
        from .voc_masks import write_object_pngs

        write_object_pngs(dataset.records, stems, root, split, dry_run)
    _unheld_common(dataset, report, "voc")
    return report


def _voc_stem(record, base):
    if isinstance(record.image_id, str) and record.image_id:
        return record.image_id.replace("/", "_").replace(os.sep, "_")
    return os.path.splitext(_relname(record.path, base))[0].replace(os.sep, "_")


def _voc_xml(record, filename, class_names, report):
    width, height = _size(record)
    ints, widened = voc_integer_boxes(record.boxes, width, height)
    _shift(report, ints - np.array([1, 1, 0, 0]) - record.boxes.astype(np.float64))
    ann = etree.Element("annotation")
    _sub(ann, "folder", "JPEGImages")
    _sub(ann, "filename", filename)
    image_keys = {k: v for k, v in record.extra.get("image_keys", {}).items()
                  if k not in ("folder", "filename", "size", "object")}
    later = {k: image_keys.pop(k) for k in ("segmented",) if k in image_keys}
    _xml_extra(ann, image_keys, "images", report)
    size = etree.SubElement(ann, "size")
    for key, value in (("width", width), ("height", height),
                       ("depth", header_bands(record.path))):
        _sub(size, key, value)
    _xml_extra(ann, later, "images", report)
    box_keys = record.extra.get("box_keys") or [{}] * record.num_boxes
    crowd = record.fields.get("iscrowd", np.zeros(record.num_boxes, np.uint8))
    difficult = record.fields.get("difficult", np.zeros(record.num_boxes, np.uint8))
    truncated = record.fields.get("truncated", np.zeros(record.num_boxes, np.uint8))
    for i in range(record.num_boxes):
        obj = etree.SubElement(ann, "object")
        _sub(obj, "name", class_names[record.labels[i]])
        keys = {k: v for k, v in (box_keys[i] or {}).items()
                if k not in ("name", "bndbox", "truncated", "difficult")}
        pose = keys.pop("pose", "Unspecified")
        _xml_extra(obj, {"pose": pose}, "annotations", report)
        _sub(obj, "truncated", int(truncated[i]))
        _sub(obj, "difficult", int(difficult[i] or crowd[i]))
        box = etree.SubElement(obj, "bndbox")
        for key, value in zip(("xmin", "ymin", "xmax", "ymax"), ints[i]):
            _sub(box, key, int(value))
        _xml_extra(obj, keys, "annotations", report)
    return ann, widened


def _xml_ready(key, value):
    """Whether ``key: value`` can be written as XML elements and read back the same."""
    if not isinstance(key, str) or not _XML_NAME.match(key):
        return False
    if isinstance(value, str):
        return not _XML_BAD_CHARS.search(value)
    if isinstance(value, dict):
        return all(_xml_ready(k, v) for k, v in value.items())
    if isinstance(value, list):
        return len(value) > 1 and all(not isinstance(v, list) and _xml_ready(key, v)
                                      for v in value)
    return False


def _xml_extra(parent, keys, where, report):
    """Write each XML-ready ``key: value`` under ``parent``; count the others as not held."""
    for key, value in keys.items():
        if _xml_ready(key, value):
            _xml_add(parent, key, value)
        else:
            report.count(f"{key} on {where}", 1)


def _xml_add(parent, key, value):
    if isinstance(value, list):
        for v in value:
            _xml_add(parent, key, v)
    elif isinstance(value, dict):
        el = etree.SubElement(parent, key)
        for k, v in value.items():
            _xml_add(el, k, v)
    else:
        _sub(parent, key, value)


def voc_integer_boxes(boxes, width, height):
    """Continuous xyxy -> VOC 1-based inclusive ints, as the inverse of the VOC reader.

    ``x0' = min(round(x0), W - 1)``, ``x1' = max(round(x1), x0' + 1)`` (same for y), so every
    box keeps at least one pixel; returns ``([[x0' + 1, y0' + 1, x1', y1']], number widened)``.
    """
    b = np.rint(np.asarray(boxes, dtype=np.float64).reshape(-1, 4))
    lo = np.minimum(b[:, :2], np.maximum(np.array([width, height]) - 1, 0))
    hi = np.maximum(b[:, 2:], lo + 1)
    widened = int(((hi != b[:, 2:]) | (lo != b[:, :2])).any(axis=1).sum())
    return np.concatenate([lo + 1, hi], axis=1).astype(np.int64), widened


def _sub(parent, tag, text):
    etree.SubElement(parent, tag).text = str(text)


def write_yolo(dataset, root, *, split=None, link=False, progress=None,
               dry_run=False) -> WriteReport:
    """Write a YOLO tree: ``images/[split/]``, ``labels/[split/]<stem>.txt``, ``classes.txt``.

    Args:
        dataset: a ``readers.Dataset`` with contiguous 0-based labels.
        root: the folder to write (created).
        split: optional sub-folder under ``images/`` and ``labels/``.
        link: hard-link images instead of copying.
        progress: optional ``callable(done, total)``.
        dry_run: build the report only; no file or folder is written or created.

    Returns:
        WriteReport. Each line is ``label cx cy w h`` normalised (6 decimals; ``max_shift_px``
        is the largest move this rounding causes); an image without boxes gets an empty file.
        Two records that would share a label file (one image file under two ids, or images
        of one stem such as ``a.jpg`` and ``a.png``) are refused before anything is written:
        DatasetError naming both; so is an image whose name does not end in an extension
        ``read_yolo`` lists (``a.jpg `` with a trailing space), naming it.
        Per-box fields, ids, segmentation and category ids are counted under ``not_held``.
    """
    _check_labels(dataset)
    _check_class_names(dataset, "yolo", os.path.join(os.fspath(root), "classes.txt"))
    report = WriteReport("yolo", os.fspath(root), classes=dataset.num_classes)
    images, labels = (os.path.join(root, d, split or "") for d in ("images", "labels"))
    base = _image_base(dataset)
    rels = _yolo_names(dataset, base)
    if not dry_run:
        for folder in (images, labels):  # even with no image: a dataset reads back
            os.makedirs(folder, exist_ok=True)
        with open(os.path.join(root, "classes.txt"), "w", encoding="utf-8") as f:
            f.writelines(f"{name}\n" for name in dataset.class_names)
    for k, (record, rel) in enumerate(zip(dataset.records, rels)):
        lines = _yolo_lines(record, report)
        if not dry_run:
            place_image(record.path, os.path.join(images, rel), link)
            label_file = os.path.join(labels, os.path.splitext(rel)[0] + ".txt")
            os.makedirs(os.path.dirname(label_file), exist_ok=True)
            with open(label_file, "w", encoding="utf-8") as f:
                f.writelines(lines)
        if record.image_id is not None and str(record.image_id) != os.path.splitext(rel)[0]:
            report.count("image ids (YOLO keeps only file names)", 1)
        report.boxes += record.num_boxes
        if progress is not None:
            progress(k + 1, len(dataset))
    report.images = len(dataset)
    _unheld_common(dataset, report, "yolo")
    return report


def _yolo_names(dataset, base):
    """Each record's image path relative to ``base``; two records that would share one label
    file (one image listed under two ids, or ``a.jpg`` and ``a.png``) are refused, naming
    both: the second would overwrite the first's boxes."""
    rels, by_label = [], {}
    for record in dataset.records:
        rel = _relname(record.path, base)
        if not rel.lower().endswith(IMAGE_EXTENSIONS):  # read_yolo lists images by extension
            raise DatasetError(record.path, f"would be written as images/{rel!r}, whose name does "
                                            f"not end in an image extension read_yolo lists "
                                            f"({' '.join(IMAGE_EXTENSIONS)}; a space after it "
                                            "counts): it would not be read back; rename the image")
        key = os.path.normcase(os.path.splitext(rel)[0])
        if key in by_label:
            other = by_label[key]
            what = "is the same image as" if other.path == record.path else \
                "shares its label file stem with"
            raise DatasetError(record.path, f"image id {record.image_id!r} {what} image id "
                                            f"{other.image_id!r} ({other.path}): both would "
                                            f"write labels/{key}.txt, which holds one image's "
                                            "boxes; rename one, or convert to COCO")
        by_label[key] = record
        rels.append(rel)
    return rels


def _yolo_lines(record, report):
    width, height = _size(record)
    scale = np.array([width, height, width, height], dtype=np.float64)
    b = record.boxes.astype(np.float64)
    norm = np.concatenate([(b[:, :2] + b[:, 2:]) / 2, b[:, 2:] - b[:, :2]], axis=1) / scale
    kept = np.round(norm, YOLO_DECIMALS)
    back = np.concatenate([kept[:, :2] - kept[:, 2:] / 2, kept[:, :2] + kept[:, 2:] / 2], axis=1)
    _shift(report, back * scale - b)
    return [f"{label} " + " ".join(f"{v:.{YOLO_DECIMALS}f}" for v in row) + "\n"
            for label, row in zip(record.labels.tolist(), kept)]


def _unheld_common(dataset, report, fmt):
    """Count per-box fields, extras and category ids that VOC / YOLO cannot hold."""
    held = _HELD_FIELDS[fmt]
    for record in dataset.records:
        for name, values in record.fields.items():
            if name in held:
                continue
            if is_instance_field(name):
                report.count(*instance_loss(name, values))
                continue
            report.count(*_field_loss(name, np.asarray(values), fmt))
        _unheld_extra(record, {"box_keys", "image_keys"} if fmt == "voc" else set(), report)
    count_unheld_dataset_extra(dataset, report)
    if list(dataset.category_ids) != list(range(dataset.num_classes)):
        report.count(f"category ids (classes are numbered 0..{dataset.num_classes - 1}; "
                     "names kept)", dataset.num_classes)


def _field_loss(name, values, fmt):
    """(description, count) for a per-box field the target drops: ids count every box,
    flags count the boxes where they are set."""
    if name == "annotation_id":
        return "annotation ids", len(values)
    if name == "iscrowd" and fmt == "voc":
        return "iscrowd=1 on annotations (written as difficult=1)", np.count_nonzero(values)
    return f"{name} (non-zero) on annotations", np.count_nonzero(values)


def _unheld_extra(record, held, report):
    for name, value in record.extra.items():
        if name in held:
            continue
        if name in ("box_keys", "image_keys"):
            where = "annotations" if name == "box_keys" else "images"
            for keys in value if name == "box_keys" else [value]:
                for key in keys or {}:
                    report.count(f"{key} on {where}", 1)
            continue
        n = sum(v is not None for v in value) if isinstance(value, list) else 1
        report.count(f"{name} on annotations" if isinstance(value, list) else name, n)


def class_name_fault(dataset, fmt):
    """Why ``fmt``'s class list cannot hold ``dataset.class_names`` as they are (None if it can):
    YOLO keeps one name a line of ``classes.txt`` (read back stripped, empty lines skipped); VOC
    names each object by its class name (XML text, stripped on reading), so names must also be
    distinct there, or two classes would read back as one, and there must be one at least (an
    empty VOC class list is a fault of the file: ``read_voc_classes``). COCO and TFRecord label
    maps hold any text."""
    if fmt not in ("yolo", "voc"):
        return None
    if fmt == "voc" and not dataset.class_names:
        return "no class: a VOC class list (classes.txt) needs one name at least (read back, " \
               "an empty one is a faulty file)"
    seen = {}
    for k, name in enumerate(dataset.class_names):
        what = f"class {k} ({name!r:.60})"
        if not name or name != name.strip():
            return f"{what}: an empty name, or one starting or ending with whitespace, does " \
                   f"not read back from a {fmt.upper()} class list"
        if name.splitlines() != [name]:  # \n, \r, \v, \f, \x85, \u2028, ...
            return f"{what}: a line break in a class name does not fit a {fmt.upper()} class list"
        if fmt == "voc" and _XML_BAD_CHARS.search(name):
            return f"{what}: holds a character XML cannot (a control character or a surrogate)"
        if fmt == "voc" and name in seen:
            return f"{what}: the same name as class {seen[name]}; VOC names classes by name, " \
                   "so they would read back as one"
        seen.setdefault(name, k)
    return None


def _check_class_names(dataset, fmt, where):
    reason = class_name_fault(dataset, fmt)
    if reason is not None:
        raise DatasetError(where, reason)


def _check_labels(dataset, allow_embedded=False):
    for record in dataset.records:
        if not allow_embedded and "tfrecord_image" in record.extra:
            raise DatasetError(record.path, "the image is inside a TFRecord file: write it out "
                                            "first with readers.tfrecord_od.extract_images")
        if record.num_boxes and (record.labels.min() < 0
                                 or record.labels.max() >= dataset.num_classes):
            raise DatasetError(record.path, f"labels must be 0..{dataset.num_classes - 1} "
                                            "(read without keep_original_ids)")


def _image_base(dataset):
    """The folder all images share: file names are written relative to it."""
    if not dataset.records:
        return dataset.root or "."
    return os.path.commonpath([os.path.dirname(r.path) for r in dataset.records])


def _relname(path, base):
    return os.path.relpath(path, base)


def _size(record):
    if record.width > 0 and record.height > 0:
        return int(record.width), int(record.height)
    return header_size(record.path)


def _shift(report, delta):
    if np.size(delta):
        report.max_shift_px = max(report.max_shift_px, float(np.abs(delta).max()))


def place_image(src, dst, link=False):
    """Copy (``shutil.copy2``) or hard-link ``src`` to ``dst``, creating folders; a no-op when
    both are the same file. A failed hard link (other file system) falls back to a copy."""
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    if os.path.exists(dst) and os.path.samefile(src, dst):
        return
    if link:
        try:
            if os.path.exists(dst):
                os.remove(dst)
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copy2(src, dst)


def _write_json(path, data):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def count_unheld_dataset_extra(dataset, report):
    """Count the dataset-level extras a writer does not hold (category keys one by one)."""
    for name, value in dataset.extra.items():
        if name == "category_keys":
            for keys in value:
                for key in keys:
                    report.count(f"{key} on categories", 1)
        else:
            report.count(name, 1)
