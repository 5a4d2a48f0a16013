"""Instance fields (readers/segments.py) -> COCO annotation keys; what other targets lose.

Used by readers/writers.py's COCO writer: polygons are written as COCO polygons, run-length
masks as compressed RLE, keypoints as ``[x, y, v] * K`` pixel indices (the 0.5 that the reader
added taken off, coco_instances.py) with ``num_keypoints``; every coordinate as the shortest
decimal that reads back to the record's value (segments.tidy: round trips are exact);
oriented boxes have no COCO key and are counted as not held.
"""
from __future__ import annotations

import numpy as np

from .segments import INSTANCE_FIELDS, Ragged, polygons_rle, rle_to_string, tidy



def coco_instance_keys(record, i) -> dict:
    """The COCO keys of box ``i``'s instance fields: ``segmentation`` (polygons, else RLE),
    ``keypoints`` and ``num_keypoints``."""
    out = {}
    polys, rle = record.fields.get("polygons"), record.fields.get("rle")
    if polys is not None and polys.counts[i]:
        inner = polys.values
        lo, hi = int(polys.offsets[i]), int(polys.offsets[i + 1])
        out["segmentation"] = [tidy(inner[j]) for j in range(lo, hi)]
    elif rle is not None and len(rle[i]):
        out["segmentation"] = {"size": [int(record.height), int(record.width)],
                               "counts": rle_to_string(rle[i])}
    kps = record.fields.get("keypoints")
    if kps is not None:
        pts = np.asarray(kps[i], np.float64).copy()
        labelled = ~(pts == 0).all(axis=1)
        pts[labelled, :2] -= 0.5  # (exact: float32 values and halves are float64 values)
        flat = pts.reshape(-1).tolist()
        out["keypoints"] = [int(v) if float(v).is_integer() else v for v in flat]
        out["num_keypoints"] = int(np.count_nonzero(pts[:, 2] > 0))
    return out


def mask_area(record, i):
    """Box ``i``'s mask area in pixels (its RLE's ones, or its polygons rasterised as COCO
    does), or None where it has no mask."""
    polys, rle = record.fields.get("polygons"), record.fields.get("rle")
    if rle is not None and len(rle[i]):
        return int(np.asarray(rle[i], np.int64)[1::2].sum())
    if polys is not None and polys.counts[i]:
        inner = polys.values
        lo, hi = int(polys.offsets[i]), int(polys.offsets[i + 1])
        runs = polygons_rle([inner[j] for j in range(lo, hi)], int(record.height),
                            int(record.width))
        return int(runs.astype(np.int64)[1::2].sum())
    return None


def coco_categories_keypoints(dataset, categories):
    """Give every category the data set's keypoint names and skeleton (1-based, as COCO) where
    the records hold keypoints and the category does not name them already."""
    inst = dataset.instances
    k = _keypoint_count(dataset)
    if not k:
        return
    names = inst.get("keypoint_names") or [f"kp{j}" for j in range(k)]
    skeleton = [[a + 1, b + 1] for a, b in inst.get("skeleton", [])]
    for cat in categories:
        cat.setdefault("keypoints", list(names))
        cat.setdefault("skeleton", skeleton)


def _keypoint_count(dataset):
    for record in dataset.records:
        kps = record.fields.get("keypoints")
        if kps is not None:
            return int(np.shape(kps)[1])
    return 0


def instance_loss(name, values):
    """(description, count) of an instance field a target without it drops: the boxes that
    hold something in it."""
    if isinstance(values, Ragged):
        n = int(np.count_nonzero(values.counts))
    elif name == "keypoints":
        n = int(np.count_nonzero((np.asarray(values)[..., 2] > 0).any(axis=-1)))
    else:
        n = len(values)
    what = {"polygons": "polygon masks", "rle": "RLE masks", "keypoints": "keypoints",
            "obb": "oriented boxes"}[name]
    return f"{what} on annotations", n


def is_instance_field(name) -> bool:
    return name in INSTANCE_FIELDS
