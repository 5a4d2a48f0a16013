"""YOLO segment, pose and oriented-box labels (Ultralytics' layouts) <-> canonical records.

The tree is read_yolo's (``images/[split/]``, ``labels/[split/]<stem>.txt``, classes from
``classes.txt`` or ``data.yaml``); each line, normalised by the image size (x by W, y by H,
continuous coordinates as YOLO boxes):

- ``segment``: ``class x1 y1 x2 y2 ... xn yn`` (n >= 3), one polygon an instance (written: an
  instance of several polygons merged into one, ``merge_polygons``); the box is
  the polygon's enclosing box (clipped to the image), as Ultralytics derives it. A line of 5
  values is a box without a polygon.
- ``pose``: ``class cx cy w h`` then K keypoints of D values (``x y`` or ``x y v``), K and D from
  ``kpt_shape: [K, D]`` in ``data.yaml``; ``flip_idx`` there gives the mirror pairing. D = 2
  means every point is labelled (v = 2) except ``0 0``, Ultralytics' unlabelled point.
- ``obb``: ``class x1 y1 x2 y2 x3 y3 x4 y4``, the 4 corners; the box is their enclosing box
  (clipped).

Fields made: ``polygons`` / ``keypoints`` / ``obb`` (readers/segments.py).
"""
from __future__ import annotations

import os

import numpy as np

from ._common import ErrorSink, box_fault, header_size, real_dir, validate_boxes
from .errors import DatasetError
from .records import Dataset, DetectionRecord
from .segments import MAX_KEYPOINTS, check_flip_index, polygons_field, tidy
from .writers import (WriteReport, _check_class_names, _check_labels, _image_base, _shift,
                      _size, _yolo_names, _yolo_lines, place_image)
from .yolo import (_INDEX, _NUMBER, _class_names, _label_path, _strict_loader, collect_records,
                   read_text)


TASKS = ("segment", "pose", "obb")


def read_yolo_task(root, task, classes_file=None, *, split=None, classes=None, kpt_shape=None,
                   flip_index=None, on_error="raise", progress=None) -> Dataset:
    """Read a YOLO ``segment``, ``pose`` or ``obb`` tree.

    Args:
        root, classes_file, split, classes, on_error, progress: as :func:`readers.read_yolo`.
        task: ``"segment"``, ``"pose"`` or ``"obb"``.
        kpt_shape, flip_index: pose only: ``[K, D]`` and the mirror pairing, given directly
            (default: ``kpt_shape`` / ``flip_idx`` of ``root/data.yaml``; without ``flip_idx``,
            each point maps to itself).

    Returns:
        Dataset (``category_ids[i] == i``), one record per image sorted by relative path, with
        the task's field; pose: ``Dataset.instances`` holds ``flip_index`` and ``kpt_shape``.

    Raises:
        DatasetError naming the label file and line: a wrong count of values (odd coordinates,
        fewer than 3 polygon points, not 5 + K * D for pose, not 9 for obb), a value that is
        not a decimal number, a visibility other than 0, 1, 2, an unknown class, a box outside
        the image; a ``data.yaml`` without a valid ``kpt_shape`` for pose. Under
        ``on_error="skip"`` a bad line is dropped and listed.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, not {task!r}")
    root = real_dir(root)
    images = os.path.join(root, "images", split or "")
    labels = os.path.join(root, "labels", split or "")
    if not os.path.isdir(images):
        raise DatasetError(root, f"no images folder {images}")
    names = list(classes) if classes is not None else _class_names(root, classes_file)
    dataset = Dataset([], names, root=root)
    shape = None
    if task == "pose":
        shape, fi = _pose_spec(root, kpt_shape, flip_index)
        dataset.instances = {"kpt_shape": list(shape), "flip_index": fi}
    sink = ErrorSink(on_error, f"read_yolo_task({task!r})")
    return collect_records(root, images, labels, sink, dataset, progress,
                           lambda rel: _record(images, labels, rel, names, task, shape, sink, dataset))


def _pose_spec(root, kpt_shape, flip_index):
    path = os.path.join(root, "data.yaml")
    data = {}
    if kpt_shape is None or flip_index is None:
        if not os.path.isfile(path):
            if kpt_shape is None:
                raise DatasetError(path, "pose labels need kpt_shape: [K, D] (data.yaml not found)")
        else:
            import yaml

            try:
                data = yaml.load(read_text(path), Loader=_strict_loader()) or {}
            except Exception as exc:  # the strict loader's duplicate key, YAML errors
                raise DatasetError(path, f"not valid YAML ({' '.join(str(exc).split())})") \
                    from None
            if not isinstance(data, dict):
                raise DatasetError(path, "the top level is not a mapping")
    shape = kpt_shape if kpt_shape is not None else data.get("kpt_shape")
    if not (isinstance(shape, (list, tuple)) and len(shape) == 2
            and all(type(v) is int for v in shape) and 0 < shape[0] <= MAX_KEYPOINTS
            and shape[1] in (2, 3)):
        raise DatasetError(path, f"'kpt_shape' is {shape!r:.40}: needs [K, 2] or [K, 3], "
                                 f"K from 1 to {MAX_KEYPOINTS}")
    fi = flip_index if flip_index is not None else data.get("flip_idx", list(range(shape[0])))
    try:
        fi = check_flip_index(fi, shape[0], "flip_idx")
    except (ValueError, TypeError) as exc:
        raise DatasetError(path, str(exc)) from None
    return tuple(shape), fi


def _record(images, labels, rel, names, task, shape, sink, dataset):
    path, label_file = os.path.join(images, rel), _label_path(labels, rel)
    try:
        width, height = header_size(path)
    except DatasetError as exc:
        sink.fault(exc.file, exc.reason)
        return None
    try:
        text = read_text(label_file) if os.path.isfile(label_file) else ""
    except DatasetError as exc:  # not text: the image's boxes are unknown
        sink.fault(exc.file, exc.reason + f"; image {path} dropped")
        return None
    rows = _lines(text, label_file, len(names), task, shape, sink)
    scale = np.array([width, height], np.float64)
    cls = np.array([r[0] for r in rows], np.int64)
    xyxy = np.zeros((len(rows), 4))
    extra_shapes = []
    for k, (_, values, _) in enumerate(rows):
        v = np.asarray(values, np.float64)
        if task == "pose" or len(v) == 4:
            centre, half = v[:2] * scale, v[2:4] * scale / 2
            xyxy[k] = np.concatenate([centre - half, centre + half])
            shapes = v[4:]
        else:
            pts = v.reshape(-1, 2) * scale
            xyxy[k] = np.concatenate([pts.min(0), pts.max(0)])
            shapes = pts
        extra_shapes.append(shapes)
    boxes, bad, clipped = validate_boxes(xyxy, width, height)
    for i in np.flatnonzero(bad):
        sink.fault(label_file, f"line {rows[i][2]}: " + box_fault(xyxy[i], width, height))
    dataset.clipped += clipped
    keep = ~bad
    fields = {}
    kept = [s for s, ok in zip(extra_shapes, keep) if ok]
    if task == "segment":
        fields["polygons"] = polygons_field([[s] if len(s) else [] for s in kept])
    elif task == "obb":
        fields["obb"] = np.asarray(kept, np.float32).reshape(-1, 4, 2)
    else:
        fields["keypoints"] = _keypoints(kept, shape, scale)
    image_id = os.path.splitext(rel)[0].replace(os.sep, "/")
    return DetectionRecord(path, width, height, boxes[keep], cls[keep], fields, image_id)


def _keypoints(rows, shape, scale):
    k, d = shape
    out = np.zeros((len(rows), k, 3), np.float32)
    if not rows:
        return out
    v = np.asarray(rows, np.float64).reshape(len(rows), k, d)
    out[..., :2] = v[..., :2] * scale
    if d == 3:
        out[..., 2] = v[..., 2]
    else:
        out[..., 2] = np.where((v[..., :2] == 0).all(-1), 0, 2)
    out[out[..., 2] == 0] = 0  # an unlabelled point is (0, 0, 0), whatever the file put there
    return out


def _lines(text, label_file, num_classes, task, shape, sink):
    """Rows ``(class, values, line number)`` of the task's lines; bad ones go to the sink."""
    rows = []
    for number, line in enumerate(text.split("\n"), 1):
        parts = line.split()
        if not parts:
            continue
        fault = _count_fault(len(parts) - 1, task, shape)
        if fault is None:
            bad = next((p for p in parts[1:] if not _NUMBER.fullmatch(p)), None)
            if not _INDEX.fullmatch(parts[0]):
                fault = f"class {parts[0]!r:.30} is not a whole number"
            elif bad is not None:
                fault = f"{bad!r:.30} is not a decimal number"
            elif len(parts[0]) >= 19 or int(parts[0]) >= num_classes:
                fault = f"unknown class {parts[0]:.30} (the class list has {num_classes})"
        if fault is None:
            values = [float(p) for p in parts[1:]]
            if task == "pose" and shape[1] == 3:
                vis = values[6::3]
                if any(v not in (0.0, 1.0, 2.0) for v in vis):
                    fault = f"a keypoint visibility is not 0, 1 or 2 ({vis!r:.40})"
        if fault is not None:
            sink.fault(label_file, f"line {number}: {fault}")
            continue
        rows.append((int(parts[0]), values, number))
    return rows


def _count_fault(n, task, shape):
    if task == "segment":
        if n == 4:
            return None  # a box without a polygon
        if n % 2:
            return f"{n} coordinates: an odd count (a polygon is x y pairs)"
        if n < 6:
            return f"{n // 2} points: a polygon needs 3 at least"
        return None
    if task == "obb":
        return None if n == 8 else f"expected 8 values 'x1 y1 ... x4 y4' after the class, got {n}"
    want = 4 + shape[0] * shape[1]
    return None if n == want else (f"expected {want} values after the class ('cx cy w h' and "
                                   f"{shape[0]} points of {shape[1]}), got {n}")


# -- writing -----------------------------------------------------------------------------------

def write_yolo_task(dataset, root, task, *, split=None, link=False, drop_shapes=False,
                    progress=None, dry_run=False) -> WriteReport:
    """Write a YOLO ``segment``, ``pose`` or ``obb`` tree (images, labels, ``classes.txt`` and
    ``data.yaml`` with ``names``, and for pose ``kpt_shape`` / ``flip_idx``).

    Args:
        dataset: records with the task's field (``polygons``, ``keypoints``, ``obb``).
        root, split, link, progress, dry_run: as :func:`readers.writers.write_yolo`.
        drop_shapes: where the records cannot be written as the task's lines (no such field;
            an instance with only an RLE mask, which a YOLO-seg line cannot hold), write plain
            detection lines (``class cx cy w h``) and count what was left out, instead of
            refusing. An instance of several polygons is written as one (``merge_polygons``,
            as Ultralytics' converter does; counted in the report: not round-trip exact).

    Returns:
        WriteReport; segment: the box becomes the polygon's enclosing box (``max_shift_px``
        says how far any box moved).

    Raises:
        DatasetError naming the record and box where the target cannot hold it (without
        ``drop_shapes``), and whatever write_yolo refuses.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, not {task!r}")
    _check_labels(dataset)
    _check_class_names(dataset, "yolo", os.path.join(os.fspath(root), "classes.txt"))
    plain = drop_shapes and _shape_fault(dataset, task) is not None
    if not plain:
        fault = _shape_fault(dataset, task)
        if fault is not None:
            raise DatasetError(*fault)
    report = WriteReport("yolo-" + task, os.fspath(root), classes=dataset.num_classes)
    images, labels = (os.path.join(root, d, split or "") for d in ("images", "labels"))
    rels = _yolo_names(dataset, _image_base(dataset))
    k = _k(dataset) if task == "pose" and not plain else 0
    if not dry_run:
        for folder in (images, labels):
            os.makedirs(folder, exist_ok=True)
        with open(os.path.join(root, "classes.txt"), "w", encoding="utf-8") as f:
            f.writelines(f"{name}\n" for name in dataset.class_names)
        _write_yaml(os.path.join(root, "data.yaml"), dataset, task if not plain else None, k)
    for n, (record, rel) in enumerate(zip(dataset.records, rels), 1):
        lines = _yolo_lines(record, report) if plain else _task_lines(record, task, report)
        if not dry_run:
            place_image(record.path, os.path.join(images, rel), link)
            label_file = os.path.join(labels, os.path.splitext(rel)[0] + ".txt")
            os.makedirs(os.path.dirname(label_file), exist_ok=True)
            with open(label_file, "w", encoding="utf-8") as f:
                f.writelines(lines)
        report.boxes += record.num_boxes
        _count_unheld(record, task, plain, report)
        if progress is not None:
            progress(n, len(dataset))
    if plain:
        why = _shape_fault(dataset, task)[1]
        report.notes.append(f"written as plain YOLO boxes (drop_shapes): {why}")
    report.images = len(dataset)
    return report


_FIELD = {"segment": "polygons", "pose": "keypoints", "obb": "obb"}


def _shape_fault(dataset, task):
    """``(file, reason)`` of the first record the task's lines cannot hold, or None."""
    name = _FIELD[task]
    for record in dataset.records:
        if record.num_boxes and name not in record.fields:
            return record.path, f"has no {name} for YOLO-{task} lines"
        if task != "segment" or not record.num_boxes:
            continue
        counts = record.fields["polygons"].counts
        rle = record.fields.get("rle")
        for i in np.flatnonzero(counts == 0):  # several polygons: merged (merge_polygons)
            if rle is not None and len(rle[i]):
                return record.path, (f"box {i} has an RLE mask and no polygon; a YOLO-seg line "
                                     "holds a polygon (drop the masks, or convert to COCO)")
    return None


def _fmt(values):
    """Normalised coordinates as the shortest decimals that read back to them (or within 4
    float64 steps: segments.tidy): multiplied by the image size again they come back within an
    ulp of the source value, and a file's ``0.25`` stays ``0.25``."""
    return " ".join(repr(v) for v in tidy(values))


def _task_lines(record, task, report):
    width, height = _size(record)
    scale = np.array([width, height], np.float64)
    labels = record.labels.tolist()
    if task == "pose":
        base = _yolo_lines(record, report)
        kps = np.asarray(record.fields["keypoints"], np.float64)
        xy = kps[..., :2] / scale
        return [line[:-1] + " " + " ".join(f"{_fmt((x, y))} {int(v)}"
                                           for (x, y), v in zip(xy[i], kps[i, :, 2])) + "\n"
                for i, line in enumerate(base)]
    if task == "obb":
        pts = np.asarray(record.fields["obb"], np.float64).reshape(-1, 4, 2)
    else:
        polys = record.fields["polygons"]
        pts = [merge_polygons([polys[i][j] for j in range(int(polys.counts[i]))])
               if polys.counts[i] else None for i in range(record.num_boxes)]
        report.count("instances of several polygons merged into one (Ultralytics' "
                     "merge_multi_segment: not round-trip exact)",
                     np.count_nonzero(polys.counts > 1))
    out = []
    for i, label in enumerate(labels):
        if pts[i] is None:  # a box with no polygon: a box line
            out.append(_yolo_lines(record.subset(np.arange(record.num_boxes) == i), report)[0])
            continue
        norm = pts[i] / scale
        if task == "segment":
            lo, hi = pts[i].min(0), pts[i].max(0)
            _shift(report, np.clip(np.concatenate([lo, hi]), 0, np.tile(scale, 2))
                   - record.boxes[i])
        out.append(f"{label} {_fmt(norm.reshape(-1))}\n")
    return out


def merge_polygons(polygons) -> np.ndarray:
    """(P, 2) one polygon through all of an instance's ``polygons`` (a sequence of (n, 2)), as
    Ultralytics' converter (``merge_multi_segment``) writes a COCO instance of several polygons
    on one YOLO-seg line, point for point, so that a data set converted here trains as theirs.

    Consecutive polygons are joined at their closest pair of points (the first such pair in
    row-major order) by zero-width bridges: the walk goes out through every polygon, each
    rolled to start at its link to the previous one and closed, a middle polygon walked only
    up to its link to the next, then back through the middle polygons' remaining points. As in
    Ultralytics, a middle polygon whose link to the next comes before its link to the previous
    one is reversed but rolled and cut at its unreversed indices (so its bridges may not sit at
    the closest points). The merged polygon repeats points and crosses itself along the bridges:
    it rasterises to about the union, but the separate polygons cannot be read back from it.
    One polygon is returned as it is."""
    segs = [np.asarray(p, np.float64).reshape(-1, 2) for p in polygons]
    last = len(segs) - 1
    if last < 1:
        return segs[0] if segs else np.zeros((0, 2))
    links = [[] for _ in segs]
    for i in range(1, last + 1):
        dist = ((segs[i - 1][:, None] - segs[i][None]) ** 2).sum(-1)
        a, b = np.unravel_index(np.argmin(dist), dist.shape)
        links[i - 1].append(int(a))
        links[i].append(int(b))
    out = []
    for i, link in enumerate(links):
        seg = segs[i]
        if len(link) == 2 and link[0] > link[1]:
            seg, link = seg[::-1], link[::-1]
        seg = np.roll(seg, -link[0], axis=0)
        segs[i] = seg = np.concatenate([seg, seg[:1]])
        out.append(seg if i in (0, last) else seg[:link[1] - link[0] + 1])
    out += [segs[i][abs(links[i][1] - links[i][0]):] for i in range(last - 1, 0, -1)]
    return np.concatenate(out)


def _k(dataset):
    for record in dataset.records:
        if "keypoints" in record.fields:
            return int(np.shape(record.fields["keypoints"])[1])
    return len(dataset.instances.get("flip_index", []))


def _write_yaml(path, dataset, task, k):
    import yaml

    data = {"path": ".", "names": {i: n for i, n in enumerate(dataset.class_names)},
            "nc": dataset.num_classes}
    if task == "pose":
        data["kpt_shape"] = [k, 3]
        data["flip_idx"] = list(dataset.instances.get("flip_index", range(k)))
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(data, f, sort_keys=False, allow_unicode=True)


def _count_unheld(record, task, plain, report):
    from .instance_writers import instance_loss

    held = set() if plain else {_FIELD[task]}
    for name, values in record.fields.items():
        if name in held:
            continue
        if name in ("polygons", "rle", "keypoints", "obb"):
            report.count(*instance_loss(name, values))
        elif name == "annotation_id":
            report.count("annotation ids", len(values))
        else:
            report.count(f"{name} (non-zero) on annotations", np.count_nonzero(values))
