"""``detaug-convert``'s instance formats: YOLO segment / pose / OBB, DOTA, and COCO's shapes.

Which target holds which instance field, the readers and writers of those formats, and the
refusal (or ``--drop-masks``) where the target cannot hold what the source has.
"""
from __future__ import annotations

import os

from readers.errors import DatasetError

FORMATS = ("yolo-seg", "yolo-pose", "yolo-obb", "dota")
_TASK = {"yolo-seg": "segment", "yolo-pose": "pose", "yolo-obb": "obb"}
# the instance fields (readers/segments.py) each target holds
HELD = {"coco": {"polygons", "rle", "keypoints"}, "voc": {"rle"}, "yolo-seg": {"polygons"},
        "yolo-pose": {"keypoints"}, "yolo-obb": {"obb"}, "dota": {"obb"}}
_NAMES = {"polygons": "polygon masks", "rle": "bitmap masks", "keypoints": "keypoints",
          "obb": "oriented boxes"}


def reads(args) -> bool:
    """Whether the source is read by :func:`read`: an instance format, or COCO going to one
    (COCO to COCO, VOC, YOLO or TFRecord keeps the plain reader, whose extras carry the
    segmentation unchanged)."""
    return args.src_format in FORMATS or (args.src_format == "coco"
                                          and args.dst_format in FORMATS)


def check_source(args, src):
    """The source folder of an instance format (real path); DatasetError where it is none."""
    if not os.path.isdir(src):
        raise DatasetError(args.src, f"not a folder: --from {args.src_format} needs the "
                                     "dataset folder")
    if args.split and args.src_format in _TASK:
        folder = os.path.join(src, "images", args.split)
        if not os.path.isdir(folder):
            raise DatasetError(folder, f"--split {args.split}: no such folder")
    return src


def read(args, on_error, progress, classes, image_root):
    """The source's Dataset; ``classes`` is ``--classes`` read (convert.class_list) and
    ``image_root`` a COCO source's image folder."""
    if args.src_format == "coco":
        from readers.coco_instances import read_coco_instances

        categories = None if classes in (None, "discover") else \
            [int(c) if c.isdigit() else c for c in classes]
        return read_coco_instances(args.src, image_root, categories=categories, on_error=on_error)
    if args.src_format == "dota":
        from readers.dota import read_dota

        return read_dota(args.src, classes=classes, on_error=on_error, progress=progress)
    from readers.yolo_tasks import read_yolo_task

    return read_yolo_task(args.src, _TASK[args.src_format], split=args.split,
                          classes=None if classes in (None, "discover") else classes,
                          on_error=on_error, progress=progress)


def write(dataset, args, dst, common):
    if args.dst_format == "dota":
        from readers.dota import write_dota

        return write_dota(dataset, dst, **common)
    from readers.yolo_tasks import write_yolo_task

    return write_yolo_task(dataset, dst, _TASK[args.dst_format], split=args.split,
                           drop_shapes=args.drop_masks, **common)


def check_held(dataset, args) -> list:
    """Refuse a source whose instance fields the target cannot hold (DatasetError naming the
    source, what and how many), unless ``--drop-masks``: then take them off the records and
    return the summary lines that count them.

    Bitmap masks are the ``rle`` field (COCO RLE read by an instance reader, a VOC source's
    ``SegmentationObject`` masks), refused as every instance field is, or, for a COCO source
    read by the plain reader (COCO to COCO, VOC, YOLO or TFRecord: box targets), the RLE
    objects among the ``segmentation`` extras: written by COCO, and by the box targets counted
    in the returned lines (not written), as a COCO file's polygons are; VOC holds the field
    (its SegmentationObject PNGs, where no two masks overlap), not a COCO file's RLE (a crowd's
    mask lies over its people's). A VOC source's masks written are counted too."""
    held = HELD.get(args.dst_format, set())
    found = {}
    for record in dataset.records:
        for name in _NAMES:
            values = record.fields.get(name)
            if values is not None and name not in held:
                found[name] = found.get(name, 0) + _count(name, values)
    crowd_rle = 0 if args.dst_format == "coco" else sum(len(_rle_extras(r))
                                                        for r in dataset.records)
    found = {k: v for k, v in found.items() if v}
    lines = _masks_written(dataset, args) if "rle" in held else []
    if crowd_rle:  # a box target: the boxes written, their COCO RLE masks counted
        lines.append(f"bitmap masks (COCO RLE) not written ({args.dst_format} holds boxes): "
                     f"{crowd_rle} boxes")
    if not found:
        return lines
    what = ", ".join(f"{_NAMES[k]} of {v} boxes" for k, v in found.items())
    if not args.drop_masks:
        raise DatasetError(args.src, f"{args.dst_format} cannot hold the {what}: give "
                                     "--drop-masks to write the boxes without them, or choose a "
                                     "target that holds them")
    for record in dataset.records:
        for name in found:
            record.fields.pop(name, None)
    return lines + [f"{_NAMES[k]} left out (--drop-masks): {v} boxes" for k, v in found.items()]


def _rle_extras(record) -> set:
    """The boxes whose ``segmentation`` extra (a plain COCO read) is an RLE object."""
    segs = record.extra.get("segmentation")
    return {i for i, s in enumerate(segs) if isinstance(s, dict)} if segs else set()


def _masks_written(dataset, args) -> list:
    """The summary line of a VOC source's object masks written (COCO: as RLE)."""
    if args.src_format != "voc":
        return []
    n = sum(_count("rle", r.fields["rle"]) for r in dataset.records if "rle" in r.fields)
    how = "as COCO RLE" if args.dst_format == "coco" else "as SegmentationObject PNGs"
    return [f"object masks (SegmentationObject) written {how}: {n} boxes"] if n else []


def _count(name, values):
    import numpy as np

    if name == "keypoints":
        return int(np.count_nonzero((np.asarray(values)[..., 2] > 0).any(axis=-1)))
    if name == "obb":
        return len(values)
    return int(np.count_nonzero(values.counts))
