"""``fn.readers.tfrecord``: TFRecords in the TensorFlow Object Detection API layout.

The files are indexed at build time by ``readers.read_tfrecord`` (framing and CRCs checked,
every Example parsed, vectorised; the index is cached in ``.detaug-index/`` beside the shards,
keyed by each shard's size and times, unless ``DETAUG_TFRECORD_INDEX_CACHE=0``): a record's
boxes, labels and flags are packed like the
other readers' (``sources._DetectionReader``), and its image stays in the file as
``(file, offset, length, start, stop)``. A batch reads each sample's record with one
``os.pread`` (no seek, the GIL released), checks its data CRC again (the file may have changed
since the index was built: a mismatch is a sample error naming the file and byte offset, which
``on_error="skip"`` on the pipeline replaces and counts), and hands the image bytes, unchanged,
to ``fn.decoders.image`` like any reader.

With ``image_label="image/class/label"`` (the layout of TensorFlow's ImageNet TFRecords, as in
DALI's TensorFlow tutorial) the second output is that per-image int64 label instead of boxes.
"""
from __future__ import annotations

import os

import numpy as np

from ..core.batch import BoxBatch
from ..core.errors import SampleError
from .registry import register
from .sources import _SHARDING, EncodedBatch, _code_streams, _DetectionReader
from ..graph.arg_check import FREE, STR, STRS, count, declare_kinds, declare_ranges


class _TFRecordReader(_DetectionReader):
    def __init__(self, op, pipe, dataset, image_label=None):
        super().__init__(op, pipe, dataset)
        recs = dataset.records
        self.locations = [r.extra["tfrecord_image"] for r in recs]
        self.image_labels = None
        if image_label is not None:
            self.image_labels = np.asarray([_image_label(r, image_label) for r in recs],
                                           np.int64)

    def read(self, ctx, payload):
        idx = np.asarray(ctx.sample_index)
        # the decode processes of a GPU pipeline read files by path; these images live inside
        # TFRecords, so they are always read here (the decoder then takes the bytes)
        data = [self._image(k, int(i)) for k, i in enumerate(idx)]
        paths = [self.paths[i] for i in idx]
        sizes = self.sizes[idx]
        enc = EncodedBatch(data, paths, sizes, _code_streams(ctx, data))
        if self.image_labels is not None:
            return enc, self.image_labels[idx]
        starts, counts = self.offsets[idx], self.offsets[idx + 1] - self.offsets[idx]
        out_off = np.zeros(len(idx) + 1, np.int64)
        np.cumsum(counts, out=out_off[1:])
        rows = np.repeat(starts - out_off[:-1], counts) + np.arange(out_off[-1])
        boxes = BoxBatch(self.boxes[rows], self.labels[rows], out_off, sizes, "cpu",
                         {k: v[rows] for k, v in self.fields.items()})
        return enc, boxes

    def _image(self, position, i):
        from readers.tfrecord import RecordFault, read_record_at

        file, offset, length, start, stop = self.locations[i]
        try:
            data = read_record_at(file, offset, length)
        except RecordFault as exc:
            raise SampleError(str(exc), position, self.paths[i]) from None
        except OSError as exc:
            raise SampleError(f"{file}: cannot read the TFRecord file ({exc.strerror or exc})",
                              position, self.paths[i]) from None
        return np.frombuffer(data, np.uint8, stop - start, start)


def _image_label(record, name):
    values = (record.extra.get("tfrecord_features") or {}).get(name)
    if values is None or len(values) != 1 or not isinstance(values[0], int):
        from readers.errors import DatasetError

        file, offset = record.extra["tfrecord_image"][:2]
        raise DatasetError(file, f"byte offset {offset}: image_label={name!r} needs one int64 "
                                 f"value per record, found {values!r:.60}")
    return values[0]


def _tfrecord_reader(op, pipe):
    from readers.tfrecord_od import read_tfrecord

    a = op.args
    if a["path"] is None:
        raise ValueError(f"{op.name}: path= is required (a file, glob, folder or list of them)")
    if a["features"] is not None:  # DALI's form: one output per feature
        from .tfrecord_features import FeatureReader

        return FeatureReader(op, pipe)
    label_map = a["label_map"]
    if label_map is None and a["image_label"] is None:
        beside = _label_map_beside(a["path"])
        label_map = beside
    ds = read_tfrecord(a["path"], label_map=label_map, skip_empty=a["skip_empty"],
                       on_error=a["on_error"])
    return _TFRecordReader(op, pipe, ds, a["image_label"])


def _label_map_beside(path):
    """``label_map.pbtxt`` in the folder of the files (as ``write_tfrecord`` leaves), if any."""
    from readers.tfrecord_od import LABEL_MAP_FILE, tfrecord_files

    folders = {os.path.dirname(f) for f in tfrecord_files(path)}
    found = [os.path.join(d, LABEL_MAP_FILE) for d in sorted(folders)
             if os.path.isfile(os.path.join(d, LABEL_MAP_FILE))]
    return found[0] if len(found) == 1 and len(folders) == 1 else None


declare_kinds("readers.tfrecord", path=STRS, label_map=FREE, image_label=STR, features=FREE)
declare_ranges("readers.tfrecord", shard_id=count(0), num_shards=count(1))
register("readers.tfrecord", devices=("cpu",), inputs=(0, 0), kind="source",
         outputs=lambda n, a: len(a["features"]) if a.get("features") else 2,
         output_names=lambda a: list(a["features"]) if a.get("features") else None,
         args={"path": None, "label_map": None, "image_label": None, "skip_empty": False,
               "on_error": "raise", "features": None, "index_path": None, **_SHARDING},
         hints={"index_path": "DALI's index files: detaug locates the records itself"},
         output_spec="(encoded bytes, BoxBatch with labels + difficult/truncated/iscrowd; or "
                     "int64 (B,) labels with image_label); with features=, a dict of them",
         arg_docs={"path": "TFRecord file, glob, folder or list of them",
                   "label_map": "{id: name} or label_map.pbtxt (default: the one beside the "
                                "files, else the ids the boxes use, named by class/text)",
                   "image_label": "a per-image int64 feature (e.g. 'image/class/label') to "
                                  "output instead of boxes",
                   "skip_empty": "leave out images with no boxes (counted)",
                   "on_error": "'raise' or 'skip' bad records (counted in pipe.stats)",
                   "features": "DALI's form: {name: tfrecord.FixedLenFeature / VarLenFeature}; "
                               "the outputs are then a dict of those features "
                               "(detaug/ops/tfrecord_features.py)"},
         doc="TFRecords, Object Detection API layout (no TensorFlow, no DALI index files; its own "
             "index cached beside the shards): encoded images and their boxes")(_tfrecord_reader)
