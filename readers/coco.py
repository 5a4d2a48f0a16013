"""COCO instances JSON -> canonical records (columns extracted in C-speed passes, numpy grouping).

A COCO box ``[x, y, w, h]`` becomes ``[x, y, x + w, y + h]`` (float32, continuous pixel
coordinates, see docs/design.md). Category ids become contiguous 0-based labels in ascending id order;
``Dataset.category_ids[label]`` is the original id.

Cost: measured against pycocotools' ``COCO()`` (``benchmarks/bench_readers.py``, RESULTS.md).
The JSON is parsed once, plainly, with the collector paused (``coco_json``); the tree is then
taken apart as it is read: each column comes out in one ``map`` over the annotations, and the
JSON text is gone before the tree grows. The records are a ``RecordTable`` (record_table.py):
the columns grouped by image, each record made when first asked for, and a pipeline packs the
columns without making any. A list that fails a fast check is read again entry by entry, so
every fault is named.
"""
from __future__ import annotations

import collections
import itertools
import os
from array import array
from operator import itemgetter

import numpy as np

from ._common import (ErrorSink, FileIndex, box_fault, count_drop, gc_paused, group_offsets,
                      header_size, outside_root_reason, real_dir, resolve_under,
                      validate_boxes_mask)
from . import limits
from .coco_json import load_coco_json
from .errors import DatasetError
from .record_table import MISSING, RecordTable
from .records import Dataset

# Annotation keys that the COCO writer adds for VOC flags; read back into per-box fields.
FLAG_KEYS = ("difficult", "truncated")
# Keys with a canonical slot; every other key is kept unchanged in ``extra`` (see records.py).
ANNOTATION_KEYS = {"id", "image_id", "category_id", "bbox", "iscrowd", "segmentation", *FLAG_KEYS}
IMAGE_KEYS = {"id", "file_name", "width", "height"}
CATEGORY_KEYS = {"id", "name"}
TOP_KEYS = {"images", "annotations", "categories"}
_repeat = itertools.repeat
_CHUNK = 1 << 16  # annotations converted at a time (bounds the temporary lists)


def _drain(iterator):
    collections.deque(iterator, maxlen=0)


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
        Dataset with one record per image in file order (``Dataset.records`` is a
        ``RecordTable``: a sequence whose records are made when first asked for, each once;
        editing it makes it a plain list of them). Per-box fields: ``iscrowd`` (uint8),
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
    data, plain = load_coco_json(file)
    with gc_paused():  # builds ~10 objects an image: collecting meanwhile finds no garbage
        dataset = _read(data, plain, file, image_root, sink, skip_empty, include_iscrowd,
                        size_threshold, categories, keep_original_ids, check_images)
    dataset.skipped = sink.finish()
    return dataset


def _read(data, plain, file, image_root, sink, skip_empty, include_iscrowd, size_threshold,
          categories, keep_original_ids, check_images):
    cats = {c["id"]: c for c in _check_categories(data.pop("categories"), file, sink)}
    cat_ids, names, selected = _categories(cats, categories, file)
    root = real_dir(image_root)
    # Popped from the tree: each list is freed as soon as its columns are out.
    images = _images(data.pop("images"), root, file, sink, check_images)
    table = _annotations(data.pop("annotations"), plain, file, sink)
    dataset = Dataset([], names, cat_ids, root=root)
    dataset.extra = {k: v for k, v in data.items() if k not in TOP_KEYS}
    category_keys = [{k: v for k, v in cats[i].items() if k not in CATEGORY_KEYS}
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
    return dataset


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


def _categories(cats, wanted, file):
    """Return (sorted ids, their names, set of all ids); ``cats`` maps id -> entry."""
    all_ids = sorted(cats)
    by_name, twice = {}, {}
    for i in all_ids:
        name = cats[i].get("name", str(i))
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
            elif isinstance(w, (int, np.integer)) and int(w) in cats:
                ids.append(int(w))
            else:
                raise DatasetError(file, f"category {w!r} is not in the file")
        ids = sorted(set(ids))
    names = [str(cats[i].get("name", i)) for i in ids]
    return ids, names, set(all_ids)


def _images(entries, root, file, sink, check_images):
    """Validate image entries; return list of (image_id, path, width, height, other keys)."""
    kept = _images_fast(entries, root, check_images)
    return kept if kept is not None else _images_checked(entries, root, file, sink, check_images)


def _images_fast(entries, root, check_images):
    """What :func:`_images_checked` returns, in C-speed passes, for a list where every entry
    is an object with an int ``id`` (non-negative, unique), a plain file name (no folder part),
    positive int ``width`` and ``height``, and (when checked) an existing file; else None.
    The entries' dicts become the other-keys dicts (the four canonical keys popped)."""
    n = len(entries)
    if not n or set(map(type, entries)) != {dict} or not limits.FOLLOW_SYMLINKS_OUTSIDE_ROOT:
        return None if n else []
    ids, names, widths, heights = (list(map(dict.get, entries, _repeat(k)))
                                   for k in ("id", "file_name", "width", "height"))
    if set(map(type, ids)) != {int} or set(map(type, names)) != {str} \
            or set(map(type, widths)) | set(map(type, heights)) != {int}:
        return None
    if min(ids) < 0 or max(ids) >= 2**63 or len(set(ids)) != n or min(widths) <= 0 \
            or min(heights) <= 0 or max(widths) >= 2**31 or max(heights) >= 2**31:
        return None
    joined = "".join(names)
    if os.sep in joined or (os.altsep and os.altsep in joined) \
            or not {"", ".", ".."}.isdisjoint(names):
        return None  # names with folders, or odd ones: resolve_under decides, name by name
    if check_images:
        try:
            listing = set(os.listdir(root))
        except OSError:
            return None
        if not listing.issuperset(names):
            return None
    prefix = root.rstrip(os.sep) + os.sep  # = resolve_under(root, name) for these names
    paths = [prefix + name for name in names]
    if set(map(len, entries)) == {len(IMAGE_KEYS)}:
        others = _repeat({}, n)
    else:
        for key in IMAGE_KEYS:
            _drain(map(dict.pop, entries, _repeat(key)))
        others = entries  # each now holds its other keys only, in the file's order
    return list(zip(ids, paths, widths, heights, others))


def _images_checked(entries, root, file, sink, check_images):
    """Entry by entry, each fault named (see :func:`_images`)."""
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


def _annotations(anns, plain, file, sink):
    """Columns of the annotation list as numpy arrays (one C-speed pass per column).

    A list that fails the fast extraction is checked entry by entry, so each malformed
    annotation reaches the on_error policy by name; the good ones are then extracted.
    The annotations' dicts are consumed: what is left of each is its ``box_keys`` dict.
    """
    try:
        table = _columns(anns, plain)
    except (KeyError, TypeError, ValueError, OverflowError, AttributeError):
        keep = [i for i, a in enumerate(anns) if _annotation_ok(a, i, file, sink)]
        anns = [anns[i] for i in keep]
        table = _columns(anns, plain)
    keys = table.pop("keys")
    if "segmentation" in keys:
        segmentation = list(map(dict.get, anns, _repeat("segmentation")))
        if any(segmentation):
            table["segmentation"] = [v or None for v in segmentation]
        del segmentation
    if keys - ANNOTATION_KEYS:
        table["box_keys"] = _box_keys(anns, keys)
    return table


def _box_keys(anns, keys):
    """Each annotation's keys that no field models (its ``extra["box_keys"]`` dict, in the
    file's order). COCO's own files hold one such key (``area``): then ``(key, values)``, one
    value per annotation (:data:`MISSING` where absent), the dicts made only for a record
    asked for (record_table.py). Otherwise the annotations' dicts themselves, the canonical
    keys popped, each copied to the size of what is left."""
    others = keys - ANNOTATION_KEYS
    if len(others) == 1:
        (key,) = others
        return key, list(map(dict.get, anns, _repeat(key), _repeat(MISSING)))
    for key in keys & ANNOTATION_KEYS:
        _drain(map(dict.pop, anns, _repeat(key), _repeat(None)))
    for i, rest in enumerate(anns):
        anns[i] = dict(rest)
    return anns


def _columns(anns, plain=False):
    """Raises on any malformed entry, including a 0/1 flag (iscrowd, difficult, truncated) > 1;
    leaves ``anns`` as it was then.

    ``plain``: the file holds no ``true`` / ``false`` / ``null``, so no bool or None is in the
    tree; the ``array`` module's conversions then check every type in the pass that converts
    (an int array takes ints only, a double array ints and floats only). Otherwise each column's
    types are checked first (numpy would take ``"1"``, ``1.5`` or ``True`` as a number).
    """
    n = len(anns)
    # (An entry that is not an object raises TypeError in the first column's pass, or here.)
    keys = set(itertools.chain.from_iterable(anns))
    table = {"image_id": _ints(map(itemgetter("image_id"), anns), plain),
             "category_id": _ints(map(itemgetter("category_id"), anns), plain),
             "ann_id": _ints(map(dict.get, anns, _repeat("id"), _repeat(-1)), plain)}
    bboxes = list(map(itemgetter("bbox"), anns))
    # Exactly 4 numbers each: numpy would take "1" or True as numbers, and reshape 8 numbers
    # into two boxes (or 2 + 2 numbers of two annotations into one).
    if n and (set(map(len, bboxes)) != {4} or not plain and set(map(type, bboxes)) != {list}):
        raise TypeError("a bbox is not 4 numbers")
    coords = itertools.chain.from_iterable(bboxes)
    if plain:  # from lists, a chunk at a time: array("d", <iterator>) took twice as long
        xywh = array("d")
        for start in range(0, n, _CHUNK):
            xywh.fromlist(list(itertools.chain.from_iterable(bboxes[start:start + _CHUNK])))
        table["xywh"] = np.frombuffer(xywh, np.float64).reshape(n, 4)
    else:
        if not set(map(type, coords)) <= {int, float}:
            raise TypeError("a bbox is not 4 numbers")
        table["xywh"] = np.fromiter(itertools.chain.from_iterable(bboxes), np.float64,
                                    4 * n).reshape(n, 4)
    del bboxes, coords
    for key in ("iscrowd",) + FLAG_KEYS:
        if key == "iscrowd" or key in keys:
            values = map(dict.get, anns, _repeat(key), _repeat(0))
            if plain:
                table[key] = np.frombuffer(array("B", values), np.uint8)
            else:
                values = list(values)
                if n and (set(map(type, values)) != {int} or not set(values) <= {0, 1}):
                    raise ValueError(f"{key!r} is not 0 or 1")
                table[key] = np.fromiter(values, np.uint8, n)
            if n and table[key].max() > 1:
                raise ValueError("a 0/1 flag holds another value")  # numpy takes 1.5 or True
    table["keys"] = keys
    return table


def _all_have(anns, key):
    return all(map(dict.__contains__, anns, _repeat(key)))


def _ints(values, plain):
    """int64 array of an iterable of ints; TypeError for any other type."""
    if plain:
        return np.frombuffer(array("q", values), np.int64)
    values = list(values)
    if not set(map(type, values)) <= {int}:  # numpy takes "1" or 1.5
        raise TypeError("an id is not an int")
    return np.fromiter(values, np.int64, len(values))


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
    """The rows where ``mask`` is set. Per-box lists (segmentation, box_keys) are not copied:
    ``table["source"]`` says which of their entries each kept row is."""
    if mask.all():
        return table
    idx = np.flatnonzero(mask)
    out = {k: v for k, v in table.items() if not isinstance(v, np.ndarray)}
    out.update((k, v[idx]) for k, v in table.items() if isinstance(v, np.ndarray))
    out["source"] = idx
    return out


def _filter(table, images, selected, cat_ids, file, sink, dataset, include_iscrowd, threshold):
    """Attach image index and label to each annotation; drop, clip and count as the options say."""
    # A sentinel image (id -1, size 0) keeps the lookups valid when no image was kept.
    ids = np.array([im[0] for im in images] or [-1], dtype=np.int64)
    sizes = np.array(list(map(itemgetter(2, 3), images)) or [(0, 0)], dtype=np.float64)
    pos = _positions(ids, table["image_id"])
    known_image = (ids[pos] == table["image_id"]) & (len(images) > 0)
    table["image"] = pos
    known_cat = np.isin(table["category_id"], np.fromiter(selected, np.int64, len(selected)))
    wanted_cat = np.isin(table["category_id"], np.asarray(cat_ids, dtype=np.int64))
    xyxy = table.pop("xywh")  # made [x, y, x + w, y + h] in place: no second (N, 4) array
    small = (xyxy[:, 2] < threshold) | (xyxy[:, 3] < threshold) if threshold > 0 else None
    xyxy[:, 2:] += xyxy[:, :2]
    boxes, bad_box, moved = validate_boxes_mask(xyxy, lambda lo, hi: sizes[pos[lo:hi], 0],
                                                lambda lo, hi: sizes[pos[lo:hi], 1])
    ok = known_image & known_cat & ~bad_box
    dataset.emptied = 0
    if not ok.all():  # (only then: np.unique's first call imports numpy.ma, 25 ms)
        _report_faults(table, file, sink, images, ok, known_image, known_cat, xyxy, sizes, pos)
        had_bad = np.unique(table["image"][~ok & known_image])
        dataset.emptied = int(np.setdiff1d(had_bad, table["image"][ok]).size)
    ok = count_drop(dataset, ok, ~wanted_cat, "boxes of categories not selected")
    if not include_iscrowd:
        ok = count_drop(dataset, ok, table["iscrowd"] > 0, "crowd boxes (include_iscrowd=False)")
    if small is not None:
        ok = count_drop(dataset, ok, small, f"boxes under size_threshold={threshold:g}")
    dataset.clipped = int(np.count_nonzero(moved & ok))
    del xyxy, moved
    table["box"] = boxes
    table["label"] = np.searchsorted(np.asarray(cat_ids, dtype=np.int64),
                                     table.pop("category_id"))
    del table["image_id"]
    return _take(table, ok)


def _positions(ids, wanted):
    """For each of ``wanted``, the position in ``ids`` (unique; -1 only as the sentinel of no
    image) of the same value, or any position where there is none (the caller compares). A lookup table where the ids are
    dense enough (COCO's: 118,287 images numbered up to 581,929), else a binary search."""
    top = int(ids.max())
    if ids.min() >= 0 and top < 8 * len(ids) + (1 << 20):
        lut = np.zeros(top + 1, np.int64)
        lut[ids] = np.arange(len(ids))
        return lut[np.clip(wanted, 0, top)]
    order = np.argsort(ids, kind="stable")
    pos = np.searchsorted(ids[order], wanted)
    np.minimum(pos, len(ids) - 1, out=pos)
    return order[pos]


def _report_faults(table, file, sink, images, ok, known_image, known_cat, xyxy, sizes, pos):
    """Send every faulty annotation (``~ok``) to the sink: raise, or record and go on."""
    ids = table["image_id"]
    for i in np.flatnonzero(~ok):
        where = f"annotation id {table['ann_id'][i]} (image id {ids[i]})"
        if not known_image[i]:
            sink.fault(file, f"{where} refers to an image that is not listed or was skipped")
        elif not known_cat[i]:
            sink.fault(file, f"{where} has unknown category id {table['category_id'][i]}")
        else:
            name = images[table["image"][i]][1]
            sink.fault(file, f"{where}, {os.path.basename(name)}: "
                             + box_fault(xyxy[i], int(sizes[pos[i], 0]), int(sizes[pos[i], 1])))


def _stable_order(keys):
    """``np.argsort(keys, kind="stable")`` for keys in [0, 2**32): a radix sort of 16-bit
    digits, each one a stable argsort that NumPy does as a radix sort (a million keys: 0.03 s,
    against 0.12 s for the merge sort that int64 keys get)."""
    order = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    high = (keys >> 16).astype(np.uint16)
    if high.any():
        order = order[np.argsort(high[order], kind="stable")]
    return order


def _group(images, table, skip_empty, dataset):
    """The records, grouped by image (annotations sorted stably by image), as a RecordTable:
    shared columns, each record made when first asked for."""
    image_of = table["image"]
    offsets = group_offsets(image_of, len(images))
    if np.all(image_of[1:] >= image_of[:-1]):  # already grouped (a file written image by image)
        order = None
    else:
        order = _stable_order(image_of)

    def sort(v):
        return v if order is None else v[order]

    boxes, labels = sort(table.pop("box")), sort(table.pop("label"))
    fields = {"iscrowd": sort(table.pop("iscrowd")), "annotation_id": sort(table.pop("ann_id"))}
    for key in FLAG_KEYS:
        if key in table:
            fields[key] = sort(table.pop(key))
    per_box = {k: table.pop(k) for k in ("segmentation", "box_keys") if k in table}
    source = table.get("source")  # row -> entry of the per-box lists (None: the same index)
    if per_box and order is not None:
        source = order if source is None else source[order]
    if images:
        ids, paths, widths, heights, image_keys = (list(c) for c in zip(*images))
    else:
        ids, paths, widths, heights, image_keys = [], [], [], [], []
    if skip_empty:
        kept = np.flatnonzero(offsets[1:] > offsets[:-1])
        if len(kept) < len(images):
            dataset.dropped["empty images (skip_empty)"] = len(images) - len(kept)
            rows = kept.tolist()
            ids, paths, widths, heights, image_keys = ([c[k] for k in rows] for c in (
                ids, paths, widths, heights, image_keys))
            # An empty image owns no rows: the kept images' rows stay contiguous.
            offsets = np.append(offsets[kept], offsets[-1])
    return RecordTable(paths, widths, heights, ids, image_keys if any(image_keys) else None,
                       offsets, boxes, labels, fields, per_box, source)
