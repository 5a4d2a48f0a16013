"""readers.record_table.RecordTable: read_coco's records kept as shared columns, each record
made when first asked for; and the pipeline reading those columns without making records."""
from __future__ import annotations

import json
import os
import pickle
import warnings

import numpy as np
import pytest

import readers.coco
from detaug import Pipeline, fn
from detaug.core.batch import concat_boxes
from readers import read_coco
from readers.records import Dataset, DetectionRecord
from helpers.reader_files import random_file
from helpers import COCO

SEEDS = [0, 1, 2, 3, 855618509, None, None]


def _seed(seed):
    return int(np.random.SeedSequence().entropy % 2**32) if seed is None else seed


def _read(tmp_path, seed, **opts):
    rng = np.random.default_rng(seed)
    path, root, doc = random_file(tmp_path, rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opts = {"include_iscrowd": bool(rng.integers(2)),
                "skip_empty": bool(rng.integers(2)), **opts}
        return read_coco(path, root, on_error="skip", **opts), doc


@pytest.mark.parametrize("seed", SEEDS)
def test_packed_columns_equal_the_records_packed(tmp_path, seed):
    """What the pipeline takes without making a record equals what it packed from the records
    (concat_boxes), array for array, dtype for dtype."""
    seed = _seed(seed)
    ds, _ = _read(tmp_path, seed)
    packed = ds.records.packed()
    assert packed is not None, seed
    records = list(ds.records)
    sizes = np.array([[r.height, r.width] for r in records], np.int64).reshape(-1, 2)
    want = concat_boxes([r.boxes for r in records], [r.labels for r in records],
                        [r.fields for r in records], sizes)
    assert packed.paths == [r.path for r in records], seed
    np.testing.assert_array_equal(packed.sizes, sizes)
    for name in ("boxes", "labels", "offsets"):
        got, ref = getattr(packed, name), getattr(want, name)
        assert got.dtype == ref.dtype and got.shape == ref.shape, (seed, name)
        np.testing.assert_array_equal(got, ref, err_msg=f"{seed} {name}")
    assert list(packed.fields) == list(want.fields), seed
    for name, ref in want.fields.items():
        assert packed.fields[name].dtype == ref.dtype, (seed, name)
        np.testing.assert_array_equal(packed.fields[name], ref, err_msg=f"{seed} {name}")
    # Records handed out and left as they were, or changed in place (their arrays are views of
    # the columns): the columns still hold them
    if len(records) and len(records[0].boxes):
        records[0].boxes[0, 2] += 1.0
        again = ds.records.packed()
        assert again.boxes[0, 2] == packed.boxes[0, 2] + 1.0, seed
        np.testing.assert_array_equal(again.boxes[1:], packed.boxes[1:])
    else:
        assert ds.records.packed() is not None


@pytest.mark.parametrize("change", ["boxes", "labels", "fields", "width", "path", "image_id",
                                    "field"])
def test_a_record_changed_by_assignment_stops_the_columns(tmp_path, change):
    """A record handed out whose attributes were replaced: the columns are no longer its, and
    the pipeline packs the records (``packed`` says None); ``image_ids`` reads the record."""
    ds, _ = _read(tmp_path, 21, skip_empty=True)
    table = ds.records
    r = table[len(table) // 2]
    assert table.packed() is not None
    if change in ("boxes", "labels"):
        setattr(r, change, getattr(r, change).copy())
    elif change == "fields":
        r.fields = dict(r.fields)
        r.fields["iscrowd"] = r.fields["iscrowd"].copy()
    elif change == "field":
        r.fields["extra_flag"] = np.zeros(r.num_boxes, np.uint8)
    elif change == "width":
        r.width += 1
    elif change == "path":
        r.path += ".png"
    else:
        r.image_id = -5
    assert table.packed() is None
    assert table.image_ids[len(table) // 2] == r.image_id


def test_a_record_is_made_once_and_the_table_is_a_sequence(tmp_path):
    ds, _ = _read(tmp_path, 11, skip_empty=False)
    table = ds.records
    n = len(table)
    assert n > 3
    first = table[0]
    assert table[0] is first and table[-n] is first and table[n - 1] is table[-1]
    assert table[1:3] == [table[1], table[2]] and table[1:3][0] is table[1]
    assert table[::-1][0] is table[-1]
    with pytest.raises(IndexError):
        table[n]
    assert [r.image_id for r in table] == table.image_ids
    made = list(table)
    assert made[0] is first and all(a is b for a, b in zip(table, made)) and table == made
    assert list(ds) == made and all(a is b for a, b in zip(ds, made))
    # Edited: a plain list of the same records from then on, and no columns.
    new = DetectionRecord("x.jpg", 4, 3, np.zeros((0, 4)), [])
    table[1] = new
    assert table[1] is new and table[0] is first and len(table) == n
    table.append(new)
    del table[0]
    table.insert(0, first)
    assert len(table) == n + 1 and table[0] is first and table[-1] is new
    assert table.packed() is None and table.image_ids[1] is None


def test_rows_map_to_their_own_per_box_extras(tmp_path):
    """Annotations out of image order, one dropped (a crowd box, include_iscrowd=False): each
    record's segmentation and box_keys are those of its own annotations, in file order."""
    (tmp_path / "im").mkdir()
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        (tmp_path / "im" / name).write_bytes(b"")
    images = [{"id": i + 1, "file_name": n, "width": 100, "height": 80}
              for i, n in enumerate(("a.jpg", "b.jpg", "c.jpg"))]
    anns = [{"id": 10, "image_id": 3, "category_id": 1, "bbox": [1, 1, 5, 5], "area": 25.5},
            {"id": 11, "image_id": 1, "category_id": 1, "bbox": [2, 2, 5, 5], "area": 1,
             "segmentation": [[1, 2, 3, 4, 5, 6]]},
            {"id": 12, "image_id": 3, "category_id": 1, "bbox": [3, 3, 5, 5], "iscrowd": 1,
             "area": 2},
            {"id": 13, "image_id": 3, "category_id": 1, "bbox": [4, 4, 5, 5], "area": 3.25},
            {"id": 14, "image_id": 1, "category_id": 1, "bbox": [5, 5, 5, 5]}]
    path = tmp_path / "ann.json"
    path.write_text(json.dumps({"images": images, "annotations": anns,
                                "categories": [{"id": 1, "name": "cat"}]}))
    ds = read_coco(path, tmp_path / "im", include_iscrowd=False, skip_empty=True)
    assert ds.dropped == {"crowd boxes (include_iscrowd=False)": 1,
                          "empty images (skip_empty)": 1}
    a, c = ds.records
    assert (a.image_id, c.image_id) == (1, 3)
    assert a.fields["annotation_id"].tolist() == [11, 14]
    assert c.fields["annotation_id"].tolist() == [10, 13]
    assert a.boxes.tolist() == [[2, 2, 7, 7], [5, 5, 10, 10]]
    assert c.boxes.tolist() == [[1, 1, 6, 6], [4, 4, 9, 9]]
    assert a.extra == {"segmentation": [[[1, 2, 3, 4, 5, 6]], None],
                       "box_keys": [{"area": 1}, {}]}
    assert c.extra == {"segmentation": [None, None],
                       "box_keys": [{"area": 25.5}, {"area": 3.25}]}


@pytest.mark.parametrize("seed", [5, None])
def test_pickled_table_gives_the_same_records(tmp_path, seed):
    seed = _seed(seed)
    ds, _ = _read(tmp_path, seed)
    table = ds.records
    table[0] if len(table) else None  # one made before, the rest after
    back = pickle.loads(pickle.dumps(ds)).records
    assert len(back) == len(table)
    for r, b in zip(table, back):
        assert (r.path, r.width, r.height, r.image_id, r.extra) == \
            (b.path, b.width, b.height, b.image_id, b.extra), seed
        np.testing.assert_array_equal(r.boxes, b.boxes)
        np.testing.assert_array_equal(r.labels, b.labels)
        assert {k: v.tolist() for k, v in r.fields.items()} == \
            {k: v.tolist() for k, v in b.fields.items()}, seed


def _batches(monkeypatch, plain):
    """Three batches of a COCO pipeline, the reader's records given as they come (a
    RecordTable) or as a plain list of the same records."""
    if plain:
        real = readers.coco.read_coco

        def as_list(*args, **kwargs):
            ds = real(*args, **kwargs)
            return Dataset(list(ds.records), ds.class_names, ds.category_ids, ds.root)
        monkeypatch.setattr(readers.coco, "read_coco", as_list)
    pipe = Pipeline(batch_size=4, num_threads=1, seed=3)
    with pipe:
        images, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                        annotations_file=os.path.join(COCO, "annotations.json"),
                                        random_shuffle=True)
        images = fn.decoders.image(images)
        images, boxes = fn.flip(images, boxes, horizontal=fn.random.coin_flip(probability=0.5))
        pipe.set_outputs(images, boxes)
    out = [pipe.run_batch(i) for i in (0, 1, 5)]
    pipe.close()
    monkeypatch.undo()
    return out


def test_pipeline_batches_equal_those_of_a_plain_record_list(monkeypatch):
    table, plain = _batches(monkeypatch, False), _batches(monkeypatch, True)
    for (ti, tb), (pi, pb) in zip(table, plain):
        a, b = ti.as_cpu().data, pi.as_cpu().data
        assert len(a) == len(b) == 4
        for x, y in zip(a, b):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        for name in ("offsets", "boxes", "labels", "canvas"):
            np.testing.assert_array_equal(getattr(tb, name), getattr(pb, name), err_msg=name)
        assert sorted(tb.fields) == sorted(pb.fields)
        for k in tb.fields:
            np.testing.assert_array_equal(tb.fields[k], pb.fields[k])
