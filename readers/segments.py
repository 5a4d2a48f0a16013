"""Per-instance shapes beside the boxes: ragged per-box fields, COCO run-length masks, polygons.

An instance is a box plus whatever the data set gives for it; every such thing is a per-box
field of the record (``DetectionRecord.fields``), so whoever drops a box drops it too:

- ``polygons``: a :class:`Ragged` of a :class:`Ragged`: box ``i`` owns polygons
  ``polygons.offsets[i]:polygons.offsets[i + 1]``, polygon ``j`` owns the points
  ``polygons.values.values[o[j]:o[j + 1]]`` (float64 (P, 2): the file's values exactly, so
  that they rasterise as COCO's own tools rasterise them; continuous pixel coordinates:
  COCO's polygon coordinates are already continuous, ``[0, W] x [0, H]``).
- ``rle``: a :class:`Ragged` of uint32 COCO run lengths (column-major, first run of zeros),
  the mask of the record's whole image (its ``height`` x ``width``); no runs: no mask.
- ``keypoints``: float32 (N, K, 3) ``[x, y, visibility]`` (dense: K is the data set's).
- ``obb``: float32 (N, 4, 2), the 4 corners of each oriented box in the file's order.

Everything here is NumPy only, except the polygon rasteriser, which is pycocotools' (the
format's own: a mask made here is the mask COCO's evaluation makes).
"""
from __future__ import annotations

import numpy as np

INSTANCE_FIELDS = ("polygons", "rle", "keypoints", "obb")
# Keypoints an instance may have: past any data set's (COCO 17, COCO-WholeBody 133), so that an
# untrusted file's K cannot size an (N, K, 3) array past memory
MAX_KEYPOINTS = 4096


class Ragged:
    """Per-box values of varying count: box ``i`` owns ``values[offsets[i]:offsets[i + 1]]``.

    ``values`` is an array whose first axis is the packed items, or a :class:`Ragged` itself
    (two levels: a box's polygons, each polygon's points). Behaves as a per-box field: ``len``
    is the number of boxes; ``r[i]`` is box ``i``'s values; ``r[mask]``, ``r[indices]`` and
    ``r[a:b]`` give a Ragged of those boxes (copies, except a slice, whose values are views).
    """

    __slots__ = ("values", "offsets")

    def __init__(self, values, offsets):
        offsets = np.asarray(offsets, np.int64).reshape(-1)
        if offsets.size < 1 or offsets[0] != 0 or (np.diff(offsets) < 0).any() \
                or offsets[-1] != len(values):
            raise ValueError(f"ragged offsets must rise from 0 to {len(values)} values")
        self.values, self.offsets = values, offsets

    @classmethod
    def _trusted(cls, values, offsets):
        """A Ragged of parts already consistent (a slice or gather of one): no checks (a
        reader slicing a million records' fields pays them a million times)."""
        out = object.__new__(cls)
        out.values, out.offsets = values, offsets
        return out

    @classmethod
    def from_lists(cls, items, dtype=np.float32, width=None):
        """From one list (or array) per box; ``width``: the values' trailing size (2 for
        points), so that an empty box still gives a (0, width) block."""
        shape = (-1,) if width is None else (-1, width)
        parts = [np.asarray(v, dtype).reshape(shape) for v in items]
        offsets = np.zeros(len(parts) + 1, np.int64)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        empty = np.zeros((0,) + shape[1:], dtype)
        return cls(np.concatenate(parts) if parts else empty, offsets)

    def __len__(self):
        return len(self.offsets) - 1

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __getitem__(self, key):
        if isinstance(key, (int, np.integer)):
            n = len(self)
            if not -n <= key < n:
                raise IndexError(f"box {key} of {n}")
            key %= n
            return self.values[int(self.offsets[key]):int(self.offsets[key + 1])]
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step == 1:
                stop = max(start, stop)
                lo, hi = int(self.offsets[start]), int(self.offsets[stop])
                return Ragged._trusted(self.values[lo:hi], self.offsets[start:stop + 1] - lo)
            key = np.arange(start, stop, step)
        key = np.asarray(key)
        if key.dtype == bool:
            if key.shape != (len(self),):
                raise IndexError(f"a mask of {key.shape} for {len(self)} boxes")
            key = np.flatnonzero(key)
        return self.take(key)

    def take(self, index) -> "Ragged":
        """The boxes ``index`` (int array), in that order."""
        index = np.asarray(index, np.int64).reshape(-1)
        starts, counts = self.offsets[index], self.counts[index]
        offsets = np.zeros(len(index) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        rows = np.repeat(starts - offsets[:-1], counts) + np.arange(offsets[-1])
        values = self.values.take(rows) if isinstance(self.values, Ragged) else self.values[rows]
        return Ragged._trusted(values, offsets)

    def copy(self) -> "Ragged":
        return Ragged(self.values.copy(), self.offsets.copy())

    @staticmethod
    def concat(parts) -> "Ragged":
        """One Ragged of the boxes of every part, in order."""
        parts = list(parts)
        counts = np.concatenate([p.counts for p in parts]) if parts else np.zeros(0, np.int64)
        offsets = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        if parts and isinstance(parts[0].values, Ragged):
            values = Ragged.concat([p.values for p in parts])
        else:
            values = np.concatenate([p.values for p in parts]) if parts else np.zeros(0)
        return Ragged(values, offsets)

    def __eq__(self, other):
        if not isinstance(other, Ragged):
            return NotImplemented
        if not np.array_equal(self.offsets, other.offsets):
            return False
        if isinstance(self.values, Ragged) or isinstance(other.values, Ragged):
            return self.values == other.values
        return np.array_equal(self.values, other.values)

    __hash__ = None

    def __repr__(self):
        return f"Ragged({len(self)} boxes, {len(self.values)} values)"


def polygons_field(per_box) -> Ragged:
    """The ``polygons`` field from one list of polygons per box, each polygon a flat
    ``[x0, y0, x1, y1, ...]`` or (P, 2) array."""
    polys = [p for box in per_box for p in box]
    counts = [len(box) for box in per_box]
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return Ragged(Ragged.from_lists(polys, np.float64, 2), offsets)


def box_polygons(polygons: Ragged, i) -> list:
    """Box ``i``'s polygons as a list of (P, 2) float64 arrays."""
    inner = polygons.values
    lo, hi = int(polygons.offsets[i]), int(polygons.offsets[i + 1])
    return [inner[j] for j in range(lo, hi)]


def polygons_box(polygons: Ragged) -> np.ndarray:
    """(N, 4) float64 enclosing box of each box's polygons (NaN where it has none)."""
    inner = polygons.values
    pts = inner.values.astype(np.float64)
    out = np.full((len(polygons), 4), np.nan)
    if not len(pts):
        return out
    poly_of_point = np.repeat(np.arange(len(inner)), inner.counts)
    box_of_poly = np.repeat(np.arange(len(polygons)), polygons.counts)
    owner = box_of_poly[poly_of_point]
    has = np.zeros(len(polygons), bool)
    has[owner] = True
    lo = np.full((len(polygons), 2), np.inf)
    hi = np.full((len(polygons), 2), -np.inf)
    np.minimum.at(lo, owner, pts)
    np.maximum.at(hi, owner, pts)
    out[has] = np.concatenate([lo, hi], 1)[has]
    return out


# -- COCO run-length encoding ------------------------------------------------------------------

def rle_from_string(s: str) -> np.ndarray:
    """The run lengths of COCO's compressed RLE string (pycocotools' ``rleFrString``: 5 bits a
    character from ``'0'``, a continuation bit, sign-extended, each count after the second
    stored as the difference from the count two before).

    Raises:
        ValueError: a character outside the code, a string that ends inside a number, or a
        negative run.
    """
    data = s.encode("ascii") if isinstance(s, str) else bytes(s)
    counts, k, x, more = [], 0, 0, False
    for byte in data:
        c = byte - 48
        if not 0 <= c < 64:
            raise ValueError(f"byte {byte!r} is not a compressed-RLE character")
        x |= (c & 0x1F) << (5 * k)
        more = bool(c & 0x20)
        k += 1
        if not more:
            if c & 0x10:
                x |= -1 << (5 * k)
            if len(counts) > 2:
                x += counts[-2]
            counts.append(x)
            k, x = 0, 0
    if more:
        raise ValueError("the string ends inside a number")
    out = np.asarray(counts, np.int64)
    if (out < 0).any() or (out >= 2**32).any():
        raise ValueError("a run length is negative or over 2**32")
    return out.astype(np.uint32)


def rle_to_string(counts) -> str:
    """COCO's compressed RLE string of the run lengths (inverse of :func:`rle_from_string`)."""
    counts = [int(v) for v in counts]
    out = bytearray()
    for i, x in enumerate(counts):
        if i > 2:
            x -= counts[i - 2]
        while True:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            if more:
                c |= 0x20
            out.append(c + 48)
            if not more:
                break
    return out.decode("ascii")


def rle_decode(counts, height: int, width: int) -> np.ndarray:
    """(H, W) uint8 0/1 mask of COCO run lengths (column-major; runs alternate 0, 1, ...)."""
    counts = np.asarray(counts, np.int64)
    if counts.sum() != height * width:
        raise ValueError(f"run lengths sum to {counts.sum()}, not {height} x {width}")
    values = (np.arange(len(counts)) % 2).astype(np.uint8)
    return np.repeat(values, counts).reshape(width, height).T.copy()


def rle_encode(mask) -> np.ndarray:
    """COCO run lengths (uint32) of an (H, W) mask (non-zero: inside), column-major."""
    flat = (np.asarray(mask) != 0).T.reshape(-1)
    if not flat.size:
        return np.zeros(1, np.uint32)  # one empty run: (an empty image's mask)
    change = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    edges = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(edges)
    if flat[0]:
        runs = np.concatenate([[0], runs])
    return runs.astype(np.uint32)


def polygons_rle(polygons, height: int, width: int) -> np.ndarray:
    """Run lengths of the union of ``polygons`` (each (P, 2) or flat) rasterised as COCO does
    (pycocotools' ``frPyObjects`` + ``merge``)."""
    from pycocotools import mask as coco_mask

    flat = [np.asarray(p, np.float64).reshape(-1).tolist() for p in polygons]
    if not flat:
        return rle_encode(np.zeros((height, width), np.uint8))
    rles = coco_mask.frPyObjects(flat, height, width)
    merged = coco_mask.merge(rles) if len(rles) > 1 else rles[0]
    return rle_from_string(merged["counts"].decode("ascii"))


def instance_masks(record) -> np.ndarray:
    """(N, H, W) uint8 0/1 masks of a record's instances: its ``rle`` where a box has runs,
    else its ``polygons`` rasterised, else zeros."""
    n, h, w = record.num_boxes, int(record.height), int(record.width)
    out = np.zeros((n, h, w), np.uint8)
    rle, polys = record.fields.get("rle"), record.fields.get("polygons")
    for i in range(n):
        if rle is not None and len(rle[i]):
            out[i] = rle_decode(rle[i], h, w)
        elif polys is not None and polys.counts[i]:
            out[i] = rle_decode(polygons_rle(box_polygons(polys, i), h, w), h, w)
    return out


# -- checks of untrusted values ----------------------------------------------------------------

def tidy(values) -> list:
    """Each float as the shortest decimal that reads back to it, or to within 4 float64 steps
    of it (``25.309999999999995``, a value that came through a division by the image size and
    back, is written ``25.31``): a file's own values are written as the file had them, and a
    value the arithmetic of a round trip moved by an ulp comes back as it was."""
    out = []
    for v in np.asarray(values, np.float64).reshape(-1).tolist():
        short = float(str(np.float32(v)))  # NumPy's shortest repr of the nearest float32
        out.append(short if abs(short - v) <= 4 * np.spacing(abs(v)) else v)
    return out


def coco_polygon_fault(seg) -> str | None:
    """Why a COCO polygon segmentation (a list of flat coordinate lists) is bad, or None."""
    if not isinstance(seg, list) or not seg:
        return "'segmentation' is neither polygons (a list of coordinate lists) nor an RLE object"
    for k, poly in enumerate(seg):
        if not isinstance(poly, list):
            return f"polygon {k} is not a list of numbers"
        if len(poly) % 2:
            return f"polygon {k} has an odd number of coordinates ({len(poly)})"
        if len(poly) < 6:
            return f"polygon {k} has {len(poly) // 2} points; a polygon needs 3 at least"
        if not _all_finite(poly):
            return f"polygon {k} holds a value that is not a finite number"
    return None


def coco_rle_counts(seg, height, width):
    """``(run lengths, None)`` of a COCO RLE object (compressed string or uncompressed list of
    counts) checked against the image's size, or ``(None, fault)``."""
    size, counts = seg.get("size"), seg.get("counts")
    if not (isinstance(size, list) and len(size) == 2 and all(type(v) is int for v in size)):
        return None, f"RLE 'size' is {size!r:.40}, not [height, width]"
    if size != [int(height), int(width)]:
        return None, f"RLE size {size} is not the image's [height, width] [{height}, {width}]"
    if isinstance(counts, str):
        try:
            runs = rle_from_string(counts)
        except ValueError as exc:
            return None, f"RLE counts: {exc}"
    elif isinstance(counts, list) and all(type(v) is int for v in counts):
        runs = np.asarray(counts, np.int64)
        if (runs < 0).any():
            return None, "RLE counts hold a negative run"
        runs = runs.astype(np.uint32)
    else:
        return None, "RLE 'counts' is neither a string nor a list of whole numbers"
    total = int(runs.astype(np.int64).sum())
    if total != size[0] * size[1]:
        return None, f"RLE runs cover {total} pixels, not {size[0]} x {size[1]}"
    return runs, None


def keypoints_fault(values, k) -> str | None:
    """Why ``values`` is not K keypoints ``[x, y, v] * K`` with v in {0, 1, 2}, or None."""
    if not isinstance(values, list) or not _all_finite(values):
        return "'keypoints' is not a list of finite numbers"
    if len(values) % 3:
        return f"'keypoints' holds {len(values)} numbers, not a multiple of 3 (x, y, v)"
    if k is not None and len(values) != 3 * k:
        return f"'keypoints' holds {len(values) // 3} points; the category names {k}"
    vis = values[2::3]
    bad = next((v for v in vis if v not in (0, 1, 2)), None)
    if bad is not None:
        return f"keypoint visibility {bad!r} is not 0, 1 or 2"
    return None


def _all_finite(values) -> bool:
    """Whether every item is an int or float (not a bool, a string, ...) that float64 holds
    finite: types in one C-speed pass, then one array (per-item checks were most of a read)."""
    if not set(map(type, values)) <= {int, float}:
        return False
    try:
        return bool(np.isfinite(np.fromiter(values, np.float64, len(values))).all())
    except OverflowError:  # an int past float64
        return False


def flip_index_from_names(names) -> list:
    """The keypoint each one becomes under a mirror, paired by name: ``left_*`` with
    ``right_*`` (also ``l_`` / ``r_`` and ``*_left`` / ``*_right``); others map to themselves."""
    names = [str(n) for n in names]
    where = {n: i for i, n in enumerate(names)}
    swaps = (("left_", "right_"), ("l_", "r_"), ("_left", "_right"), ("_l", "_r"))
    out = list(range(len(names)))
    for i, name in enumerate(names):
        for a, b in swaps:
            for x, y in ((a, b), (b, a)):
                starts = x.endswith("_")
                if (name.startswith(x) if starts else name.endswith(x)):
                    other = (y + name[len(x):]) if starts else (name[:-len(x)] + y)
                    if other in where:
                        out[i] = where[other]
    return out


def check_flip_index(flip_index, k, where) -> list:
    """``flip_index`` as a list after checking it is a permutation of 0..K-1 that is its own
    inverse (mirroring twice changes nothing); ValueError naming ``where`` otherwise."""
    fi = list(flip_index)
    if len(fi) != k or sorted(fi) != list(range(k)) or any(fi[fi[i]] != i for i in range(k)):
        raise ValueError(f"{where}: flip index {fi!r:.80} is not a pairing of the {k} "
                         "keypoints (a permutation of 0..K-1 that is its own inverse)")
    return fi
