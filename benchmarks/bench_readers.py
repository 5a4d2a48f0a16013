"""Time the COCO and VOC readers on synthetic sets of realistic size.

    python benchmarks/bench_readers.py [--images 100000] [--annotations 700000] [--voc 20000]

COCO: one instances JSON of ``--images`` images and ``--annotations`` box-only annotations over
80 categories with non-contiguous ids (as COCO's 1..90); the image folder holds an empty
placeholder file per image, so the reader's existence check runs as it would on real data.
VOC: ``--voc`` XML files with ``<size>``, a split file, and empty placeholder images.
Timed: ``read_coco`` including JSON loading, and ``read_voc``; best of ``--repeat`` runs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from readers.coco import read_coco  # noqa: E402
from readers.voc import VOC_CLASSES, read_voc  # noqa: E402

VOC_TEMPLATE = """<annotation>
  <folder>VOC2012</folder>
  <filename>{name}.jpg</filename>
  <size><width>{w}</width><height>{h}</height><depth>3</depth></size>
  <segmented>0</segmented>
{objects}</annotation>
"""
VOC_OBJECT = """  <object>
    <name>{cls}</name><pose>Unspecified</pose><truncated>{t}</truncated><difficult>{d}</difficult>
    <bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox>
  </object>
"""


def make_coco(folder, n_images, n_annotations, rng):
    """Write annotations.json and empty image placeholders; return the JSON path."""
    image_dir = os.path.join(folder, "images")
    os.makedirs(image_dir)
    sizes = rng.integers(200, 641, size=(n_images, 2))
    images = [{"id": i + 1, "file_name": f"{i + 1:012d}.jpg", "width": int(w), "height": int(h)}
              for i, (w, h) in enumerate(sizes)]
    for im in images:
        open(os.path.join(image_dir, im["file_name"]), "wb").close()
    cat_ids = np.sort(rng.choice(np.arange(1, 91), size=80, replace=False))
    img = rng.integers(0, n_images, size=n_annotations)
    wh = sizes[img].astype(np.float64)
    xy = rng.random((n_annotations, 2)) * wh * 0.7
    bw = np.maximum(rng.random((n_annotations, 2)) * (wh - xy), 1.0)
    bbox = np.round(np.concatenate([xy, bw], axis=1), 2).tolist()
    cats = rng.choice(cat_ids, size=n_annotations).tolist()
    annotations = [{"id": j + 1, "image_id": int(img[j]) + 1, "category_id": cats[j],
                    "bbox": bbox[j], "area": round(bbox[j][2] * bbox[j][3], 2), "iscrowd": 0}
                   for j in range(n_annotations)]
    categories = [{"id": int(c), "name": f"class{c}", "supercategory": "thing"} for c in cat_ids]
    path = os.path.join(folder, "annotations.json")
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
    return path, image_dir


def make_voc(folder, n_files, rng):
    """Write a VOC tree of n_files annotation files (1-6 objects each) and placeholders."""
    for sub in ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main")):
        os.makedirs(os.path.join(folder, sub))
    names = [f"2012_{i:06d}" for i in range(n_files)]
    for name in names:
        w, h = (int(v) for v in rng.integers(200, 501, size=2))
        objects = []
        for _ in range(int(rng.integers(1, 7))):
            x0, y0 = int(rng.integers(1, w // 2)), int(rng.integers(1, h // 2))
            objects.append(VOC_OBJECT.format(
                cls=VOC_CLASSES[int(rng.integers(20))], t=int(rng.integers(2)), d=0, x0=x0, y0=y0,
                x1=int(rng.integers(x0 + 1, w + 1)), y1=int(rng.integers(y0 + 1, h + 1))))
        with open(os.path.join(folder, "Annotations", name + ".xml"), "w") as f:
            f.write(VOC_TEMPLATE.format(name=name, w=w, h=h, objects="".join(objects)))
        open(os.path.join(folder, "JPEGImages", name + ".jpg"), "wb").close()
    with open(os.path.join(folder, "ImageSets", "Main", "trainval.txt"), "w") as f:
        f.writelines(n + "\n" for n in names)
    return folder


def best_time(fn, repeat):
    """Best wall and best CPU (process) seconds of ``repeat`` runs, and the last result.

    CPU time is reported beside wall time because a shared machine inflates wall time; the
    readers are single-threaded, so on an idle machine the two agree.
    """
    walls, cpus, result = [], [], None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus), result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=100_000)
    p.add_argument("--annotations", type=int, default=700_000)
    p.add_argument("--voc", type=int, default=20_000)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        coco_json, image_dir = make_coco(os.path.join(tmp, "coco"), args.images,
                                         args.annotations, rng)
        voc_root = make_voc(os.path.join(tmp, "voc"), args.voc, rng)
        wall_coco, cpu_coco, ds = best_time(lambda: read_coco(coco_json, image_dir), args.repeat)
        n_coco = sum(r.num_boxes for r in ds)
        wall_voc, cpu_voc, dv = best_time(lambda: read_voc(voc_root), args.repeat)
        n_voc = sum(r.num_boxes for r in dv)
    print(f"read_coco: {len(ds)} images, {n_coco} boxes, {ds.num_classes} classes: "
          f"{wall_coco:.2f} s wall, {cpu_coco:.2f} s CPU (target < 12 s)")
    print(f"read_voc:  {len(dv)} files, {n_voc} boxes: "
          f"{wall_voc:.2f} s wall, {cpu_voc:.2f} s CPU (target < 5 s)")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
