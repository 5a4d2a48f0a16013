"""``detaug`` command line: ``detaug demo`` runs a detection pipeline on a sample data set, prints
its throughput and writes a grid of augmented images with their boxes drawn
(:func:`detaug.visualize.draw_grid`).

    detaug demo [--data voc|coco] [--device cpu|gpu|auto] [--batches N] [--out demo.png]
                [--op NAME]   (one op, e.g. mosaic, with its defaults, instead of the pipeline)
    python -m detaug demo ...

The sample is the repository's ``examples/data/<voc-mini|coco-mini>`` (real photographs) in a
source checkout, else a generated one (coloured shapes, :mod:`detaug.cli.sample`) kept in
``~/.cache/detaug``, so that the demo runs after ``pip install detaug`` too.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from ..core.backend import cpu_warp, pick_device, to_host
from ..visualize import class_color, draw_grid  # noqa: F401  (class_color: the tests')

SAMPLES = {"voc": "voc-mini", "coco": "coco-mini"}
SIZE = 512  # the demo pipeline's output canvas (square)


# ---- data ---------------------------------------------------------------------------------------
def repository_sample(data: str):
    """``examples/data/<voc-mini|coco-mini>`` in the nearest folder above the detaug package that
    has one (a source checkout or an editable install), else None."""
    here = os.path.dirname(os.path.abspath(__file__))
    while True:
        cand = os.path.join(here, "examples", "data", SAMPLES[data])
        if os.path.isdir(cand):
            return cand
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def find_sample_root(data: str, root: str | None = None) -> str:
    """The sample data set's folder: ``root`` if given, else the repository's sample, else the
    generated one (made on first use, :func:`detaug.cli.sample.sample_root`)."""
    if root is not None:
        if not os.path.isdir(root):
            raise FileNotFoundError(f"--root {root}: no such folder")
        return os.path.abspath(root)
    found = repository_sample(data)
    if found is not None:
        return found
    from .sample import sample_root

    return sample_root(data)


def coco_files(root: str) -> tuple:
    """(annotations JSON, image folder) of a COCO sample folder."""
    return os.path.join(root, "annotations.json"), os.path.join(root, "images")


def voc_classes(root: str):
    """The class list of a VOC folder: its ``classes.txt`` (as detaug's VOC writer leaves it;
    ``readers.read_voc_classes``) where there is one, else None (the 20 VOC classes)."""
    path = os.path.join(root, "classes.txt")
    if not os.path.isfile(path):
        return None
    from readers.voc import read_voc_classes

    return read_voc_classes(path)


def load_dataset(data: str, root: str):
    """The readers' Dataset (records and class names) that the pipeline's reader op reads."""
    if data == "voc":
        from readers.voc import read_voc

        return read_voc(root, classes=voc_classes(root))
    from readers.coco import read_coco

    return read_coco(*coco_files(root))


def demo_pipeline(data: str, root: str, device: str = "cpu", batch_size: int = 8, seed: int = 0):
    """The demo's detection pipeline (SSD-style crop, flip, rotate, colour, resize, prune).

    On 'gpu' the decoder is mixed and every op after it runs on the device."""
    from detaug import fn, pipeline_def

    @pipeline_def(batch_size=batch_size, num_threads=min(4, os.cpu_count() or 1),
                  seed=seed, device_id=0 if device == "gpu" else None)
    def detection():
        if data == "voc":
            enc, boxes = fn.readers.voc(root=root, classes=voc_classes(root), random_shuffle=True)
        else:
            ann, images = coco_files(root)
            enc, boxes = fn.readers.coco(annotations_file=ann, file_root=images, random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed" if device == "gpu" else "cpu")
        img, boxes = fn.random_iou_crop(img, boxes)
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        # expand=False: detaug's canvas, chosen by name (DALI's rotate warning is for DALI code)
        img, boxes = fn.rotate(img, boxes, angle=fn.random.uniform(range=(-10, 10)), expand=False)
        img = fn.hsv(img, hue=fn.random.uniform(range=(-15, 15)),
                     saturation=fn.random.uniform(range=(0.7, 1.3)))
        img = fn.brightness_contrast(img, brightness=fn.random.uniform(range=(0.8, 1.2)),
                                     contrast=fn.random.uniform(range=(0.8, 1.2)))
        img, boxes = fn.resize(img, boxes, size=(SIZE, SIZE))
        return img, fn.prune_boxes(boxes, min_size=2)

    return detection()


# arguments an op needs to run at all (no default): the demo's own choice for them; rotate's
# expand= names detaug's canvas rule, as a user's own call would, so the demo raises no DALI warning
OP_DEMO_ARGS = {"rotate": {"expand": False},
                "resize": {"size": (SIZE, SIZE)}, "letterbox": {"size": (SIZE, SIZE)},
                "random_resized_crop": {"size": (SIZE, SIZE)}, "crop": {"crop": (SIZE // 2, SIZE // 2)},
                "paste": {"ratio": 2.0}, "mosaic": {"size": SIZE // 2},
                "scale_jitter": {"size": (SIZE, SIZE)},
                "random_shortest_size": {"min_size": [SIZE // 2, SIZE * 3 // 4, SIZE],
                                         "max_size": SIZE * 2},
                "warp_affine": {"matrix": [0.9, 0.2, 0.0, -0.2, 0.9, 40.0], "fill_value": 0},
                "gaussian_blur": {"sigma_range": (0.5, 3.0)}}
_DRAWN_KINDS = ("geometric", "color", "box", "other")


def _drawable(schema) -> bool:
    """Whether the grid can show ``schema``'s op, from its declaration: it takes images (and
    optionally their boxes) and gives back as many outputs as it takes, and no argument's default
    turns the uint8 HWC images into another dtype or layout (normalize's ``dtype='float32'``,
    crop_mirror_normalize's ``output_layout='CHW'``); or it takes boxes alone, runs on both of
    the demo's devices and, given a BoxBatch, gives back a BoxBatch in the same format."""
    from ..ops.registry import input_names

    names, defaults = input_names(schema), schema.args
    if names in (("images",), ("images", "boxes")):
        lo, hi = schema.inputs
        if any(schema.num_outputs(n, defaults) != n for n in range(lo, hi + 1)):
            return False
        return all(defaults.get(k) in (None, "uint8") for k in _DTYPE_ARGS) and \
            all(defaults.get(k) in (None, "HWC") for k in _LAYOUT_ARGS)
    return (names == ("boxes",) and {"cpu", "gpu"} <= set(schema.devices)
            and schema.num_outputs(1, defaults) == 1 and _gives_box_batch(schema))


_DTYPE_ARGS = ("dtype", "output_dtype")  # arguments that choose the output images' element type
_LAYOUT_ARGS = ("output_layout",)        # ... and their layout


def _gives_box_batch(schema) -> bool:
    """Run the box op's body with its defaults on one box of one 8 x 8 canvas (box ops need no
    context on the host): a BoxBatch of the input's format back is what the grid draws."""
    import numpy as np

    from ..core.batch import BoxBatch

    class _Op:  # what an op body reads of its node: its name (for errors)
        name = schema.name

    one = BoxBatch(np.array([[1.0, 1.0, 6.0, 5.0]], np.float32), np.zeros(1, np.int64),
                   [0, 1], [[8, 8]])
    try:
        out = schema.impl(None, _Op(), [one], dict(schema.args))
    except Exception:  # noqa: BLE001  (an op that cannot run so is not one the grid can show)
        return False
    return isinstance(out, BoxBatch) and out.fmt == one.fmt


def demo_ops() -> list:
    """The ops ``--op`` can show (:func:`_drawable`): any registered image or box op of that
    kind, new ones included."""
    from ..ops import REGISTRY

    return sorted(n for n, s in REGISTRY.items() if s.kind in _DRAWN_KINDS
                  and not n.startswith("_") and _drawable(s))


def op_pipeline(data: str, root: str, op: str, device: str = "cpu", batch_size: int = 8,
                seed: int = 0):
    """The sample through one op with its defaults (and :data:`OP_DEMO_ARGS` where it has
    required ones): (images, boxes) of the op, for the grid."""
    from detaug import fn, pipeline_def
    from ..ops import REGISTRY

    if op not in demo_ops():
        raise ValueError(f"--op {op}: not an op that takes and gives images (uint8 HWC, their "
                         f"boxes passed through or transformed) or boxes; one of "
                         f"{', '.join(demo_ops())}")
    schema = REGISTRY[op]
    call = fn
    for part in op.split("."):
        call = getattr(call, part)

    @pipeline_def(batch_size=batch_size, num_threads=min(4, os.cpu_count() or 1), seed=seed,
                  device_id=0 if device == "gpu" else None)
    def one_op():
        enc, boxes = _reader(data, root)
        img = fn.decoders.image(enc, device="mixed" if device == "gpu" else "cpu")
        kw = dict(OP_DEMO_ARGS.get(op, {}))
        if schema.kind == "box":
            return img, call(boxes, **kw)
        if schema.inputs[1] >= 2:
            out = call(img, boxes, **kw)
            return (out[0], out[1]) if isinstance(out, tuple) else (out, boxes)
        return call(img, **kw), boxes

    return one_op()


def _reader(data, root):
    from detaug import fn

    if data == "voc":
        return fn.readers.voc(root=root, classes=voc_classes(root), random_shuffle=True)
    ann, images = coco_files(root)
    return fn.readers.coco(annotations_file=ann, file_root=images, random_shuffle=True)


# ---- the demo -----------------------------------------------------------------------------------
def run_demo(args) -> dict:
    """Time ``args.batches`` batches, then run untimed batches until the grid's
    ``args.grid ** 2`` cells are filled (going round the epoch as often as that takes)."""
    root = find_sample_root(args.data, args.root)
    device = pick_device(args.device)
    if getattr(args, "op", None):
        pipe = op_pipeline(args.data, root, args.op, device, args.batch_size, args.seed)
    else:
        pipe = demo_pipeline(args.data, root, device, args.batch_size, args.seed)
    pipe.build()
    want = args.grid * args.grid
    images, targets, n, dt, runs = [], [], 0, 0.0, 0
    while runs < args.batches or len(images) < want:
        t0 = time.perf_counter()
        img, boxes = pipe.run()  # a reader's run() goes round into the next epoch
        if pipe.last_event is not None:
            pipe.last_event.synchronize()
        if runs < args.batches:
            dt += time.perf_counter() - t0
            n += len(img)
        runs += 1
        if len(images) < want:  # host copies for drawing, outside the timed work
            _check_drawable(args, img, boxes)
            images.extend(to_host(a) for a in list(img.data)[:want - len(images)])
            targets.extend(boxes.per_sample()[:want - len(targets)])
    class_names = pipe.class_names  # the reader's Dataset: the annotations are read once
    grid = draw_grid(images, targets, class_names, args.grid, args.cell, rows=args.grid)
    grid.save(args.out)
    pipe.close()
    return {"root": root, "device": device, "images": n, "seconds": dt, "out": args.out,
            "grid": grid.size, "records": pipe.epoch_size(), "classes": len(class_names),
            "threads": pipe.num_threads}


def _check_drawable(args, img, boxes):
    from ..core.batch import BoxBatch

    data = list(img.data) if hasattr(img, "data") else []
    if not data or data[0].dtype != "uint8" or not isinstance(boxes, BoxBatch):
        raise ValueError(f"--op {args.op}: its output is not uint8 images with boxes (xyxy), "
                         "which the grid draws")


def package_version() -> str:
    """The installed distribution's version (importlib.metadata), else ``detaug.__version__``."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("detaug")
    except PackageNotFoundError:
        import detaug

        return getattr(detaug, "__version__", "unknown")


def _parser():
    p = argparse.ArgumentParser(prog="detaug", description="detaug: data loading and box-aware "
                                "augmentation for object detection")
    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}",
                   help="print detaug's version and exit")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run a detection pipeline on the sample data, print its "
                       "throughput and write a grid of augmented images with their boxes")
    d.add_argument("--data", choices=sorted(SAMPLES), default="voc",
                   help="sample data set: voc (Pascal VOC XML) or coco (COCO JSON) (default voc)")
    d.add_argument("--device", choices=("cpu", "gpu", "auto"), default="auto",
                   help="where the pipeline runs: cpu, gpu (mixed decode, device ops), or auto "
                        "(the GPU where one is present and cupy imports, else the CPU) (default auto)")
    d.add_argument("--batches", type=int, default=4, help="batches to run (default 4)")
    d.add_argument("--batch-size", type=int, default=8, help="images per batch (default 8)")
    d.add_argument("--out", default="demo.png", help="PNG grid to write (default demo.png)")
    d.add_argument("--root", default=None,
                   help="the sample folder (default: the repository's examples/data/<voc-mini|"
                        "coco-mini>, else a generated sample of shapes in ~/.cache/detaug)")
    d.add_argument("--grid", type=int, default=4, help="grid is N x N images (default 4)")
    d.add_argument("--cell", type=int, default=256, help="pixels per grid cell (default 256)")
    d.add_argument("--op", default=None,
                   help="show one op with its defaults (fn.<op>: mosaic, mixup, affine, hsv, ...) "
                        "on the sample instead of the demo pipeline")
    d.add_argument("--seed", type=int, default=0,
                   help="the pipeline's random seed: the same seed draws the same augmentations "
                        "(default 0)")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.batches < 1 or args.batch_size < 1 or args.grid < 1 or args.cell < 16:
        print("detaug demo: --batches, --batch-size and --grid must be positive, --cell >= 16",
              file=sys.stderr)
        return 2
    try:
        r = run_demo(args)
    except (FileNotFoundError, RuntimeError, ValueError, SystemExit) as e:  # SystemExit: pick_device's;
        # ValueError: a bad data set (readers' DatasetError names the file and the fault)
        print(f"detaug demo: {e}", file=sys.stderr)
        return 1
    where = "gpu (mixed decode, device ops)" if r["device"] == "gpu" else \
        f"cpu ({r['threads']} threads, {cpu_warp()} warp)"
    print(f"detaug demo: {args.data} sample, {r['records']} images, {r['classes']} classes "
          f"({r['root']})")
    print(f"device: {where}")
    size = f"{SIZE}x{SIZE}" if not args.op else f"fn.{args.op}"
    print(f"{args.batches} batches x {args.batch_size} images ({size}) in "
          f"{r['seconds']:.2f} s: {r['images'] / r['seconds']:.1f} img/s")
    print(f"wrote {r['out']} ({args.grid}x{args.grid} grid, {r['grid'][0]}x{r['grid'][1]} px)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
