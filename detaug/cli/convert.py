"""``detaug-convert``: convert a detection dataset among COCO, Pascal VOC and YOLO.

    detaug-convert SRC DST --from voc --to coco [--split trainval] [--classes a,b | discover]
                   [--image-root DIR] [--skip-bad] [--link]

For COCO, SRC is the annotations JSON (images under ``--image-root``, default ``images/``
beside the JSON, else the JSON's folder) and DST is a folder that receives
``annotations.json`` and ``images/``. For VOC and YOLO, SRC and DST are dataset folders.
A VOC source with no ``--classes`` uses its ``classes.txt`` (as write_voc leaves) when there is
one, else the 20 standard classes. A summary at the end names every count: images, boxes, classes, skipped items and why, boxes
clipped, the largest rounding shift, and what the target format could not hold.
Imports only ``readers`` (no engine module).
"""
from __future__ import annotations

import argparse
import os
import sys

from readers.coco import read_coco
from readers.errors import DatasetError
from readers.voc import read_voc
from readers.writers import write_coco, write_voc, write_yolo
from readers.yolo import read_yolo

FORMATS = ("coco", "voc", "yolo")
# Lines of skipped items printed; beyond this the full list goes to DST/convert_skipped.txt.
MAX_PRINTED_SKIPS = 50


class Progress:
    """A ``\\r`` counter on stderr, every ``step`` items, when stderr is a terminal or the set
    is large (over 1000 items); ``callable(done, total)`` as the readers and writers expect."""

    def __init__(self, label: str, stream=None):
        self.label, self.stream, self.shown = label, stream or sys.stderr, False

    def __call__(self, done: int, total: int) -> None:
        if not (total > 1000 or self.stream.isatty()):
            return
        step = max(1, total // 100)
        if done % step == 0 or done == total:
            self.stream.write(f"\r{self.label}: {done}/{total}")
            self.shown = True
            if done == total:
                self.stream.write("\n")
            self.stream.flush()


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="detaug-convert", description=__doc__.split("\n\n")[0])
    p.add_argument("src", help="source: COCO annotations JSON, or VOC / YOLO folder")
    p.add_argument("dst", help="destination folder")
    p.add_argument("--from", dest="src_format", choices=FORMATS, required=True)
    p.add_argument("--to", dest="dst_format", choices=FORMATS, required=True)
    p.add_argument("--image-root", help="COCO source: folder the file_name entries are under")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip bad items with a warning (on_error='skip') instead of stopping")
    p.add_argument("--split", help="VOC: ImageSets/Main/<split>.txt to read and write "
                                   "(default trainval); YOLO: images/<split>/ sub-folder")
    p.add_argument("--classes", help="comma-separated names, a file with one name a line, or "
                                     "'discover' (VOC); COCO: categories to keep")
    p.add_argument("--link", action="store_true", help="hard-link images instead of copying")
    return p.parse_args(argv)


def class_list(spec):
    """``None``, ``"discover"``, a file of names (one a line), or comma-separated names."""
    if spec is None or spec == "discover":
        return spec
    if os.path.isfile(spec):
        with open(spec, encoding="utf-8") as f:
            return [line.strip() for line in f if line.strip()]
    return [name.strip() for name in spec.split(",") if name.strip()]


def coco_image_root(annotations_file, image_root=None):
    """``--image-root``, else ``images/`` beside the JSON when it exists, else the JSON's folder."""
    if image_root:
        return image_root
    folder = os.path.dirname(os.path.abspath(annotations_file))
    beside = os.path.join(folder, "images")
    return beside if os.path.isdir(beside) else folder


def read(args):
    on_error = "skip" if args.skip_bad else "raise"
    classes = class_list(args.classes)
    if args.src_format == "coco":
        if classes == "discover":
            classes = None
        categories = None if classes is None else [int(c) if c.isdigit() else c for c in classes]
        return read_coco(args.src, coco_image_root(args.src, args.image_root),
                         categories=categories, on_error=on_error)
    if args.src_format == "voc":
        sidecar = os.path.join(args.src, "classes.txt")  # written by write_voc
        if classes is None and os.path.isfile(sidecar):
            classes = class_list(sidecar)
        return read_voc(args.src, split=args.split or "trainval", classes=classes,
                        on_error=on_error, progress=Progress("reading"))
    return read_yolo(args.src, split=args.split, on_error=on_error, progress=Progress("reading"),
                     classes=None if classes in (None, "discover") else classes)


def write(dataset, args):
    progress = Progress("writing")
    if args.dst_format == "coco":
        return write_coco(dataset, os.path.join(args.dst, "annotations.json"),
                          images_dir=os.path.join(args.dst, "images"), link=args.link,
                          progress=progress)
    if args.dst_format == "voc":
        return write_voc(dataset, args.dst, split=args.split or "trainval", link=args.link,
                         progress=progress)
    return write_yolo(dataset, args.dst, split=args.split, link=args.link, progress=progress)


def summary(dataset, report, args):
    """The end-of-run lines: what was read, skipped, dropped, clipped, written and not held."""
    boxes = sum(r.num_boxes for r in dataset.records)
    lines = [f"read {len(dataset)} images, {boxes} boxes, {dataset.num_classes} classes "
             f"from {args.src} ({args.src_format})"]
    if dataset.skipped:
        lines.append(f"skipped {len(dataset.skipped)} bad items:")
        lines += [f"  {file}: {why}" for file, why in dataset.skipped[:MAX_PRINTED_SKIPS]]
        if len(dataset.skipped) > MAX_PRINTED_SKIPS:
            path = os.path.join(args.dst, "convert_skipped.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(f"{file}: {why}\n" for file, why in dataset.skipped)
            lines.append(f"  ... and {len(dataset.skipped) - MAX_PRINTED_SKIPS} more, "
                         f"all listed in {path}")
    lines += [f"dropped by option: {what}: {n}" for what, n in dataset.dropped.items()]
    lines.append(f"boxes clipped to their image: {dataset.clipped}")
    return lines + report.summary_lines()


def main(argv=None) -> int:
    """Run the converter; return the exit status (0 done, 2 bad input)."""
    args = parse_args(argv)
    try:
        dataset = read(args)
        os.makedirs(args.dst, exist_ok=True)
        report = write(dataset, args)
    except DatasetError as exc:
        print(f"detaug-convert: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summary(dataset, report, args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
