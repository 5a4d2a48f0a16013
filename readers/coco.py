"""COCO instances JSON -> canonical records (pycocotools index, numpy grouping).

A COCO box ``[x, y, w, h]`` becomes ``[x, y, x + w, y + h]`` (float32, continuous pixel
coordinates, see docs/design.md). Category ids become contiguous 0-based labels in ascending id order;
``Dataset.category_ids[label]`` is the original id.
"""
from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re

import numpy as np

from ._common import (ErrorSink, FileIndex, box_fault, count_drop, group_offsets, header_size,
                      outside_root_reason, real_dir, resolve_under, validate_boxes)
from . import limits
from .errors import DatasetError
from .records import Dataset, DetectionRecord

# Annotation keys that the COCO writer adds for VOC flags; read back into per-box fields.
FLAG_KEYS = ("difficult", "truncated")
# Keys with a canonical slot; every other key is kept unchanged in ``extra`` (see records.py).
ANNOTATION_KEYS = {"id", "image_id", "category_id", "bbox", "iscrowd", "segmentation", *FLAG_KEYS}
IMAGE_KEYS = {"id", "file_name", "width", "height"}
CATEGORY_KEYS = {"id", "name"}
TOP_KEYS = {"images", "annotations", "categories"}


def read_coco(annotations_file, image_root, *, skip_empty=False, include_iscrowd=True,
              size_threshold=0.0, categories=None, keep_original_ids=False, on_error="raise",
              check_images=True) -> Dataset:
    """Read a COCO instances file.

    Args:
        annotations_file: the JSON file.
        image_root: folder that the images' ``file_name`` entries are relative to.
        skip_empty: drop images left with no boxes (counted in ``Dataset.dropped``).
        include_iscrowd: keep crowd boxes, flagged by the ``iscrowd`` field (True), or remove
            them (False, counted).
        size_threshold: drop boxes whose ``w < size_threshold`` or ``h < size_threshold``
            (counted).
        categories: keep only these categories, given by name or id (others' boxes are dropped
            and counted); labels are then contiguous over the kept ones.
        keep_original_ids: labels are the COCO category ids instead of 0-based indices
            (``class_names`` / ``category_ids`` stay in ascending id order; writers refuse it).
        on_error: ``"raise"`` or ``"skip"`` (see docs/design.md "Bad input"). A bad box is dropped,
            an image whose file is missing or unsafe is dropped; both are listed in ``skipped``.
            A file that is not JSON or not COCO always raises, and so does a category id
            defined twice. A category or ``images`` entry that is not an object, or whose id
            is not a non-negative int64 (or an image whose width / height is not a number),
            is a fault that drops it (and, for a category, its boxes).
        check_images: check that each image file exists (one directory listing per folder).

    Returns:
        Dataset with one record per image in file order. Per-box fields: ``iscrowd`` (uint8),
        ``annotation_id`` (int64), and ``difficult`` / ``truncated`` (uint8) where the file has
        those keys. ``extra["segmentation"]`` (list aligned with boxes, None where absent) when
        any annotation has one; every key the records do not model is kept unchanged:
        ``extra["box_keys"]`` (e.g. ``area``), ``extra["image_keys"]`` (e.g. ``license``,
        ``coco_url``), ``Dataset.extra`` (``info``, ``licenses``, ``category_keys`` such as
        ``supercategory``). ``Dataset.emptied`` counts images whose every annotation was bad.

    Raises:
        DatasetError: naming the file and the fault (under ``on_error="raise"``).
    """
    file = os.fspath(annotations_file)
    sink = ErrorSink(on_error, "read_coco")
    data = _load_json(file)
    data["categories"] = _check_categories(data["categories"], file, sink)
    coco = _index(data, file)
    cat_ids, names, selected = _categories(coco, categories, file)
    images = _images(data["images"], real_dir(image_root), file, sink, check_images)
    table = _annotations(data["annotations"], file, sink)
    dataset = Dataset([], names, cat_ids, root=real_dir(image_root))
    dataset.extra = {k: v for k, v in data.items() if k not in TOP_KEYS}
    category_keys = [{k: v for k, v in coco.cats[i].items() if k not in CATEGORY_KEYS}
                     for i in cat_ids]
    if any(category_keys):
        dataset.extra["category_keys"] = category_keys
    table = _filter(table, images, selected, cat_ids, file, sink, dataset,
                    include_iscrowd, size_threshold)
    if keep_original_ids:
        table["label"] = np.asarray(cat_ids, dtype=np.int64)[table["label"]]
    dataset.records = _group(images, table, skip_empty, dataset)
    if skip_empty:
        dataset.emptied = 0  # those images were dropped, and counted as empty
    dataset.skipped = sink.finish()
    return dataset


def _load_json(file):
    try:
        text = limits.read_bytes(file, "MAX_ANNOTATION_BYTES", "COCO annotations file")
    except FileNotFoundError:
        raise DatasetError(file, "annotations file not found") from None
    except OSError as exc:  # a folder, no permission, ...
        raise DatasetError(file, f"cannot read the annotations file ({exc})") from None
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise DatasetError(file, f"an object gives the key {exc.args[0]!r} twice (JSON readers "
                                 "disagree on which value counts); refused") from None
    except (ValueError, UnicodeDecodeError) as exc:  # also ints over Python's digit limit
        raise DatasetError(file, f"malformed JSON ({exc})") from None
    except RecursionError:
        raise DatasetError(file, "malformed JSON (nested too deeply)") from None
    if _SURROGATE_ESCAPE.search(text):  # rare: checked in full only then
        _check_surrogates(data, file)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) \
            or not isinstance(data.get("categories"), list):
        raise DatasetError(file, "not a COCO instances file: needs 'images' and 'categories' lists")
    data.setdefault("annotations", [])
    if not isinstance(data["annotations"], list):
        raise DatasetError(file, "'annotations' is not a list")
    return data


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs):
    """A JSON object as a dict; a key given twice is refused (``json`` keeps the last value
    silently, other readers the first)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        raise _DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return out


def _check_surrogates(data, file):
    """Refuse a string holding a lone UTF-16 surrogate (a ``\\ud800`` escape without its pair):
    JSON lets it through, but it is not text any file, XML or label file can hold (the writers
    raised UnicodeEncodeError)."""
    stack = [data]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise DatasetError(file, f"the string {v[:40]!r} holds a lone UTF-16 surrogate "
                                         "(a \\uD800-\\uDFFF escape without its pair): not "
                                         "valid text") from None


def _check_categories(entries, file, sink):
    """The valid category entries. An entry that is not an object or whose ``id`` is not a
    non-negative int64 is a fault (skipped under ``on_error="skip"``; its boxes then fault as
    unknown categories). An id defined twice always raises: which name is meant is unknown."""
    kept, names = [], {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            sink.fault(file, f"categories entry #{i} is not an object: {entry!r:.60}")
            continue
        cat_id = entry.get("id")
        if not _is_id(cat_id):
            sink.fault(file, f"categories entry #{i}: 'id' is {cat_id!r:.40}, "
                             "not a non-negative int64")
            continue
        if cat_id in names:
            raise DatasetError(file, f"category id {cat_id} is defined twice "
                                     f"({names[cat_id]!r} and {entry.get('name')!r})")
        if not isinstance(entry.get("name", ""), str):
            sink.fault(file, f"categories entry #{i} (id {cat_id}): 'name' is "
                             f"{entry['name']!r:.40}, not a string")
            continue
        names[cat_id] = entry.get("name")
        kept.append(entry)
    return kept


def _index(data, file):
    """Build pycocotools' index from the already-parsed dict (one JSON parse, not two)."""
    from pycocotools.coco import COCO

    # The index holds images and categories only: annotations are grouped with numpy (faster
    # than pycocotools' per-annotation dicts), and a malformed annotation must reach the
    # on_error policy instead of failing inside createIndex.
    coco = COCO()
    coco.dataset = {"images": [im for im in data["images"] if isinstance(im, dict) and "id" in im],
                    "categories": data["categories"], "annotations": []}
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints progress
            coco.createIndex()
    except (KeyError, TypeError) as exc:
        raise DatasetError(file, f"malformed COCO entry (missing or bad key {exc})") from None
    return coco


def _categories(coco, wanted, file):
    """Return (sorted ids, their names, set of selected ids)."""
    all_ids = sorted(coco.getCatIds())
    by_name, twice = {}, {}
    for i in all_ids:
        name = coco.cats[i].get("name", str(i))
        if name in by_name:
            twice.setdefault(name, [by_name[name]]).append(i)
        by_name[name] = i
    if wanted is None:
        ids = all_ids
    else:
        ids = []
        for w in wanted:
            if isinstance(w, str) and w in twice:
                raise DatasetError(file, f"category name {w!r} names the ids {twice[w]}: "
                                         "select by id")
            if w in by_name:
                ids.append(by_name[w])
            elif isinstance(w, (int, np.integer)) and int(w) in coco.cats:
                ids.append(int(w))
            else:
                raise DatasetError(file, f"category {w!r} is not in the file")
        ids = sorted(set(ids))
    names = [str(coco.cats[i].get("name", i)) for i in ids]
    return ids, names, set(all_ids)


def _images(entries, root, file, sink, check_images):
    """Validate image entries; return list of (image_id, path, width, height, other keys)."""
    index = FileIndex()
    seen = set()
    kept = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            sink.fault(file, f"images entry #{i} is not an object: {entry!r:.60}")
            continue
        image_id, name = entry.get("id"), entry.get("file_name")
        if not _is_id(image_id) or not isinstance(name, str):
            sink.fault(file, f"image entry {entry!r:.80} lacks a non-negative int64 'id' "
                             "or a 'file_name'")
            continue
        if image_id in seen:
            sink.fault(file, f"duplicate image id {image_id}")
            continue
        path = resolve_under(root, name)
        if path is None:
            sink.fault(file, f"image id {image_id}: " + outside_root_reason(name, root))
            continue
        if check_images and not index.exists(path):
            sink.fault(path, f"image file not found (image id {image_id} in {file})")
            continue
        size = [entry.get(key) for key in ("width", "height")]
        size = [0 if v is None else v for v in size]  # absent or null: read from the header
        bad = [key for key, v in zip(("width", "height"), size) if not _is_size(v)]
        if bad:
            sink.fault(file, f"image id {image_id}: {bad[0]!r} is {entry[bad[0]]!r:.40}, "
                             "not a non-negative number (a whole number of pixels)")
            continue
        width, height = int(size[0]), int(size[1])
        if (width <= 0 or height <= 0) and os.path.exists(path):
            try:
                width, height = header_size(path)
            except DatasetError as exc:
                sink.fault(exc.file, exc.reason)
                continue
        seen.add(image_id)
        kept.append((image_id, path, width, height,
                     {k: v for k, v in entry.items() if k not in IMAGE_KEYS}))
    return kept


def _annotations(anns, file, sink):
    """Columns of the annotation list as numpy arrays (one pass per column, no objects).

    A list that fails the fast extraction is checked entry by entry, so each malformed
    annotation reaches the on_error policy by name; the good ones are then extracted.
    """
    try:
        table = _columns(anns)
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError):
        keep = [i for i, a in enumerate(anns) if _annotation_ok(a, i, file, sink)]
        anns = [anns[i] for i in keep]
        table = _columns(anns) | {"pos": np.asarray(keep, dtype=np.int64)}
    if any(a.get("segmentation") for a in anns):
        table["segmentation"] = [a.get("segmentation") or None for a in anns]
    others = [{k: v for k, v in a.items() if k not in ANNOTATION_KEYS} for a in anns]
    if any(others):
        table["box_keys"] = others
    return table


def _columns(anns):
    """Raises on any malformed entry, including a 0/1 flag (iscrowd, difficult, truncated) > 1."""
    n = len(anns)
    image_ids, cat_ids = [a["image_id"] for a in anns], [a["category_id"] for a in anns]
    ann_ids = [a.get("id", -1) for a in anns]
    if not set(map(type, image_ids + cat_ids + ann_ids)) <= {int}:  # numpy takes "1" or 1.5
        raise TypeError("an id is not an int")
    bboxes = [a["bbox"] for a in anns]
    # Exactly 4 numbers each: numpy would take "1" or True as numbers, and reshape 8 numbers
    # into two boxes (or 2 + 2 numbers of two annotations into one).
    if not all(type(b) is list and len(b) == 4 for b in bboxes) \
            or not set(map(type, itertools.chain.from_iterable(bboxes))) <= {int, float}:
        raise TypeError("a bbox is not 4 numbers")
    flags = {k: [a.get(k, 0) for a in anns] for k in ("iscrowd",) + FLAG_KEYS
             if k == "iscrowd" or any(k in a for a in anns)}
    if any(v.__class__ is not int or v not in (0, 1) for f in flags.values() for v in f):
        raise ValueError("a 0/1 flag holds another value")  # numpy takes 1.5 or True as 1
    table = {
        "image_id": np.fromiter(image_ids, np.int64, n),
        "category_id": np.fromiter(cat_ids, np.int64, n),
        "xywh": np.array(bboxes, dtype=np.float64).reshape(n, 4),
        "ann_id": np.fromiter(ann_ids, np.int64, n),
        "pos": np.arange(n),
    }
    table.update({k: np.fromiter(v, np.uint8, n) for k, v in flags.items()})
    return table


def _is_id(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _is_number(value):
    """An int or float that float64 holds (10**400 does not: OverflowError)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _is_size(value):
    """A whole number of pixels (``640`` or ``640.0``; ``640.5`` is no size: it was truncated)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and 0 <= value < 2**31 and float(value).is_integer()


def _annotation_ok(a, i, file, sink):
    """Slow path for a list that failed the fast one: name each malformed annotation."""
    where = f"annotation #{i} (id {a.get('id') if isinstance(a, dict) else '?'})"
    if not isinstance(a, dict):
        sink.fault(file, f"{where} is not an object")
        return False
    for key in ("image_id", "category_id"):
        if not _is_id(a.get(key)):
            sink.fault(file, f"{where}: {key!r} missing or not a non-negative int64")
            return False
    bbox = a.get("bbox")
    if not (type(bbox) is list and len(bbox) == 4 and all(_is_number(v) for v in bbox)):
        sink.fault(file, f"{where}: 'bbox' must be 4 numbers [x, y, w, h], got {bbox!r:.60}")
        return False
    if "id" in a and not _is_id(a["id"]):
        sink.fault(file, f"{where}: 'id' is not a non-negative int64")
        return False
    for key in ("iscrowd",) + FLAG_KEYS:
        if not (a.get(key, 0).__class__ is int and a.get(key, 0) in (0, 1)):
            sink.fault(file, f"{where}: {key!r} is {a[key]!r}, not 0 or 1")
            return False
    return True


def _take(table, mask):
    return {k: ([v[i] for i in np.flatnonzero(mask)] if isinstance(v, list) else v[mask])
            for k, v in table.items()}


def _filter(table, images, selected, cat_ids, file, sink, dataset, include_iscrowd, threshold):
    """Attach image index and label to each annotation; drop, clip and count as the options say."""
    # A sentinel image (id -1, size 0) keeps the lookups valid when no image was kept.
    ids = np.array([im[0] for im in images] or [-1], dtype=np.int64)
    sizes = np.array([im[2:4] for im in images] or [(0, 0)], dtype=np.float64)
    order = np.argsort(ids, kind="stable")
    pos = order[np.clip(np.searchsorted(ids[order], table["image_id"]), 0, len(ids) - 1)]
    known_image = (ids[pos] == table["image_id"]) & (len(images) > 0)
    table["image"] = pos
    known_cat = np.isin(table["category_id"], np.fromiter(selected, np.int64, len(selected)))
    wanted_cat = np.isin(table["category_id"], np.asarray(cat_ids, dtype=np.int64))
    xywh = table["xywh"]
    xyxy = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
    w, h = sizes[pos, 0], sizes[pos, 1]
    boxes, bad_box, _ = validate_boxes(xyxy, w, h)
    all_ids = np.asarray(table["image_id"])
    ok = _report_faults(table, file, sink, images, known_image, known_cat, bad_box, xyxy, w, h,
                        all_ids)
    had_bad = np.unique(table["image"][~ok & known_image])
    dataset.emptied = int(np.setdiff1d(had_bad, table["image"][ok]).size)
    ok = count_drop(dataset, ok, ~wanted_cat, "boxes of categories not selected")
    if not include_iscrowd:
        ok = count_drop(dataset, ok, table["iscrowd"] > 0, "crowd boxes (include_iscrowd=False)")
    if threshold > 0:
        small = (xywh[:, 2] < threshold) | (xywh[:, 3] < threshold)
        ok = count_drop(dataset, ok, small, f"boxes under size_threshold={threshold:g}")
    _, _, dataset.clipped = validate_boxes(xyxy[ok], w[ok], h[ok])
    table["box"] = boxes
    table["label"] = np.searchsorted(np.asarray(cat_ids, dtype=np.int64), table["category_id"])
    return _take(table, ok)


def _report_faults(table, file, sink, images, known_image, known_cat, bad_box, xyxy, w, h, ids):
    """Send every faulty annotation to the sink (raise or record); return the mask of good ones."""
    ok = known_image & known_cat & ~bad_box
    for i in np.flatnonzero(~ok):
        where = f"annotation id {table['ann_id'][i]} (image id {ids[i]})"
        if not known_image[i]:
            sink.fault(file, f"{where} refers to an image that is not listed or was skipped")
        elif not known_cat[i]:
            sink.fault(file, f"{where} has unknown category id {table['category_id'][i]}")
        else:
            name = images[table["image"][i]][1]
            sink.fault(file, f"{where}, {os.path.basename(name)}: "
                             + box_fault(xyxy[i], int(w[i]), int(h[i])))
    return ok


def _group(images, table, skip_empty, dataset):
    """One record per image: annotations sorted stably by image, then sliced per image."""
    order = np.argsort(table["image"], kind="stable")
    offsets = group_offsets(table["image"], len(images))
    boxes, labels = table["box"][order], table["label"][order]
    fields = {"iscrowd": table["iscrowd"][order], "annotation_id": table["ann_id"][order]}
    for key in FLAG_KEYS:
        if key in table:
            fields[key] = table[key][order]
    per_box = [k for k in ("segmentation", "box_keys") if k in table]
    records, empty = [], 0
    for k, (image_id, path, width, height, image_keys) in enumerate(images):
        s, e = int(offsets[k]), int(offsets[k + 1])
        if s == e and skip_empty:
            empty += 1
            continue
        extra = {key: [table[key][i] for i in order[s:e]] for key in per_box}
        if image_keys:
            extra["image_keys"] = image_keys
        records.append(DetectionRecord(path, width, height, boxes[s:e], labels[s:e],
                                       {n: v[s:e] for n, v in fields.items()}, image_id, extra))
    if empty:
        dataset.dropped["empty images (skip_empty)"] = empty
    return records
