"""``detaug-convert``: convert a detection dataset among COCO, Pascal VOC, YOLO and TFRecord.

    detaug-convert SRC DST [--from voc] --to coco [--split trainval] [--classes a,b | discover]
                   [--image-root DIR] [--skip-bad] [--link] [--overwrite] [--dry-run]
                   [--skip-crowd] [--skip-difficult] [--num-shards N] [--prefix NAME]
                   [--progress-interval SECONDS] [--version]

For COCO, SRC is the annotations JSON (images under ``--image-root``, default ``images/``
beside the JSON, else the JSON's folder) and DST is a folder that receives
``annotations.json`` and ``images/``. For VOC and YOLO, SRC and DST are dataset folders. A VOC
source with no ``--classes`` uses its ``classes.txt`` (as write_voc leaves) when there is one,
else the 20 standard classes.

Instance shapes: ``yolo-seg``, ``yolo-pose`` and ``yolo-obb`` are YOLO folders of
Ultralytics' segment, pose and oriented-box labels (pose: ``kpt_shape`` / ``flip_idx`` in
``data.yaml``), ``dota`` a DOTA folder (``images/``, ``labelTxt/``, its 15 classes unless
``--classes``); a COCO source read for one of them (or from one to COCO) keeps its polygons, RLE
masks and keypoints. A VOC source with ``SegmentationObject/`` has each object's mask read
from its PNG (a bad box is then an error even with ``--skip-bad``: the PNG's indices follow
the XML's objects), written to COCO as RLE, to VOC as SegmentationObject PNGs again. Bitmap
masks (COCO RLE, crowds' among them; VOC's) go to no other target. Where the target cannot hold the source's masks, keypoints or oriented boxes
the run is refused, naming what and how many, unless ``--drop-masks`` (or ``--skip-crowd``,
for crowds' masks); what it leaves out is counted in the summary. An instance of several polygons goes to
``yolo-seg`` as one, merged as Ultralytics' converter merges it (``merge_multi_segment``;
counted in the summary: not round-trip exact).

TFRecords use the Object Detection API layout (``readers.tfrecord_od``): SRC is a file, a glob
(quoted) or a folder of ``*.tfrecord`` files, its classes from ``--classes`` (a label map
``.pbtxt``) or the ``label_map.pbtxt`` beside the files; DST is a folder that receives
``<prefix>-00000-of-0000N.tfrecord`` shards (``--num-shards``, records dealt to the shards in
turn; ``--prefix`` defaults to ``--split`` or ``train``) and ``label_map.pbtxt``. Images
inside TFRecords are written out unchanged (to a temporary folder, then copied or linked).

Data safety: the source is never opened for writing; DST may not be the source, inside it or
around it, nor hold, be or lie in any folder or file the source reads, links resolved
(a VOC ``JPEGImages`` linking into DST is refused); a non-empty DST is refused
unless ``--overwrite``; the dataset is written into a temporary folder beside DST and moved
into place only when complete (with ``--overwrite``, on Linux, swapped with the old content in
one atomic step, the old content removed after; elsewhere, set aside first and, after a crash
between the two moves, put back by the next run), so a failed or interrupted run leaves DST as
it was. Hidden folders that killed runs left beside DST are removed by the next run, which
says so. ``--dry-run`` prints the summary and writes nothing (not even DST's parent folders).
Image sizes are checked against the image headers (header only); crowd and difficult boxes are
kept unless ``--skip-crowd`` / ``--skip-difficult``, and counted either way. Every user
mistake is one line on stderr and exit status 2.

A summary at the end (stdout) names every count: images, boxes, classes, skipped items and
why, boxes clipped, the largest rounding shift, and what the target format could not hold.
Progress goes to stderr: a line redrawn in place on a terminal, else a plain line every
``--progress-interval`` seconds (default 10), each with the rate and the time left.

Imports ``readers`` and, from detaug, only the CLI's progress line and version (no engine
module of its own).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import textwrap

from readers.checks import check_image_headers, count_flagged, drop_flagged
from readers.coco import read_coco
from readers.errors import DatasetError
from readers.voc import read_voc, read_voc_classes
from readers.writers import class_name_fault, write_coco, write_voc, write_yolo
from readers.yolo import read_yolo

from . import detect, instance_formats
from .overlap import Overlap, check_overlap, read_paths, source_folders
from .place import place, recover, staging_folder
from .progress import Progress

FORMATS = ("coco", "voc", "yolo", "tfrecord") + instance_formats.FORMATS
# Lines of skipped items printed; beyond this the full list goes to DST/convert_skipped.txt.
MAX_PRINTED_SKIPS = 50


class _Parser(argparse.ArgumentParser):
    """argparse whose usage mistakes are one line (``detaug-convert: error: ...``), exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


class UsageError(Exception):
    """A user mistake in the command line (bad path, unsafe destination, unknown split)."""


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``detaug-convert`` (every option with its help text)."""
    p = _Parser(prog="detaug-convert", description=_plain(__doc__.split("\n\n")[0]),
                epilog=help_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", help="source: COCO annotations JSON, VOC / YOLO folder, or TFRecord "
                               "file / glob / folder")
    p.add_argument("dst", help="destination folder (must not exist or be empty, unless "
                               "--overwrite; never the source, inside it, or around it)")
    p.add_argument("--from", dest="src_format", choices=FORMATS, default=None,
                   metavar="FORMAT",
                   help="source format: coco (annotations JSON), voc (Pascal VOC folder), yolo "
                        "(YOLO folder), tfrecord (TF Object Detection API records), or the "
                        "instance formats yolo-seg, yolo-pose, yolo-obb, dota; left "
                        "out, told from the source's layout (Annotations/, labels/, a .json "
                        "file, ...), and said")
    p.add_argument("--to", dest="dst_format", choices=FORMATS, required=True,
                   metavar="FORMAT",
                   help="target format, the same choices: coco (annotations.json and images/), "
                        "voc, yolo, tfrecord (shards and label_map.pbtxt), yolo-seg, yolo-pose, "
                        "yolo-obb or dota")
    p.add_argument("--image-root", help="COCO source: folder the file_name entries are under")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip bad items with a warning (on_error='skip') instead of stopping")
    p.add_argument("--split", help="VOC: ImageSets/Main/<split>.txt to read and write "
                                   "(default trainval); YOLO: images/<split>/ sub-folder")
    p.add_argument("--classes", help="comma-separated names, a file with one name a line, or "
                                     "'discover' (VOC); COCO: categories to keep")
    p.add_argument("--link", action="store_true", help="hard-link images instead of copying")
    p.add_argument("--skip-crowd", action="store_true",
                   help="leave out crowd boxes (iscrowd=1); by default they are written as "
                        "boxes (VOC: difficult=1) and counted in the summary")
    p.add_argument("--skip-difficult", action="store_true",
                   help="leave out difficult boxes (difficult=1); by default they are written "
                        "and counted in the summary")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the content of a non-empty destination (only once the new "
                        "dataset is complete)")
    p.add_argument("--num-shards", type=int, default=1,
                   help="TFRecord target: number of shard files (default 1)")
    p.add_argument("--prefix", help="TFRecord target: shard file prefix (default: --split, "
                                    "else 'train')")
    p.add_argument("--drop-masks", action="store_true",
                   help="where the target cannot hold the source's polygon / bitmap masks, "
                        "keypoints or oriented boxes, write the boxes without them (counted in "
                        "the summary) instead of refusing")
    p.add_argument("--dry-run", action="store_true",
                   help="read, check and print the summary; write nothing")
    p.add_argument("--progress-interval", type=float, default=10.0, metavar="SECONDS",
                   help="seconds between progress lines on stderr when it is not a terminal "
                        "(a log; default 10); a terminal gets one redrawn line")
    from .main import package_version

    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}",
                   help="print detaug's version and exit")
    return p


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def _plain(text: str, width: int = 79) -> str:
    """``text`` without reST markup, its paragraphs refilled to ``width``."""
    text = text.replace("``", "").replace(":class:", "").replace("`", "")
    return "\n\n".join(textwrap.fill(" ".join(par.split()), width, break_on_hyphens=False)
                       for par in text.split("\n\n"))


def help_epilog() -> str:
    """The module docstring's paragraphs on layouts, data safety and output, as plain text for
    --help (the usage block and the note on imports left out)."""
    paragraphs = __doc__.strip().split("\n\n")[2:-1]
    return _plain("\n\n".join(paragraphs))


def class_list(spec):
    """``None``, ``"discover"``, a file of names (one a line), or comma-separated names."""
    if spec is None or spec == "discover":
        return spec
    if os.path.isfile(spec):
        with open(spec, encoding="utf-8") as f:
            return [line.strip() for line in f if line.strip()]
    return [name.strip() for name in spec.split(",") if name.strip()]


def voc_class_list(args):
    """A VOC source's classes: ``--classes`` (a class list file, read by
    ``readers.read_voc_classes``; comma-separated names; or ``discover``), else the source's
    ``classes.txt`` (as write_voc leaves) where there is one, else None (the 20 standard
    classes). A class list file's faults are a DatasetError naming it; names given twice on
    the command line are a UsageError (VOC objects name their class)."""
    spec = args.classes
    if spec is None:
        sidecar = os.path.join(args.src, "classes.txt")
        return read_voc_classes(sidecar) if os.path.isfile(sidecar) else None
    if spec != "discover" and os.path.isfile(spec):
        return read_voc_classes(spec)
    classes = class_list(spec)
    if isinstance(classes, list) and len(set(classes)) < len(classes):
        twice = sorted({c for c in classes if classes.count(c) > 1})
        raise UsageError(f"VOC classes {twice} are listed twice (VOC names classes by name)")
    return classes


def coco_image_root(annotations_file, image_root=None):
    """``--image-root``, else ``images/`` beside the JSON when it exists, else the JSON's folder."""
    if image_root:
        return image_root
    folder = os.path.dirname(os.path.abspath(annotations_file))
    beside = os.path.join(folder, "images")
    return beside if os.path.isdir(beside) else folder


def check_source(args):
    """The source's folders (real paths): the dataset folder, or for COCO the JSON's folder and
    the image root. A missing source, or a file where a folder is needed (or the reverse), or a
    ``--split`` that names nothing, is a UsageError."""
    src = os.path.abspath(args.src)
    if args.num_shards < 1:
        raise UsageError(f"--num-shards {args.num_shards}: needs at least 1")
    if not args.progress_interval >= 0:  # also NaN
        raise UsageError(f"--progress-interval {args.progress_interval}: needs 0 or more seconds")
    if not os.path.exists(src) and args.src_format != "tfrecord":
        raise UsageError(f"source {args.src} does not exist")
    if args.src_format == "coco":
        if os.path.isdir(src):
            raise UsageError(f"source {args.src} is a folder: --from coco needs the annotations "
                             f"JSON file (e.g. {os.path.join(args.src, 'annotations.json')})")
        image_root = coco_image_root(src, args.image_root)
        if not os.path.isdir(image_root):
            raise UsageError(f"image root {image_root} is not a folder")
        roots = [os.path.dirname(src), image_root]
    elif args.src_format in instance_formats.FORMATS:
        roots = [instance_formats.check_source(args, src)]
    elif args.src_format == "tfrecord":
        from readers.tfrecord_od import tfrecord_files

        try:
            files = tfrecord_files(args.src)
        except DatasetError as exc:
            raise UsageError(f"source {args.src}: {exc.reason}") from None
        roots = sorted({os.path.dirname(f) for f in files})
    else:
        if not os.path.isdir(src):
            raise UsageError(f"source {args.src} is not a folder: --from {args.src_format} "
                             "needs the dataset folder")
        roots = [src]
        if args.split and args.src_format == "voc":
            split_file = os.path.join(src, "ImageSets", "Main", f"{args.split}.txt")
            if not os.path.isfile(split_file):
                raise UsageError(f"--split {args.split}: no file {split_file}")
        if args.split and args.src_format == "yolo":
            folder = os.path.join(src, "images", args.split)
            if not os.path.isdir(folder):
                raise UsageError(f"--split {args.split}: no folder {folder}")
    return [os.path.realpath(r) for r in roots]


def _inside(path, folder):
    return path.startswith(folder.rstrip(os.sep) + os.sep)


def check_destination(args, source_roots):
    """The destination's real path, after refusing every unsafe one: the source itself, a
    folder inside the source or around it, a file, a non-empty folder without --overwrite."""
    dst = os.path.realpath(os.path.abspath(args.dst))
    for root in source_roots:
        if dst == root:
            raise UsageError(f"destination {args.dst} is the source folder {root}: "
                             "choose another folder (the source is never written)")
        if _inside(dst, root):
            raise UsageError(f"destination {args.dst} is inside the source folder {root}: "
                             "choose a folder outside it")
        if _inside(root, dst):
            raise UsageError(f"source folder {root} is inside the destination {args.dst}: "
                             "choose a folder that does not hold the source")
    if os.path.exists(dst) and not os.path.isdir(dst):
        raise UsageError(f"destination {args.dst} is a file, not a folder")
    if os.path.isdir(dst) and os.listdir(dst) and not args.overwrite:
        raise UsageError(f"destination {args.dst} is not empty ({len(os.listdir(dst))} "
                         "entries): give --overwrite to replace its content, or choose an "
                         "empty folder")
    return dst


def _progress(label, args):
    """The progress line for ``label`` on stderr, at ``--progress-interval`` in a log."""
    return Progress(label, sys.stderr, interval=args.progress_interval)


def read(args):
    on_error = "skip" if args.skip_bad else "raise"
    if instance_formats.reads(args):
        root = coco_image_root(args.src, args.image_root) if args.src_format == "coco" else None
        return instance_formats.read(args, on_error, _progress("reading", args),
                                     class_list(args.classes), root)
    if args.src_format == "coco":
        classes = class_list(args.classes)
        if classes == "discover":
            classes = None
        categories = None if classes is None else [int(c) if c.isdigit() else c for c in classes]
        return read_coco(args.src, coco_image_root(args.src, args.image_root),
                         categories=categories, on_error=on_error)
    if args.src_format == "tfrecord":
        from readers.tfrecord_od import LABEL_MAP_FILE, read_tfrecord, tfrecord_files

        label_map = args.classes if args.classes not in (None, "discover") else None
        folders = {os.path.dirname(f) for f in tfrecord_files(args.src)}
        sidecar = os.path.join(folders.pop(), LABEL_MAP_FILE) if len(folders) == 1 else ""
        if label_map is None and args.classes is None and os.path.isfile(sidecar):
            label_map = sidecar
        return read_tfrecord(args.src, label_map=label_map, on_error=on_error,
                             progress=_progress("reading", args))
    if args.src_format == "voc":
        options = {"split": args.split or "trainval", "classes": voc_class_list(args),
                   "on_error": on_error, "progress": _progress("reading", args)}
        if os.path.isdir(os.path.join(args.src, "SegmentationObject")):
            from readers.voc_masks import read_voc_instances

            return read_voc_instances(args.src, **options)  # each object's mask: ``rle``
        return read_voc(args.src, **options)
    classes = class_list(args.classes)
    return read_yolo(args.src, split=args.split, on_error=on_error,
                     progress=_progress("reading", args),
                     classes=None if classes in (None, "discover") else classes)


def write(dataset, args, dst, dry_run=False):
    """Write ``dataset`` under the folder ``dst`` (the temporary folder of :func:`main`)."""
    progress = None if dry_run else _progress("writing", args)
    common = {"link": args.link, "progress": progress, "dry_run": dry_run}
    if args.dst_format in instance_formats.FORMATS:
        return instance_formats.write(dataset, args, dst, common)
    if args.dst_format == "coco":
        return write_coco(dataset, os.path.join(dst, "annotations.json"),
                          images_dir=os.path.join(dst, "images"), **common)
    if args.dst_format == "tfrecord":
        from readers.tfrecord_od import write_tfrecord

        return write_tfrecord(dataset, dst, prefix=args.prefix or args.split or "train",
                              num_shards=args.num_shards, progress=progress, dry_run=dry_run)
    if args.dst_format == "voc":
        return write_voc(dataset, dst, split=args.split or "trainval", **common)
    return write_yolo(dataset, dst, split=args.split, **common)


def _class_source(args):
    """Where the source's class names come from: the class file of a VOC or YOLO folder when
    it has one (and no --classes), else the source itself."""
    if args.src_format in ("voc", "yolo") and args.classes in (None, "discover"):
        sidecar = os.path.join(args.src, "classes.txt")
        if os.path.isfile(sidecar):
            return sidecar
    return args.src


def apply_policies(dataset, args):
    """Between reading and writing: check image sizes against the headers (``--skip-bad``
    skips a faulty image, else it is an error), then the crowd / difficult options. Returns
    summary lines for what was kept or emptied."""
    fault = class_name_fault(dataset, args.dst_format)
    if fault is not None:  # named here by the source, before any image is opened
        fix = "rename it in the source, or convert to COCO" if dataset.class_names else \
              "convert to COCO or YOLO"
        raise DatasetError(_class_source(args), f"{fault} ({fix})")
    check_image_headers(dataset, "skip" if args.skip_bad else "raise")
    lines = []
    emptied = 0
    for name, flag, what in (("iscrowd", args.skip_crowd, "crowd boxes (iscrowd=1)"),
                             ("difficult", args.skip_difficult, "difficult boxes")):
        option = "--" + ("skip-crowd" if name == "iscrowd" else "skip-difficult")
        if flag:
            emptied += drop_flagged(dataset, name, f"{what} ({option})")
        elif count_flagged(dataset, name):
            lines.append(f"{what}: {count_flagged(dataset, name)} written as boxes "
                         f"({option} leaves them out)")
    if dataset.emptied:
        lines.append(f"images left with no boxes, every box of theirs bad and skipped: "
                     f"{dataset.emptied} (written without boxes)")
    if emptied:
        lines.append(f"images left with no boxes by --skip-crowd / --skip-difficult: {emptied} "
                     "(written without boxes)")
    # after the options: a crowd left out by --skip-crowd takes its RLE mask with it
    return instance_formats.check_held(dataset, args) + lines


def summary(dataset, report, args, folder=None, policy_lines=()):
    """The end-of-run lines: what was read, skipped, dropped, clipped, written and not held.
    The full skip list goes to ``folder/convert_skipped.txt`` when it is long (not in a dry
    run, where ``folder`` is None)."""
    boxes = sum(r.num_boxes for r in dataset.records)
    lines = [f"read {len(dataset)} images, {boxes} boxes, {dataset.num_classes} classes "
             f"from {args.src} ({args.src_format})"]
    if dataset.skipped:
        lines.append(f"skipped {len(dataset.skipped)} bad items:")
        lines += [f"  {file}: {why}" for file, why in dataset.skipped[:MAX_PRINTED_SKIPS]]
        if len(dataset.skipped) > MAX_PRINTED_SKIPS:
            more = len(dataset.skipped) - MAX_PRINTED_SKIPS
            if folder is None:
                lines.append(f"  ... and {more} more (dry run: the full list is not written)")
            else:
                with open(os.path.join(folder, "convert_skipped.txt"), "w", encoding="utf-8") as f:
                    f.writelines(f"{file}: {why}\n" for file, why in dataset.skipped)
                lines.append(f"  ... and {more} more, all listed in "
                             f"{os.path.join(args.dst, 'convert_skipped.txt')}")
    lines += [f"dropped by option: {what}: {n}" for what, n in dataset.dropped.items()]
    lines += list(policy_lines)
    lines.append(f"boxes clipped to their image: {dataset.clipped}")
    return lines + report.summary_lines()


def convert(args):
    """Clean up after killed runs into the destination, check, read, write into a temporary
    folder beside the destination, then move it into place; return the summary lines.
    Nothing is left at the destination unless complete. A dry run creates nothing: not the
    destination's parent folders, nor anything beside it (a TFRecord source's images are
    unpacked under the system's temporary folder, and removed)."""
    recovered = recover(os.path.realpath(os.path.abspath(args.dst)), args.dry_run)
    for line in recovered:
        print(f"detaug-convert: {line}", file=sys.stderr)
    roots = check_source(args)
    dst = check_destination(args, roots)
    dataset = read(args)
    try:  # every path read, links resolved: the root-folder check above misses a link into DST
        extra = [(f, os.path.realpath(f)) for f in (args.classes,)
                 if f and f != "discover" and os.path.isfile(f)]  # a class list file read
        masks = os.path.join(args.src, "SegmentationObject")
        if args.src_format == "voc" and os.path.isdir(masks):  # each object PNG read
            pngs = (os.path.join(masks, f"{r.image_id}.png") for r in dataset.records)
            extra += [(f, os.path.realpath(f)) for f in pngs if os.path.isfile(f)]
        check_overlap(args.dst, dst, source_folders(roots), read_paths(dataset) + extra)
    except Overlap as exc:
        raise UsageError(str(exc)) from None
    parent = os.path.dirname(dst)
    if not args.dry_run:
        os.makedirs(parent, exist_ok=True)
    staged, renamed = None, 0
    try:
        if args.src_format == "tfrecord":  # the writers and header checks need image files
            from readers.tfrecord_od import extract_images

            staged = tempfile.mkdtemp(prefix="detaug-convert-images-") if args.dry_run \
                else staging_folder(dst, "images")
            renamed = extract_images(dataset, staged)
            args.link = True  # staged copies: a hard link moves them at no cost
        return _convert(args, dst, dataset, parent, renamed)
    finally:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)


def _convert(args, dst, dataset, parent, renamed=0):
    policy = apply_policies(dataset, args)
    if renamed:
        policy.append(f"image file names used twice in the TFRecords: {renamed} given a "
                      "_<n> suffix")
    if args.dry_run:
        report = write(dataset, args, dst, dry_run=True)
        report.path = args.dst
        return summary(dataset, report, args, None, policy) + ["dry run: nothing was written"]
    tmp = staging_folder(dst, "convert")
    try:
        report = write(dataset, args, tmp)
        report.path = os.path.normpath(os.path.join(args.dst, os.path.relpath(report.path, tmp)))
        lines = summary(dataset, report, args, tmp, policy)
        place(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return lines


def _one_line(exc) -> str:
    return str(exc).replace("\r", "\\r").replace("\n", "\\n")


def main(argv=None) -> int:
    """Run the converter; return the exit status (0 done, 2 bad input, 130 interrupted).
    Every fault is one line on stderr (``detaug-convert: error: ...``), never a traceback."""
    args = parse_args(argv)
    try:
        if args.src_format is None:  # told from the layout, and said on stderr
            args.src_format = detect.choose_format(args.src, lambda m: print(m, file=sys.stderr))
        lines = convert(args)
    except (UsageError, DatasetError, detect.UndetectedFormat) as exc:  # one line, even where a file name has a break
        print(f"detaug-convert: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:
        print(f"detaug-convert: error: a file is not UTF-8 text ({_one_line(exc)})",
              file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"detaug-convert: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"detaug-convert: interrupted; {args.dst} left as it was", file=sys.stderr)
        return 130
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
