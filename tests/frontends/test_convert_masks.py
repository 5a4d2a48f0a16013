"""detaug-convert with bitmap masks: COCO RLE (crowds') to COCO unchanged; a VOC source's
SegmentationObject masks to COCO RLE (pycocotools' encoding, equal pixel for pixel through the
reader's ``bitmasks``) and to VOC's SegmentationObject PNGs again; every target without bitmaps
refuses naming the source, the count and --drop-masks, or with --drop-masks (or --skip-crowd
for crowds) writes the boxes and counts what it left out."""
import json
import os

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as coco_mask

from detaug import Pipeline, fn
from detaug.cli.convert import main
from helpers import COCO
from helpers.reader_files import crowd_coco, voc_xml, write_voc
from readers.coco_instances import read_coco_shapes
from readers.errors import DatasetError
from readers.segments import Ragged, rle_decode, rle_encode
from readers.voc_masks import read_voc_instances
from readers.writers import write_voc as write_voc_tree

IMAGES = os.path.join(COCO, "images")


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_coco_crowd_rle_to_coco_is_exact(tmp_path, capsys):
    path, want = crowd_coco(tmp_path / "src", every=5)
    code, out, err = _run(capsys, path, tmp_path / "out", "--from", "coco", "--to", "coco",
                          "--image-root", IMAGES)
    assert code == 0, err
    back = os.path.join(tmp_path, "out", "annotations.json")
    src, got = (json.load(open(p))["annotations"] for p in (path, back))
    assert len(got) == len(src)  # (grouped by image: compared by id)
    assert {a["id"]: (a["segmentation"], a["iscrowd"], a["area"]) for a in got} == \
        {a["id"]: (a["segmentation"], a["iscrowd"], a["area"]) for a in src}
    assert any(isinstance(a["segmentation"].get("counts"), list) for a in got
               if isinstance(a["segmentation"], dict))  # plain counts stay plain
    ds = read_coco_shapes(back, os.path.join(tmp_path, "out", "images"), bitmasks=True)
    seen = 0
    for r in ds.records:
        for i, ann_id in enumerate(r.fields["annotation_id"].tolist()):
            if ann_id in want:
                np.testing.assert_array_equal(rle_decode(r.fields["rle"][i], r.height, r.width),
                                              want[ann_id])
                seen += 1
    assert seen == len(want) >= 10


def _voc_with_masks(tmp_path, rng):
    """Two VOC images: ``a`` with a SegmentationObject PNG of random object indices (and VOC's
    255 outline), ``b`` without one. Returns (root, index array of a, object count of a)."""
    n = int(rng.integers(2, 5))
    objects = [("dog" if k % 2 else "cat", 1 + k, 2 + k, 60 + k, 50 + k) for k in range(n)]
    root = write_voc(tmp_path / "voc", {"a": voc_xml("a.jpg", (100, 80), objects),
                                        "b": voc_xml("b.jpg", (60, 50), objects[:1])},
                     {"a.jpg": (100, 80), "b.jpg": (60, 50)})
    index = rng.integers(0, n + 1, (80, 100))
    index[rng.random((80, 100)) < 0.1] = 255
    index[0, 0] = 1  # object 1 covers the first pixel: its runs start with a zero-length run
    os.makedirs(os.path.join(root, "SegmentationObject"))
    im = Image.fromarray(index.astype(np.uint8), "P")
    im.putpalette([0, 0, 0] + [128, 0, 0] * n + [0] * (768 - 3 - 3 * n))
    im.save(os.path.join(root, "SegmentationObject", "a.png"))
    return root, index, n


def test_voc_segmentation_object_to_coco_rle(tmp_path, rng, capsys):
    root, index, n = _voc_with_masks(tmp_path, rng)
    code, out, err = _run(capsys, root, tmp_path / "coco", "--from", "voc", "--to", "coco",
                          "--classes", "cat,dog")
    assert code == 0, err
    assert f"object masks (SegmentationObject) written as COCO RLE: {n} boxes" in out
    doc = json.load(open(tmp_path / "coco" / "annotations.json"))
    name = {im["id"]: im["file_name"] for im in doc["images"]}
    anns_a = [a for a in doc["annotations"] if name[a["image_id"]] == "a.jpg"]
    anns_b = [a for a in doc["annotations"] if name[a["image_id"]] == "b.jpg"]
    assert len(anns_a) == n and len(anns_b) == 1 and "segmentation" not in anns_b[0]
    for k, a in enumerate(anns_a):
        mask = (index == k + 1).astype(np.uint8)
        ref = coco_mask.encode(np.asfortranarray(mask))  # the format's own encoder
        assert a["segmentation"] == {"size": [80, 100], "counts": ref["counts"].decode()}
        assert a["area"] == float(mask.sum()) and a["iscrowd"] == 0
    # back through the pipeline reader's bitmasks: each object's mask pixel for pixel
    pipe = Pipeline(batch_size=2, num_threads=1, seed=0, prefetch_queue_depth=1)
    with pipe:
        _, boxes = fn.readers.coco(file_root=str(tmp_path / "coco" / "images"),
                                   annotations_file=str(tmp_path / "coco" / "annotations.json"),
                                   bitmasks=True)
        pipe.set_outputs(boxes)
    (batch,) = pipe.run()
    pipe.close()
    a, b = batch.per_sample()  # the file's order: a, then b
    assert a["bitmasks"].shape == (n, 80, 100)
    for k in range(n):
        np.testing.assert_array_equal(a["bitmasks"][k], index == k + 1)
    assert b["bitmasks"].shape == (1, 50, 60) and not b["bitmasks"].any()


def test_bitmap_masks_refused_or_dropped_and_counted(tmp_path, rng, capsys):
    path, want = crowd_coco(tmp_path / "src", every=5)
    crowds = len(want)
    for to in ("yolo", "voc", "tfrecord"):  # box targets: the boxes written, the masks counted
        code, out, err = _run(capsys, path, tmp_path / to, "--from", "coco", "--to", to,
                              "--image-root", IMAGES)
        assert code == 0, (to, err)
        assert f"bitmap masks (COCO RLE) not written ({to} holds boxes): {crowds} boxes" in out
    code, out, err = _run(capsys, path, tmp_path / "yolo-seg", "--from", "coco", "--to",
                          "yolo-seg", "--image-root", IMAGES)
    assert code == 2, out
    assert f"{path}: yolo-seg cannot hold the bitmap masks of {crowds} boxes" in err, err
    assert "--drop-masks" in err and not os.path.exists(tmp_path / "yolo-seg")
    folder = tmp_path / "yolo" / "labels"
    lines = sum(len(open(folder / f).readlines()) for f in os.listdir(folder))
    assert lines == len(json.load(open(path))["annotations"])  # every box kept, crowds too
    code, out, err = _run(capsys, path, tmp_path / "seg", "--from", "coco", "--to", "yolo-seg",
                          "--image-root", IMAGES, "--skip-crowd", "--dry-run")
    assert code == 0, err  # the crowds left out with their masks: nothing to refuse
    assert f"dropped by option: crowd boxes (iscrowd=1) (--skip-crowd): {crowds}" in out
    assert "bitmap masks" not in out
    root, _, n = _voc_with_masks(tmp_path, rng)
    code, out, err = _run(capsys, root, tmp_path / "vy", "--from", "voc", "--to", "yolo",
                          "--classes", "cat,dog")
    assert code == 2 and f"{root}: yolo cannot hold the bitmap masks of {n} boxes" in err, err
    code, out, err = _run(capsys, root, tmp_path / "vy", "--from", "voc", "--to", "yolo",
                          "--classes", "cat,dog", "--drop-masks")
    assert code == 0 and f"bitmap masks left out (--drop-masks): {n} boxes" in out, err


def test_voc_segmentation_object_to_voc(tmp_path, rng, capsys):
    """VOC -> VOC writes each image's SegmentationObject PNG again (VOC's palette; its 255
    outline, no object's, written as 0): the masks read back are the source's."""
    root, index, n = _voc_with_masks(tmp_path, rng)
    code, out, err = _run(capsys, root, tmp_path / "v2", "--from", "voc", "--to", "voc",
                          "--classes", "cat,dog")
    assert code == 0, err
    assert f"object masks (SegmentationObject) written as SegmentationObject PNGs: {n} boxes" \
        in out and "not written as such" not in out
    png = Image.open(tmp_path / "v2" / "SegmentationObject" / "a.png")
    assert png.mode == "P" and png.getpalette()[3:6] == [128, 0, 0]  # VOC's colour 1
    np.testing.assert_array_equal(np.asarray(png), np.where(index == 255, 0, index))
    assert not os.path.exists(tmp_path / "v2" / "SegmentationObject" / "b.png")
    assert (tmp_path / "v2" / "ImageSets" / "Segmentation" / "trainval.txt").read_text() == "a\n"
    src = read_voc_instances(root, classes=["cat", "dog"])
    back = read_voc_instances(tmp_path / "v2", classes=["cat", "dog"])
    for a, b in zip(src.records, back.records):
        assert a.fields["rle"] == b.fields["rle"]
        np.testing.assert_array_equal(a.boxes, b.boxes)


def test_overlapping_masks_are_refused_for_voc(tmp_path):
    """Two objects' masks over one pixel: a SegmentationObject PNG cannot hold them."""
    root, index, n = _voc_with_masks(tmp_path, np.random.default_rng(5))
    ds = read_voc_instances(root, classes=["cat", "dog"])
    r = ds.records[0]
    runs = [r.fields["rle"][k] for k in range(n)]
    runs[1] = rle_encode((index == 1) | (index == 2))  # object 2's mask takes object 1's
    r.fields["rle"] = Ragged.from_lists(runs, np.uint32)
    with pytest.raises(DatasetError, match=r"a\.jpg: the masks of objects 1 and 2 overlap"):
        write_voc_tree(ds, str(tmp_path / "out"), dry_run=True)


def test_a_mask_png_linked_into_the_destination_is_refused(tmp_path, rng, capsys):
    """--overwrite would remove what DST held: a SegmentationObject PNG that is a link into
    it is a file the converter reads, refused as the images are."""
    root, _, _ = _voc_with_masks(tmp_path, rng)
    dst = tmp_path / "dst"
    os.makedirs(dst)
    png = os.path.join(root, "SegmentationObject", "a.png")
    os.replace(png, dst / "a.png")
    os.symlink(dst / "a.png", png)
    code, _, err = _run(capsys, root, dst, "--from", "voc", "--to", "coco", "--classes",
                        "cat,dog", "--overwrite")
    assert code == 2 and f"source file {png} resolves to" in err, err
    assert os.path.isfile(dst / "a.png")
