"""The torch adapter's list targets made from views and kept columns (detaug/adapters/box_lists.py):
equal, bit for bit, key for key, to what the adapter made before (every column a torch tensor,
the valid rows taken with ``index_select``: helpers/list_targets_before.py), on fresh random
batches: the CPU path, and the device path's in-place compaction emulated on host arrays
(``may_move`` naming them; ``IN_PLACE_CHUNK`` small, so that it moves in several runs). The
in-place move itself against ``np.take``, and masks made for the kept boxes only against every
box's masks then taken."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from detaug.adapters import box_lists  # noqa: E402
from detaug.adapters import torch as tadapter  # noqa: E402
from detaug.core.batch import BoxBatch  # noqa: E402
from detaug.core.instances import dense_polygons  # noqa: E402
from detaug.ops import instance_masks  # noqa: E402
from helpers import fresh_seed  # noqa: E402
from helpers.list_targets_before import previous_box_list, same_targets  # noqa: E402


def _batch(rng, kind):
    """A random host BoxBatch of 3 samples: boxes float32, labels int32, an int64 and a bool
    field, some boxes dropped; ``kind`` 'masks' (a masks field), 'polygons', 'bitmasks' or
    'both' (polygons and bitmasks: the adapter makes the masks)."""
    counts = rng.integers(0, 5, 3)
    counts[rng.integers(0, 3)] += 1  # at least one box
    off = np.concatenate([[0], np.cumsum(counts)])
    n = int(off[-1])
    canvas = rng.integers(6, 20, (3, 2))
    big = canvas.max(0)
    fields = {"annotation_id": rng.integers(0, 1000, n).astype(np.int64),
              "iscrowd": rng.random(n) < 0.3}
    per_box = np.repeat(canvas, counts, axis=0)
    if kind == "masks":
        fields["masks"] = (rng.random((n, *big)) < 0.4).astype(np.uint8)
    if kind in ("polygons", "both"):
        pts, poff, boff = [], [0], [0]
        for h, w in per_box:
            for _ in range(int(rng.integers(0, 3))):
                k = int(rng.integers(3, 7))
                pts.append(rng.uniform(0, 1, (k, 2)) * [w, h])
                poff.append(poff[-1] + k)
            boff.append(len(poff) - 1)
        dense = dense_polygons(np.concatenate(pts) if pts else np.zeros((0, 2)), poff, boff)
        # NaN rows past the width, as the GPU leaves them
        fields["polygons"] = np.concatenate([dense, np.full((n, 3, 2), np.nan)], axis=1)
    if kind in ("bitmasks", "both"):
        fields["bitmasks"] = (rng.random((n, big[0] + 2, big[1] + 1)) < 0.3).astype(np.uint8)
    valid = rng.random(n) < 0.6
    boxes = rng.uniform(0, 10, (n, 4)).astype(np.float32)
    labels = rng.integers(0, 80, n).astype(np.int32)
    return BoxBatch(boxes, labels, off, canvas, "cpu", fields, valid=valid)


def _copy(bb):
    return bb.replace(boxes=bb.boxes.copy(), labels=bb.labels.copy(), valid=bb.valid.copy(),
                      fields={k: v.copy() for k, v in bb.fields.items()})


@pytest.mark.parametrize("kind", ["masks", "polygons", "bitmasks", "both"])
def test_list_targets_equal_the_previous_ones(kind, monkeypatch):
    rng = np.random.default_rng(fresh_seed())
    monkeypatch.setattr(box_lists, "IN_PLACE_CHUNK", 40)  # runs of a few small rows
    monkeypatch.setattr(box_lists, "IN_PLACE_MIN", 0)
    monkeypatch.setattr(instance_masks, "UNITE_BYTES", 200)
    for _ in range(4):
        bb = _batch(rng, kind)
        offset = int(rng.integers(0, 3))
        want = previous_box_list(_copy(bb), offset)
        same_targets(tadapter._box_list(_copy(bb), offset), want)  # the CPU path
        # the device path's in-place move, emulated on host arrays
        moved = _copy(bb)
        ids = frozenset(id(a) for a in (moved.boxes, moved.labels, *moved.fields.values()))
        got = tadapter._box_list(moved, offset, may_move=ids)
        same_targets(got, want)
        if kind == "masks" and 0 < moved.valid.sum() < len(moved.valid):  # (the field itself)
            first = next(d["masks"] for d in got if len(d["masks"]))
            assert np.shares_memory(first.numpy(), moved.fields["masks"])


def test_in_place_kept_rows_equal_take(monkeypatch):
    rng = np.random.default_rng(fresh_seed())
    for chunk in (1, 24, 100, 1 << 20):
        monkeypatch.setattr(box_lists, "IN_PLACE_CHUNK", chunk)
        for _ in range(10):
            n = int(rng.integers(0, 30))
            a = rng.integers(0, 255, (n, 2, 3)).astype(np.uint8)
            keep = np.flatnonzero(rng.random(n) < rng.random())
            want = a[keep].copy()
            got = box_lists.kept(a, keep, in_place=True)
            assert np.array_equal(got, want) and (len(keep) == 0 or np.shares_memory(got, a))
            copy = box_lists.kept(a.copy(), keep)
            assert copy.shape == (len(keep), 2, 3)
    a = np.arange(12).reshape(6, 2)
    got = box_lists.kept(a, np.array([0, 1, 3, 5]), in_place=True)  # rows 0, 1 stay
    assert got.tolist() == [[0, 1], [2, 3], [6, 7], [10, 11]]
    assert a[4:].tolist() == [[8, 9], [10, 11]]  # past the kept rows: as they were


def test_masks_of_the_kept_boxes_equal_every_boxs_taken(monkeypatch):
    rng = np.random.default_rng(fresh_seed())
    monkeypatch.setattr(instance_masks, "UNITE_BYTES", 300)
    for kind in ("polygons", "bitmasks", "both"):
        bb = _batch(rng, kind)
        every = instance_masks.union_masks(bb)
        keep = np.flatnonzero(bb.valid)
        got = instance_masks.union_masks(bb, keep)
        assert got.dtype == np.uint8 and np.array_equal(got, every[keep])
        assert every.shape[1:] == tuple(bb.canvas.max(0))


class _Dev:
    """A stand-in for a device array where :func:`box_lists.movable` reads one: its type's
    module (cupy's), its memory's address, shape, strides and sizes."""
    __module__ = "cupy"

    def __init__(self, ptr, shape, strides, itemsize=1):
        self.data = type("Ptr", (), {"ptr": ptr})()
        self.shape, self.strides, self.itemsize = tuple(shape), tuple(strides), itemsize
        self.size = int(np.prod(shape))
        self.nbytes = self.size * itemsize


def test_only_a_large_array_no_other_output_shares_moves_in_place():
    mib = box_lists.IN_PLACE_MIN
    masks = _Dev(10 * mib, (4, mib // 2), (mib // 2, 1))         # 2 MiB, its own
    other = _Dev(20 * mib, (4, mib // 2), (mib // 2, 1))         # 2 MiB, shared by two outputs
    inside = _Dev(30 * mib + 64, (2, mib), (mib, 1))             # within ``outer``'s memory
    outer = _Dev(30 * mib, (4, mib), (mib, 1))
    back = _Dev(40 * mib + 3 * mib, (4, mib), (-mib, 1))         # reversed rows: [40, 44) MiB
    after = _Dev(44 * mib, (2, mib), (mib, 1))                   # starts where ``back`` ends
    small = _Dev(50 * mib, (4, 4), (4, 1))
    box = np.zeros((4, 4), np.float32)

    def boxes(**fields):
        return BoxBatch(box, np.zeros(4, np.int64), [0, 4], [[8, 8]], "gpu", fields)

    outs = (boxes(masks=masks, a=other, inner=inside, back=back, small=small),
            boxes(b=other, outer=outer, after=after))
    got = box_lists.movable(outs)
    assert got == {id(masks), id(back), id(after)}
    assert box_lists.movable((boxes(masks=masks), boxes(masks=masks))) == frozenset()
