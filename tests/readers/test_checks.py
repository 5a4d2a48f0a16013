"""readers.checks (what the converter applies between reading and writing): image sizes checked
against the image headers, truncated JPEG / PNG files told from files with data after their end
marker, under on_error 'raise' (the image named) and 'skip' (listed, counted); flagged boxes
counted and dropped with their fields, the images left empty counted."""
import io

import numpy as np
import pytest
from PIL import Image

from readers import DatasetError
from readers.checks import check_image_headers, count_flagged, drop_flagged
from readers.records import Dataset, DetectionRecord


def image_file(path, w, h, fmt="JPEG", tail=b"", cut=0):
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(w * h).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(buf, fmt)
    data = buf.getvalue()
    path.write_bytes((data[:-cut] if cut else data) + tail)
    return str(path)


def record(path, w, h, n=2, **fields):
    boxes = np.array([[1, 1, 4, 4]] * n, np.float32)
    return DetectionRecord(path=path, width=w, height=h, boxes=boxes, labels=np.zeros(n, np.int64),
                           fields={k: np.asarray(v) for k, v in fields.items()})


def dataset(records):
    return Dataset(records=list(records), class_names=["a"])


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_good_images_and_data_after_the_end_marker_pass(tmp_path, fmt):
    ds = dataset([record(image_file(tmp_path / f"a.{fmt}", 20, 10, fmt), 20, 10),
                  record(image_file(tmp_path / f"b.{fmt}", 8, 9, fmt, tail=b"trailing bytes"), 8, 9),
                  record(image_file(tmp_path / f"c.{fmt}", 8, 9, fmt), 0, 0)])  # size unknown: any
    assert check_image_headers(ds) == 0 and len(ds.records) == 3 and ds.skipped == []


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_a_wrong_size_or_a_truncated_file_is_named_or_skipped(tmp_path, fmt):
    good = image_file(tmp_path / f"good.{fmt}", 16, 16, fmt)
    wrong = image_file(tmp_path / f"wrong.{fmt}", 16, 12, fmt)
    cut = image_file(tmp_path / f"cut.{fmt}", 64, 64, fmt, cut=200)
    with pytest.raises(DatasetError) as e:
        check_image_headers(dataset([record(good, 16, 16), record(wrong, 12, 16)]))
    assert e.value.file == wrong and "the annotation gives the size 12x16, the image header 16x12" in str(e.value)
    ds = dataset([record(good, 16, 16), record(wrong, 12, 16), record(cut, 64, 64)])
    assert check_image_headers(ds, on_error="skip") == 2
    assert [r.path for r in ds.records] == [good]
    assert [p for p, _ in ds.skipped] == [wrong, cut]
    assert ds.skipped[1][1].startswith("the image data is truncated or corrupt")


def test_a_missing_or_unreadable_image_is_a_fault_too(tmp_path):
    (tmp_path / "text.jpg").write_text("not an image")
    ds = dataset([record(str(tmp_path / "gone.jpg"), 4, 4), record(str(tmp_path / "text.jpg"), 4, 4)])
    assert check_image_headers(ds, on_error="skip") == 2 and ds.records == []
    assert [p for p, _ in ds.skipped] == [str(tmp_path / "gone.jpg"), str(tmp_path / "text.jpg")]


def test_flagged_boxes_are_counted_and_dropped_with_their_fields():
    ds = dataset([record("a.jpg", 8, 8, 3, iscrowd=[0, 1, 0], area=[1.0, 2.0, 3.0]),
                  record("b.jpg", 8, 8, 2, iscrowd=[1, 1], area=[4.0, 5.0]),
                  record("c.jpg", 8, 8, 1, area=[6.0]),  # no flags: untouched
                  record("d.jpg", 8, 8, 2, iscrowd=[0, 0], area=[7.0, 8.0])])
    assert count_flagged(ds, "iscrowd") == 3 and count_flagged(ds, "difficult") == 0
    assert drop_flagged(ds, "iscrowd", "crowd") == 1  # b.jpg has no box left
    assert ds.dropped["crowd"] == 3
    assert [r.num_boxes for r in ds.records] == [2, 0, 1, 2]
    np.testing.assert_array_equal(ds.records[0].fields["area"], [1.0, 3.0])
    np.testing.assert_array_equal(ds.records[0].fields["iscrowd"], [0, 0])
    assert count_flagged(ds, "iscrowd") == 0
    assert drop_flagged(ds, "iscrowd", "crowd") == 0 and ds.dropped["crowd"] == 3  # nothing more
