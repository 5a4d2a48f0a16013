"""One record of the Object Detection API layout, from its parsed ``tf.train.Example``: the
reference decode of ``read_tfrecord`` (``readers.tfrecord_scan`` is its fast path and hands
every record it cannot read completely, or finds a fault in, to :func:`_record`).

The layout's features and their rules are listed in ``readers.tfrecord_od``.
"""
from __future__ import annotations

import os
import re

import numpy as np

from ._common import box_fault, validate_boxes
from .errors import DatasetError
from .tfrecord import ProtoError, parse_example

BOX_KEYS = tuple(f"image/object/bbox/{k}" for k in ("xmin", "ymin", "xmax", "ymax"))
FLAGS = {"difficult": "image/object/difficult", "truncated": "image/object/truncated",
         "iscrowd": "image/object/is_crowd"}
LABEL, TEXT, AREA = "image/object/class/label", "image/object/class/text", "image/object/area"
MODELED = {"image/encoded", "image/filename", "image/source_id", "image/height", "image/width",
           "image/format", "image/key/sha256", *BOX_KEYS, LABEL, TEXT, AREA, *FLAGS.values()}
_CANONICAL_INT = re.compile(r"0|[1-9][0-9]*")
_MAGIC = ((b"\xff\xd8\xff", "jpeg"), (b"\x89PNG\r\n\x1a\n", "png"), (b"BM", "bmp"),
          (b"RIFF", "webp"))


def image_id(source_id):
    """The record's image id: an int only where ``source_id`` is one's canonical decimal
    (``"7"``, not ``"007"`` or ``"\\u0667"``: those stay text, as written); None for none."""
    if source_id and _CANONICAL_INT.fullmatch(source_id) and int(source_id) < 2**63:
        return int(source_id)
    return source_id or None


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
            "image_id": image_id(source_id), "extra": extra, "clipped": n_clipped,
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


def reference_rows(files, fixed, sink, on_error, progress=None):
    """The records of ``files`` as row dicts, each record framed by ``iter_records`` and parsed
    by ``parse_example`` (the reference path, and the fast path's fallback): ``(rows, names,
    clipped)``, faults sent to ``sink`` in file order."""
    from .tfrecord import RecordFault, iter_records

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
    return rows, names, clipped
