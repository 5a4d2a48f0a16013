"""COCO instance shapes: polygons, run-length masks and keypoints as per-box fields.

:func:`read_coco_instances` reads the file with :func:`readers.coco.read_coco` and turns each
annotation's ``segmentation`` and ``keypoints`` (which read_coco keeps as they are, in
``extra``) into the instance fields of readers/segments.py, checking them as untrusted input.

Keypoints: COCO's keypoint coordinates are pixel indices (integers in ``[0, W - 1]``), its
polygons continuous coordinates (``[0, W]``), as detectron2 reads them; so a keypoint becomes
``(x + 0.5, y + 0.5)`` here (the centre of its pixel, docs/design.md coordinates) and the
writer takes the 0.5 off again: then a horizontal flip sends pixel ``i`` to pixel
``W - 1 - i``, as it sends the image's pixels. ``(0, 0, 0)``, COCO's unlabelled point, stays
``(0, 0, 0)``.
"""
from __future__ import annotations

import numpy as np

from ._common import ErrorSink
from .coco import read_coco
from .coco_shapes_fast import fast_records
from .errors import DatasetError
from .records import trusted_record
from .segments import (MAX_KEYPOINTS, Ragged, check_flip_index, coco_polygon_fault, coco_rle_counts,
                       flip_index_from_names, keypoints_fault, polygons_field)

_KEYPOINT_KEYS = ("keypoints", "num_keypoints")


def read_coco_instances(annotations_file, image_root, *, segmentation=True, keypoints=True,
                        flip_index=None, on_error="raise", **options):
    """Read a COCO instances or person-keypoints file with its instance shapes.

    Args:
        annotations_file, image_root, on_error, options: as :func:`readers.coco.read_coco`
            (``skip_empty``, ``include_iscrowd``, ``categories``, ...).
        segmentation: make the ``polygons`` and ``rle`` fields from each annotation's
            ``segmentation`` (polygons: a list of ``[x0, y0, x1, y1, ...]``; RLE: ``{"size":
            [h, w], "counts": str | list}``, compressed or not, as pycocotools reads them).
        keypoints: make the ``keypoints`` field (N, K, 3) from ``keypoints``, K the longest
            ``keypoints`` name list of the categories (boxes of categories with fewer or none
            get ``(0, 0, 0)`` for the rest).
        flip_index: the keypoint each one becomes in a mirror image; default: paired by name
            (``left_*`` with ``right_*``, :func:`segments.flip_index_from_names`).

    Returns:
        The Dataset of read_coco, its records a list, each with the fields asked for (a box
        without a polygon has none: zero polygons; without RLE, zero runs) and without the
        ``segmentation`` extra and the ``keypoints`` / ``num_keypoints`` box keys that the
        fields now hold. ``Dataset.instances``: ``keypoint_names``, ``skeleton`` (0-based pairs),
        ``flip_index``, where the file has keypoints.

    Raises:
        DatasetError naming the file and the annotation (id, image id): a polygon with an odd
        number of coordinates or fewer than 3 points, a non-finite coordinate, an RLE whose
        size is not the image's or whose runs do not cover it, keypoints not 3 numbers each or
        not the category's count, a visibility other than 0, 1, 2, a ``num_keypoints`` that is
        not the count of labelled points; category ``keypoints`` / ``skeleton`` lists that are
        malformed. Under ``on_error="skip"`` a bad annotation is dropped (box and all) and
        listed in ``Dataset.skipped``.
    """
    file = str(annotations_file)
    ds = read_coco(annotations_file, image_root, on_error=on_error, **options)
    sink = ErrorSink(on_error, "read_coco_instances")
    k_of_label, spec = _keypoint_spec(ds, file, flip_index) if keypoints else ([], {})
    k = max(k_of_label, default=0)
    records = list(ds.records)
    fast = fast_records(records, segmentation, keypoints and k > 0, k_of_label, k)
    if fast is None:  # a fault somewhere: annotation by annotation, each fault named
        fast = [_record(record, file, sink, segmentation, keypoints and k > 0, k_of_label, k)
                for record in records]
    ds.records = fast
    ds.instances.update(spec)
    ds.skipped = ds.skipped + sink.finish()
    return ds


def _keypoint_spec(ds, file, flip_index):
    """(K of each label, dataset instances dict) from the categories' ``keypoints`` /
    ``skeleton`` (read_coco keeps them in ``extra["category_keys"]``)."""
    keys = ds.extra.get("category_keys") or [{}] * ds.num_classes
    k_of_label, names = [], None
    skeleton = None
    for label, cat in enumerate(keys):
        kp = cat.get("keypoints")
        if kp is None:
            k_of_label.append(0)
            continue
        if not isinstance(kp, list) or not all(isinstance(n, str) for n in kp):
            raise DatasetError(file, f"category {ds.category_ids[label]}: 'keypoints' is not a "
                                     "list of names")
        if len(kp) > MAX_KEYPOINTS:
            raise DatasetError(file, f"category {ds.category_ids[label]} names {len(kp)} "
                                     f"keypoints; at most {MAX_KEYPOINTS} are read")
        k_of_label.append(len(kp))
        if names is None or len(kp) > len(names):
            names, skeleton = kp, cat.get("skeleton", [])
            where = f"category {ds.category_ids[label]}"
    if names is None:
        return k_of_label, {}
    k = len(names)
    if not isinstance(skeleton, list) or not all(
            isinstance(e, list) and len(e) == 2 and all(type(v) is int and 1 <= v <= k for v in e)
            for e in skeleton):
        raise DatasetError(file, f"{where}: 'skeleton' is not a list of [a, b] pairs of "
                                 f"keypoint numbers 1..{k}")
    fi = flip_index_from_names(names) if flip_index is None else flip_index
    try:
        fi = check_flip_index(fi, k, file)
    except ValueError as exc:
        raise DatasetError(file, str(exc).split(": ", 1)[1]) from None
    return k_of_label, {"keypoint_names": list(names),
                        "skeleton": [[a - 1, b - 1] for a, b in skeleton], "flip_index": fi}


def _record(record, file, sink, segmentation, keypoints, k_of_label, k):
    n = record.num_boxes
    extra = dict(record.extra)
    segs = extra.pop("segmentation", None) or [None] * n
    box_keys = extra.get("box_keys") or [{}] * n
    keep = np.ones(n, bool)
    polys, runs = [[] for _ in range(n)], [np.zeros(0, np.uint32)] * n
    kps = np.zeros((n, k, 3), np.float32)
    ann_ids = record.fields.get("annotation_id")
    for i in range(n):
        where = f"annotation id {ann_ids[i] if ann_ids is not None else '?'} (image id " \
                f"{record.image_id})"
        fault = None
        if segmentation and segs[i] is not None:
            fault = _segmentation(segs[i], record, i, polys, runs)
        keys = box_keys[i] or {}
        if fault is None and keypoints and "keypoints" in keys:
            fault = _keypoints(keys, k_of_label[record.labels[i]], kps, i)
        if fault is not None:
            sink.fault(file, f"{where}: {fault}")
            keep[i] = False
    fields = dict(record.fields)
    if segmentation:
        fields["polygons"] = polygons_field(polys)
        fields["rle"] = Ragged.from_lists(runs, np.uint32)
    elif segs[0] is not None or any(s is not None for s in segs):
        extra["segmentation"] = segs
    if keypoints:
        fields["keypoints"] = kps
        extra["box_keys"] = [{a: b for a, b in (d or {}).items() if a not in _KEYPOINT_KEYS}
                             for d in box_keys]
        if not any(extra["box_keys"]):
            del extra["box_keys"]
    out = trusted_record(record.path, record.width, record.height, record.boxes, record.labels,
                         fields, record.image_id, extra)
    return out if keep.all() else out.subset(keep)


def _segmentation(seg, record, i, polys, runs):
    if isinstance(seg, dict):
        counts, fault = coco_rle_counts(seg, record.height, record.width)
        if fault is None:
            runs[i] = counts
        return fault
    fault = coco_polygon_fault(seg)
    if fault is None:
        polys[i] = [np.asarray(p, np.float64).reshape(-1, 2) for p in seg]
    return fault


def _keypoints(keys, k_cat, kps, i):
    values = keys["keypoints"]
    if not k_cat:
        return "has 'keypoints', but its category names no keypoints"
    fault = keypoints_fault(values, k_cat)
    if fault is not None:
        return fault
    pts = np.asarray(values, np.float64).reshape(-1, 3)
    labelled = int(np.count_nonzero(pts[:, 2] > 0))
    num = keys.get("num_keypoints", labelled)
    if type(num) is not int or num != labelled:
        return f"'num_keypoints' is {num!r:.20} but {labelled} points are labelled (v > 0)"
    unlabelled = (pts == 0).all(axis=1)
    pts[~unlabelled, :2] += 0.5
    kps[i, :len(pts)] = pts
    return None


def dali_polygons(record, ratio=False):
    """DALI's ``polygons`` (P, 3) int32 ``[mask index, first vertex, end vertex)`` and
    ``vertices`` (V, 2) float32 of one record (readers.coco(polygon_masks=True)): the mask index
    is the box's position among the record's boxes; an RLE mask (a crowd's) has no polygon and
    gives none; ``ratio`` divides the vertices by the image's width and height."""
    polys = record.fields.get("polygons")
    if polys is None or not len(polys.values):
        return np.zeros((0, 3), np.int32), np.zeros((0, 2), np.float32)
    inner = polys.values
    mask = np.repeat(np.arange(len(polys)), polys.counts)
    out = np.stack([mask, inner.offsets[:-1], inner.offsets[1:]], 1).astype(np.int32)
    vertices = inner.values.astype(np.float64)
    if ratio:
        vertices = vertices / np.array([record.width, record.height], np.float64)
    return out, vertices.astype(np.float32)


def dali_pixelwise(record, labels):
    """DALI's ``pixelwise_masks`` of one record: (H, W, 1) int32, each pixel the label (as
    given, one per box) of the masks that cover it, 0 where none does; where masks of several
    labels overlap, the highest label is kept (DALI paints the labels in ascending order)."""
    from .segments import instance_masks

    masks = instance_masks(record)
    out = np.zeros((int(record.height), int(record.width)), np.int32)
    labels = np.asarray(labels)
    for label in np.unique(labels):
        covered = masks[labels == label].any(axis=0)
        out[covered] = label
    return out[..., None]


def read_coco_masks(annotations_file, image_root, **options):
    """:func:`read_coco_instances` with the masks only (no keypoints): readers.coco's
    ``polygon_masks`` / ``pixelwise_masks``."""
    return read_coco_instances(annotations_file, image_root, keypoints=False, **options)


def without_shapes(dataset):
    """A shallow copy of ``dataset`` whose records hold no instance field (a reader packs
    their boxes into dataset-wide arrays and reads the shapes a sample at a time)."""
    import copy

    from .segments import INSTANCE_FIELDS

    out = copy.copy(dataset)
    out.records = [copy.copy(r) for r in dataset.records]
    for r in out.records:
        r.fields = {k: v for k, v in r.fields.items() if k not in INSTANCE_FIELDS}
    return out


def dali_masks(records, labels, polygons, ratio):
    """DALI's mask outputs of a batch: ``(polygons list, vertices list)`` where ``polygons``,
    else ``(pixelwise list,)`` (:func:`dali_polygons`, :func:`dali_pixelwise`)."""
    if not polygons:
        return ([dali_pixelwise(r, lab) for r, lab in zip(records, labels)],)
    pairs = [dali_polygons(r, ratio) for r in records]
    return [p for p, _ in pairs], [v for _, v in pairs]


def read_coco_shapes(annotations_file, image_root, *, keypoints=False, polygons=False,
                     tight_boxes=False, bitmasks=False, **options):
    """:func:`read_coco_instances` for a pipeline (readers.coco(keypoints=, polygons=,
    bitmasks=)): the ``keypoints`` field with each box's mirror pairing as ``keypoint_flip``
    (N, K), and/or the ``polygons`` field (with ``tight_boxes``, the field ``tight_box`` (N,)
    uint8 1: the boxes follow their polygons through the ops), and/or the ``rle`` field (the
    RLE annotations' masks, crowds' in COCO's own files: a pipeline makes them the per-box
    bitmap masks ``bitmasks``). Without ``bitmasks`` RLE masks are not carried: their count is
    in ``Dataset.dropped``; without ``polygons`` the polygons are not read."""
    ds = read_coco_instances(annotations_file, image_root, segmentation=polygons or bitmasks,
                             keypoints=keypoints, **options)
    fi = np.asarray(ds.instances.get("flip_index", []), np.int64)
    rle = 0
    for r in ds.records:
        if "keypoints" in r.fields:
            r.fields["keypoint_flip"] = np.tile(fi, (r.num_boxes, 1))
        if not polygons:
            r.fields.pop("polygons", None)
        if "rle" in r.fields and not bitmasks:
            rle += int(np.count_nonzero(r.fields.pop("rle").counts))
        if tight_boxes:
            r.fields["tight_box"] = np.ones(r.num_boxes, np.uint8)
    if rle:
        ds.dropped["RLE masks (bitmasks=False: a pipeline carries polygons only)"] = rle
    return ds
