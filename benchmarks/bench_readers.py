"""Time and memory of the COCO and VOC readers against the field's usual loaders, at growing scale.

    python benchmarks/bench_readers.py [--coco 10000,100000,1000000] [--voc 10000,100000]
                                       [--repeat 3] [--data DIR] [--json FILE]
    python benchmarks/bench_readers.py --tight-boxes [--tight-masks] [--tight-data DIR]
                                       [--tight-epochs 4] [--seed 0] [--json FILE]

COCO: for each size N, one instances JSON of N box-only annotations on N/7 images (COCO's ratio)
over 80 categories with non-contiguous ids (as COCO's 1..90), each annotation with COCO's keys
(``id``, ``image_id``, ``category_id``, ``bbox``, ``area``, ``iscrowd``); the image folder holds an
empty placeholder file per image, so the reader's existence check runs as on real data.
Loaders: ``pycocotools`` = ``pycocotools.coco.COCO(path)`` (json.load, then its index);
``read_coco`` = ``readers.read_coco(path, images)`` as a user calls it (``check_images=True``:
one directory listing, every file name checked; every entry and box validated, boxes clipped);
``read_coco nocheck`` = the same with ``check_images=False`` (pycocotools checks no file);
``read_coco, every record made`` = read_coco, then every ``DetectionRecord`` asked for once
(read_coco's records are made when first asked for; a pipeline never asks: it takes the columns);
``json.load`` = the parse alone, the floor both share (``json.load nogc``: with the cyclic
collector off, as read_coco parses).

VOC: for each size N, about N objects in N/3.5 XML files (1-6 objects each) with ``<size>``, a
split file and placeholder images. Loaders: ``ElementTree`` = what torchvision's
``VOCDetection`` does per item (``xml.etree.ElementTree.parse`` of the file, then its recursive
``parse_voc_xml`` into dicts), for every id of the split: the field's usual VOC parse, and the
one a user gets without detaug (pycocotools has no VOC reader); ``read_voc`` / ``read_voc
nocheck`` = ``readers.read_voc(root)`` with and without the image check.

Every run is a fresh process (``python bench_readers.py --child ...``), the loaders of a set
alternated round by round: wall and CPU seconds of the load call alone (imports done before),
and peak RSS of that process (``VmHWM``: the ``ru_maxrss`` of a fresh process, see
``_peak_mb``), which includes the interpreter and imports (``base`` = its RSS before the load).
Best of ``--repeat`` for each figure (wall, CPU and RSS separately), and in brackets the ratio
of the median CPU seconds. Ratios are against the first loader of the set.

``--tight-boxes`` (CPU, no timing): how much tighter ``readers.coco(polygons=True,
tight_boxes=True)`` makes the boxes after a rotation or shear, on real COCO polygons
(``--tight-data``, default examples/data/coco-mini: every image with an annotation, each of
its boxes). Per mode (``tight_modes()``: ``fn.rotate`` keeping the size, the angle drawn
uniformly in a range of magnitudes with a random sign; ``fn.affine`` with shear only), two
pipelines of one seed and one graph, ``tight_boxes=False`` and ``True``, over
``--tight-epochs`` epochs (new draws each): box by box, the area ratio tight / corners' box,
their IoU (mean, median), the share at least 10 % smaller (ratio <= 0.9). Boxes with no polygon
left (crowds' RLE, or every polygon cut off the canvas) keep the corners' box: counted, not in
the ratios. Every tight box lies inside its corners' box (asserted, to ``INSIDE_TOL`` px).
``--tight-masks`` adds, per mode, the boxes from masks: the same file with each polygon object's
mask in COCO's RLE (``rle_copy``: pycocotools, the mask COCO defines), a third pipeline with
``bitmasks=True, tight_boxes=True`` (each box the box of its mask's pixels after the nearest
warp), against the corners' box and against the polygons' tight box; boxes whose mask lost every
pixel keep the corners' box (counted). Pixel boxes are not bounded by the corners' box: a mask
pixel whose centre lies inside the object reaches up to half a pixel beyond it (and COCO's
rasterisation a little more), shown in ``max outside``.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair",
               "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
               "sheep", "sofa", "train", "tvmonitor")
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
    """Write annotations.json and empty image placeholders; return (json path, image folder)."""
    image_dir = os.path.join(folder, "images")
    os.makedirs(image_dir)
    sizes = rng.integers(200, 641, size=(n_images, 2))
    images = [{"id": i + 1, "file_name": f"{i + 1:012d}.jpg", "width": int(w), "height": int(h)}
              for i, (w, h) in enumerate(sizes.tolist())]
    for im in images:
        open(os.path.join(image_dir, im["file_name"]), "wb").close()
    cat_ids = np.sort(rng.choice(np.arange(1, 91), size=80, replace=False))
    img = rng.integers(0, n_images, size=n_annotations)
    wh = sizes[img].astype(np.float64)
    xy = rng.random((n_annotations, 2)) * wh * 0.7
    bw = np.maximum(rng.random((n_annotations, 2)) * (wh - xy), 1.0)
    bbox = np.round(np.concatenate([xy, bw], axis=1), 2).tolist()
    cats = rng.choice(cat_ids, size=n_annotations).tolist()
    img = (img + 1).tolist()
    annotations = [{"id": j + 1, "image_id": img[j], "category_id": cats[j], "bbox": bbox[j],
                    "area": round(bbox[j][2] * bbox[j][3], 2), "iscrowd": 0}
                   for j in range(n_annotations)]
    categories = [{"id": int(c), "name": f"class{c}", "supercategory": "thing"} for c in cat_ids]
    path = os.path.join(folder, "annotations.json")
    with open(path, "w") as f:
        f.write(json.dumps({"images": images, "annotations": annotations,
                            "categories": categories}))
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


def parse_voc_xml(node):
    """torchvision.datasets.VOCDetection.parse_voc_xml (torchvision 0.20), verbatim in effect:
    an element tree as nested dicts, ``object`` always a list."""
    voc_dict = {}
    children = list(node)
    if children:
        def_dic = collections.defaultdict(list)
        for dc in map(parse_voc_xml, children):
            for ind, v in dc.items():
                def_dic[ind].append(v)
        if node.tag == "annotation":
            def_dic["object"] = [def_dic["object"]]
        voc_dict = {node.tag: {ind: v[0] if len(v) == 1 else v for ind, v in def_dic.items()}}
    if node.text:
        text = node.text.strip()
        if not children:
            voc_dict[node.tag] = text
    return voc_dict


def _load(loader, path):
    """The child's work: (object to keep alive, images, boxes)."""
    if loader == "pycocotools":
        import contextlib
        import io
        from pycocotools.coco import COCO
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its progress
            return _run(lambda: COCO(path), lambda c: (len(c.imgs), len(c.anns)))
    if loader.startswith("json.load"):  # the floor both COCO loaders share: the parse alone
        import gc

        def parse():
            if "nogc" in loader:
                gc.disable()
            with open(path) as f:
                return json.load(f)
        return _run(parse, lambda d: (len(d["images"]), len(d["annotations"])))
    if loader.startswith("read_coco"):
        from readers import read_coco

        def load():
            ds = read_coco(path, os.path.join(os.path.dirname(path), "images"),
                           check_images="nocheck" not in loader)
            if "records" in loader:  # every record made (they are made when first asked for)
                list(ds.records)
            return ds
        return _run(load, _count)
    if loader == "ElementTree":
        import xml.etree.ElementTree as ET

        def load():
            split = os.path.join(path, "ImageSets", "Main", "trainval.txt")
            with open(split) as f:
                ids = [line.strip() for line in f if line.strip()]
            return [parse_voc_xml(ET.parse(os.path.join(path, "Annotations", i + ".xml"))
                                  .getroot()) for i in ids]
        return _run(load, lambda t: (len(t), sum(len(d["annotation"]["object"]) for d in t)))
    if loader.startswith("read_voc"):
        from readers import read_voc
        return _run(lambda: read_voc(path, check_images="nocheck" not in loader), _count)
    raise ValueError(loader)


def _count(dataset):
    return len(dataset), sum(r.num_boxes for r in dataset)


def _run(load, count):
    base = _rss_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    out = load()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = _peak_mb()
    images, boxes = count(out)
    return {"wall": wall, "cpu": cpu, "peak_mb": peak, "base_mb": base, "images": images,
            "boxes": boxes}


def _peak_mb():
    """This process's peak RSS since its exec (VmHWM). ``getrusage(...).ru_maxrss`` would do on
    a fresh interpreter, but Linux carries it over exec from the forking parent (here the
    driver, which made the data sets): it read 140 MB for every loader of a small set."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux: KiB


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(loaders, path, repeat):
    """Each loader in ``repeat`` fresh processes, the loaders alternated round by round (a
    machine that slows down for a while then slows every loader alike): per loader the best
    of its runs (each figure on its own) and its median CPU seconds."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = {loader: [] for loader in loaders}
    for _ in range(repeat):
        for loader in loaders:
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", loader,
                                  path], env=env, capture_output=True, text=True, check=True)
            runs[loader].append(json.loads(out.stdout.strip().splitlines()[-1]))
    results = {}
    for loader, rs in runs.items():
        best = {k: min(r[k] for r in rs) for k in ("wall", "cpu", "peak_mb", "base_mb")}
        results[loader] = best | {"cpu_median": float(np.median([r["cpu"] for r in rs])),
                                  "images": rs[-1]["images"], "boxes": rs[-1]["boxes"]}
    return results


INSIDE_TOL = 0.05  # px: boxes are float32, COCO's coordinates are rounded to 0.01


def tight_modes():
    """``(name, chain(images, boxes) -> (images, boxes))`` for the ``--tight-boxes`` table."""
    from detaug import fn

    def rotate(lo, hi):
        def chain(img, boxes):
            sign = fn.random.coin_flip() * 2 - 1
            angle = fn.random.uniform(range=(lo, hi)) * sign
            return fn.rotate(img, boxes, angle=angle, expand=False)
        return f"rotate, angle +-({lo:g} to {hi:g}) deg", chain

    def shear(img, boxes):
        return fn.affine(img, boxes, shear_x=fn.random.uniform(range=(-20.0, 20.0)),
                         shear_y=fn.random.uniform(range=(-20.0, 20.0)))
    return [rotate(0.0, 10.0), rotate(10.0, 30.0), rotate(30.0, 90.0),
            ("affine shear_x, shear_y +-20 deg", shear)]



def _chain_rows(annotations, image_root, chain, n, *, epochs, seed, batch_size, **reader):
    """The per-sample output rows (BoxBatch.per_sample) of ``chain`` after one
    ``fn.readers.coco(**reader)`` over the ``n`` images of ``annotations`` with a box, epoch
    after epoch (the last batch's padding samples cut off)."""
    from detaug import Pipeline, fn

    pipe = Pipeline(batch_size=batch_size, num_threads=1, seed=seed)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=image_root, annotations_file=annotations,
                                     skip_empty=True, **reader)
        pipe.set_outputs(chain(fn.decoders.image(enc), boxes)[1])
    rows = []
    for e in range(epochs):
        for b in range(-(-n // batch_size)):
            rows += pipe.run_batch(b, e)[0].per_sample()[:n - b * batch_size]
    pipe.close()
    return rows


def _cat(rows, key):
    return np.concatenate([np.asarray(r[key], np.float64).reshape(len(r["boxes"]), -1)
                           for r in rows]) if rows else np.zeros((0, 4))


def tight_box_pairs(annotations, image_root, chain, *, epochs=1, seed=0, batch_size=16,
                    ids=False):
    """Run ``chain`` in two pipelines (``tight_boxes`` False / True, one seed) over every image
    of ``annotations`` with a box, ``epochs`` times: ``(corner (N, 4), tight (N, 4), moved
    (N,) bool)`` float64, row for row (asserted: the same annotation ids); ``moved``: the box
    had polygons left, so that tight_boxes replaced it. With ``ids`` the annotation ids (N,)
    follow."""
    from readers.coco_instances import read_coco_shapes

    n = len(read_coco_shapes(annotations, image_root, polygons=True, skip_empty=True))
    kw = dict(epochs=epochs, seed=seed, batch_size=batch_size, polygons=True)
    out = {t: _chain_rows(annotations, image_root, chain, n, tight_boxes=t, **kw)
           for t in (False, True)}
    assert np.array_equal(_cat(out[False], "annotation_id"), _cat(out[True], "annotation_id"))
    poly = [np.asarray(r["polygons"]).reshape(len(r["boxes"]), -1) for r in out[True]]
    moved = np.concatenate([~np.isnan(p).all(1) for p in poly]) if poly else np.zeros(0, bool)
    got = _cat(out[False], "boxes"), _cat(out[True], "boxes"), moved
    return got + (_cat(out[True], "annotation_id").reshape(-1),) if ids else got


def rle_copy(annotations, out_path):
    """``annotations`` rewritten with each polygon object's ``segmentation`` as its mask in
    COCO's compressed RLE (pycocotools ``merge(frPyObjects(...))``: the mask COCO's tools make
    of the polygons), ``iscrowd`` kept; written to ``out_path``."""
    from pycocotools import mask as coco_mask

    with open(annotations) as f:
        doc = json.load(f)
    sizes = {im["id"]: (im["height"], im["width"]) for im in doc["images"]}
    for a in doc["annotations"]:
        if isinstance(a.get("segmentation"), list) and a["segmentation"]:
            h, w = sizes[a["image_id"]]
            rle = coco_mask.merge(coco_mask.frPyObjects(a["segmentation"], h, w))
            a["segmentation"] = {"size": [h, w], "counts": rle["counts"].decode("ascii")}
    with open(out_path, "w") as f:
        json.dump(doc, f)
    return out_path


def tight_mask_boxes(annotations, image_root, chain, *, epochs=1, seed=0, batch_size=16):
    """``chain`` once more over ``annotations`` read with ``bitmasks=True, tight_boxes=True``
    (each box follows its warped mask): ``(boxes (N, 4) float64, moved (N,) bool, annotation
    ids (N,))``, ``moved`` where the box's mask kept a pixel. With :func:`rle_copy`'s file the
    rows line up with :func:`tight_box_pairs`' on the original one (same seed, same graph)."""
    from readers.coco_instances import read_coco_shapes

    n = len(read_coco_shapes(annotations, image_root, bitmasks=True, skip_empty=True))
    rows = _chain_rows(annotations, image_root, chain, n, epochs=epochs, seed=seed,
                       batch_size=batch_size, bitmasks=True, tight_boxes=True)
    moved = [np.asarray(r["bitmasks"]).reshape(len(r["boxes"]), -1).any(1) for r in rows]
    moved = np.concatenate(moved) if moved else np.zeros(0, bool)
    return _cat(rows, "boxes"), moved, _cat(rows, "annotation_id").reshape(-1)


def tight_box_stats(corner, tight, moved):
    """The table's figures over the ``moved`` boxes: area ratio tight / corners' (mean,
    median), IoU (mean, median), share with ratio <= 0.9, count; ``kept`` the boxes not moved;
    ``outside`` the largest distance (px) by which a tight box leaves its corners' box."""
    corner, tight = np.asarray(corner, np.float64), np.asarray(tight, np.float64)
    outside = float(np.max(np.concatenate([corner[:, :2] - tight[:, :2],
                                           tight[:, 2:] - corner[:, 2:]], 1), initial=0.0))
    c, t = corner[moved], tight[moved]

    def area(b):
        return np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    lo, hi = np.maximum(c[:, :2], t[:, :2]), np.minimum(c[:, 2:], t[:, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), 1)
    ac, at = area(c), area(t)
    ok = ac > 0
    ratio = at[ok] / ac[ok]
    iou = inter[ok] / (ac + at - inter)[ok]
    nan = float("nan")
    return {"boxes": int(ok.sum()), "kept": int((~moved).sum()), "degenerate": int((~ok).sum()),
            "ratio_mean": float(ratio.mean()) if len(ratio) else nan,
            "ratio_median": float(np.median(ratio)) if len(ratio) else nan,
            "iou_mean": float(iou.mean()) if len(iou) else nan,
            "iou_median": float(np.median(iou)) if len(iou) else nan,
            "smaller_10": float(np.mean(ratio <= 0.9)) if len(ratio) else nan,
            "outside": outside}


def tight_main(args):
    """The ``--tight-boxes`` table (module docstring)."""
    ann = os.path.join(args.tight_data, "annotations.json")
    root = os.path.join(args.tight_data, "images")
    with open(ann) as f:
        anns = json.load(f)["annotations"]
    no_poly = sum(not (isinstance(a.get("segmentation"), list) and a["segmentation"])
                  for a in anns)
    crowd = sum(bool(a.get("iscrowd")) for a in anns)
    print(f"tight_boxes on {ann}: {len({a['image_id'] for a in anns})} images with annotations, "
          f"{len(anns)} annotations, {no_poly} without a polygon ({crowd} crowds): they keep "
          f"their corners' box; {args.tight_epochs} epochs per mode, seed {args.seed}")
    if args.tight_masks:
        print("with --tight-masks: the same file with each polygon object's mask as COCO's RLE "
              "(pycocotools), read with bitmasks=True, tight_boxes=True: rows ', masks' (the "
              "warped mask's box against the corners' box) and ', masks vs polygons' (against "
              "the polygons' tight box: ratio mask / polygon box)")
        rle = rle_copy(ann, os.path.join(tempfile.mkdtemp(prefix="tight_rle_"), "rle.json"))
    print("| mode | boxes | mean area ratio tight / corners | median | mean IoU | median IoU | "
          ">= 10 % smaller | kept corners' box (no polygon / mask pixel left) | "
          "max outside (px) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []

    def row(name, r):
        rows.append({"mode": name} | r)
        print(f"| {name} | {r['boxes']:,} | {r['ratio_mean']:.3f} | {r['ratio_median']:.3f} | "
              f"{r['iou_mean']:.3f} | {r['iou_median']:.3f} | {100 * r['smaller_10']:.1f} % | "
              f"{r['kept']} | {r['outside']:.3f} |", flush=True)
    for name, chain in tight_modes():
        kw = dict(epochs=args.tight_epochs, seed=args.seed)
        corner, tight, moved, poly_ids = tight_box_pairs(ann, root, chain, ids=True, **kw)
        r = tight_box_stats(corner, tight, moved)
        assert r["outside"] <= INSIDE_TOL, (name, r)  # every tight box inside its corners' box
        row(name, r)
        if args.tight_masks:
            masked, has, ids = tight_mask_boxes(rle, root, chain, **kw)
            assert np.array_equal(ids, poly_ids)  # row for row
            row(f"{name}, masks", tight_box_stats(corner, masked, has))
            row(f"{name}, masks vs polygons", tight_box_stats(tight, masked, has & moved))
    print(f"every tight box inside its corners' box (to {INSIDE_TOL} px)"
          + (" (polygons'; masks': max outside above)" if args.tight_masks else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--coco", default="10000,100000,1000000",
                   help="annotation counts of the COCO sets (images = count / 7); '' for none")
    p.add_argument("--voc", default="10000,100000",
                   help="object counts of the VOC sets (files = count / 3.5); '' for none. "
                        "1000000: 285,714 files and as many placeholders, made in ~1 minute "
                        "(2-core dev box), ~1.2 GB of disk blocks")
    p.add_argument("--repeat", type=int, default=3, help="fresh processes per loader (best of)")
    p.add_argument("--data", default=None, help="folder for the generated sets (kept; reused "
                                                "when already there). Default: a temporary one")
    p.add_argument("--json", default=None, help="write the rows here too")
    p.add_argument("--tight-boxes", action="store_true",
                   help="instead: the tight_boxes table on real COCO polygons (docstring)")
    p.add_argument("--tight-data", default=os.path.join(REPO, "examples", "data", "coco-mini"),
                   help="folder with annotations.json and images/ (--tight-boxes)")
    p.add_argument("--tight-epochs", type=int, default=4, help="epochs per mode (--tight-boxes)")
    p.add_argument("--tight-masks", action="store_true",
                   help="with --tight-boxes: also the boxes of the objects' masks (docstring)")
    p.add_argument("--seed", type=int, default=0, help="pipeline seed (--tight-boxes)")
    p.add_argument("--child", nargs=2, metavar=("LOADER", "PATH"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(_load(*args.child)))
        return
    if args.tight_boxes:
        return tight_main(args)
    data = args.data or tempfile.mkdtemp(prefix="bench_readers_")
    rng = np.random.default_rng(0)
    sets = []
    for n in [int(v) for v in args.coco.split(",") if v]:
        folder = os.path.join(data, f"coco_{n}")
        path = os.path.join(folder, "annotations.json")
        if not os.path.exists(path):
            shutil.rmtree(folder, ignore_errors=True)
            make_coco(folder, max(1, n // 7), n, rng)
        sets.append((f"COCO {n:,} ann", path, ("pycocotools", "read_coco", "read_coco nocheck",
                                               "read_coco, every record made", "json.load",
                                               "json.load nogc")))
    for n in [int(v) for v in args.voc.split(",") if v]:
        folder = os.path.join(data, f"voc_{n}")
        if not os.path.exists(os.path.join(folder, "ImageSets", "Main", "trainval.txt")):
            shutil.rmtree(folder, ignore_errors=True)
            make_voc(folder, max(1, round(n / 3.5)), rng)
        sets.append((f"VOC ~{n:,} obj", folder, ("ElementTree", "read_voc", "read_voc nocheck")))
    rows = []
    print("| set | loader | images | boxes | wall s | CPU s | peak RSS MB (base) | wall x | "
          "CPU x (of medians) | RSS x | RSS over base x |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, path, loaders in sets:
        ref = None
        for loader, r in measure(loaders, path, args.repeat).items():
            ref = ref or r
            rows.append({"set": name, "loader": loader} | r)
            print(f"| {name} | {loader} | {r['images']:,} | {r['boxes']:,} | {r['wall']:.2f} | "
                  f"{r['cpu']:.2f} | {r['peak_mb']:.0f} ({r['base_mb']:.0f}) | "
                  f"{r['wall'] / ref['wall']:.2f} | {r['cpu'] / ref['cpu']:.2f} "
                  f"({r['cpu_median'] / ref['cpu_median']:.2f}) | "
                  f"{r['peak_mb'] / ref['peak_mb']:.2f} | "
                  f"{(r['peak_mb'] - r['base_mb']) / (ref['peak_mb'] - ref['base_mb']):.2f} |",
                  flush=True)
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if not args.data:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
