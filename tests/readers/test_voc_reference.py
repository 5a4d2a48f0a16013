"""read_voc against a reference written from the VOC format and docs/design.md with another XML
parser (xml.etree.ElementTree), on fresh random trees: boxes past an edge (clipped), reversed
and outside boxes, unknown classes, difficult / truncated present or absent, comments, nested
elements (<part>, <source>), repeated other elements, ids with an inner space, a missing
<filename>, every class option and skip_difficult."""
from __future__ import annotations

import os
import warnings
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from readers import read_voc
from readers.voc import VOC_CLASSES


def value(el):
    kids = list(el)
    if not kids:
        return (el.text or "").strip()
    return elements(kids, ())


def elements(children, skip):
    out = {}
    for c in children:
        if c.tag in skip:
            continue
        v = value(c)
        if c.tag not in out:
            out[c.tag] = v
        elif isinstance(out[c.tag], list):
            out[c.tag].append(v)
        else:
            out[c.tag] = [out[c.tag], v]
    return out


def random_tree(root, rng):
    for sub in ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main")):
        os.makedirs(os.path.join(root, sub))
    names = list(VOC_CLASSES[:6]) + ["alien"]
    ids = []
    for i in range(int(rng.integers(1, 15))):
        image_id = f"im {i}" if rng.random() < 0.1 else f"2012_{i:04d}"
        ids.append(image_id)
        w, h = int(rng.integers(1, 400)), int(rng.integers(1, 400))
        parts = ["<annotation>", "<folder>VOC</folder>"]
        if rng.random() < 0.9:
            parts.append(f"<filename>{image_id}.jpg</filename>")
        parts.append(f"<size><width>{w}</width><height>{h}</height><depth>3</depth></size>")
        if rng.random() < 0.5:
            parts.append("<source><database>x</database><image>flickr</image></source>")
        parts.append(f"<segmented>{int(rng.integers(2))}</segmented>")
        for _ in range(int(rng.integers(0, 6))):
            x0, y0 = int(rng.integers(-20, w + 20)), int(rng.integers(-20, h + 20))
            x1, y1 = x0 + int(rng.integers(-5, w)), y0 + int(rng.integers(-5, h))
            obj = [f"<name> {names[int(rng.integers(len(names)))]} </name>"]
            if rng.random() < 0.7:
                obj.append("<pose>Left</pose>")
            if rng.random() < 0.2:
                obj.append("<!-- a comment --><occluded>1</occluded><occluded>0</occluded>")
            for flag in ("truncated", "difficult"):
                if rng.random() < 0.8:
                    obj.append(f"<{flag}>{int(rng.integers(2))}</{flag}>")
            obj.append(f"<bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin><xmax>{x1}</xmax>"
                       f"<ymax>{y1}</ymax></bndbox>")
            if rng.random() < 0.2:
                obj.append("<part><name>hand</name><bndbox><xmin>1</xmin></bndbox></part>")
            parts.append("<object>" + "".join(obj) + "</object>")
        parts.append("</annotation>")
        with open(os.path.join(root, "Annotations", image_id + ".xml"), "w") as f:
            f.write("\n".join(parts))
        open(os.path.join(root, "JPEGImages", image_id + ".jpg"), "wb").close()
    with open(os.path.join(root, "ImageSets", "Main", "trainval.txt"), "w") as f:
        f.writelines(i + "\n" for i in ids)
    return ids


def reference(root, ids, classes, skip_difficult):
    """(records, clipped, faults) from the definitions."""
    files = [(i, ET.parse(os.path.join(root, "Annotations", i + ".xml")).getroot()) for i in ids]
    objects = [(i, o) for i, a in files for o in a.findall("object")]
    if classes == "discover":
        classes = sorted({o.findtext("name").strip() for _, o in objects})
    classes = list(VOC_CLASSES if classes is None else classes)
    any_other = any(c.tag not in ("name", "bndbox", "difficult", "truncated")
                    and isinstance(c.tag, str) for _, o in objects for c in o)
    records, clipped, faults = [], 0, 0
    for image_id, a in files:
        W, H = int(a.findtext("size/width")), int(a.findtext("size/height"))
        boxes, labels, fields, box_keys = [], [], {"difficult": [], "truncated": []}, []
        for o in a.findall("object"):
            name = o.findtext("name").strip()
            x0, y0, x1, y1 = (float(o.find("bndbox").findtext(k))
                              for k in ("xmin", "ymin", "xmax", "ymax"))
            x0, y0 = x0 - 1, y0 - 1  # 1-based inclusive pixels -> continuous coordinates
            if name not in classes or x1 <= x0 or y1 <= y0 or x0 >= W or x1 <= 0 \
                    or y0 >= H or y1 <= 0:
                faults += 1
                continue
            difficult, truncated = (int(o.findtext(k) or 0) for k in ("difficult", "truncated"))
            if skip_difficult and difficult:
                continue
            box = [min(max(x0, 0), W), min(max(y0, 0), H), min(max(x1, 0), W),
                   min(max(y1, 0), H)]
            clipped += any(abs(b - v) > 1e-3 for b, v in zip(box, (x0, y0, x1, y1)))
            boxes.append(box)
            labels.append(classes.index(name))
            fields["difficult"].append(difficult)
            fields["truncated"].append(truncated)
            box_keys.append(elements(list(o), ("name", "bndbox", "difficult", "truncated")))
        extra = {}
        image_keys = elements(list(a), ("folder", "filename", "size", "object"))
        if image_keys:
            extra["image_keys"] = image_keys
        if any_other:
            extra["box_keys"] = box_keys
        records.append((os.path.join(os.path.realpath(root), "JPEGImages", image_id + ".jpg"),
                        W, H, np.array(boxes, np.float64).reshape(-1, 4), labels, fields,
                        image_id, extra))
    return records, clipped, faults


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5, None, None, None, None])
def test_read_voc_matches_the_reference(tmp_path, seed):
    seed = int(np.random.SeedSequence().entropy % 2**32) if seed is None else seed
    rng = np.random.default_rng(seed)
    root = str(tmp_path / "voc")
    ids = random_tree(root, rng)
    classes = [None, "discover", list(VOC_CLASSES[:6][::-1])][int(rng.integers(3))]
    skip_difficult = bool(rng.integers(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = read_voc(root, classes=classes, skip_difficult=skip_difficult, on_error="skip")
    want, clipped, faults = reference(root, ids, classes, skip_difficult)
    assert len(ds.skipped) == faults, (seed, ds.skipped)
    assert ds.clipped == clipped, seed
    assert len(ds.records) == len(want), seed
    for r, (p, w, h, boxes, labels, fields, image_id, extra) in zip(ds.records, want):
        assert (r.path, r.width, r.height, r.image_id) == (p, w, h, image_id), seed
        assert r.boxes.dtype == np.float32 and r.boxes.shape == boxes.shape, seed
        np.testing.assert_array_equal(r.boxes, boxes.astype(np.float32), err_msg=str(seed))
        assert r.labels.dtype == np.int64 and r.labels.tolist() == labels, seed
        assert {k: v.tolist() for k, v in r.fields.items()} == fields, seed
        assert all(v.dtype == np.uint8 for v in r.fields.values())
        assert r.extra == extra, seed
