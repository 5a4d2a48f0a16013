"""read_coco against pycocotools, the format's reference loader (a core dependency for this
check and for benchmarks/bench_readers.py): the same images, and per image the same annotations
(ids, boxes as [x, y, x + w, y + h], categories mapped to contiguous labels in id order, iscrowd),
on the real COCO sample and on fresh random files."""
import json
import os

import numpy as np
import pytest

pycoco = pytest.importorskip("pycocotools.coco")

from readers import read_coco  # noqa: E402
from helpers import COCO

SAMPLE = COCO


def _compare(ann_file, image_root):
    ref = pycoco.COCO(ann_file)
    got = read_coco(ann_file, image_root, check_images=False)
    cat_ids = sorted(ref.getCatIds())
    label_of = {c: i for i, c in enumerate(cat_ids)}
    by_id = {r.image_id: r for r in got.records}
    assert sorted(by_id) == sorted(ref.getImgIds())
    for img_id, rec in by_id.items():
        info = ref.loadImgs(img_id)[0]
        assert os.path.basename(rec.path) == info["file_name"]
        assert (rec.width, rec.height) == (info["width"], info["height"])
        anns = sorted(ref.loadAnns(ref.getAnnIds(imgIds=img_id)), key=lambda a: a["id"])
        order = np.argsort(rec.fields["annotation_id"], kind="stable")
        assert [a["id"] for a in anns] == rec.fields["annotation_id"][order].tolist()
        want = np.array([[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2],
                          a["bbox"][1] + a["bbox"][3]] for a in anns], np.float64).reshape(-1, 4)
        want = np.clip(want, 0, [info["width"], info["height"]] * 2)  # boxes clipped to the image
        np.testing.assert_allclose(rec.boxes[order], want, rtol=0, atol=1e-3)
        assert rec.labels[order].tolist() == [label_of[a["category_id"]] for a in anns]
        assert rec.fields["iscrowd"][order].tolist() == [a.get("iscrowd", 0) for a in anns]


def test_sample_matches_pycocotools():
    _compare(os.path.join(SAMPLE, "annotations.json"), os.path.join(SAMPLE, "images"))


@pytest.mark.parametrize("seed", [None, 7])
def test_random_file_matches_pycocotools(tmp_path, seed):
    rng = np.random.default_rng(seed)
    cats = sorted(rng.choice(np.arange(1, 91), size=12, replace=False).tolist())
    images, anns, aid = [], [], 1
    for i in range(int(rng.integers(5, 30))):
        w, h = int(rng.integers(32, 900)), int(rng.integers(32, 900))
        images.append({"id": int(rng.integers(1, 10**9)) * 100 + i, "file_name": f"{i}.jpg",
                       "width": w, "height": h})
        for _ in range(int(rng.integers(0, 8))):
            x, y = float(rng.uniform(0, w - 2)), float(rng.uniform(0, h - 2))
            bw, bh = float(rng.uniform(1, w - x)), float(rng.uniform(1, h - y))
            anns.append({"id": aid, "image_id": images[-1]["id"], "category_id": int(rng.choice(cats)),
                         "bbox": [round(x, 2), round(y, 2), round(bw, 2), round(bh, 2)],
                         "area": bw * bh, "iscrowd": int(rng.random() < 0.1)})
            aid += 1
    rng.shuffle(anns)
    path = tmp_path / "ann.json"
    path.write_text(json.dumps({"images": images, "annotations": anns,
                                "categories": [{"id": c, "name": f"c{c}"} for c in cats]}))
    _compare(str(path), str(tmp_path))
