"""Pascal VOC XML -> canonical records (lxml, parsed without entity expansion or network).

VOC boxes are 1-based inclusive integer pixel indices; pixel ``i`` covers ``[i - 1, i]`` in
continuous coordinates, so ``(xmin, ymin, xmax, ymax)`` maps to
``[xmin - 1, ymin - 1, xmax, ymax]`` (float32). ``xmax == width`` maps to ``x1 == width``.
"""
from __future__ import annotations

import os
import re
import sys
from array import array
from itertools import repeat

import numpy as np
from lxml import etree

from ._common import (ErrorSink, FileIndex, box_fault, count_drop, gc_paused, group_offsets,
                      header_size, outside_root_reason, real_dir, resolve_under,
                      validate_boxes_mask)
from . import limits
from .errors import DatasetError
from .records import Dataset, trusted_record

VOC_CLASSES = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor",
)

_COORDS = ("xmin", "ymin", "xmax", "ymax")
# Elements with a canonical slot: <folder>, <filename>, <size>, <object> of <annotation>, and
# <name>, <bndbox>, <difficult>, <truncated> of <object>; every other child is kept in
# ``extra["image_keys"]`` / ``extra["box_keys"]`` (e.g. <source>, <segmented>, <pose>, <part>).


def safe_parser() -> etree.XMLParser:
    """An XML parser that expands no entities, loads no DTD, reaches no network, and refuses
    huge trees (XXE and billion-laughs inputs are inert)."""
    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                           huge_tree=False)


def read_voc_classes(path) -> list:
    """The class names of a VOC class list (``classes.txt``, as :func:`readers.write_voc` leaves
    it): one name a line, label ``i`` being the ``i``-th name. The one reader of such files
    (``read_voc(classes=<path>)``, detaug-convert, the demo).

    Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` (a character such as U+2028 inside a name is
    kept). Each line is stripped of surrounding whitespace, as a VOC ``<name>`` is when read,
    and a line left blank is skipped. A leading UTF-8 byte-order mark is dropped.

    Raises:
        DatasetError naming the file and the fault: missing or unreadable, not a regular file
        or over ``readers.limits.MAX_LABEL_FILE_BYTES``, not UTF-8, no name at all, or a name
        listed twice (VOC objects name their class: two labels of one name would read as one).
    """
    path = os.fspath(path)
    try:
        data = limits.read_bytes(path, what="class list")
    except FileNotFoundError:
        raise DatasetError(path, "class list not found") from None
    except OSError as exc:
        raise DatasetError(path, f"cannot read the class list ({exc})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DatasetError(path, f"class list is not UTF-8 text ({exc})") from None
    names, first = [], {}
    for number, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), 1):
        name = line.strip()
        if not name:
            continue
        if name in first:
            raise DatasetError(path, f"line {number}: class {name!r} is listed twice (first on "
                                     f"line {first[name]}); VOC objects name their class, so "
                                     "the two would read as one")
        first[name] = number
        names.append(name)
    if not names:
        raise DatasetError(path, "class list holds no class name (empty, or blank lines only)")
    return names


def read_voc(root, split="trainval", classes=None, *, skip_difficult=False, on_error="raise",
             check_images=True, progress=None) -> Dataset:
    """Read a Pascal VOC tree (``Annotations/``, ``ImageSets/Main/``, ``JPEGImages/``).

    Args:
        root: the VOC folder (e.g. ``VOCdevkit/VOC2012``).
        split: ids are read from ``ImageSets/Main/<split>.txt`` (first token a line, or the
            whole line where ``Annotations/<line>.xml`` exists, so ids with inner spaces work);
            when that file does not exist, every ``Annotations/*.xml`` is read, in sorted
            order. An id listed twice is a fault: DatasetError, or under ``on_error="skip"``
            one record and the repeat listed in ``skipped``. A split file that is not UTF-8
            always raises.
        classes: None for the 20 standard classes (``VOC_CLASSES``), a list of names, the
            path of a class list file (one name a line: :func:`read_voc_classes`), or
            ``"discover"`` for the sorted union of the names in the files. Label ``i`` is
            ``classes[i]``; an object of another class is a fault. Names must be distinct
            (ValueError): an object names its class.
        skip_difficult: drop ``difficult=1`` objects (counted in ``Dataset.dropped``).
        on_error: ``"raise"`` or ``"skip"``: a bad box (or unknown class) drops that box, a bad
            file (malformed XML, missing annotation or image, unsafe file name) drops the image;
            each is listed in ``Dataset.skipped``.
        check_images: check that each image file exists (one directory listing, not a stat each).
        progress: optional ``callable(done, total)`` called after each file.

    Returns:
        Dataset (``root`` = the VOC folder, ``category_ids[i] == i``), one record per id with
        ``image_id`` the id string and per-box uint8 fields ``difficult`` and ``truncated``.
        Image size comes from ``<size>``, or from the image header where it is missing or 0.
        Other elements are kept as text (nested elements as dicts, repeated ones as lists):
        ``extra["image_keys"]`` (``source``, ``owner``, ``segmented``, ...) and
        ``extra["box_keys"]`` (per box: ``pose``, ``occluded``, ``part``, ...).
        ``Dataset.emptied`` counts images whose every object was bad (skipped).
    """
    if isinstance(classes, os.PathLike) or (isinstance(classes, str) and classes != "discover"):
        classes = read_voc_classes(classes)  # (a str is a path: never a list of its letters)
    root = real_dir(root)
    sink = ErrorSink(on_error, "read_voc")
    with gc_paused():  # dicts and strings for every object, none of them garbage
        dataset = _read(root, split, classes, sink, skip_difficult, check_images, progress)
    dataset.skipped = sink.finish()  # (here: its warning names read_voc's caller)
    return dataset


def _read(root, split, classes, sink, skip_difficult, check_images, progress):
    table = _parse_all(root, _list_ids(root, split, sink), sink, check_images, progress)
    if classes == "discover":
        faults = table.faults
        classes = sorted({n for i, n in enumerate(table.names) if i not in faults})
    names = list(VOC_CLASSES if classes is None else classes)
    if len(set(names)) < len(names):  # objects name their class: two would read as one
        raise ValueError(f"read_voc: classes names "
                         f"{sorted({n for n in names if names.count(n) > 1})} more than once")
    dataset = Dataset([], names, root=root)
    dataset.records = _build(table, names, skip_difficult, sink, dataset)
    return dataset


def _list_ids(root, split, sink):
    """The ids of a split file: a line is an id, or an id and a per-class flag (``id -1``);
    a whole line that names an annotation file is that id (ids with spaces round-trip). An id
    listed twice is a fault (the second listing is skipped under ``on_error="skip"``)."""
    split_file = os.path.join(root, "ImageSets", "Main", f"{split}.txt")
    if os.path.isfile(split_file):
        try:
            text = limits.read_bytes(split_file, what="split file").decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise DatasetError(split_file, f"split file is not UTF-8 text ({exc})") from None
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        index, ids, first = FileIndex(), [], {}
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if not line:
                continue
            if line.isprintable() and " " not in line:  # no inner blank: the line is the id
                image_id = line
            else:
                whole = resolve_under(os.path.join(root, "Annotations"), line + ".xml")
                image_id = line if whole and index.exists(whole) else line.split()[0]
            if image_id in first:
                sink.fault(split_file, f"line {number}: id {image_id!r} is listed twice "
                                       f"(first on line {first[image_id]})")
                continue
            first[image_id] = number
            ids.append(image_id)
        return ids
    folder = os.path.join(root, "Annotations")
    if not os.path.isdir(folder):
        raise DatasetError(root, f"no {split_file} and no Annotations/ folder: not a VOC tree")
    return sorted(n[:-4] for n in os.listdir(folder) if n.endswith(".xml"))


def _parse_all(root, ids, sink, check_images, progress):
    """Every file's objects into one :class:`_Table` (a file with a fault leaves nothing)."""
    table, parser, index = _Table(), safe_parser(), FileIndex()
    folder = os.path.join(root, "Annotations")
    images = os.path.join(root, "JPEGImages")
    total = len(ids)
    for done, image_id in enumerate(ids, 1):
        xml_path = resolve_under(folder, image_id + ".xml")
        if xml_path is None:
            sink.fault(image_id, outside_root_reason(image_id, root))
            continue
        n_objects = len(table.names)
        try:
            _parse_file(xml_path, image_id, images, parser, index, check_images, table)
        except DatasetError as exc:
            table.truncate(n_objects)  # the objects read before the fault go too
            sink.fault(exc.file, exc.reason)
        if progress is not None:
            progress(done, total)
    return table


class _Table:
    """What the files hold, as columns: one entry per object (all files' objects in file
    order) and one per file. Objects go straight into flat columns (their coordinates into
    one float64 array) instead of a tuple of Python floats each."""

    def __init__(self):
        self.names = []  # interned <name> text of each object
        self.coords = array("d")  # xmin, ymin, xmax, ymax of each object as given (NaN: fault)
        self.difficult = bytearray()
        self.truncated = bytearray()
        self.box_keys = []  # dict of each object's other elements
        self.faults = {}  # object index -> why the object is unusable (checked at build)
        # One entry per file read: its path, id, image path, size, objects, other elements
        self.xml, self.ids, self.paths, self.sizes, self.counts, self.image_keys = \
            [], [], [], array("q"), array("q"), []

    def add_file(self, xml, image_id, path, width, height, n_objects, image_keys):
        self.xml.append(xml)
        self.ids.append(image_id)
        self.paths.append(path)
        self.sizes.append(width)
        self.sizes.append(height)
        self.counts.append(n_objects)
        self.image_keys.append(image_keys)

    def truncate(self, n):
        """Forget the objects from index ``n`` on (those of a file found faulty)."""
        del self.names[n:], self.coords[4 * n:], self.difficult[n:], self.truncated[n:]
        del self.box_keys[n:]
        for i in [i for i in self.faults if i >= n]:
            del self.faults[i]


def _read_xml(path):
    """The file's bytes, by ``limits.read_bytes``'s rules (a regular file within
    ``MAX_LABEL_FILE_BYTES``) with os calls instead of a buffered file object: 0.12 s for
    28,571 files of ~1 kB where ``read_bytes`` took 0.25-0.31 s (2-core box)."""
    try:
        size = limits.check_file(path).st_size
        fd = os.open(path, _OPEN_FLAGS)
        try:
            data = os.read(fd, size + 1)
        finally:
            os.close(fd)
        if len(data) != size:  # grew or shrank meanwhile: the reference reader decides
            data = limits.read_bytes(path)
    except FileNotFoundError:
        raise DatasetError(path, "annotation file not found") from None
    except OSError as exc:
        raise DatasetError(path, f"cannot read the annotation file ({exc})") from None
    return data


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0)  # (no newline translation on Windows)


def _parse_file(xml_path, image_id, images, parser, index, check_images, table):
    """Parse one annotation file into ``table``; raise DatasetError for a fault of the whole
    file (``table`` may then hold some of its objects: the caller truncates)."""
    data = _read_xml(xml_path)
    try:
        ann = etree.fromstring(data, parser)
    except (etree.XMLSyntaxError, OSError, ValueError) as exc:  # OSError: bad bytes for encoding
        raise DatasetError(xml_path, f"malformed XML ({exc})") from None
    if ann is None:
        raise DatasetError(xml_path, "malformed XML (no root element)")
    if ann.tag != "annotation":
        raise DatasetError(xml_path, f"root element is <{ann.tag}>, not <annotation>")
    if b"&" in data:  # (an entity reference needs one; most files have none)
        _refuse_entities(ann, xml_path)
    # One pass over the children (ElementPath's findtext("size/width") costs more than the rest)
    filename = size = None
    n_filename = n_size = 0
    others = []
    n_objects = len(table.names)
    for child in ann:
        tag = child.tag
        if tag == "object":
            _object(child, table)
        elif tag == "filename":
            n_filename += 1
            if filename is None:
                filename = child
        elif tag == "size":
            n_size += 1
            if size is None:
                size = child
        elif tag != "folder" and isinstance(tag, str):  # (a comment's tag is a function)
            others.append(child)
    width = height = None  # <size>'s first <width> / <height> text ("" where empty)
    twice = "filename" if n_filename > 1 else "size" if n_size > 1 else None
    if size is not None:
        n_width = n_height = 0
        for child in size:
            tag = child.tag
            if tag == "width":
                n_width += 1
                if n_width == 1:
                    width = child.text or ""
            elif tag == "height":
                n_height += 1
                if n_height == 1:
                    height = child.text or ""
        twice = twice or ("size/width" if n_width > 1 else "size/height" if n_height > 1
                          else None)
    if twice:
        raise DatasetError(xml_path, f"<{twice}> is given twice: which one counts is unknown")
    path = _image_path(None if filename is None else filename.text, image_id, images, index,
                       xml_path, check_images)
    width, height = _size(width, xml_path, "width"), _size(height, xml_path, "height")
    if width <= 0 or height <= 0:
        width, height = header_size(path)
    table.add_file(xml_path, image_id, path, width, height, len(table.names) - n_objects,
                   element_dict(others, ()))


def _refuse_entities(ann, xml_path):
    """DatasetError naming the file, the entity and its element where the document holds an
    entity reference (``person&e;``, declared in a DTD or not, which a DOCTYPE makes legal).
    The parser expands none, for safety, and the text of an element around one stops at it:
    the name would read as ``person``, a coordinate ``1&e;2`` as 1, without a word."""
    entity = next(ann.iter(etree.Entity), None)
    if entity is not None:
        parent = entity.getparent()
        where = f"<{parent.tag}>" if parent is not None and isinstance(parent.tag, str) else "the file"
        raise DatasetError(xml_path, f"entity reference {entity.text} in {where}: entities are "
                                     "not expanded (for safety), so the text around it would be "
                                     "read without it; write the text itself")


def element_value(el):
    """An element as JSON-like data: its stripped text, or a dict of its children (a tag
    that repeats gives a list)."""
    if not len(el) or not any(isinstance(c.tag, str) for c in el):  # comments: non-str tag
        # Interned: a dataset repeats a few values ("Unspecified", "0") 100,000 times
        return sys.intern((el.text or "").strip())
    return element_dict(el, ())


def element_dict(el, skip):
    out = {}
    for child in el:
        tag = child.tag
        if not isinstance(tag, str) or tag in skip:
            continue
        value, tag = element_value(child), sys.intern(tag)
        if tag not in out:
            out[tag] = value
        elif isinstance(out[tag], list):  # element_value never gives a list itself
            out[tag].append(value)
        else:
            out[tag] = [out[tag], value]
    return out


def _image_path(filename, image_id, images, index, xml_path, check_images):
    """``JPEGImages/<filename>``, else ``JPEGImages/<id>.jpg``; refuse names leaving the folder."""
    filename = (filename or "").strip()
    candidates = []
    if filename:
        path = resolve_under(images, filename)
        if path is None:
            raise DatasetError(xml_path, outside_root_reason(filename, images))
        candidates.append(path)
    candidates.append(os.path.join(images, image_id + ".jpg"))
    if not check_images:
        return candidates[0]
    for path in candidates:
        if index.exists(path):
            return path
    raise DatasetError(candidates[0], f"image file not found (named in {xml_path})")


def _size(text, xml_path, key):
    """``<size><key>``'s text: a whole number of pixels; 0 where absent or empty (then the image
    header gives it). Anything else (``abc``, ``-5``, ``500.5``, ``inf``) is a fault of the
    file: it was read as "unknown" before, silently."""
    text = (text or "").strip()
    if not text:
        return 0
    if text.isdigit() and text.isascii():  # the usual "500": no float, no pattern
        return int(text) if int(text) < 2**31 else _size_fault(text, xml_path, key)
    try:
        value = float(text)
        ok = value.is_integer() and 0 <= value < 2**31
    except (ValueError, OverflowError):
        ok = False
    if not ok or not _DECIMAL.fullmatch(text):
        _size_fault(text, xml_path, key)
    return int(value)


def _size_fault(text, xml_path, key):
    raise DatasetError(xml_path, f"<size><{key}> is {text!r:.40}, not a whole number of pixels")


_DECIMAL = re.compile(r"[+]?[0-9]+(?:\.0*)?")


def _object(obj, table):
    """Append one ``<object>`` to ``table``: its name, ``[xmin, ymin, xmax, ymax]`` as given,
    difficult, truncated, the dict of its other elements, and the fault that makes it unusable
    if any (the box is then NaN, the flags 0 and the dict empty, unless only a flag is bad:
    the box is kept for the message).

    Reads the direct children and the ``bndbox`` children in one pass (4x faster than a
    findtext per key); nested ``<part>`` elements (VOC person layout) are not descended into.
    The coordinates are the ``bndbox``'s only: a stray ``<xmin>`` directly under ``<object>``
    is one of the other elements (it overrode the box when it came after the ``bndbox``, as
    write_voc puts the other elements, so a VOC -> VOC round trip changed the box). Where a
    tag repeats, the last one's text counts (and the object is refused: the last repeat
    found names the fault).
    """
    name = difficult = truncated = _ABSENT
    box, twice, others = None, None, None
    for child in obj:
        tag = child.tag
        if tag == "bndbox":
            if box is None:
                box = {}
            else:
                twice = "bndbox"
            for coord in child:
                key = coord.tag
                if key in box and key in _COORDS:
                    twice = "bndbox/" + key
                box[key] = coord.text
        elif tag == "name":
            if name is not _ABSENT:
                twice = "name"
            name = child.text
        elif tag == "difficult":
            if difficult is not _ABSENT:
                twice = "difficult"
            difficult = child.text
        elif tag == "truncated":
            if truncated is not _ABSENT:
                twice = "truncated"
            truncated = child.text
        elif isinstance(tag, str):  # (a comment's tag is a function)
            if others is None:
                others = []
            others.append(child)
    name = sys.intern((name or "").strip()) if name is not _ABSENT else ""
    table.names.append(name)
    fault = coords = None
    flags = (0, 0)
    if not name:  # also what an unexpanded entity reference leaves behind
        fault = "object without a <name>"
    elif twice:
        fault = f"object {name!r}: <{twice}> is given twice"
    else:
        try:
            coords = (float(box["xmin"]), float(box["ymin"]), float(box["xmax"]),
                      float(box["ymax"]))
        except (KeyError, TypeError, ValueError):
            given = [box.get(k) for k in _COORDS] if box is not None else [None] * 4
            fault = f"object {name!r}: bndbox is not 4 numbers {given}"
        else:
            flags = (_flag(difficult), _flag(truncated))
            if None in flags:
                key, text = next((k, (t or "0").strip()) for k, t, f in
                                 (("difficult", difficult, flags[0]),
                                  ("truncated", truncated, flags[1])) if f is None)
                fault = f"object {name!r}: <{key}> is {text!r}, not 0 or 1"
                flags = (0, 0)
    table.coords.extend(_NAN_BOX if coords is None else coords)
    table.difficult.append(flags[0])
    table.truncated.append(flags[1])
    if fault is None:
        table.box_keys.append(element_dict(others, ()) if others else {})
    else:
        table.box_keys.append({})
        table.faults[len(table.names) - 1] = fault


_ABSENT = object()  # an element not given (its text may be None too)
_NAN_BOX = (float("nan"),) * 4


def _flag(text):
    """``<difficult>`` / ``<truncated>``'s text as 0 or 1 (absent or without text: 0; blank
    text is a fault), or None."""
    if text is _ABSENT or not text or text == "0":
        return 0
    if text == "1":
        return 1
    text = text.strip()
    return 0 if text == "0" else 1 if text == "1" else None


def _build(table, names, skip_difficult, sink, dataset):
    """All files' objects in one table: 1-based inclusive -> continuous, validate and clip in
    one vectorised pass, then slice back into one record per file."""
    n_files, n = len(table.ids), len(table.names)
    owner = np.repeat(np.arange(n_files), np.frombuffer(table.counts, dtype=np.int64))
    given = np.frombuffer(table.coords, dtype=np.float64).reshape(-1, 4)
    xyxy = given - (1, 1, 0, 0)
    del given
    del table.coords[:]  # (its buffer is freed: xyxy is a copy)
    sizes = np.frombuffer(table.sizes, dtype=np.int64).reshape(-1, 2).astype(np.float64)
    w, h = sizes[owner, 0], sizes[owner, 1]
    boxes, bad, moved = validate_boxes_mask(xyxy, w, h)
    label_of = {name: i for i, name in enumerate(names)}
    labels = np.fromiter(map(label_of.get, table.names, repeat(-1, n)), dtype=np.int64, count=n)
    keep = ~bad & (labels >= 0)
    keep[np.fromiter(table.faults, dtype=np.int64, count=len(table.faults))] = False
    for i in np.flatnonzero(~keep):
        sink.fault(table.xml[owner[i]], _fault(table.names[i], table.faults.get(int(i)),
                                               labels[i], xyxy[i], w[i], h[i], len(names)))
    del xyxy, w, h, bad, table.names[:], table.xml[:]
    good = np.bincount(owner[keep], minlength=n_files)
    faulty = np.bincount(owner[~keep], minlength=n_files)
    dataset.emptied = int(((faulty > 0) & (good == 0)).sum())
    difficult = np.array(table.difficult, dtype=np.uint8)
    if skip_difficult:
        keep = count_drop(dataset, keep, difficult > 0, "difficult objects (skip_difficult)")
    dataset.clipped += int(np.count_nonzero(moved & keep))
    columns = [boxes, labels, difficult, np.array(table.truncated, dtype=np.uint8)]
    box_keys = table.box_keys if any(table.box_keys) else None
    if not keep.all():  # (all kept: the columns as they are, no copy)
        columns = [c[keep] for c in columns]
        if box_keys is not None:
            box_keys = [box_keys[i] for i in np.flatnonzero(keep).tolist()]
    return _records(table, owner[keep], *columns, box_keys)


def _fault(name, fault, label, xyxy, width, height, n_classes):
    if fault is not None:
        return fault
    if label < 0:
        return f"object {name!r}: unknown class (not in the {n_classes} given classes)"
    return f"object {name!r}: " + box_fault(xyxy, int(width), int(height))


def _records(table, owner, boxes, labels, difficult, truncated, box_keys):
    """One record per file: views of the kept columns (made canonical above, so without the
    record constructor's conversions and checks)."""
    offsets = group_offsets(owner, len(table.ids)).tolist()
    sizes = table.sizes.tolist()
    records = []
    append = records.append
    for k, (image_id, path, image_keys) in enumerate(zip(table.ids, table.paths,
                                                         table.image_keys)):
        s, e = offsets[k], offsets[k + 1]
        extra = {"image_keys": image_keys} if image_keys else {}
        if box_keys is not None:
            extra["box_keys"] = box_keys[s:e]
        append(trusted_record(path, sizes[2 * k], sizes[2 * k + 1], boxes[s:e], labels[s:e],
                              {"difficult": difficult[s:e], "truncated": truncated[s:e]},
                              image_id, extra))
    return records
