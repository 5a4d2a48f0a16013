"""The converter never reports a count it did not write, and a COCO
``bbox`` of the wrong length is a named fault (or a counted skip), never a raw exception.

Item 3: two images of one stem (``a.jpg``, ``a.png``) and one image file listed under two
ids are converted from every source (COCO, VOC, TFRecord; a YOLO source cannot hold them: its
reader refuses shared stems, naming both) to every target. Each run either refuses with a
DatasetError naming both inputs, leaving no destination, or writes a dataset whose every
output, read back by the target's reader, holds exactly the images and boxes the summary
counts, image by image.
"""
import json
import os
import warnings

import numpy as np
import pytest
from PIL import Image

import readers
from detaug.cli.convert import main
from readers import DatasetError

TARGETS = ("coco", "voc", "yolo", "tfrecord")
# image file -> (width, height, boxes as xyxy): a.jpg / a.png share the stem "a"
FILES = {"a.jpg": (60, 40, [[1, 2, 11, 12], [20, 5, 30, 25]]),
         "a.png": (50, 30, [[3, 3, 13, 23]]),
         "b.jpg": (40, 40, [[5, 5, 15, 15]])}


def _image(path, width, height, seed):
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


def _coco_source(folder, case):
    """COCO: ``stem`` lists a.jpg and a.png; ``shared`` lists b.jpg under ids 3 and 4."""
    images = os.path.join(folder, "images")
    os.makedirs(images)
    for seed, (name, (w, h, _)) in enumerate(FILES.items()):
        _image(os.path.join(images, name), w, h, seed)
    listing = [("a.jpg", 1), ("a.png", 2)] if case == "stem" else [("b.jpg", 3), ("b.jpg", 4)]
    doc = {"images": [], "annotations": [], "categories": [{"id": 1, "name": "cat"},
                                                           {"id": 2, "name": "dog"}]}
    for name, image_id in listing:
        w, h, boxes = FILES[name]
        doc["images"].append({"id": image_id, "file_name": name, "width": w, "height": h})
        for x0, y0, x1, y1 in boxes:
            doc["annotations"].append({"id": len(doc["annotations"]) + 1, "image_id": image_id,
                                       "category_id": 1 + image_id % 2, "iscrowd": 0,
                                       "bbox": [x0, y0, x1 - x0, y1 - y0]})
    path = os.path.join(folder, "annotations.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path, [name for name, _ in listing]


def _voc_source(folder, case):
    """VOC: ids x and y whose <filename> is a.jpg and a.png (stem), or b.jpg both (shared)."""
    path, names = _coco_source(os.path.join(folder, "coco"), case)
    ds = readers.read_coco(path, os.path.join(folder, "coco", "images"))
    for record, image_id in zip(ds.records, ("x", "y")):
        record.image_id = image_id
    root = os.path.join(folder, "voc")
    readers.write_voc(ds, root)
    if case == "shared":  # y's annotation names x's image file
        for stem in ("x", "y"):
            xml = os.path.join(root, "Annotations", stem + ".xml")
            text = open(xml).read().replace(f"<filename>{stem}.jpg<", "<filename>x.jpg<")
            open(xml, "w").write(text)
        os.remove(os.path.join(root, "JPEGImages", "y.jpg"))
        names = ["x.jpg", "x.jpg"]
    else:
        names = ["x.jpg", "y.png"]
    return root, names


def _tfrecord_source(folder, case):
    from readers.tfrecord_od import write_tfrecord

    path, names = _coco_source(os.path.join(folder, "coco"), case)
    ds = readers.read_coco(path, os.path.join(folder, "coco", "images"))
    out = os.path.join(folder, "tfr")
    write_tfrecord(ds, out)
    return os.path.join(out, "train-00000-of-00001.tfrecord"), names


def _yolo_source(folder, case):
    """YOLO: images/a.jpg and images/a.png would share labels/a.txt (the reader refuses);
    one file under two ids cannot be written in YOLO, so ``shared`` is the same case."""
    path, _ = _coco_source(os.path.join(folder, "coco"), "stem")
    root = os.path.join(folder, "yolo")
    for sub in ("images", "labels"):
        os.makedirs(os.path.join(root, sub))
    for name in ("a.jpg", "a.png"):
        os.link(os.path.join(folder, "coco", "images", name), os.path.join(root, "images", name))
    with open(os.path.join(root, "labels", "a.txt"), "w") as f:
        f.write("0 0.5 0.5 0.2 0.2\n")
    with open(os.path.join(root, "classes.txt"), "w") as f:
        f.write("cat\ndog\n")
    return root, ["a.jpg", "a.png"]


SOURCES = {"coco": _coco_source, "voc": _voc_source, "tfrecord": _tfrecord_source,
           "yolo": _yolo_source}


def _read_back(fmt, dst):
    if fmt == "coco":
        return readers.read_coco(os.path.join(dst, "annotations.json"), os.path.join(dst, "images"))
    if fmt == "voc":
        return readers.read_voc(dst, classes=os.path.join(dst, "classes.txt"))
    if fmt == "tfrecord":
        from readers.tfrecord_od import read_tfrecord

        return read_tfrecord(dst, label_map=os.path.join(dst, "label_map.pbtxt"))
    return readers.read_yolo(dst)


def _pixels(record):
    from readers.tfrecord_od import image_bytes
    import io

    return np.asarray(Image.open(io.BytesIO(image_bytes(record))).convert("RGB"))


@pytest.mark.parametrize("dst_fmt", TARGETS)
@pytest.mark.parametrize("src_fmt", sorted(SOURCES))
@pytest.mark.parametrize("case", ["stem", "shared"])
def test_converter_summary_matches_what_every_output_holds(tmp_path, capsys, case, src_fmt,
                                                           dst_fmt):
    src, names = SOURCES[src_fmt](str(tmp_path / "src"), case)
    dst = str(tmp_path / "out")
    argv = [src, dst, "--from", src_fmt, "--to", dst_fmt]
    if src_fmt == "voc":
        argv += ["--classes", os.path.join(src, "classes.txt")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        status = main(argv)
    out, err = capsys.readouterr()
    if status != 0:  # a refusal names both inputs and writes nothing
        assert status == 2 and "Traceback" not in err, err
        assert all(n in err for n in set(names)) or err.count(names[0]) >= 2, err
        assert not os.path.exists(dst) and os.listdir(tmp_path) == ["src"]
        return
    lines = out.splitlines()
    wrote = next(line for line in lines if line.startswith("wrote ")).split()
    n_images, n_boxes = int(wrote[1]), int(wrote[3])
    read = lines[0].split()
    assert (n_images, n_boxes) == (int(read[1]), int(read[3])) == (2, sum(
        len(FILES[n][2]) for n in (["a.jpg", "a.png"] if case == "stem" else ["b.jpg"] * 2)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = _read_back(dst_fmt, dst)
    assert len(back) == n_images and sum(r.num_boxes for r in back.records) == n_boxes
    # image by image: each written image holds the boxes of the source image it shows
    expected = sorted((FILES[n][0], FILES[n][1], len(FILES[n][2]))
                      for n in (["a.jpg", "a.png"] if case == "stem" else ["b.jpg"] * 2))
    got = sorted((r.width, r.height, r.num_boxes) for r in back.records)
    assert got == expected
    for record in back.records:
        name = next(n for n, (w, h, _) in FILES.items() if (w, h) == (record.width, record.height))
        want = np.asarray(FILES[name][2], np.float32)
        assert np.abs(np.sort(record.boxes, axis=0) - np.sort(want, axis=0)).max() <= 0.5
        assert _pixels(record).shape == (record.height, record.width, 3)


def test_yolo_writer_refuses_two_images_of_one_stem_naming_both(tmp_path):
    path, _ = _coco_source(str(tmp_path / "src"), "stem")
    ds = readers.read_coco(path, str(tmp_path / "src" / "images"))
    with pytest.raises(DatasetError) as err:
        readers.write_yolo(ds, str(tmp_path / "out"))
    assert err.value.file.endswith("a.png") and "a.jpg" in err.value.reason
    assert not os.path.exists(tmp_path / "out")


def test_yolo_writer_refuses_one_image_under_two_ids_naming_both(tmp_path):
    path, _ = _coco_source(str(tmp_path / "src"), "shared")
    ds = readers.read_coco(path, str(tmp_path / "src" / "images"))
    with pytest.raises(DatasetError) as err:
        readers.write_yolo(ds, str(tmp_path / "out"), dry_run=True)
    assert "image id 4" in str(err.value) and "image id 3" in str(err.value)


# ---------------------------------------------------------------- item 4: bbox length

def _coco_with_bboxes(folder, bboxes):
    os.makedirs(os.path.join(folder, "images"))
    _image(os.path.join(folder, "images", "a.jpg"), 100, 80, 0)
    anns = [{"id": i + 1, "image_id": 1, "category_id": 1, "bbox": b, "iscrowd": 0}
            for i, b in enumerate(bboxes)]
    path = os.path.join(folder, "annotations.json")
    with open(path, "w") as f:
        json.dump({"images": [{"id": 1, "file_name": "a.jpg", "width": 100, "height": 80}],
                   "annotations": anns, "categories": [{"id": 1, "name": "cat"}]}, f)
    return path


BAD_BBOXES = {
    "8 numbers": [[1, 2, 3, 4, 5, 6, 7, 8]],
    "2 numbers": [[1, 2]],
    "0 numbers": [[]],
    "8 numbers twice": [[1, 2, 3, 4, 5, 6, 7, 8]] * 2,
    "2 and 2 numbers": [[1, 2], [3, 4]],
    "a string": [[1, 2, "3", 4]],
    "a bool": [[1, 2, True, 4]],
    "not a list": [{"x": 1}],
}


@pytest.mark.parametrize("good", [False, True], ids=["alone", "with a good box"])
@pytest.mark.parametrize("case", sorted(BAD_BBOXES))
def test_coco_bbox_of_the_wrong_length_is_a_named_fault(tmp_path, case, good):
    bboxes = BAD_BBOXES[case] + [[10, 10, 20, 20]] * good  # a good box after the bad ones
    path = _coco_with_bboxes(str(tmp_path), bboxes)
    with pytest.raises(DatasetError) as err:
        readers.read_coco(path, str(tmp_path / "images"))
    assert err.value.file == path and "annotation #0 (id 1)" in err.value.reason
    assert "'bbox' must be 4 numbers" in err.value.reason
    with pytest.warns(UserWarning, match="skipped"):
        ds = readers.read_coco(path, str(tmp_path / "images"), on_error="skip")
    assert len(ds.skipped) == len(BAD_BBOXES[case])
    assert ds.records[0].boxes.tolist() == [[10, 10, 30, 30]] * good


@pytest.mark.parametrize("case", ["8 numbers", "2 and 2 numbers", "0 numbers"])
def test_convert_skip_bad_counts_a_bbox_of_the_wrong_length(tmp_path, capsys, case):
    path = _coco_with_bboxes(str(tmp_path / "src"), BAD_BBOXES[case])
    with open(path) as f:  # a second image, without boxes
        doc = json.load(f)
    doc["images"].append({"id": 2, "file_name": "b.jpg", "width": 100, "height": 80})
    _image(str(tmp_path / "src" / "images" / "b.jpg"), 100, 80, 1)
    with open(path, "w") as f:
        json.dump(doc, f)
    dst = str(tmp_path / "out")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        status = main([path, dst, "--from", "coco", "--to", "yolo", "--skip-bad"])
    out, err = capsys.readouterr()
    assert status == 0 and "Traceback" not in err, err
    assert f"skipped {len(BAD_BBOXES[case])} bad items:" in out
    assert "wrote 2 images, 0 boxes" in out
    assert [open(os.path.join(dst, "labels", n)).read() for n in ("a.txt", "b.txt")] == ["", ""]
    assert main([path, str(tmp_path / "out2"), "--from", "coco", "--to", "yolo"]) == 2
    assert "annotation #0 (id 1): 'bbox' must be 4 numbers" in capsys.readouterr().err
