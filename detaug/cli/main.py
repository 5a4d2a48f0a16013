"""``detaug`` command line: ``detaug demo`` runs a detection pipeline on the repository's sample
data, prints its throughput and writes a grid of augmented images with their boxes drawn.

    detaug demo [--data voc|coco] [--device cpu|gpu|auto] [--batches N] [--out demo.png]
    python -m detaug demo ...
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from ..backend import cpu_warp, pick_device, to_host

SAMPLES = {"voc": "voc-mini", "coco": "coco-mini"}
SIZE = 512  # the demo pipeline's output canvas (square)

# distinct, saturated colours; class k is drawn in PALETTE[k % len(PALETTE)]
PALETTE = ((230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
           (145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212),
           (0, 128, 128), (220, 190, 255), (170, 110, 40), (255, 250, 200), (128, 0, 0),
           (170, 255, 195), (128, 128, 0), (255, 215, 180), (0, 0, 128), (128, 128, 128))


def class_color(label: int) -> tuple:
    return PALETTE[int(label) % len(PALETTE)]


# ---- data ---------------------------------------------------------------------------------------
def find_sample_root(data: str, root: str | None = None) -> str:
    """The sample data set's folder: ``root`` if given, else ``examples/data/<voc-mini|coco-mini>``
    in the nearest folder above the detaug package that has one."""
    if root is not None:
        if not os.path.isdir(root):
            raise FileNotFoundError(f"--root {root}: no such folder")
        return os.path.abspath(root)
    here = os.path.dirname(os.path.abspath(__file__))
    while True:
        cand = os.path.join(here, "examples", "data", SAMPLES[data])
        if os.path.isdir(cand):
            return cand
        parent = os.path.dirname(here)
        if parent == here:
            raise FileNotFoundError(f"cannot find examples/data/{SAMPLES[data]} above "
                                    f"{os.path.dirname(os.path.abspath(__file__))}: pass --root")
        here = parent


def coco_files(root: str) -> tuple:
    """(annotations JSON, image folder) of a COCO sample folder."""
    return os.path.join(root, "annotations.json"), os.path.join(root, "images")


def load_dataset(data: str, root: str):
    """The readers' Dataset (records and class names) that the pipeline's reader op reads."""
    if data == "voc":
        from readers.voc import read_voc

        return read_voc(root)
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
            enc, boxes = fn.readers.voc(root=root, random_shuffle=True)
        else:
            ann, images = coco_files(root)
            enc, boxes = fn.readers.coco(annotations_file=ann, file_root=images, random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed" if device == "gpu" else "cpu")
        img, boxes = fn.random_iou_crop(img, boxes)
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        img, boxes = fn.rotate(img, boxes, angle=fn.random.uniform(range=(-10, 10)))
        img = fn.hsv(img, hue=fn.random.uniform(range=(-15, 15)),
                     saturation=fn.random.uniform(range=(0.7, 1.3)))
        img = fn.brightness_contrast(img, brightness=fn.random.uniform(range=(0.8, 1.2)),
                                     contrast=fn.random.uniform(range=(0.8, 1.2)))
        img, boxes = fn.resize(img, boxes, size=(SIZE, SIZE))
        return img, fn.prune_boxes(boxes, min_size=2)

    return detection()


# ---- drawing ------------------------------------------------------------------------------------
def draw_sample(image: np.ndarray, target: dict, class_names, cell: int):
    """A ``cell`` x ``cell`` Pillow image of one sample, its boxes and class names drawn.
    Box corners are scaled by ``cell / W``; the rectangle's outline runs through the pixels
    at ``round(corner * scale)``."""
    from PIL import Image, ImageDraw

    im = Image.fromarray(np.ascontiguousarray(image)).convert("RGB")
    scale = cell / im.width
    if im.size != (cell, cell):
        im = im.resize((cell, cell), Image.BILINEAR)
    draw = ImageDraw.Draw(im)
    for box, label in zip(np.asarray(target["boxes"]), np.asarray(target["labels"])):
        x0, y0, x1, y1 = (int(round(float(v) * scale)) for v in box)
        color = class_color(label)
        draw.rectangle([x0, y0, x1 - 1, y1 - 1], outline=color, width=2)
        name = class_names[label] if 0 <= label < len(class_names) else str(int(label))
        tw = int(draw.textlength(name))
        ty = y0 - 12 if y0 >= 12 else y0 + 2
        draw.rectangle([x0, ty, x0 + tw + 3, ty + 11], fill=color)
        draw.text((x0 + 2, ty), name, fill=(0, 0, 0))
    return im


def render_grid(images, targets, class_names, cols: int = 4, cell: int = 256):
    """A grid of ``cols`` columns; sample k sits in cell (k // cols, k % cols)."""
    from PIL import Image

    rows = -(-len(images) // cols)
    grid = Image.new("RGB", (cols * cell, rows * cell), (0, 0, 0))
    for k, (img, tgt) in enumerate(zip(images, targets)):
        grid.paste(draw_sample(img, tgt, class_names, cell), ((k % cols) * cell, (k // cols) * cell))
    return grid


# ---- the demo -----------------------------------------------------------------------------------
def run_demo(args) -> dict:
    root = find_sample_root(args.data, args.root)
    device = pick_device(args.device)
    pipe = demo_pipeline(args.data, root, device, args.batch_size, args.seed)
    pipe.build()
    want = args.grid * args.grid
    images, targets, n, dt = [], [], 0, 0.0
    for _ in range(args.batches):
        t0 = time.perf_counter()
        try:
            img, boxes = pipe.run()
        except StopIteration:  # more batches than the sample set holds: go round again
            pipe.reset()
            img, boxes = pipe.run()
        if pipe.last_event is not None:
            pipe.last_event.synchronize()
        dt += time.perf_counter() - t0
        n += len(img)
        if len(images) < want:  # host copies for drawing, outside the timed work
            images.extend(to_host(a) for a in list(img.data)[:want - len(images)])
            targets.extend(boxes.per_sample()[:want - len(targets)])
    class_names = pipe.class_names  # the reader's Dataset: the annotations are read once
    grid = render_grid(images, targets, class_names, args.grid, args.cell)
    grid.save(args.out)
    pipe.close()
    return {"root": root, "device": device, "images": n, "seconds": dt, "out": args.out,
            "grid": grid.size, "records": pipe.epoch_size(), "classes": len(class_names),
            "threads": pipe.num_threads}


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
    d.add_argument("--root", default=None, help="the sample folder (default: examples/data/...)")
    d.add_argument("--grid", type=int, default=4, help="grid is N x N images (default 4)")
    d.add_argument("--cell", type=int, default=256, help="pixels per grid cell (default 256)")
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
    except (FileNotFoundError, RuntimeError, SystemExit) as e:  # SystemExit: pick_device's
        print(f"detaug demo: {e}", file=sys.stderr)
        return 1
    where = "gpu (mixed decode, device ops)" if r["device"] == "gpu" else \
        f"cpu ({r['threads']} threads, {cpu_warp()} warp)"
    print(f"detaug demo: {args.data} sample, {r['records']} images, {r['classes']} classes "
          f"({r['root']})")
    print(f"device: {where}")
    print(f"{args.batches} batches x {args.batch_size} images ({SIZE}x{SIZE}) in "
          f"{r['seconds']:.2f} s: {r['images'] / r['seconds']:.1f} img/s")
    print(f"wrote {r['out']} ({args.grid}x{args.grid} grid, {r['grid'][0]}x{r['grid'][1]} px)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
