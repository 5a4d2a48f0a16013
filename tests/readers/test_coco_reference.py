"""read_coco against a pure-Python float64 reference written from the format and docs/design.md
(not from the reader's code), on fresh random files: unsorted and sorted annotations, crowd,
boxes past an edge (clipped), bad boxes (NaN, negative size, wholly outside), unknown image and
category ids, a missing image file, annotations without an id, flags, segmentation, extra keys,
JSON literals (true / null: the reader's other column path), and a malformed annotation (its
entry-by-entry path). Every option is drawn too. The fast JSON load's duplicate-key count is
checked on files where strings hold ':', '{', quotes and escapes."""
from __future__ import annotations

import json
import math
import os
import re
import warnings

import numpy as np
import pytest

from readers import read_coco
from readers.errors import DatasetError
from helpers.reader_files import random_file

CANON = {"id", "image_id", "category_id", "bbox", "iscrowd", "segmentation", "difficult",
         "truncated"}


def well_typed(a):
    return all(type(v) in (int, float) for v in a["bbox"])


def reference(doc, root, include_iscrowd, size_threshold, categories, skip_empty,
              keep_original_ids):
    """(records as tuples, clipped, number of faults) from the definitions."""
    all_ids = sorted(c["id"] for c in doc["categories"])
    names = {c["id"]: c["name"] for c in doc["categories"]}
    wanted = all_ids if categories is None else sorted(
        {next(i for i in all_ids if names[i] == c) if isinstance(c, str) else c
         for c in categories})
    label_of = {c: (c if keep_original_ids else k) for k, c in enumerate(wanted)}
    images = [im for im in doc["images"] if os.path.exists(os.path.join(root, im["file_name"]))]
    faults = len(doc["images"]) - len(images)
    by_id = {im["id"]: im for im in images}
    anns = [a for a in doc["annotations"] if well_typed(a)]
    faults += len(doc["annotations"]) - len(anns)
    has_seg = any(a.get("segmentation") for a in anns)
    has_keys = any(set(a) - CANON for a in anns)
    boxes = {im["id"]: [] for im in images}
    clipped = 0
    for a in anns:
        im = by_id.get(a["image_id"])
        if im is None or a["category_id"] not in all_ids:
            faults += 1
            continue
        W, H = float(im["width"]), float(im["height"])
        x, y, w, h = (float(v) for v in a["bbox"])
        x0, y0, x1, y1 = x, y, x + w, y + h
        if not all(math.isfinite(v) for v in (x0, y0, x1, y1)) or x1 <= x0 or y1 <= y0 \
                or x0 >= W or x1 <= 0 or y0 >= H or y1 <= 0:
            faults += 1
            continue
        if a["category_id"] not in label_of or (not include_iscrowd and a.get("iscrowd", 0)) \
                or (size_threshold > 0 and (w < size_threshold or h < size_threshold)):
            continue
        box = [min(max(x0, 0.0), W), min(max(y0, 0.0), H), min(max(x1, 0.0), W),
               min(max(y1, 0.0), H)]
        clipped += any(abs(b - v) > 1e-3 for b, v in zip(box, (x0, y0, x1, y1)))
        boxes[im["id"]].append((box, a))
    records = []
    for im in images:
        got = boxes[im["id"]]
        if skip_empty and not got:
            continue
        fields = {"iscrowd": [a.get("iscrowd", 0) for _, a in got],
                  "annotation_id": [a.get("id", -1) for _, a in got]}
        for k in ("difficult", "truncated"):
            if any(k in a for a in anns):
                fields[k] = [a.get(k, 0) for _, a in got]
        extra = {}
        if has_seg:
            extra["segmentation"] = [a.get("segmentation") or None for _, a in got]
        if has_keys:
            extra["box_keys"] = [{k: v for k, v in a.items() if k not in CANON} for _, a in got]
        image_keys = {k: v for k, v in im.items() if k not in ("id", "file_name", "width",
                                                                "height")}
        if image_keys:
            extra["image_keys"] = image_keys
        records.append((os.path.join(os.path.realpath(root), im["file_name"]), im["width"],
                        im["height"], np.array([b for b, _ in got], np.float64).reshape(-1, 4),
                        [label_of[a["category_id"]] for _, a in got], fields, im["id"], extra))
    return records, clipped, faults


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5, 6, 7, None, None, None, None])
def test_read_coco_matches_the_reference(tmp_path, seed):
    seed = int(np.random.SeedSequence().entropy % 2**32) if seed is None else seed
    rng = np.random.default_rng(seed)
    path, root, doc = random_file(tmp_path, rng)
    opts = {"include_iscrowd": bool(rng.integers(2)),
            "size_threshold": float(rng.choice([0.0, 0.0, 20.0])),
            "skip_empty": bool(rng.integers(2)), "keep_original_ids": bool(rng.integers(2))}
    cat_ids = [c["id"] for c in doc["categories"]]
    opts["categories"] = None if rng.random() < 0.6 else \
        [rng.choice(cat_ids).item(), f"c{rng.choice(cat_ids)}"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = read_coco(path, root, on_error="skip", **opts)
    want, clipped, faults = reference(doc, root, **opts)
    assert len(ds.skipped) == faults, (seed, ds.skipped)
    assert ds.clipped == clipped, seed
    assert len(ds.records) == len(want), seed
    for r, (p, w, h, boxes, labels, fields, image_id, extra) in zip(ds.records, want):
        assert (r.path, r.width, r.height, r.image_id) == (p, w, h, image_id), seed
        assert r.boxes.dtype == np.float32 and r.boxes.shape == boxes.shape, seed
        np.testing.assert_array_equal(r.boxes, boxes.astype(np.float32), err_msg=str(seed))
        assert r.labels.dtype == np.int64 and r.labels.tolist() == labels, seed
        assert sorted(r.fields) == sorted(fields), seed
        for k, v in fields.items():
            assert r.fields[k].tolist() == v, (seed, k)
        assert r.fields["iscrowd"].dtype == np.uint8
        assert r.fields["annotation_id"].dtype == np.int64
        assert r.extra == extra, seed


@pytest.mark.parametrize("text, dup", [
    ('{"a": 1, "a": 2}', "a"),
    ('{"x": {"a" : 1, "b": 2, "a": 3}}', "a"),
    ('{"s": ": {", "t": "a\\": {\\"b\\": 1}", "u": " :"}', None),
    ('{"s": "\\\\", "k\\\\": 1, "k\\\\\\\\": 2}', None),
    ('{"k\\\\": 1, "k\\u005c": 2}', "k\\"),  # one key written two ways
    ('{\n  "a" :\t1,\r\n  "b"\n:\n[{"c": {}}, {"c" : 1, "c": 2}]\n}', "c"),
])
def test_duplicate_keys_are_found_however_the_text_is_written(tmp_path, text, dup):
    json.loads(text)  # valid JSON (json keeps the last value)
    body = text.rstrip()[:-1].rstrip() + ', "images": [], "categories": []}'
    path = tmp_path / "a.json"
    path.write_text(body)
    if dup is None:
        assert len(read_coco(path, tmp_path)) == 0
    else:
        with pytest.raises(DatasetError, match=re.escape(f"gives the key {dup!r} twice")):
            read_coco(path, tmp_path)
