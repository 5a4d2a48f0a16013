"""DALI's form of ``fn.readers.tfrecord``: ``features={name: FixedLenFeature | VarLenFeature}``
(``detaug.tfrecord``'s classes, or any object with DALI's ``dtype`` / ``shape`` /
``default_value``), giving one output per feature, a dict by name as DALI's.

Every record of the files is located at build time (one pass over the files, framing and CRCs
checked; DALI's ``index_path`` files are not needed and are a hint); a batch reads each sample's
record with one ``os.pread`` and parses its ``tf.train.Example``. Per feature and sample: a
``string`` feature is its bytes as a 1-D uint8 array (the first value of a FixedLen one), an
``int64`` one int64 values, a ``float32`` one float32 values; a FixedLenFeature has its declared
shape (its default value where the record lacks it; a record with the wrong number of values is
a sample error naming the file and offset), a VarLenFeature the values the record holds (its
default as one value where it has none).
"""
from __future__ import annotations

import numpy as np

from ..core.errors import SampleError
from .sources import _Source

KINDS = {"int64": "int64_list", "float32": "float_list", "string": "bytes_list"}


def _spec(op, name, feature):
    dtype = str(getattr(feature, "dtype", ""))
    if dtype not in KINDS:
        raise ValueError(f"{op.name}: feature {name!r}: dtype {dtype!r} (DALI's tfrecord.int64, "
                         "float32 or string)")
    shape = getattr(feature, "shape", None)
    shape = None if shape is None else tuple(int(d) for d in np.atleast_1d(shape)) \
        if np.size(shape) else ()
    return name, dtype, shape, getattr(feature, "default_value", None)


def feature_value(ex, spec):
    """One feature of a parsed Example by ``spec = (name, dtype, shape, default)``."""
    name, dtype, shape, default = spec
    present = ex.kind(name) is not None
    if dtype == "string":
        if present:
            return np.frombuffer(ex.bytes(name)[0], np.uint8).copy()
        return np.frombuffer((default or "").encode() if isinstance(default, str)
                             else bytes(default or b""), np.uint8).copy()
    if present:
        v = ex.int64s(name) if dtype == "int64" else ex.floats(name)
    else:
        v = np.asarray([] if default is None else [default],
                       np.int64 if dtype == "int64" else np.float32)
    if shape is None:  # VarLenFeature
        return v
    n = int(np.prod(shape)) if shape else 1
    if not present:
        v = np.full(n, 0 if default is None else default, v.dtype)
    if v.size != n:
        raise ValueError(f"feature {name!r} holds {v.size} values, its FixedLenFeature shape "
                         f"{list(shape)} takes {n}")
    return v.reshape(shape)


class FeatureReader(_Source):
    """Source of ``readers.tfrecord(features=...)``: one output per feature, in the dict's order."""

    def __init__(self, op, pipe):
        from readers.tfrecord import RecordFault, iter_records
        from readers.tfrecord_od import tfrecord_files

        super().__init__(op, pipe)
        a = op.args
        if not isinstance(a["features"], dict) or not a["features"]:
            raise ValueError(f"{op.name}: features must be a dict {{name: FixedLenFeature or "
                             "VarLenFeature}}")
        self.specs = [_spec(op, k, f) for k, f in a["features"].items()]
        self.records = []
        for f in tfrecord_files(a["path"]):
            for offset, data in iter_records(f):
                if isinstance(data, RecordFault):
                    raise data
                self.records.append((f, offset, len(data)))
        self.size = len(self.records)
        if not self.size:
            raise ValueError(f"{op.name}: the files hold no record")

    def read(self, ctx, payload):
        from readers.tfrecord import ProtoError, RecordFault, parse_example, read_record_at

        def one(k):
            file, offset, length = self.records[int(ctx.sample_index[k])]
            try:
                ex = parse_example(read_record_at(file, offset, length))
                return [feature_value(ex, s) for s in self.specs]
            except (RecordFault, ProtoError, ValueError) as e:
                raise SampleError(f"{file}: byte offset {offset}: {e}", k, file) from None

        rows = ctx.map_samples(one, len(ctx.sample_index))
        outs = []
        for j in range(len(self.specs)):
            col = [r[j] for r in rows]
            same = all(c.shape == col[0].shape for c in col)
            outs.append(np.stack(col) if same and self.specs[j][1] != "string" else col)
        return tuple(outs)
