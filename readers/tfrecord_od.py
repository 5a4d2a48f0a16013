"""TFRecords in the TensorFlow Object Detection API layout <-> canonical records.

One ``tf.train.Example`` per image, with the features of the API's dataset tools
(``create_coco_tf_record.py``, ``create_pascal_tf_record.py``)::

    image/encoded            bytes    the encoded image, unchanged
    image/filename           bytes    file name (UTF-8)
    image/source_id          bytes    the dataset's image id (a decimal string for COCO)
    image/height, image/width int64
    image/format             bytes    b"jpeg" / b"png"
    image/key/sha256         bytes    hex digest of image/encoded (written, not checked)
    image/object/bbox/xmin|ymin|xmax|ymax   float   normalised to [0, 1] by width / height
    image/object/class/label int64    the label-map id (1-based; 0 is the API's background)
    image/object/class/text  bytes    the class name
    image/object/difficult, image/object/truncated, image/object/is_crowd   int64 0/1
    image/object/area        float    (COCO's area, in pixels)

A normalised box ``[xmin, ymin, xmax, ymax]`` becomes ``[xmin * W, ymin * H, xmax * W,
ymax * H]`` in the canonical continuous pixel coordinates (docs/design.md), and back by division;
float32 keeps that within ``6e-8 * W`` pixels. Labels become contiguous 0-based indices over
the label-map ids in ascending order; ``Dataset.category_ids`` keeps the ids.

The image bytes stay inside the TFRecord file: a record's ``path`` is a name under the file
(``<file>/<image/filename>``, for messages), and ``extra["tfrecord_image"]`` is
``(file, record offset, record length, start, stop)``, the image's place inside the record's
data. :func:`image_bytes` reads it; :func:`extract_images` writes the images out as files
(what the COCO / VOC / YOLO writers need).
"""
from __future__ import annotations

import gc
import glob
import hashlib
import itertools
import os

import numpy as np

from ._common import ErrorSink, real_dir, resolve_under
from .errors import DatasetError
from .label_map import pbtxt_quote, read_label_map
from .records import Dataset, DetectionRecord
from .writers import count_unheld_dataset_extra
from .tfrecord import (RecordFault, bytes_feature, float_feature, int64_feature,
                       read_record_at, serialize_example, write_records)
from .tfrecord_cache import load_index
from .tfrecord_example import (AREA, BOX_KEYS, FLAGS, LABEL, TEXT, _record, _sniff,
                               reference_rows)

LABEL_MAP_FILE = "label_map.pbtxt"


def tfrecord_files(paths) -> list:
    """The files that ``paths`` names: a file, a glob pattern, a folder (its ``*.tfrecord*``
    files), or a list of those; globs and folders sorted. None found raises DatasetError."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    files = []
    for item in items:
        item = os.fspath(item)
        if os.path.isdir(item):
            found = sorted(f for f in glob.glob(os.path.join(glob.escape(item), "*.tfrecord*"))
                           if os.path.isfile(f))
        elif glob.has_magic(item) and not os.path.exists(item):
            found = sorted(glob.glob(item))
        else:
            found = [item]
        if not found:
            raise DatasetError(item, "no TFRecord files match")
        files += [os.path.abspath(f) for f in found]
    if not files:
        raise DatasetError(str(paths), "no TFRecord files given")
    return files


def read_tfrecord(paths, *, label_map=None, skip_empty=False, on_error="raise",
                  progress=None, index_cache=None, index_workers=None) -> Dataset:
    """Read TFRecord files in the Object Detection API layout; no TensorFlow needed.

    Each file is indexed once: its records' framing and both CRCs are checked and the features
    of this layout read (``readers.tfrecord_scan``: over the whole file at once; a record it
    cannot read completely, or finds a fault in, goes to the reference parser of
    ``readers.tfrecord``, record by record); the image bytes are located, not copied. The
    index of each file is cached beside it (``readers.tfrecord_cache``: keyed by the file's
    path, size, mtime and ctime, checked before use, rebuilt when it does not match).

    Args:
        paths: a file, a glob (``"data/train-*.tfrecord"``), a folder, or a list of these.
        label_map: ``{id: name}`` or a ``label_map.pbtxt``: the classes, in id order (ids not
            used by any box are classes too); a record with a label not in it, or with a
            class/text other than the map's name, is a fault (the whole record is skipped).
            None: the ids the boxes use, named by ``class/text`` (``str(id)`` without one).
        skip_empty: drop images with no boxes (counted in ``Dataset.dropped``).
        on_error: ``"raise"``, or ``"skip"``: a bad record (CRC, truncation, malformed Example,
            missing image) or a bad box is skipped, listed in ``Dataset.skipped`` with its
            file and byte offset, and counted in one warning. A fault in a length field leaves
            the rest of that file unreadable: it is one skipped item naming the offset.
        progress: optional ``callable(done, total)`` per file.
        index_cache: None (on, unless ``DETAUG_TFRECORD_INDEX_CACHE=0``): in
            ``.detaug-index/`` beside each file, else in the user's cache folder; False: off;
            a folder: there.
        index_workers: files indexed at once, in threads (None: half the cores, at most 8:
            8 threads took 9.7 us a record against 11.8 for one on 16 idle cores, while on a busy
            2-core box 2 threads were slower, hence 1 there: benchmarks/RESULTS.md, "TFRecord index").

    Returns:
        Dataset, records in file order then record order. Per-box fields ``difficult``,
        ``truncated``, ``iscrowd`` (uint8) where the files have them; ``extra["box_keys"]``
        holds ``area``; features this layout does not model are kept in
        ``extra["tfrecord_features"]`` (``{name: list of values}``).

    Raises:
        DatasetError: naming the file, the byte offset and the fault.
    """
    files = tfrecord_files(paths)
    sink = ErrorSink(on_error, "read_tfrecord")
    fixed = None if label_map is None else read_label_map(label_map)
    collecting = gc.isenabled()
    gc.disable()  # ~10 objects a record, none of them garbage: the collector's passes over
    try:  # them would cost as much as making them
        return _read_fast(files, fixed, sink, skip_empty, on_error, progress, index_cache,
                          index_workers)
    finally:
        if collecting:
            gc.enable()


def _indexes(files, index_cache, workers):
    """Each file's index (or the DatasetError it raised), in file order; with ``workers`` > 1
    several files at once in threads (NumPy's array work runs outside the GIL)."""
    def one(file):
        try:
            return load_index(file, index_cache)
        except DatasetError as exc:
            return exc

    workers = min(8, max(1, (os.cpu_count() or 2) // 2)) if workers is None else int(workers)
    if workers <= 1 or len(files) < 2:
        yield from map(one, files)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers, thread_name_prefix="detaug-tfrecord-index") as pool:
        futures = [pool.submit(one, f) for f in files]
        try:
            for future in futures:
                yield future.result()
        finally:
            for future in futures:
                future.cancel()


def _read_fast(files, fixed, sink, skip_empty, on_error, progress, index_cache, workers):
    shards, faults, fatal = [], [], None
    for k, (file, index) in enumerate(zip(files, _indexes(files, index_cache, workers))):
        if isinstance(index, DatasetError):  # missing, a folder, GZIP: raised in order below
            fatal = index
            break
        shards.append((file, index, _slow_rows(file, index, faults, on_error)))
        if progress is not None:
            progress(k + 1, len(files))
    names = _clean_classes(shards, fixed)
    if names is None:  # a class fault or a name conflict: the reference says which comes first
        rows, names, clipped = reference_rows(files, fixed, sink, on_error)
        return _dataset(files, rows, names, clipped, skip_empty, sink)
    for file, reason in faults:
        sink.fault(file, reason)
    if fatal is not None:
        raise fatal
    return _fast_dataset(files, shards, names, skip_empty, sink)


def _read_reference(paths, *, label_map=None, skip_empty=False, on_error="raise",
                    progress=None) -> Dataset:
    """:func:`read_tfrecord` by the reference parser alone, record by record (what the fast
    path is tested against)."""
    files = tfrecord_files(paths)
    sink = ErrorSink(on_error, "read_tfrecord")
    fixed = None if label_map is None else read_label_map(label_map)
    rows, names, clipped = reference_rows(files, fixed, sink, on_error, progress)
    return _dataset(files, rows, names, clipped, skip_empty, sink)


class _Collect:
    """An error sink that keeps the faults, in order, for the end of the read."""

    def __init__(self, faults):
        self.faults = faults

    def fault(self, file, reason):
        self.faults.append((str(file), reason))


def _slow_rows(file, index, faults, on_error):
    """``[(offset, row)]`` of the records the scan left to the reference parser (their
    faults appended to ``faults``), then the file's terminal fault."""
    rows, sink = [], _Collect(faults)
    for offset, length in zip(index["slow_offset"].tolist(), index["slow_length"].tolist()):
        try:
            data = read_record_at(file, offset, length)
        except RecordFault as exc:
            faults.append((file, exc.reason))
            continue
        row = _record(file, offset, data, sink)
        if row is not None:
            rows.append((offset, row))
    if index["terminal"] is not None:
        offset, reason = index["terminal"]
        faults.append((file, f"byte offset {offset}: {reason}"
                             + ("" if on_error == "raise" else "; the rest of the file is skipped")))
    return rows


def _clean_classes(shards, fixed):
    """``{id: name}`` of the classes when no record breaks a class rule (ids in the label
    map, class/text as the map names it, one name an id); None otherwise."""
    table, ids, codes = {}, [], []
    for _, index, rows in shards:
        local = np.asarray([table.setdefault(t, len(table)) for t in index["texts"]] + [-1],
                           np.int64)
        ids.append(index["ids"])
        codes.append(local[index["text_code"]])
        for _, row in rows:
            ids.append(np.asarray(row["ids"], np.int64))
            codes.append(np.asarray([-1 if t is None else table.setdefault(t, len(table))
                                     for t in row["texts"]], np.int64).reshape(-1))
    ids = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    codes = np.concatenate(codes) if codes else np.zeros(0, np.int64)
    texts = list(table)
    named = codes >= 0
    span = len(texts) + 1
    pairs = [divmod(v, span) for v in np.unique(ids[named] * span + codes[named]).tolist()]
    if fixed is not None:
        if not np.isin(ids, np.asarray(list(fixed), np.int64)).all():
            return None
        return None if any(texts[c] != fixed[i] for i, c in pairs) else dict(fixed)
    names = dict.fromkeys(np.unique(ids).tolist())
    for i, c in pairs:
        if names[i] is not None:
            return None  # two names for one id
        names[i] = texts[c]
    return names


def _dataset(files, rows, names, clipped, skip_empty, sink):
    """The Dataset of the reference's row dicts."""
    ids = sorted(names)
    dataset = _empty_dataset(files, names)
    index = {cid: k for k, cid in enumerate(ids)}
    for row in rows:
        if skip_empty and not len(row["boxes"]):
            _count_empty(dataset)
            continue
        dataset.records.append(_row_record(row, index))
    dataset.clipped = clipped
    dataset.emptied = sum(r.pop("emptied", 0) for r in rows)
    dataset.skipped = sink.finish()
    return dataset


def _empty_dataset(files, names):
    ids = sorted(names)
    return Dataset([], [names[i] if names[i] is not None else str(i) for i in ids], ids,
                   root=os.path.dirname(os.path.commonpath([real_dir(f) for f in files])))


def _count_empty(dataset):
    what = "empty images (skip_empty)"
    dataset.dropped[what] = dataset.dropped.get(what, 0) + 1


def _row_record(row, index):
    labels = np.asarray([index[int(i)] for i in row["ids"]], np.int64)
    return DetectionRecord(row["path"], row["width"], row["height"], row["boxes"], labels,
                           row["fields"], row["image_id"], row["extra"])


def _fast_dataset(files, shards, names, skip_empty, sink):
    """The Dataset of the scanned records and the reference's rows, in file order."""
    dataset = _empty_dataset(files, names)
    lookup = np.asarray(sorted(names), np.int64)
    index = {cid: k for k, cid in enumerate(lookup.tolist())}
    clipped = emptied = 0
    for file, ix, rows in shards:
        records = _fast_records(file, ix, lookup)
        clipped += int(ix["clipped"].sum())
        if rows:
            clipped += sum(row.pop("clipped") for _, row in rows)
            emptied += sum(row.pop("emptied", 0) for _, row in rows)
            merged = sorted([(o, k, r) for k, (o, r) in enumerate(zip(
                ix["offset"].tolist(), records))] + [(o, -1, row) for o, row in rows],
                key=lambda t: t[0])
            records = [r if k >= 0 else _row_record(r, index) for _, k, r in merged]
        if not skip_empty:
            dataset.records.extend(records)
            continue
        for record in records:
            if len(record.boxes):
                dataset.records.append(record)
            else:
                _count_empty(dataset)
    dataset.clipped, dataset.emptied = clipped, emptied
    dataset.skipped = sink.finish()
    return dataset


def _fast_records(file, ix, lookup):
    """DetectionRecords of a shard's scanned records (all of them clean). Their arrays are
    float32 (n, 4) boxes and int64 labels by construction: the constructor's checks are
    skipped (a record costs a few dict and tuple allocations, no more)."""
    n = len(ix["offset"])
    bounds = np.zeros(n + 1, np.int64)
    np.cumsum(ix["nbox"], out=bounds[1:])
    lo, hi = bounds[:-1].tolist(), bounds[1:].tolist()
    labels = np.searchsorted(lookup, ix["ids"])
    boxes = ix["boxes"]
    ids = [i if ok else (s or None) for i, ok, s in zip(
        ix["image_id_int"].tolist(), ix["image_id_is_int"].tolist(), ix["source_id"])]
    prefix = file + os.sep
    paths = [prefix + name.lstrip("/") for name in ix["name"]]
    places = zip(itertools.repeat(file), ix["offset"].tolist(), ix["length"].tolist(),
                 ix["img_start"].tolist(), ix["img_stop"].tolist())
    new, cls = object.__new__, DetectionRecord
    out = []
    for path, w, h, a, b, iid, place in zip(paths, ix["width"].tolist(), ix["height"].tolist(),
                                            lo, hi, ids, places):
        record = new(cls)  # attributes set one by one: the instance keeps a key-sharing dict
        record.path, record.width, record.height = path, w, h
        record.boxes, record.labels, record.fields = boxes[a:b], labels[a:b], {}
        record.image_id, record.extra = iid, {"tfrecord_image": place}
        out.append(record)
    flags = [(f, ix[f"flag_{f}"]) for f in FLAGS if ix[f"flag_present_{f}"].any()]
    for f, values in flags:  # per-box flags, where the record has them
        for k in np.flatnonzero(ix[f"flag_present_{f}"]).tolist():
            out[k].fields[f] = values[lo[k]:hi[k]]
    if ix["area_present"].any():
        area = ix["area"].tolist()
        for k in np.flatnonzero(ix["area_present"]).tolist():
            out[k].extra["box_keys"] = [{"area": v} for v in area[lo[k]:hi[k]]]
    for record, others in zip(out, ix["others"]):
        if others:
            record.extra["tfrecord_features"] = others
    return out


def image_bytes(record) -> bytes:
    """The encoded image of a record: read from inside its TFRecord (CRC checked again), or
    from its file."""
    loc = record.extra.get("tfrecord_image")
    if loc is None:
        with open(record.path, "rb") as f:
            return f.read()
    file, offset, length, start, stop = loc
    return read_record_at(file, offset, length)[start:stop]


def extract_images(dataset, folder, *, progress=None) -> int:
    """Write the images held inside TFRecords as files under ``folder``, unchanged, and point
    the records at them (``path``; ``extra["tfrecord_image"]`` removed), so that the COCO, VOC
    and YOLO writers can copy them. File names are the records' ``image/filename``; a name
    that would leave ``folder`` is refused (DatasetError); a name used twice gets a
    ``_<n>`` suffix. Returns the number of names so changed."""
    root = real_dir(folder)
    os.makedirs(root, exist_ok=True)
    used, renamed = set(), 0
    for k, record in enumerate(dataset.records):
        loc = record.extra.get("tfrecord_image")
        if loc is None:
            continue
        name = os.path.relpath(record.path, loc[0])
        stem, ext = os.path.splitext(name)
        n = 1
        while name in used:
            name, n = f"{stem}_{n}{ext}", n + 1
        renamed += name != os.path.relpath(record.path, loc[0])
        used.add(name)
        path = resolve_under(root, name)
        if path is None:
            raise DatasetError(loc[0], f"byte offset {loc[1]}: image/filename {name!r} points "
                                       "outside the folder it is extracted to; refused")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(image_bytes(record))
        record.path = path
        record.extra = {key: v for key, v in record.extra.items() if key != "tfrecord_image"}
        if progress is not None:
            progress(k + 1, len(dataset))
    return renamed


def shard_names(prefix, num_shards) -> list:
    """``prefix-00000-of-00004.tfrecord`` ... (the Object Detection API's sharded names)."""
    return [f"{prefix}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]


def write_tfrecord(dataset, folder, *, prefix="train", num_shards=1, progress=None,
                   dry_run=False):
    """Write ``dataset`` as sharded TFRecords in the Object Detection API layout, and
    ``label_map.pbtxt`` beside them.

    Args:
        dataset: a ``readers.Dataset`` with contiguous 0-based labels. Images are read from
            their files, or from inside the TFRecords they came from; never re-encoded.
        folder: the folder to write (created).
        prefix, num_shards: file names (:func:`shard_names`); record ``k`` goes to shard
            ``k % num_shards``, so the shards hold the records in turn.
        progress: optional ``callable(done, total)``.
        dry_run: build the report only; nothing is written.

    Returns:
        ``readers.WriteReport`` (format ``"tfrecord"``). Boxes are written normalised, as
        float32: ``max_shift_px`` is the largest move that this rounding causes. Class ids are
        ``dataset.category_ids``, shifted by +1 when one of them is 0 (the API reserves 0 for
        the background; said in ``notes``). Written as well: ``source_id`` (the image id),
        ``difficult`` / ``truncated`` / ``iscrowd`` fields, ``area`` box keys, and the
        ``tfrecord_features`` a TFRecord source had. Counted under ``not_held``: annotation
        ids, segmentation, other box and image keys and per-box fields, dataset extras.
    """
    from .writers import WriteReport, _check_labels

    if int(num_shards) < 1:
        raise ValueError(f"num_shards must be at least 1, not {num_shards}")
    _check_labels(dataset, allow_embedded=True)
    report = WriteReport("tfrecord", os.fspath(folder), classes=dataset.num_classes)
    shift = 1 if len(dataset.category_ids) and min(dataset.category_ids) == 0 else 0
    ids = [int(i) + shift for i in dataset.category_ids]
    if shift:
        report.notes.append(f"class ids written as category id + 1 (1..{len(ids)}): the "
                            "Object Detection API reserves 0 for the background")
    names = shard_names(prefix, int(num_shards))
    shards = [[] for _ in names]
    for k, record in enumerate(dataset.records):
        shards[k % len(names)].append(record)
    if not dry_run:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, LABEL_MAP_FILE), "w", encoding="utf-8") as f:
            f.writelines(f"item {{\n  id: {i}\n  name: {pbtxt_quote(n)}\n}}\n"
                         for i, n in zip(ids, dataset.class_names))
    done = [0]

    def examples(records):
        for record in records:
            yield _example(record, ids, dataset.class_names, report)
            done[0] += 1
            if progress is not None:
                progress(done[0], len(dataset))

    for name, records in zip(names, shards):
        if dry_run:
            for _ in examples(records):
                pass
        else:
            write_records(os.path.join(folder, name), examples(records))
    report.images = len(dataset)
    _unheld(dataset, report)
    return report


def _example(record, ids, class_names, report):
    from ._common import header_size

    width, height = record.width, record.height
    if width <= 0 or height <= 0:
        width, height = header_size(record.path)
    image = image_bytes(record)
    loc = record.extra.get("tfrecord_image")
    filename = os.path.relpath(record.path, loc[0]) if loc else os.path.basename(record.path)
    b = record.boxes.astype(np.float64)
    scale = np.array([width, height, width, height], np.float64)
    norm = (b / scale).astype(np.float32)
    if len(b):
        report.max_shift_px = max(report.max_shift_px,
                                  float(np.abs(norm.astype(np.float64) * scale - b).max()))
    labels = record.labels.tolist()
    feats = {
        "image/height": int64_feature([height]), "image/width": int64_feature([width]),
        "image/filename": bytes_feature([filename]),
        "image/source_id": bytes_feature([str(record.image_id if record.image_id is not None
                                              else os.path.splitext(filename)[0])]),
        "image/key/sha256": bytes_feature([hashlib.sha256(image).hexdigest()]),
        "image/encoded": bytes_feature([image]),
        "image/format": bytes_feature([_sniff(image)]),
    }
    for j, key in enumerate(BOX_KEYS):
        feats[key] = float_feature(norm[:, j])
    feats[TEXT] = bytes_feature([class_names[i] for i in labels])
    feats[LABEL] = int64_feature([ids[i] for i in labels])
    for field, key in FLAGS.items():
        if field in record.fields:
            feats[key] = int64_feature(np.asarray(record.fields[field], np.int64))
    box_keys = record.extra.get("box_keys") or []
    areas = [k.get("area") if k else None for k in box_keys]
    if areas and all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in areas):
        feats[AREA] = float_feature(areas)
    for name, values in (record.extra.get("tfrecord_features") or {}).items():
        if name in feats:
            continue
        if all(isinstance(v, (bytes, str)) for v in values):
            feats[name] = bytes_feature(values)
        elif all(isinstance(v, int) for v in values):
            feats[name] = int64_feature(values)
        else:
            feats[name] = float_feature(values)
    report.boxes += record.num_boxes
    return serialize_example(feats)


def _unheld(dataset, report):
    """Count what the layout does not hold (nothing leaves without a count)."""
    for record in dataset.records:
        for name, values in record.fields.items():
            if name == "annotation_id":
                report.count("annotation ids", len(values))
            elif name not in FLAGS:
                report.count(f"{name} (non-zero) on annotations", np.count_nonzero(values))
        for name, value in record.extra.items():
            if name in ("tfrecord_image", "tfrecord_features"):
                continue
            if name == "box_keys":
                for keys in value:
                    for key in keys or {}:
                        if key != "area":
                            report.count(f"{key} on annotations", 1)
            elif name == "image_keys":
                for key in value:
                    report.count(f"{key} on images", 1)
            elif isinstance(value, list):
                report.count(f"{name} on annotations", sum(v is not None for v in value))
            else:
                report.count(name, 1)
    count_unheld_dataset_extra(dataset, report)
