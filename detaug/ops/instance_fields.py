"""A reader's ragged instance fields (readers/segments.py ``Ragged``: polygons) kept apart
from its dataset-wide packed boxes and made dense per batch (core/instances.py
``dense_polygons``), so that the BoxBatch holds only dense per-box fields, which every op
carries as it carries labels."""
from __future__ import annotations

import numpy as np

from ..core.instances import dense_polygons

CARRIED = ("polygons",)  # the ragged fields a pipeline carries (masks: not yet)


def split_ragged(records):
    """``(records, ragged)``: the records without their ragged fields (copies where they had
    some) and each such field over the whole set, rows in record order (a ``Ragged`` per
    name). A RecordTable (read_coco's columns) has none: returned as it is, no record made.

    Raises:
        ValueError naming a ragged field that a pipeline does not carry (an RLE mask), rather
        than pass it through unmoved.
    """
    if hasattr(records, "packed") or not len(records):
        return records, {}
    from readers.segments import Ragged

    names = [k for k, v in records[0].fields.items() if isinstance(v, Ragged)]
    if not names:
        return records, {}
    other = [k for k in names if k not in CARRIED]
    if other:
        raise ValueError(f"the records' fields {other} cannot ride a pipeline yet (it carries "
                         f"{list(CARRIED)}); drop them from the records")
    ragged = {k: Ragged.concat([r.fields[k] for r in records]) for k in names}
    import copy

    out = []
    for r in records:
        r = copy.copy(r)
        r.fields = {k: v for k, v in r.fields.items() if k not in ragged}
        out.append(r)
    return out, ragged


def batch_fields(ragged, rows) -> dict:
    """The dense per-box fields of the packed ``rows`` of a batch."""
    out = {}
    for name, values in ragged.items():
        sub = values.take(np.asarray(rows, np.int64))
        out[name] = dense_polygons(sub.values.values, sub.values.offsets, sub.offsets)
    return out
