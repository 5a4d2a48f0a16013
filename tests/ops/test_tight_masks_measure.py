"""bench_readers.py --tight-boxes --tight-masks on a tiny COCO file: ``rle_copy`` writes each
polygon object's mask as pycocotools makes it, ``tight_mask_boxes`` gives the box of that mask
turned by 90 degrees (exact on the pixel grid, so the reference turns the decoded mask's pixel
box by hand), an empty crowd mask keeps its corners' box, and the table's mask rows print."""
import json

import numpy as np
import pytest

from detaug import fn
from helpers import fresh_seed, load_benchmark
from helpers.reader_files import write_coco

W, H = 60, 50  # the turn about (30, 25): (x, y) -> (y + 5, 55 - x)


def _files(tmp_path, polygon):
    px = np.asarray(polygon).reshape(-1, 2)
    lo, hi = px.min(0), px.max(0)
    anns = [{"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 0,
             "bbox": [*lo.tolist(), *(hi - lo).tolist()], "segmentation": [list(polygon)]},
            {"id": 2, "image_id": 1, "category_id": 3, "iscrowd": 1, "bbox": [5, 6, 20, 10],
             "segmentation": {"counts": [W * H], "size": [H, W]}}]
    return write_coco(tmp_path, [{"id": 1, "file_name": "1.jpg", "width": W, "height": H}], anns)


def _turn(img, boxes):
    return fn.rotate(img, boxes, angle=90, expand=False)


@pytest.mark.parametrize("seed", [0, fresh_seed()])
def test_mask_boxes_of_a_turned_coco_mask(tmp_path, seed):
    from pycocotools import mask as coco_mask

    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, 2 * np.pi, 6))
    r = rng.uniform(4, 12, 6)
    pts = np.round(np.stack([25 + r * np.cos(t), 24 + r * np.sin(t)], 1), 2)
    path, root = _files(tmp_path, pts.ravel().tolist())
    bench = load_benchmark("bench_readers")
    rle = bench.rle_copy(path, str(tmp_path / "rle.json"))
    with open(rle) as f:
        seg = json.load(f)["annotations"][0]["segmentation"]
    mask = coco_mask.decode({"size": seg["size"], "counts": seg["counts"].encode()})
    i, j = np.nonzero(mask)
    x0, y0, x1, y1 = j.min(), i.min(), j.max() + 1, i.max() + 1  # the mask's pixel box
    boxes, moved, ids = bench.tight_mask_boxes(rle, root, _turn, batch_size=1)
    assert moved.tolist() == [True, False] and ids.tolist() == [1, 2]
    np.testing.assert_allclose(boxes[0], [y0 + 5, 55 - x1, y1 + 5, 55 - x0], atol=1e-4)
    corner, tight, _ = bench.tight_box_pairs(path, root, _turn, batch_size=1)
    np.testing.assert_array_equal(boxes[1], corner[1])  # no mask pixel: the corners' box
    # COCO's mask never reaches a pixel past its polygon's box (a thin spike may leave no pixel)
    assert (boxes[0, :2] >= tight[0, :2] - 1).all() and (boxes[0, 2:] <= tight[0, 2:] + 1).all()


def test_tight_masks_table_prints(tmp_path, capsys, monkeypatch):
    _files(tmp_path, [20, 20, 30, 22, 24, 30])
    bench = load_benchmark("bench_readers")
    monkeypatch.setattr(bench, "tight_modes", lambda: [("turn 90", _turn)])
    rows = bench.main(["--tight-boxes", "--tight-masks", "--tight-data", str(tmp_path),
                       "--tight-epochs", "1"])
    out = capsys.readouterr().out
    assert [r["mode"] for r in rows] == ["turn 90", "turn 90, masks",
                                         "turn 90, masks vs polygons"]
    assert all(r["boxes"] == 1 and r["kept"] == 1 for r in rows), rows
    assert rows[2]["ratio_mean"] == pytest.approx(1.0, abs=0.3)
    for r in rows:
        assert f"| {r['mode']} | {r['boxes']:,} | {r['ratio_mean']:.3f} |" in out, out
