"""YOLO text labels -> canonical records.

Layout: ``root/images/<rel>.<ext>`` with ``root/labels/<rel>.txt`` beside it (optionally one
level of split folder: ``images/<split>/``, ``labels/<split>/``). Each label line is
``class cx cy w h`` normalised by the image size, so the box is
``[(cx - w/2) W, (cy - h/2) H, (cx + w/2) W, (cy + h/2) H]``.
"""
from __future__ import annotations

import os
import reprlib
import re

import numpy as np

from ._common import (IMAGE_EXTENSIONS, ErrorSink, box_fault, header_size, outside_root_reason,
                      real_dir, resolve_under, validate_boxes)
from . import limits
from .errors import DatasetError
from .records import Dataset, DetectionRecord


def read_yolo(root, classes_file=None, *, split=None, classes=None, on_error="raise",
              progress=None) -> Dataset:
    """Read a YOLO tree.

    Args:
        root: folder holding ``images/`` and ``labels/``.
        classes_file: text file of class names, one a line (label ``i`` is line ``i``), or a
            ``.yaml`` / ``.yml`` file read as a data.yaml. Default: ``root/classes.txt``, else
            the ``names`` of ``root/data.yaml`` (list or ``i: name``; :func:`yaml_names`).
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
    dataset = Dataset([], names, root=root)
    return collect_records(root, images, labels, sink, dataset, progress,
                           lambda rel: _record(images, labels, rel, len(names), sink, dataset))


def collect_records(root, images, labels, sink, dataset, progress, make):
    """``dataset`` with the record ``make(rel)`` of every image under ``images`` that has its
    label file (in order; None: skipped, the sink counts it), label files without an image
    reported, and the sink's skips; ``progress(done, total)`` after each image."""
    all_rels = _relative_images(images)
    rels = inside_root(_same_stem(all_rels, images, labels, sink), root, images, labels, sink)
    for done, rel in enumerate(rels, 1):
        record = make(rel)
        if record is not None:
            dataset.records.append(record)
        if progress is not None:
            progress(done, len(rels))
    _orphans(labels, all_rels, sink)
    dataset.skipped = sink.finish()
    return dataset


def _class_names(root, classes_file):
    path = os.fspath(classes_file) if classes_file else os.path.join(root, "classes.txt")
    if classes_file and path.lower().endswith((".yaml", ".yml")) and os.path.isfile(path):
        names = yaml_names(read_text(path), path)
        if names is not None:
            return names
        raise DatasetError(path, "no 'names' key: not a YOLO data.yaml")
    if os.path.isfile(path):
        return class_lines(read_text(path))
    yaml = os.path.join(root, "data.yaml")
    if classes_file is None and os.path.isfile(yaml):
        names = yaml_names(read_text(yaml), yaml)
        if names:
            return names
    raise DatasetError(path, "class list not found (need classes.txt or data.yaml 'names')")


def class_lines(text):
    """The names of a ``classes.txt``: one a line, stripped, blank lines skipped. Lines end at
    ``\\n``, ``\\r\\n`` or ``\\r`` only, as write_yolo writes them and read_voc_classes reads
    them (``str.splitlines`` would also split at U+2028, form feeds, ... inside a name)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return [line.strip() for line in lines if line.strip()]


def read_text(path) -> str:
    """The file as UTF-8 text (a leading byte-order mark dropped); DatasetError naming the
    file when it is not."""
    try:
        return limits.read_bytes(path, what="text file").decode("utf-8-sig")
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


def inside_root(rels, root, images, labels, sink):
    """``rels`` whose image and label file resolve inside ``root``, when
    ``readers.limits.FOLLOW_SYMLINKS_OUTSIDE_ROOT`` is False (as VOC and COCO read then); each
    other is a fault naming the file, and its image is dropped. Links are followed otherwise."""
    if limits.FOLLOW_SYMLINKS_OUTSIDE_ROOT:
        return rels
    kept = []
    for rel in rels:
        image, label = os.path.join(images, rel), _label_path(labels, rel)
        outside = [p for p in (image, label) if (p is image or os.path.lexists(p))
                   and resolve_under(root, os.path.relpath(p, root)) is None]
        for path in outside[:1]:
            sink.fault(path, outside_root_reason(os.path.relpath(path, root), root))
        if not outside:
            kept.append(rel)
    return kept


def yaml_names(text: str, path="data.yaml"):
    """The class names of a YOLO ``data.yaml``, read by PyYAML's safe loader: ``names`` a list
    (label ``i`` is item ``i``) or a mapping ``{0: a, 1: b, ...}`` whose keys are exactly
    ``0 .. n-1``. Returns None when there is no ``names`` key.

    Raises:
        DatasetError naming ``path`` and the fault: not YAML, not a mapping at the top, a key
        given twice, ``names`` of another type, a name that YAML does not read as text
        (``yes``, ``null``, ``1.5``, a list, ...: quote it) or that is blank, mapping keys
        that are not the whole numbers ``0 .. n-1``, or an ``nc`` that is not their count.
    """
    import yaml

    try:
        data = yaml.load(text, Loader=_strict_loader())
    except _YamlDuplicate as exc:
        raise DatasetError(path, str(exc)) from None
    except yaml.YAMLError as exc:
        raise DatasetError(path, "not valid YAML (" + " ".join(str(exc).split()) + ")") from None
    except RecursionError:
        raise DatasetError(path, "not valid YAML (nested too deeply)") from None
    except ValueError as exc:  # an int over Python's digit limit
        raise DatasetError(path, f"not valid YAML ({exc})") from None
    if data is None:
        return None
    _refuse_alias_bombs(data, path)
    if not isinstance(data, dict):
        raise DatasetError(path, f"the top level is a {type(data).__name__}, not a mapping "
                                 "with a 'names' key")
    if "names" not in data:
        return None
    names = data["names"]
    if isinstance(names, dict):
        keys = list(names)
        if not all(type(k) is int for k in keys) or sorted(keys) != list(range(len(keys))):
            raise DatasetError(path, f"'names' keys are {_short(keys, 80)}: they must be the whole "
                                     f"numbers 0 .. {len(keys) - 1} (label i is key i)")
        names = [names[k] for k in range(len(keys))]
    elif not isinstance(names, list):
        raise DatasetError(path, f"'names' is {_short(names)}: not a list or a mapping of names")
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise DatasetError(path, f"names[{i}] is {_short(name)} ({type(name).__name__}): "
                                     "YAML does not read it as text (yes, no, on, off, null, "
                                     "numbers); quote it")
        if not name.strip() or name != name.strip() or name.splitlines() != [name]:
            raise DatasetError(path, f"names[{i}] is {_short(name)}: blank, or with surrounding "
                                     "whitespace or a line break")
    nc = data.get("nc")
    if nc is not None and (type(nc) is not int or nc != len(names)):
        raise DatasetError(path, f"'nc' is {_short(nc, 40)} but 'names' holds {len(names)} names")
    return names


# The most values a data.yaml may hold once its aliases are expanded. A few hundred bytes of
# nested aliases ("billion laughs") expand to billions; anything that walks the tree (a repr
# in an error message, a copy) would exhaust memory.
MAX_YAML_VALUES = 1_000_000


def _refuse_alias_bombs(data, path, limit=None):
    """DatasetError naming ``path`` where the loaded YAML, its aliases expanded, holds more than
    ``MAX_YAML_VALUES`` values or refers to itself. Shared values are counted once per
    reference, in time linear in the distinct values (a memo by identity)."""
    limit = MAX_YAML_VALUES if limit is None else limit
    sizes, busy = {}, set()

    def size(v):
        if not isinstance(v, (list, dict)):
            return 1
        key = id(v)
        if key in sizes:
            return sizes[key]
        if key in busy:
            raise DatasetError(path, "an alias refers to a value that holds it (a recursive "
                                     "YAML value); refused")
        busy.add(key)
        total = 1
        for x in ([y for kv in v.items() for y in kv] if isinstance(v, dict) else v):
            total += size(x)
            if total > limit:
                raise DatasetError(path, f"its aliases expand to more than {limit:,} values "
                                         "(an alias bomb); refused")
        busy.discard(key)
        sizes[key] = total
        return total

    try:
        size(data)
    except RecursionError:
        raise DatasetError(path, "not valid YAML (nested too deeply)") from None


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxdict = 3, 6, 6, 6
_REPR.maxstring, _REPR.maxother = 60, 60


def _short(value, width=60) -> str:
    """A bounded repr of ``value``, cut to ``width`` characters: nested lists and mappings
    shown 3 levels and 6 items deep (``reprlib``), so its cost never depends on the value's
    size; an int over Python's digit limit, whose repr raises, by its size."""
    try:
        return _REPR.repr(value)[:width]
    except ValueError:
        return f"<an int of {value.bit_length()} bits>" if isinstance(value, int) else "<?>"


class _YamlDuplicate(Exception):
    pass


_LOADER = []


def _strict_loader():
    """PyYAML's safe loader (the C one where built), refusing a mapping key given twice
    (PyYAML keeps the last value silently). Merge keys (``<<: *base``) are YAML's own and are
    taken: a key of the mapping itself overrides a merged one, as YAML says; a merge that would
    hold more than ``MAX_YAML_VALUES`` entries (merges of merges double) is refused before it
    is copied."""
    if _LOADER:
        return _LOADER[0]
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    merge_tag = "tag:yaml.org,2002:merge"

    class StrictLoader(base):
        def flatten_mapping(self, node):
            done = self.__dict__.setdefault("_flattened", set())
            if id(node) in done:  # flattened once: its value holds the merged keys now
                return
            seen, merged = set(), 0
            for key_node, value_node in node.value:
                if key_node.tag == merge_tag:
                    subs = value_node.value if isinstance(value_node, yaml.SequenceNode) \
                        else [value_node]
                    for sub in subs:
                        if isinstance(sub, yaml.MappingNode):
                            self.flatten_mapping(sub)
                            merged += len(sub.value)
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the base class says so
                    break
                if duplicate:
                    raise _YamlDuplicate(f"the key {_short(key)} is given twice (line "
                                         f"{key_node.start_mark.line + 1}); refused")
            if merged > MAX_YAML_VALUES:
                raise _YamlDuplicate(f"its merge keys (<<) expand to more than "
                                     f"{MAX_YAML_VALUES:,} entries (line "
                                     f"{node.start_mark.line + 1}); refused")
            super().flatten_mapping(node)
            done.add(id(node))

    _LOADER.append(StrictLoader)
    return StrictLoader


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
        if len(parts) != 5:
            sink.fault(label_file, f"line {number}: expected 5 values 'class cx cy w h', "
                                   f"got {len(parts)}")
            continue
        bad = next((p for p in parts[1:] if not _NUMBER.fullmatch(p)), None)
        if not _INDEX.fullmatch(parts[0]) or bad is not None:
            what = f"class {parts[0]!r:.30} is not a whole number" if bad is None else \
                f"{bad!r:.30} is not a decimal number"
            sink.fault(label_file, f"line {number}: {what}")
            continue
        # (a class of 19 digits or more is past any class list; int() refuses 4300+ digits)
        cls = int(parts[0]) if len(parts[0]) < 19 else num_classes
        values = [float(v) for v in parts[1:]]
        if not 0 <= cls < num_classes:
            sink.fault(label_file, f"line {number}: unknown class {parts[0]:.30} "
                                   f"(the class list has {num_classes})")
            continue
        rows.append((cls, values, number))
    return rows


# ASCII decimals only: int() and float() also take "1_0" (10), "\u0661" (1), "nan", "inf".
_INDEX = re.compile(r"[0-9]+")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


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
