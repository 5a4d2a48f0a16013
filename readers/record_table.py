"""Records kept as shared columns, each :class:`DetectionRecord` made when first asked for.

A reader that has its whole set as columns (read_coco: every box of the file in one (N, 4)
array, grouped by image) hands them over as a :class:`RecordTable` instead of a list of a
record per image: building 143,000 records and their dicts cost ~1 s of the load at a million
annotations, and a pipeline packs the columns straight back into dataset-wide arrays
(:meth:`RecordTable.packed`) without ever needing the records. Anyone who asks for a record gets
the same object the list held before (views of the shared columns, the same fields and extras),
made once and then kept, so ``table[i] is table[i]``.

The table is a mutable sequence: assigning, deleting or inserting turns it into a plain list of
records first (every record made), after which it behaves as that list; ``packed`` then says
None and the caller reads the records. So it does where a record handed out was given other
arrays, fields, size, path or id (an array changed in place is the columns' own: a view).
"""
from __future__ import annotations

from collections.abc import MutableSequence
from types import SimpleNamespace

import numpy as np

from ._common import gc_paused
from .records import trusted_record

class _Missing:
    """The value of a single-key per-box extra that an annotation lacks (one object, also
    after pickling)."""

    def __reduce__(self):
        return "MISSING"

    def __repr__(self):
        return "MISSING"


MISSING = _Missing()
_RUN = 1024  # records made together while the table is iterated


class RecordTable(MutableSequence):
    """A sequence of DetectionRecords backed by columns.

    Args:
        paths, widths, heights, image_ids: one entry per record (Python str / int / id).
        image_keys: one dict per record (its ``extra["image_keys"]`` where not empty), or None.
        offsets: (n + 1,) int64; record i owns rows ``offsets[i]:offsets[i + 1]``.
        boxes: float32 (N, 4); labels: int64 (N,); fields: name -> (N,) array.
        per_box: name -> list of N values (``extra[name]`` of each record, sliced), or
            ``(key, values)``: each row's extra is ``{key: value}`` (``{}`` where the value is
            :data:`MISSING`), for box_keys that hold one key (COCO's ``area``).
        source: int array, the entry of the ``per_box`` lists that each row is (rows were
            sorted by image and filtered; the lists were not), or None: the row's own index.
    """

    def __init__(self, paths, widths, heights, image_ids, image_keys, offsets, boxes, labels,
                 fields, per_box, source=None):
        self._cols = SimpleNamespace(paths=paths, widths=widths, heights=heights,
                                     image_ids=image_ids, image_keys=image_keys,
                                     offsets=offsets, bounds=offsets.tolist(), boxes=boxes,
                                     labels=labels, fields=fields, per_box=per_box,
                                     source=source)
        self._items = [None] * len(paths)  # the records made so far; all of them once detached
        self._parts = {}  # index -> the arrays a made record was made with (_unchanged)

    # -- the columns --------------------------------------------------------------------------
    def packed(self):
        """The whole set as dataset-wide arrays, or None where they may no longer be the
        records' (a record handed out that no longer holds what it was made with, or the table
        edited): ``paths`` (list), ``sizes`` (n, 2) int64 ``[height, width]``, ``boxes``,
        ``labels``, ``fields`` (name -> array, names sorted), ``offsets`` (n + 1,); copies, so
        that a record changed in place later leaves the caller's arrays as they were (as
        packing the records did). A record's arrays changed in place are the columns' own
        (views): what they hold now is packed."""
        c, items = self._cols, self._items
        if c is None or (items.count(None) != len(items)
                         and not all(self._unchanged(i) for i in self._parts)):
            return None
        sizes = np.empty((len(c.paths), 2), np.int64)
        sizes[:, 0] = c.heights
        sizes[:, 1] = c.widths
        return SimpleNamespace(paths=list(c.paths), sizes=sizes, boxes=c.boxes.copy(),
                               labels=c.labels.copy(),
                               fields={k: c.fields[k].copy() for k in sorted(c.fields)
                                       if c.paths},  # (no record: no field, as packing them)
                               offsets=c.offsets.copy())

    def _unchanged(self, i):
        """Whether record ``i`` (made) still holds what it was made with: the same arrays of
        boxes, labels and fields (views of the columns: changed in place, the columns changed
        with them), the same fields dict with the same arrays, its path, size and id."""
        c, r = self._cols, self._items[i]
        boxes, labels, fields, values = self._parts[i]
        return (r.boxes is boxes and r.labels is labels and r.fields is fields
                and len(fields) == len(values)
                and all(a is b for a, b in zip(fields.values(), values))
                and r.path == c.paths[i] and r.width == c.widths[i]
                and r.height == c.heights[i] and r.image_id == c.image_ids[i])

    @property
    def image_ids(self):
        """Every record's image id, without making the records."""
        if self._cols is None:
            return [r.image_id for r in self._items]
        ids = self._cols.image_ids
        return [ids[i] if r is None else r.image_id for i, r in enumerate(self._items)]

    def _make(self, lo, hi):
        """The records ``lo..hi - 1`` not yet made, made together: the per-box extras of the
        run gathered at once, and the collector paused (a record is ~10 containers, and the
        collections they set off each walked the whole set: making a million annotations'
        records one at a time took 3 s, most of it collecting)."""
        c, items = self._cols, self._items
        bounds = c.bounds
        s0, e0 = bounds[lo], bounds[hi]
        rows = None if c.source is None else c.source[s0:e0].tolist()
        with gc_paused():
            extras = {}
            for name, values in c.per_box.items():
                key = None
                if isinstance(values, tuple):
                    key, values = values
                values = values[s0:e0] if rows is None else [values[j] for j in rows]
                if key is not None:
                    values = [{} if v is MISSING else {key: v} for v in values]
                extras[name] = values
            for i in range(lo, hi):
                if items[i] is not None:
                    continue
                s, e = bounds[i], bounds[i + 1]
                extra = {name: v[s - s0:e - s0] for name, v in extras.items()}
                if c.image_keys is not None and c.image_keys[i]:
                    extra["image_keys"] = c.image_keys[i]
                fields = {n: v[s:e] for n, v in c.fields.items()}
                r = items[i] = trusted_record(c.paths[i], c.widths[i], c.heights[i],
                                              c.boxes[s:e], c.labels[s:e], fields,
                                              c.image_ids[i], extra)
                self._parts[i] = (r.boxes, r.labels, fields, tuple(fields.values()))

    def _detach(self):
        """Every record made; from now on a plain list of them."""
        if self._cols is not None:
            self._make(0, len(self._items))
            self._cols, self._parts = None, {}

    def __setstate__(self, state):
        """Unpickled (or deep-copied): a made record's arrays come back as copies, no longer
        views of the columns, so an in-place change would miss ``packed``. Each record still as
        it was made is given views of the columns again (the same values: both were pickled
        together); a record changed before pickling keeps what it holds (``packed`` says None)."""
        self.__dict__.update(state)
        c = self._cols
        if c is None:
            return
        for i in [i for i in self._parts if self._unchanged(i)]:
            r, (s, e) = self._items[i], (c.bounds[i], c.bounds[i + 1])
            r.boxes, r.labels = c.boxes[s:e], c.labels[s:e]
            for n in r.fields:
                r.fields[n] = c.fields[n][s:e]
            self._parts[i] = (r.boxes, r.labels, r.fields, tuple(r.fields.values()))

    # -- the sequence -------------------------------------------------------------------------
    def __len__(self):
        return len(self._items)

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self._items))
            if step == 1 and start < stop and self._cols is not None:
                self._make(start, stop)
            return [self[k] for k in range(start, stop, step)]
        record = self._items[i]  # IndexError / TypeError as a list gives them
        if record is None:
            i %= len(self._items)
            self._make(i, i + 1)
            record = self._items[i]
        return record

    def __iter__(self):
        n = len(self._items)
        for lo in range(0, n, _RUN):
            hi = min(lo + _RUN, n)
            if self._cols is not None:
                self._make(lo, hi)
            yield from self._items[lo:hi]

    def __setitem__(self, i, value):
        self._detach()
        self._items[i] = value

    def __delitem__(self, i):
        self._detach()
        del self._items[i]

    def insert(self, i, value):
        self._detach()
        self._items.insert(i, value)

    def __eq__(self, other):
        if isinstance(other, (RecordTable, list)):
            return len(self) == len(other) and all(a is b or a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None

    def __add__(self, other):
        return list(self) + list(other)

    def __repr__(self):
        made = len(self._items) - self._items.count(None)
        return f"<RecordTable of {len(self._items)} records, {made} made>"
