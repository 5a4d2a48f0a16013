"""readers.coco(polygon_masks=True) / (pixelwise_masks=True): DALI's outputs, checked against
the JSON file itself and pycocotools' COCO API on the sample COCO set and on a file with crowd
RLE masks."""
import json
import os

import numpy as np
import pytest
from pycocotools.coco import COCO

from detaug import Pipeline, fn
from helpers import track
from helpers.reader_files import write_coco

from helpers import COCO as COCO_MINI

ROOT, ANN = os.path.join(COCO_MINI, "images"), os.path.join(COCO_MINI, "annotations.json")


def _run(n, **kw):
    pipe = track(Pipeline(batch_size=n, num_threads=1, seed=0))
    with pipe:
        outs = fn.readers.coco(file_root=kw.pop("root", ROOT), annotations_file=kw.pop("ann", ANN),
                               image_ids=True, **kw)
        pipe.set_outputs(*outs[1:])
    return pipe.run()


@pytest.mark.parametrize("ratio", [False, True])
def test_polygons_and_vertices_are_the_files(ratio):
    data = json.load(open(ANN))
    images = {im["id"]: im for im in data["images"]}
    by_image = {}
    for a in data["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a)
    boxes, labels, polys, verts, ids = _run(4, polygon_masks=True, ratio=ratio)
    for p, v, b, image_id in zip(polys, verts, boxes, ids):
        anns = by_image[int(image_id[0])]  # every box kept (size_threshold 0.1)
        im = images[int(image_id[0])]
        assert len(anns) == len(b) and p.dtype == np.int32 and v.dtype == np.float32
        k = 0
        for mask, a in enumerate(anns):
            for poly in a["segmentation"]:
                ref = np.asarray(poly, np.float64).reshape(-1, 2)
                if ratio:
                    ref = ref / [im["width"], im["height"]]
                assert p[k, 0] == mask
                assert np.allclose(v[p[k, 1]:p[k, 2]], ref, rtol=1e-6, atol=1e-6)
                k += 1
        assert k == len(p)


def _reference_pixelwise(api, image_id, labels):
    im = api.imgs[image_id]
    out = np.zeros((im["height"], im["width"]), np.int32)
    anns = api.loadAnns(api.getAnnIds(imgIds=[image_id]))
    for label in sorted(set(labels.tolist())):
        for a, lab in zip(anns, labels):
            if lab == label:
                out[api.annToMask(a) > 0] = label
    return out


def test_pixelwise_masks_equal_pycocotools(tmp_path, rng):
    h, w = 30, 40
    crowd = (rng.random((h, w)) < 0.3).astype(np.uint8)
    from pycocotools import mask as coco_mask
    rle = coco_mask.encode(np.asfortranarray(crowd))
    anns = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 2, 20, 20], "iscrowd": 0,
             "segmentation": [[2, 2, 22, 2, 12, 22]]},
            {"id": 2, "image_id": 1, "category_id": 3, "bbox": [0, 0, 40, 30], "iscrowd": 1,
             "segmentation": {"size": [h, w], "counts": rle["counts"].decode()}},
            {"id": 3, "image_id": 2, "category_id": 1, "bbox": [5, 5, 10, 10], "iscrowd": 0,
             "segmentation": [[5, 5, 15, 5, 15, 15, 5, 15], [20, 20, 25, 20, 22, 28]]}]
    images = [{"id": i, "file_name": f"{i}.jpg", "width": w, "height": h} for i in (1, 2)]
    path, root = write_coco(tmp_path, images, anns)
    boxes, labels, masks, ids = _run(2, root=root, ann=path, pixelwise_masks=True)
    api = COCO(path)
    for m, lab, image_id in zip(masks, labels, ids):
        assert m.shape == (h, w, 1) and m.dtype == np.int32
        assert np.array_equal(m[..., 0], _reference_pixelwise(api, int(image_id[0]), lab))
    boxes, labels, polys, verts, ids = _run(2, root=root, ann=path, polygon_masks=True)
    assert polys[0].tolist() == [[0, 0, 3]]  # the crowd's RLE gives no polygon
    assert polys[1].tolist() == [[0, 0, 4], [0, 4, 7]]
