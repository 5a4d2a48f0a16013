"""VOC SegmentationObject PNGs as the rle field (readers/voc_masks.py): each object's mask is
the PNG's pixels of its 1-based index, outlines (255) in no mask; bad PNGs named."""
import os

import numpy as np
import pytest
from PIL import Image

from readers.errors import DatasetError
from readers.segments import rle_decode
from readers.voc_masks import read_voc_instances
from helpers.reader_files import voc_xml, write_voc


def _tree(tmp_path, index, objects=None, size=(100, 80)):
    objects = objects or [("dog", 1, 1, 50, 40), ("cat", 20, 20, 90, 70, 1)]
    root = write_voc(tmp_path, {"a": voc_xml("a.jpg", size, objects),
                                "b": voc_xml("b.jpg", size, objects[:1])})
    os.makedirs(os.path.join(root, "SegmentationObject"), exist_ok=True)
    im = Image.fromarray(index.astype(np.uint8), "P")
    im.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0] + [0] * 759)
    im.save(os.path.join(root, "SegmentationObject", "a.png"))
    return root


def test_object_masks_from_indices(tmp_path, rng):
    index = rng.integers(0, 3, (80, 100))
    index[rng.random((80, 100)) < 0.1] = 255
    ds = read_voc_instances(_tree(tmp_path, index))
    a, b = ds.records
    for k in range(2):
        assert np.array_equal(rle_decode(a.fields["rle"][k], 80, 100), index == k + 1)
    assert list(b.fields["rle"].counts) == [0]  # no PNG: no mask
    ds = read_voc_instances(_tree(tmp_path / "d", index), skip_difficult=True)
    assert ds.records[0].num_boxes == 1 and len(ds.records[0].fields["rle"]) == 1
    assert np.array_equal(rle_decode(ds.records[0].fields["rle"][0], 80, 100), index == 1)


def test_tight_boxes_mark_every_kept_box(tmp_path, rng):
    index = rng.integers(0, 3, (80, 100))
    assert all("tight_box" not in r.fields for r in read_voc_instances(_tree(tmp_path, index)).records)
    ds = read_voc_instances(_tree(tmp_path / "t", index), tight_boxes=True)
    assert [r.fields["tight_box"].tolist() for r in ds.records] == [[1, 1], [1]]
    assert ds.records[0].fields["tight_box"].dtype == np.uint8
    ds = read_voc_instances(_tree(tmp_path / "d", index), tight_boxes=True, skip_difficult=True)
    assert [r.fields["tight_box"].tolist() for r in ds.records] == [[1], [1]]  # the cat dropped


@pytest.mark.parametrize("index,message", [
    (np.full((80, 100), 3), "object index 3"),
    (np.zeros((60, 100)), "not the annotation's"),
])
def test_bad_png_is_named(tmp_path, index, message):
    root = _tree(tmp_path, index)
    with pytest.raises(DatasetError, match=message) as info:
        read_voc_instances(root)
    assert "a.png" in str(info.value)
    with pytest.warns(UserWarning):
        ds = read_voc_instances(root, on_error="skip")
    assert list(ds.records[0].fields["rle"].counts) == [0, 0]
