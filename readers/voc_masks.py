"""Pascal VOC instance masks: ``SegmentationObject/<id>.png`` as the ``rle`` field.

A SegmentationObject PNG is a palette image whose index at each pixel is the 1-based position
of the object (in the annotation XML's order) that covers it; 0 is background and 255 the
outline VOC leaves unlabelled (no object's mask: it is counted as neither). Only the images
of the segmentation sets have one; the others' boxes get no mask (zero runs).
"""
from __future__ import annotations

import os

import numpy as np

from ._common import ErrorSink, open_image
from .errors import DatasetError
from .records import trusted_record
from .segments import Ragged, rle_decode, rle_encode
from .voc import read_voc

VOID = 255


def read_voc_instances(root, split="trainval", classes=None, *, skip_difficult=False,
                       on_error="raise", tight_boxes=False, **options):
    """:func:`readers.voc.read_voc` with each object's mask from ``SegmentationObject``.

    The objects are matched to the PNG's indices by their order in the XML, so every object is
    read (a bad box is an error here whatever ``on_error``: a dropped object would shift the
    objects after it onto the wrong masks); ``skip_difficult`` then drops difficult objects
    with their masks.

    Args:
        root, split, classes, options: as read_voc (``check_images``, ``progress``).
        on_error: for the masks: a PNG that cannot be read, whose size is not the image's, or
            that holds an index past the image's object count is an error naming it, or under
            ``"skip"`` listed in ``Dataset.skipped`` and the image's boxes left without masks.
        tight_boxes: each record also gets the field ``tight_box`` (N,) uint8, all ones: a
            pipeline then makes each box the tight box of its mask after every transform (as
            ``readers.coco_instances.read_coco``'s).

    Returns:
        The Dataset, its records with the ``rle`` field (zero runs where there is no mask);
        ``Dataset.dropped`` counts the difficult objects dropped.
    """
    ds = read_voc(root, split, classes, on_error="raise", **options)
    sink = ErrorSink(on_error, "read_voc_instances")
    folder = os.path.join(ds.root, "SegmentationObject")
    records = []
    for record in ds.records:
        runs = [np.zeros(0, np.uint32)] * record.num_boxes
        png = os.path.join(folder, f"{record.image_id}.png")
        if os.path.isfile(png):
            try:
                runs = object_runs(png, record.num_boxes, record.width, record.height)
            except DatasetError as exc:
                sink.fault(exc.file, exc.reason)
        fields = dict(record.fields, rle=Ragged.from_lists(runs, np.uint32))
        if tight_boxes:
            fields["tight_box"] = np.ones(record.num_boxes, np.uint8)
        out = trusted_record(record.path, record.width, record.height, record.boxes,
                             record.labels, fields, record.image_id, record.extra)
        if skip_difficult and fields["difficult"].any():
            keep = fields["difficult"] == 0
            ds.dropped["difficult objects (skip_difficult)"] = \
                ds.dropped.get("difficult objects (skip_difficult)", 0) + int((~keep).sum())
            out = out.subset(keep)
        records.append(out)
    ds.records = records
    ds.skipped = ds.skipped + sink.finish()
    return ds


def object_runs(png, n, width, height) -> list:
    """The COCO run lengths of each of the ``n`` objects' masks in a SegmentationObject PNG.

    Raises:
        DatasetError naming the PNG: unreadable, not a palette or grey image, a size other than
        the annotation's, an index past ``n`` (other than 255).
    """
    with open_image(png) as im:
        if im.mode not in ("P", "L"):
            raise DatasetError(png, f"a {im.mode} image: a SegmentationObject PNG holds object "
                                    "indices (palette or grey)")
        if im.size != (int(width), int(height)):
            raise DatasetError(png, f"{im.size[0]}x{im.size[1]}, not the annotation's "
                                    f"{width}x{height}")
        try:
            index = np.asarray(im)
        except Exception as exc:  # a truncated or corrupt file
            raise DatasetError(png, f"cannot decode the PNG ({exc})") from None
    used = np.unique(index)
    past = used[(used > n) & (used != VOID)]
    if len(past):
        raise DatasetError(png, f"object index {int(past[0])} but the annotation has {n} "
                                "objects")
    return [rle_encode(index == k + 1) for k in range(n)]


def object_index(record):
    """(H, W) uint8 SegmentationObject indices of a record's ``rle`` masks: object ``k``'s
    pixels ``k + 1``, 0 elsewhere; None where no box has a mask.

    Raises:
        DatasetError naming the image: two objects' masks overlap, or more than 254 objects
        (a PNG gives each pixel one object, 255 being VOC's outline).
    """
    rle = record.fields.get("rle")
    if rle is None or not rle.counts.any():
        return None
    n, h, w = record.num_boxes, int(record.height), int(record.width)
    if n >= VOID:
        raise DatasetError(record.path, f"{n} objects with masks: a SegmentationObject PNG "
                                        f"holds {VOID - 1} at most")
    index = np.zeros((h, w), np.uint8)
    for k in np.flatnonzero(rle.counts):
        mask = rle_decode(rle[k], h, w).astype(bool)
        under = index[mask]
        if under.any():
            raise DatasetError(record.path, f"the masks of objects {int(under.max())} and "
                                            f"{k + 1} overlap: a SegmentationObject PNG gives "
                                            "each pixel one object")
        index[mask] = k + 1
    return index


def write_object_pngs(records, stems, root, split, dry_run=False) -> int:
    """Write ``SegmentationObject/<stem>.png`` (VOC's palette) for each record with a mask
    (:func:`object_index`) and the ids of those images to ``ImageSets/Segmentation/<split>.txt``;
    return how many images have one. VOC's 255 outline is not written: the reader counts it as
    no object's, so the masks read back are the same."""
    from PIL import Image

    written = []
    for record, stem in zip(records, stems):
        index = object_index(record)
        if index is None:
            continue
        written.append(stem)
        if not dry_run:
            os.makedirs(os.path.join(root, "SegmentationObject"), exist_ok=True)
            im = Image.frombytes("P", (index.shape[1], index.shape[0]), index.tobytes())
            im.putpalette(_PALETTE)
            im.save(os.path.join(root, "SegmentationObject", stem + ".png"))
    if written and not dry_run:
        folder = os.path.join(root, "ImageSets", "Segmentation")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{split}.txt"), "w", encoding="utf-8") as f:
            f.writelines(s + "\n" for s in written)
    return len(written)


def _voc_palette() -> list:
    """VOC's colour map (its devkit's ``VOClabelcolormap``): index bits spread over R, G, B."""
    out = []
    for i in range(256):
        rgb, c = [0, 0, 0], i
        for j in range(8):
            for ch in range(3):
                rgb[ch] |= ((c >> ch) & 1) << (7 - j)
            c >>= 3
        out += rgb
    return out


_PALETTE = _voc_palette()
