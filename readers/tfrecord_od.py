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

import glob
import hashlib
import os
import re

import numpy as np

from ._common import ErrorSink, box_fault, real_dir, resolve_under, validate_boxes
from .errors import DatasetError
from .label_map import pbtxt_quote, read_label_map  # noqa: F401 (importable here as before)
from .records import Dataset, DetectionRecord
from .writers import count_unheld_dataset_extra
from .tfrecord import (ProtoError, RecordFault, bytes_feature, float_feature, int64_feature,
                       iter_records, parse_example, read_record_at, serialize_example,
                       write_records)

BOX_KEYS = tuple(f"image/object/bbox/{k}" for k in ("xmin", "ymin", "xmax", "ymax"))
FLAGS = {"difficult": "image/object/difficult", "truncated": "image/object/truncated",
         "iscrowd": "image/object/is_crowd"}
LABEL, TEXT, AREA = "image/object/class/label", "image/object/class/text", "image/object/area"
MODELED = {"image/encoded", "image/filename", "image/source_id", "image/height", "image/width",
           "image/format", "image/key/sha256", *BOX_KEYS, LABEL, TEXT, AREA, *FLAGS.values()}
LABEL_MAP_FILE = "label_map.pbtxt"
_CANONICAL_INT = re.compile(r"0|[1-9][0-9]*")
_MAGIC = ((b"\xff\xd8\xff", "jpeg"), (b"\x89PNG\r\n\x1a\n", "png"), (b"BM", "bmp"),
          (b"RIFF", "webp"))


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
                  progress=None) -> Dataset:
    """Read TFRecord files in the Object Detection API layout; no TensorFlow needed.

    The files are indexed here, once (no index files): each record's framing and CRCs are
    checked and its Example parsed; the image bytes are located, not copied.

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
    names = dict(fixed or {})
    rows, clipped = [], 0
    for k, file in enumerate(files):
        try:
            for offset, data in iter_records(file):
                if isinstance(data, RecordFault):
                    sink.fault(file, data.reason)
                    continue
                row = _record(file, offset, data, sink)
                if row is not None and _classes(row, names, fixed, file, offset, sink):
                    clipped += row.pop("clipped")
                    rows.append(row)
        except RecordFault as exc:
            sink.fault(file, exc.reason + ("" if on_error == "raise" else
                                           "; the rest of the file is skipped"))
        if progress is not None:
            progress(k + 1, len(files))
    ids = sorted(names)
    dataset = Dataset([], [names[i] if names[i] is not None else str(i) for i in ids], ids,
                      root=os.path.dirname(os.path.commonpath([real_dir(f) for f in files])))
    index = {cid: k for k, cid in enumerate(ids)}
    for row in rows:
        if skip_empty and not len(row["boxes"]):
            dataset.dropped["empty images (skip_empty)"] = \
                dataset.dropped.get("empty images (skip_empty)", 0) + 1
            continue
        labels = np.asarray([index[int(i)] for i in row["ids"]], np.int64)
        dataset.records.append(DetectionRecord(row["path"], row["width"], row["height"],
                                               row["boxes"], labels, row["fields"],
                                               row["image_id"], row["extra"]))
    dataset.clipped = clipped
    dataset.emptied = sum(r.pop("emptied", 0) for r in rows)
    dataset.skipped = sink.finish()
    return dataset


def _record(file, offset, data, sink):
    """One record's dict, or None after a fault (sent to the sink)."""
    where = f"byte offset {offset}"
    try:
        ex = parse_example(data)
        return _decode(file, offset, data, ex, where, sink)
    except ProtoError as exc:
        sink.fault(file, f"{where}: malformed tf.train.Example ({exc})")
    except _Fault as exc:
        sink.fault(file, f"{where}: {exc}")
    return None


class _Fault(Exception):
    pass


def _one(ex, name, kind, required=False):
    values = {"bytes": ex.bytes, "int": ex.int64s, "float": ex.floats}[kind](name)
    if len(values) == 0:
        if required:
            raise _Fault(f"no {name}")
        return None
    if len(values) > 1:
        raise _Fault(f"{name} holds {len(values)} values, not 1")
    return values[0]


def _text(value, name):
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise _Fault(f"{name} is not UTF-8") from None


def _decode(file, offset, data, ex, where, sink):
    spans = ex.spans("image/encoded")
    if len(spans) != 1:
        raise _Fault(f"image/encoded holds {len(spans)} values, not 1")
    start, stop = spans[0]
    fmt = _text(_one(ex, "image/format", "bytes"), "image/format")
    filename = _text(_one(ex, "image/filename", "bytes"), "image/filename")
    source_id = _text(_one(ex, "image/source_id", "bytes"), "image/source_id")
    width, height = _one(ex, "image/width", "int"), _one(ex, "image/height", "int")
    if width is None or height is None:
        width, height = _header_size(data[start:stop])
    if not (0 < width < 2**31 and 0 < height < 2**31):
        raise _Fault(f"image/width x image/height is {width} x {height}")
    # an int only where it is one's canonical decimal ("7", not "007" or "\u0667": those
    # stay text, as written)
    image_id = int(source_id) if source_id and _CANONICAL_INT.fullmatch(source_id) \
        and int(source_id) < 2**63 else (source_id or None)
    name = filename or f"{source_id or offset}.{fmt or _sniff(data[start:stop])}"
    path = os.path.join(file, name.lstrip("/"))
    cols = [ex.floats(k).astype(np.float64) for k in BOX_KEYS]
    n = len(cols[0])
    ids, texts = ex.int64s(LABEL), ex.bytes(TEXT)
    lengths = {k: len(c) for k, c in zip(BOX_KEYS, cols)} | {LABEL: len(ids)}
    if texts:
        lengths[TEXT] = len(texts)
    fields = {}
    for field, key in FLAGS.items():
        if key in ex:
            fields[field] = ex.int64s(key)
            lengths[key] = len(fields[field])
    area = ex.floats(AREA) if AREA in ex else None
    if area is not None:
        lengths[AREA] = len(area)
    if (ids < 0).any():
        raise _Fault(f"{LABEL} holds the negative id {int(ids[ids < 0][0])}")
    if len(set(lengths.values())) > 1:
        raise _Fault("per-box features differ in length: "
                     + ", ".join(f"{k} {v}" for k, v in lengths.items()))
    for field, values in fields.items():
        if ((values != 0) & (values != 1)).any():
            raise _Fault(f"{FLAGS[field]} holds {values.tolist()}, not 0 or 1")
    texts = [_text(t, TEXT) for t in texts] or [None] * n
    boxes = np.stack(cols, axis=1) * np.array([width, height, width, height], np.float64) \
        if n else np.zeros((0, 4))
    good, bad, n_clipped = validate_boxes(boxes, width, height)
    keep = ~bad
    for i in np.flatnonzero(bad):
        sink.fault(file, f"{where} ({name}): " + box_fault(boxes[i], width, height))
    extra = {"tfrecord_image": (file, offset, len(data), start, stop)}
    if area is not None:
        extra["box_keys"] = [{"area": float(a)} for a in area[keep]]
    others = {k: _feature_values(ex, k) for k in ex.features if k not in MODELED}
    if others:
        extra["tfrecord_features"] = others
    return {"path": path, "width": int(width), "height": int(height), "boxes": good[keep],
            "ids": ids[keep], "texts": [t for t, k in zip(texts, keep) if k],
            "fields": {k: v[keep].astype(np.uint8) for k, v in fields.items()},
            "image_id": image_id, "extra": extra, "clipped": n_clipped,
            "emptied": int(n > 0 and not keep.any())}


def _feature_values(ex, name):
    kind = ex.kind(name)
    if kind == "bytes_list":
        return ex.bytes(name)
    if kind == "float_list":
        return ex.floats(name).tolist()
    return ex.int64s(name).tolist() if kind else []


def _classes(row, names, fixed, file, offset, sink):
    """Check the row's class ids (and texts) against the classes so far; False after a fault."""
    for cid, text in zip(row["ids"].tolist(), row["texts"]):
        if fixed is not None:
            if cid not in fixed:
                sink.fault(file, f"byte offset {offset}: class id {cid} is not in the label map")
                return False
            if text is not None and text != fixed[cid]:
                sink.fault(file, f"byte offset {offset}: class/text {text!r} for id {cid}, "
                                 f"the label map says {fixed[cid]!r}")
                return False
        elif names.get(cid) is None:
            names[cid] = text
        elif text is not None and names[cid] != text:
            raise DatasetError(file, f"byte offset {offset}: class id {cid} is named "
                                     f"{text!r} here and {names[cid]!r} before")
    row.pop("texts")
    return True


def _sniff(data) -> str:
    head = bytes(data[:8])
    return next((fmt for magic, fmt in _MAGIC if head.startswith(magic)), "img")


def _header_size(data):
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(bytes(data))) as im:
            return im.size
    except Exception as exc:  # Pillow raises several types for a bad header
        raise _Fault(f"no image/width or image/height, and the image header cannot be read "
                     f"({exc})") from None


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
