"""Source ops: readers (COCO, VOC, file lists), plus the implicit upload (external_source:
ops/external_source.py)."""
from __future__ import annotations

import os
import stat

import numpy as np

from ..core import shapes as S
from ..core.batch import BoxBatch, EncodedBatch, ImageBatch, concat_boxes
from ..core.deferred import HostUpload
from ..core.errors import SampleError
from .arg_docs import SHARED
from .instance_fields import batch_fields, split_ragged
from .registry import register
from ..graph.arg_check import BOOL, FREE, STR, STRS, count, declare_kinds, declare_ranges, finite, nonneg

_SHARDING = {"random_shuffle": False, "shard_id": None, "num_shards": None}
# DALI's reader arguments (docs/dali.md). Honoured: shuffle_after_epoch (a new
# permutation of the whole dataset every epoch, sharded: what detaug's random_shuffle does),
# pad_last_batch (the shard's last batch repeats its last sample, and every shard has the largest
# shard's length) and stick_to_shard (False: an unshuffled reader's shard moves on by one every
# epoch, shard_id + epoch; None, not given: DALI's default False where the shards have one
# length, else the shard stays: _Source.moves_shards); pad_last_batch=True or stick_to_shard given
# makes the reader's shards DALI's ('uneven'), whatever the pipeline's shard_policy
# (Schedule.policy_of). random_shuffle's initial_fill (the size of DALI's
# shuffle buffer) is accepted: detaug's shuffle is a full permutation of the epoch. The others tune
# DALI's I/O and change no value.
_DALI_READER = {"initial_fill": 1024, "pad_last_batch": False, "stick_to_shard": None,
                "shuffle_after_epoch": False, "read_ahead": False, "lazy_init": False,
                "prefetch_queue_depth": 1, "dont_use_mmap": False, "skip_cached_images": False,
                "tensor_init_bytes": 1048576, "bytes_per_sample_hint": 0, "preserve": False}
# The ones that change no value here: accepted, documented as hints, and a warning when set.
_DALI_READER_HINTS = {
    "initial_fill": "the size of DALI's shuffle buffer; detaug's shuffle is a full permutation "
                    "of the epoch",
    "read_ahead": "DALI's I/O tuning", "lazy_init": "DALI's I/O tuning",
    "prefetch_queue_depth": "DALI's reader queue; the Pipeline's prefetch_queue_depth sets "
                            "detaug's",
    "dont_use_mmap": "DALI's I/O tuning",
    "skip_cached_images": "DALI's decoder-cache tuning; detaug's decoders keep no cache, so "
                          "every image is read (as DALI without a cache)",
    "tensor_init_bytes": "DALI's allocation tuning",
    "bytes_per_sample_hint": "DALI's allocation tuning", "preserve": "every reader is kept"}



class _Source:
    """Protocol of a source: ``size`` (records, or None), ``shuffle``, ``shard`` (id, count),
    ``prepare(key)`` in submission order on the caller's thread, ``read(ctx, payload)``."""

    size = None
    shuffle = False
    wraps_around = True  # a reader goes on into the next epoch in pipe.run(), as DALI's

    def __init__(self, op, pipe, args=None):
        self.op = op
        a = op.args if args is None else args
        if a.get("random_shuffle") and a.get("shuffle_after_epoch"):
            raise ValueError(f"{op.name}: random_shuffle and shuffle_after_epoch cannot both be set "
                             "(as in DALI)")
        if a.get("stick_to_shard") and a.get("shuffle_after_epoch"):
            raise ValueError(f"{op.name}: stick_to_shard and shuffle_after_epoch cannot both be set "
                             "(as in DALI)")
        if int(a.get("initial_fill", 1) or 1) < 1:
            raise ValueError(f"{op.name}: initial_fill must be at least 1")
        self.shuffle = bool(a.get("random_shuffle", False) or a.get("shuffle_after_epoch", False))
        self.pad_last_batch = bool(a.get("pad_last_batch", False))
        # True / False as given; None: not given (DALI's default where it can be honoured);
        # readers without DALI's argument keep their shard
        stick = a.get("stick_to_shard", True)
        self.stick_to_shard = None if stick is None else bool(stick)
        # a reader given DALI's sharding arguments shards as DALI's ('uneven' shards: its own
        # padding), whatever the pipeline's shard_policy
        # (what the user gave: detaug's own readers pass stick_to_shard=True to keep their shard)
        self.dali_sharding = (bool(op.args.get("pad_last_batch", False))
                              or op.args.get("stick_to_shard") is not None)
        sid = a.get("shard_id")
        ns = a.get("num_shards")
        self.shard = (pipe.shard_id if sid is None else int(sid), pipe.num_shards if ns is None else int(ns))
        if not 0 <= self.shard[0] < self.shard[1]:
            raise ValueError(f"{op.name}: shard_id {self.shard[0]} not in [0, {self.shard[1]})")

    def prepare(self, key):
        return None

    @property
    def moves_shards(self) -> bool:
        """Whether the shard moves on by one every epoch (DALI's ``stick_to_shard=False``: its
        reader reads on into the next shard). Only an unshuffled reader's order shows it: a
        shuffled epoch is a new permutation of the whole dataset, so the records of a shard are a
        new random draw every epoch either way. Shards of different lengths cannot move without
        changing the shard's length from epoch to epoch (and the iterators' counts with it):
        given ``stick_to_shard=False`` they are refused; not given, the shard stays (DALI's
        epochs of such shards straddle shards, as its reader is one stream: docs/dali.md)."""
        ns = self.shard[1]
        if self.stick_to_shard or self.shuffle or ns == 1:
            return False
        if self.size % ns:
            if self.stick_to_shard is None:
                return False
            raise NotImplementedError(
                f"{self.op.name}: stick_to_shard=False moves each shard on by one every epoch, "
                f"and the {ns} shards of {self.size} records have different lengths: the shard's "
                "length would change from epoch to epoch. Pass stick_to_shard=True (the shard "
                "stays, DALI's lengths), leave it out (the shard stays, its length evened out by "
                "the pipeline's shard_policy) or pass random_shuffle=True")
        return True


def _read_bytes(path, position):
    """The file's bytes in a new uint8 array. os.readv releases the GIL while it reads (np.fromfile
    holds it: a visible share of the GIL-held time of the GPU pipeline, benchmarks/RESULTS.md)
    and reads straight into the array (no bytes object in between).

    Only a regular file is read: a FIFO, device or folder under an image's name is a named
    SampleError (opened without blocking: a FIFO with no writer would block ``open`` forever)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SampleError(f"{path}: not a regular file (a FIFO, device or folder); "
                                  "refused", position, path)
            buf = np.empty(st.st_size, np.uint8)
            got = os.readv(fd, [buf]) if len(buf) else 0
            while got < len(buf):  # readv may return short counts
                more = os.readv(fd, [buf[got:]])
                if more == 0:  # the end of the file, early: it shrank since fstat
                    raise SampleError(f"{path}: the file shrank while it was read ({got} of "
                                      f"{len(buf)} bytes); refused", position, path)
                got += more
        finally:
            os.close(fd)
        return buf
    except OSError as e:
        raise SampleError(f"{path}: cannot read image file ({e.strerror or e})", position, path) from None


def read_files(paths):
    """File bytes of a batch, read one after another in the calling (batch) thread: spreading
    the reads of cached files over pool threads cost more in hand-overs than the reads
    (benchmarks/RESULTS.md)."""
    return [_read_bytes(p, k) for k, p in enumerate(paths)]


def _code_streams(ctx, data):
    """Parsed code streams for the GPU decoder, made here in the reader's (host-stage) thread
    when the pipeline decodes on the GPU: nvImageCodec then decodes faster and the parsing is
    off the device stage (benchmarks/RESULTS.md)."""
    if not ctx.pipeline.build_plan.mixed_decode or getattr(ctx, "planning", False):
        return None  # (a launch planned ahead parses them where it decodes: detaug/runtime/gpu/plan_ahead.py)
    from .gpu_decode import code_streams

    return code_streams(data)


class _DetectionReader(_Source):
    """Reads a Dataset's records. Their boxes, labels, fields and sizes are packed once into
    dataset-wide arrays, so that a batch is gathered with a few array operations rather than
    assembled record by record (a field a record lacks is zeros, as in :func:`concat_boxes`)."""

    def __init__(self, op, pipe, dataset, args=None):
        super().__init__(op, pipe, args)
        self.dataset = dataset
        self.size = len(dataset)
        if dataset.skipped:
            pipe.stats.setdefault("reader_skipped", []).extend(dataset.skipped)
        recs, self.ragged = split_ragged(dataset.records)  # (polygons: made dense per batch)
        packed = recs.packed() if hasattr(recs, "packed") else None  # readers' RecordTable
        if packed is not None:  # the reader's own columns: no record made
            self.paths, self.sizes = packed.paths, packed.sizes
        else:
            self.paths = [r.path for r in recs]
            self.sizes = np.array([[r.height, r.width] for r in recs], np.int64).reshape(-1, 2)
            packed = concat_boxes([r.boxes for r in recs], [r.labels for r in recs],
                                  [r.fields for r in recs], self.sizes)
        self.boxes, self.labels, self.fields = packed.boxes, packed.labels, packed.fields
        self.offsets = packed.offsets

    def read(self, ctx, payload):
        idx = ctx.sample_index
        paths = [self.paths[i] for i in idx]
        if self.op.id in ctx.pipeline._paths_only:  # decode processes read the files
            data, streams = None, None
        else:
            data = read_files(paths)
            streams = _code_streams(ctx, data)
        starts, counts = self.offsets[idx], self.offsets[idx + 1] - self.offsets[idx]
        out_off = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(counts, out=out_off[1:])
        rows = np.repeat(starts - out_off[:-1], counts) + np.arange(out_off[-1])
        sizes = self.sizes[idx]
        boxes = BoxBatch(self.boxes[rows], self.labels[rows], out_off, sizes, "cpu",
                         {**{k: v[rows] for k, v in self.fields.items()},
                          **batch_fields(self.ragged, rows, np.repeat(sizes, counts, axis=0))})
        return EncodedBatch(data, paths, sizes, streams), boxes


BITMASKS_DOC = ("detaug's outputs: the boxes carry the field bitmasks (N, H, W) uint8 0/1, each "
                "box's mask on its image's canvas (H, W the batch's largest), moved by the "
                "geometric ops with nearest sampling and dropped with their boxes")


def tight_doc(shapes: str) -> str:
    """The ``tight_boxes`` argument's doc for a reader whose boxes carry ``shapes``."""
    return (f"after the geometric ops each box is the enclosing box of {shapes} (a mask pixel "
            "(i, j) covers [j, j + 1] x [i, i + 1]), tighter than its corners' box under "
            "rotations and shears; a box with none left keeps its corners' box; min_size and "
            "visibility are judged on the corners' box")


def reader_rule(ins, args):
    """A detection reader's outputs for the memory plan: the encoded images (``ins[0]``, the
    annotated sizes' bound) and boxes on that bound, which carry a mask of it each with
    ``bitmasks`` and polygons with ``polygons``."""
    enc = ins[0] if ins else S.Encoded(None)
    if dali_coco(args):
        return S.Out((enc,) + (S.Boxes(None),) * (dali_coco_outputs(args) - 1))
    canvas = S.Img(None, enc.bound) if enc.bound is not None else None
    return S.Out((enc, S.Boxes(canvas, masks=bool(args.get("bitmasks")),
                               polygons=bool(args.get("polygons")))))


def dali_coco(args) -> bool:
    """readers.coco follows DALI (outputs encoded, boxes, labels[, image_ids]) when called with
    any argument that only DALI's reader has (ltrb=, ratio=, image_ids=, pad_last_batch=,
    initial_fill=, ...: those whose default is None here); coco_reader always does."""
    return any(args.get(k) is not None for k in _COCO_DALI)


def dali_coco_outputs(args) -> int:
    """The number of outputs of DALI's COCO reader: images, bounding boxes, labels, then
    (polygons, vertices) or pixelwise masks, then image ids. Both kinds of masks at once are
    refused when the call is traced (DALI's arguments exclude each other)."""
    if args.get("polygon_masks") and args.get("pixelwise_masks"):
        raise ValueError("readers.coco: polygon_masks and pixelwise_masks cannot both be set "
                         "(as in DALI)")
    return (3 + 2 * bool(args.get("polygon_masks")) + bool(args.get("pixelwise_masks"))
            + bool(args.get("image_ids")))


class _DALICocoReader(_DetectionReader):
    """DALI's COCO reader outputs: encoded images; boxes per sample (n, 4) float32, [x, y, w, h]
    in pixels, [l, t, r, b] with ``ltrb``, divided by the image's annotated width and height
    with ``ratio``; labels (n,) int32, contiguous from 1 in the order of the category ids
    (the COCO ids with ``avoid_class_remapping``); with ``polygon_masks`` the polygons (P, 3)
    int32 and vertices (V, 2) float32, with ``pixelwise_masks`` the (H, W, 1) int32 label map
    (readers/coco_instances.py: dali_polygons, dali_pixelwise); with ``image_ids`` the (1,)
    int32 image id."""

    def __init__(self, op, pipe, dataset, args):
        self.shapes = None
        if args.get("polygon_masks") or args.get("pixelwise_masks"):
            from readers.coco_instances import without_shapes

            self.shapes, dataset = dataset.records, without_shapes(dataset)  # (read per sample)
        super().__init__(op, pipe, dataset, args)
        a = args
        self.ltrb, self.ratio = bool(a["ltrb"]), bool(a["ratio"])
        self.label_base = 0 if a["avoid_class_remapping"] else 1
        self.image_ids = bool(a["image_ids"])
        recs = dataset.records
        ids = recs.image_ids if hasattr(recs, "image_ids") else [r.image_id for r in recs]
        self.ids = np.array(ids, np.int64)

    def read(self, ctx, payload):
        enc, bb = super().read(ctx, payload)
        boxes, labels = [], []
        for s in range(len(bb.offsets) - 1):
            lo, hi = bb.offsets[s], bb.offsets[s + 1]
            b = bb.boxes[lo:hi].astype(np.float64)
            if not self.ltrb:
                b = np.concatenate([b[:, :2], b[:, 2:] - b[:, :2]], 1)
            if self.ratio:
                h, w = bb.canvas[s]
                b = b / np.array([w, h, w, h], np.float64)
            boxes.append(b.astype(np.float32).reshape(-1, 4))
            labels.append((bb.labels[lo:hi] + self.label_base).astype(np.int32))
        outs = (enc, boxes, labels)
        if self.shapes is not None:
            from readers.coco_instances import dali_masks

            outs += dali_masks([self.shapes[i] for i in ctx.sample_index], labels,
                               bool(self.op.args.get("polygon_masks")), self.ratio)
        if self.image_ids:
            outs += (self.ids[ctx.sample_index].astype(np.int32).reshape(-1, 1),)
        return outs


def _coco_reader(op, pipe):
    from readers.coco import read_coco

    dali = dali_coco(op.args)
    # DALI's arguments not given take DALI's defaults in DALI's mode
    a = {**op.args, **{k: v for k, v in _COCO_DALI_DEFAULTS.items() if op.args.get(k) is None}} \
        if dali else op.args
    dali_coco_outputs(a)
    threshold = a["size_threshold"] if a["size_threshold"] is not None else (0.1 if dali else 0.0)
    keep_ids = bool(a["keep_original_ids"] or a.get("avoid_class_remapping"))
    if dali and (a.get("keypoints") or a.get("polygons") or a.get("bitmasks")):
        raise ValueError("readers.coco: keypoints= / polygons= / bitmasks= ride detaug's "
                         "BoxBatch output; "
                         "with DALI's arguments (ltrb, ratio, image_ids, ...) the outputs are "
                         "DALI's: use polygon_masks= or pixelwise_masks= there")
    if dali and (a.get("polygon_masks") or a.get("pixelwise_masks")):
        from readers.coco_instances import read_coco_masks as read_coco  # noqa: F811
    elif not dali and (a.get("keypoints") or a.get("polygons") or a.get("bitmasks")):
        from functools import partial

        from readers.coco_instances import read_coco_shapes

        read_coco = partial(read_coco_shapes, keypoints=bool(a.get("keypoints")),  # noqa: F811
                            polygons=bool(a.get("polygons")),
                            tight_boxes=bool(a.get("tight_boxes")),
                            bitmasks=bool(a.get("bitmasks")))
    elif a.get("tight_boxes"):
        raise ValueError("readers.coco: tight_boxes=True needs polygons=True or bitmasks=True "
                         "(the boxes follow their polygons and masks)")
    ds = read_coco(a["annotations_file"], a["file_root"], skip_empty=a["skip_empty"],
                   include_iscrowd=a["include_iscrowd"], size_threshold=threshold,
                   categories=a["categories"], keep_original_ids=keep_ids,
                   on_error=a["on_error"])
    if dali:
        return _DALICocoReader(op, pipe, ds, a)
    return _DetectionReader(op, pipe, ds, {**a, "stick_to_shard": True})  # detaug's: shards stay


def _voc_reader(op, pipe):
    from readers.voc import read_voc

    a = op.args
    if a["tight_boxes"] and not a["bitmasks"]:
        raise ValueError("readers.voc: tight_boxes=True needs bitmasks=True (the boxes follow "
                         "their masks)")
    kw = dict(split=a["split"], classes=a["classes"], skip_difficult=a["skip_difficult"],
              on_error=a["on_error"])
    if a["bitmasks"]:
        from readers.voc_masks import read_voc_instances

        ds = read_voc_instances(a["root"], tight_boxes=a["tight_boxes"], **kw)
    else:
        ds = read_voc(a["root"], **kw)
    return _DetectionReader(op, pipe, ds)


_COCO_DALI_DEFAULTS = {"ltrb": False, "ratio": False, "image_ids": False,
                       "avoid_class_remapping": False, "polygon_masks": False,
                       "pixelwise_masks": False, **_DALI_READER}
# readers.coco declares DALI's own arguments with None (not given): any of them given selects
# DALI's outputs, and the others then take DALI's defaults
_COCO_DALI = dict.fromkeys(_COCO_DALI_DEFAULTS)
declare_kinds("readers.coco", categories=FREE, **dict.fromkeys(
    ("ltrb", "ratio", "image_ids", "avoid_class_remapping", "polygon_masks", "pixelwise_masks",
     "pad_last_batch", "shuffle_after_epoch"), BOOL))
declare_ranges("readers.coco", size_threshold=nonneg(), shard_id=count(0), num_shards=count(1))
register("readers.coco", devices=("cpu",), inputs=(0, 0), kind="source",
         outputs=lambda n, a: dali_coco_outputs(a) if dali_coco(a) else 2,
         args={"file_root": None, "annotations_file": None, "skip_empty": False,
               "include_iscrowd": True, "size_threshold": None, "categories": None,
               "keep_original_ids": False, "on_error": "raise", "keypoints": False,
               "polygons": False, "tight_boxes": False, "bitmasks": False, **_SHARDING,
               **_COCO_DALI},
         rule=reader_rule,
         hints=_DALI_READER_HINTS,
         output_spec="(encoded bytes, BoxBatch with labels + iscrowd/annotation_id); given any "
                     "of DALI's own arguments (ltrb=, ratio=, image_ids=, pad_last_batch=, ...), "
                     "DALI's (encoded, boxes (n, 4) float32 per sample, labels (n,) int32 from "
                     "1[, image_ids])",
         arg_docs={"size_threshold": "drop boxes narrower or lower than this many pixels (None: "
                                     "0.0, or DALI's 0.1 in DALI's mode)",
                   "keypoints": "detaug's outputs: the boxes carry the fields keypoints (N, K, 3) "
                                "[x, y, v] (COCO's pixel indices + 0.5) and keypoint_flip (N, K), "
                                "which the geometric ops move (CPU)",
                   "polygons": "detaug's outputs: the boxes carry the field polygons (N, P, 2) "
                               "float64, each polygon followed by a NaN row, moved and clipped "
                               "by the geometric ops (CPU); crowd RLE masks are not carried "
                               "unless bitmasks=True (else counted in the dataset's dropped)",
                   "bitmasks": BITMASKS_DOC + " (COCO: the RLE annotations, crowds'; a box "
                               "with polygons has a zero mask here: fn.instance_masks and the "
                               "torch adapter's masks take the union of both)",
                   "tight_boxes": "with polygons=True and/or bitmasks=True: " + tight_doc(
                       "its moved polygons and the pixels of its moved bitmask"),
                   "ltrb": "DALI's mode: boxes [l, t, r, b] (True) or [x, y, w, h] (False)",
                   "ratio": "DALI's mode: boxes divided by the image's width and height",
                   **{k: "DALI's argument: giving it (any value) selects DALI's outputs; "
                         f"default {v!r} there" for k, v in _COCO_DALI_DEFAULTS.items()
                      if k not in ("ltrb", "ratio") and k not in _DALI_READER_HINTS},
                   "pad_last_batch": "DALI's argument: giving it (any value) selects DALI's "
                                     "outputs. " + SHARED["pad_last_batch"][1].removeprefix("DALI's: "),
                   "stick_to_shard": "DALI's argument: giving it (any value) selects DALI's "
                                     "outputs. False moves an unshuffled reader's shard on by one "
                                     "every epoch (refused where the shards differ in length), "
                                     "True keeps it; either makes the reader's shards DALI's "
                                     "(lengths may differ by one), not evened out by the "
                                     "pipeline's shard_policy. Not given: the shard stays, or "
                                     "where another of DALI's arguments is given, DALI's default "
                                     "(False where the shards have one length)"},
         doc="COCO instances JSON: encoded images and their boxes")(_coco_reader)
declare_kinds("coco_reader", categories=FREE)
declare_ranges("coco_reader", size_threshold=nonneg(), shard_id=count(0), num_shards=count(1))
register("coco_reader", devices=("cpu",), inputs=(0, 0), kind="source",
         outputs=lambda n, a: dali_coco_outputs(a),
         args={"file_root": None, "annotations_file": None, "skip_empty": False,
               "include_iscrowd": True, "size_threshold": 0.1, "categories": None,
               "keep_original_ids": False, "on_error": "raise", **_SHARDING,
               **_COCO_DALI_DEFAULTS},
         hints=_DALI_READER_HINTS,
         output_spec="DALI's (encoded bytes, boxes (n, 4) float32 per sample, labels (n,) int32 "
                     "from 1[, image_ids])",
         doc="DALI's COCOReader: readers.coco with DALI's outputs and defaults (xywh pixels; "
             "ltrb=, ratio=)")(_coco_reader)
declare_kinds("readers.voc", root=STR, classes=STRS)
declare_ranges("readers.voc", shard_id=count(0), num_shards=count(1))
register("readers.voc", devices=("cpu",), inputs=(0, 0), outputs=2, kind="source",
         args={"root": None, "split": "trainval", "classes": None, "skip_difficult": False,
               "on_error": "raise", "bitmasks": False, "tight_boxes": False, **_SHARDING},
         rule=reader_rule,
         arg_docs={"bitmasks": BITMASKS_DOC + " (VOC: SegmentationObject/<id>.png where the "
                               "image has one, else zeros; a bad box is then an error whatever "
                               "on_error: the PNG's indices follow the XML's objects)",
                   "tight_boxes": "with bitmasks=True: " + tight_doc(
                       "the pixels of its moved bitmask")},
         output_spec="(encoded bytes, BoxBatch with labels + difficult/truncated)",
         doc="Pascal VOC XML (lxml, no entity expansion): encoded images and their boxes")(_voc_reader)


# DALI's file reader takes, from the class folders, the files that match one of these patterns
DALI_FILE_FILTERS = ("*.jpg", "*.jpeg", "*.png", "*.bmp", "*.tif", "*.tiff", "*.pnm", "*.ppm",
                     "*.pgm", "*.pbm", "*.jp2", "*.webp", "*.flac", "*.ogg", "*.wav")


def file_filter(patterns, case_sensitive, paths) -> list:
    """Indices of ``paths`` whose file name matches one of the glob ``patterns`` (DALI's
    file_filters), compared case-insensitively unless ``case_sensitive``."""
    import fnmatch

    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    if not case_sensitive:
        patterns = [p.lower() for p in patterns]
    out = []
    for k, path in enumerate(paths):
        name = os.path.basename(path) if case_sensitive else os.path.basename(path).lower()
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            out.append(k)
    return out


class _FileReader(_Source):
    def __init__(self, op, pipe):
        super().__init__(op, pipe)
        from readers import folder

        a = op.args
        if a["file_list"] is not None:
            fd = folder.read_file_list(a["file_list"], a["file_root"])
        elif a["files"] is not None:
            fd = folder.FolderDataset([os.path.join(a["file_root"] or "", f) for f in a["files"]],
                                      np.asarray(a["labels"] if a["labels"] is not None
                                                 else np.zeros(len(a["files"])), np.int64), [])
        else:
            fd = folder.read_folder(a["file_root"], extensions=("",))
            keep = file_filter(a["file_filters"], a["case_sensitive_filter"], fd.paths)
            fd.paths, fd.labels = [fd.paths[k] for k in keep], np.asarray(fd.labels)[keep]
        self.paths, self.labels = list(fd.paths), np.asarray(fd.labels, np.int64)
        self.class_names = list(fd.class_names)
        self.size = len(self.paths)

    def read(self, ctx, payload):
        paths = [self.paths[i] for i in ctx.sample_index]
        if self.op.id in ctx.pipeline._paths_only:  # decode processes read the files
            return EncodedBatch(None, paths), self.labels[ctx.sample_index]
        data = read_files(paths)
        return EncodedBatch(data, paths, None, _code_streams(ctx, data)), self.labels[ctx.sample_index]


declare_kinds("readers.file", file_list=STR, files=STRS, file_filters=STRS)
declare_ranges("readers.file", labels=finite(integer=True, form='seq'), shard_id=count(0),
               num_shards=count(1))
register("readers.file", devices=("cpu",), inputs=(0, 0), outputs=2, kind="source",
         aliases=("file_reader",),
         args={"file_root": None, "file_list": None, "files": None, "labels": None, **_SHARDING,
               "file_filters": DALI_FILE_FILTERS, "case_sensitive_filter": False, **_DALI_READER},
         hints=_DALI_READER_HINTS,
         arg_docs={"file_filters": "glob patterns of the file names taken from the class folders "
                                   "(DALI's default list); not applied to file_list / files",
                   "case_sensitive_filter": "match file_filters case-sensitively"},
         output_spec="(encoded bytes, int64 (B,) labels)",
         doc="classification folders or DALI file lists: encoded images and labels")(_FileReader)


@register("_upload", rule=S.same_canvas, plans=True, roles={"upload"}, devices=("mixed",),
          inputs=(1, 1), kind="other",
          doc="host -> device copy (inserted by build)")
def _upload(ctx, op, inputs, args):
    from ..core.backend import upload, upload_many

    v = inputs[0]
    if getattr(ctx, "planning", False):
        # planned ahead: boxes and plain tensors stay on the host until the launch is realised
        # (runtime/gpu/plan_ahead.py uploads them there, in its one copy: a tensor marked so);
        # host images cannot stand in for device ones in the planned chain
        if isinstance(v, (BoxBatch, EncodedBatch)):
            return v
        if isinstance(v, ImageBatch):
            from ..core.errors import NotPlannable

            raise NotPlannable(f"{op.name}: an upload of host images")
        return HostUpload(v)
    if isinstance(v, BoxBatch):
        return v.to_device(ctx)
    if isinstance(v, ImageBatch):
        # a ragged batch goes up in one staged copy: views into one device buffer
        data = upload_many(v.data, ctx.stream) if not v.is_dense else upload(v.data, ctx.stream)
        return ImageBatch(data, "gpu", v.layout, v.geometry)
    if isinstance(v, EncodedBatch):
        return v
    if isinstance(v, (list, tuple)):  # a ragged tensor batch: its samples in one staged copy
        return upload_many([np.asarray(a) for a in v], ctx.stream)
    return upload(np.asarray(v), ctx.stream)
