"""bench_readers.py --tight-boxes on tiny COCO files: its pairs of boxes (tight_boxes False /
True through one chain) and its figures are a float64 reference's, for a hand-made diamond (its
box turned 45 degrees encloses 4x the tight box's area) and a fresh random polygon; a crowd's
RLE box keeps its corners' box; the table prints."""
import numpy as np
import pytest

from detaug import fn
from helpers import fresh_seed, load_benchmark
from helpers.reader_files import write_coco

W, H = 60, 50
CX, CY = W / 2, H / 2


def _bench():
    return load_benchmark("bench_readers")


def _turn(points, degrees):
    """Counter-clockwise as displayed (y down) about the image centre, in float64."""
    a = np.deg2rad(degrees)
    c, s = np.cos(a), np.sin(a)
    d = np.asarray(points, np.float64) - (CX, CY)
    return np.stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]], 1) + (CX, CY)


def _box(points):
    return np.concatenate([points.min(0), points.max(0)])


def _files(tmp_path, polygon):
    """Image 1: a diamond of half-diagonal 5 about the centre; image 2: ``polygon`` and a
    crowd's RLE box (no polygon)."""
    diamond = [CX, CY - 5, CX + 5, CY, CX, CY + 5, CX - 5, CY]
    px = np.asarray(polygon).reshape(-1, 2)
    lo, hi = px.min(0), px.max(0)
    anns = [{"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 0,
             "bbox": [CX - 5, CY - 5, 10, 10], "segmentation": [diamond]},
            {"id": 2, "image_id": 2, "category_id": 1, "iscrowd": 0,
             "bbox": [*lo.tolist(), *(hi - lo).tolist()], "segmentation": [list(polygon)]},
            {"id": 3, "image_id": 2, "category_id": 3, "iscrowd": 1, "bbox": [5, 6, 20, 10],
             "segmentation": {"counts": [W * H], "size": [H, W]}}]
    images = [{"id": i, "file_name": f"{i}.jpg", "width": W, "height": H} for i in (1, 2)]
    path, root = write_coco(tmp_path, images, anns)
    return path, root


def _rotate(angle):
    return lambda img, boxes: fn.rotate(img, boxes, angle=angle, expand=False)


@pytest.mark.parametrize("seed", [0, fresh_seed()])
def test_tight_box_figures_match_a_float64_reference(tmp_path, seed):
    rng = np.random.default_rng(seed)
    # a random polygon well inside the canvas: turned, neither it nor its box's corners clip
    t = np.sort(rng.uniform(0, 2 * np.pi, 7))
    r = rng.uniform(3, 10, 7)
    pts = np.round(np.stack([CX + 4 + r * np.cos(t), CY - 3 + r * np.sin(t)], 1), 2)
    path, root = _files(tmp_path, pts.ravel().tolist())
    bench = _bench()
    angle = float(rng.choice([-1, 1]) * rng.uniform(5, 85))
    for deg in (45.0, angle):
        corner, tight, moved = bench.tight_box_pairs(path, root, _rotate(deg), batch_size=2)
        assert moved.tolist() == [True, True, False]  # the crowd's box: no polygon, kept
        box = np.array([pts[:, 0].min(), pts[:, 1].min(), pts[:, 0].max(), pts[:, 1].max()])
        corners = box[[0, 1, 2, 1, 2, 3, 0, 3]].reshape(4, 2)
        diamond = np.array([[CX, CY - 5], [CX + 5, CY], [CX, CY + 5], [CX - 5, CY]])
        square = np.array([[CX - 5, CY - 5], [CX + 5, CY - 5], [CX + 5, CY + 5], [CX - 5, CY + 5]])
        ref_tight = np.stack([_box(_turn(diamond, deg)), _box(_turn(pts, deg))])
        ref_corner = np.stack([_box(_turn(square, deg)), _box(_turn(corners, deg))])
        assert np.allclose(tight[:2], ref_tight, atol=2e-3), (tight, ref_tight)
        assert np.allclose(corner[:2], ref_corner, atol=2e-3), (corner, ref_corner)
        assert np.array_equal(tight[2], corner[2])
        stats = bench.tight_box_stats(corner, tight, moved)
        area = lambda b: (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
        ratio = area(ref_tight) / area(ref_corner)  # tight inside corners: IoU = the ratio
        assert stats["boxes"] == 2 and stats["kept"] == 1 and stats["outside"] <= 1e-3
        assert stats["ratio_mean"] == pytest.approx(ratio.mean(), abs=1e-3)
        assert stats["ratio_median"] == pytest.approx(np.median(ratio), abs=1e-3)
        assert stats["iou_mean"] == pytest.approx(ratio.mean(), abs=1e-3)
        assert stats["smaller_10"] == np.mean(ratio <= 0.9)
        if deg == 45.0:  # by hand: a 5 sqrt 2 square in a 10 sqrt 2 one
            assert ratio[0] == pytest.approx(0.25)
            one = bench.tight_box_stats(corner[:1], tight[:1], moved[:1])
            assert one["ratio_mean"] == pytest.approx(0.25, abs=1e-4)
            assert one["iou_mean"] == pytest.approx(0.25, abs=1e-4)
            assert one["smaller_10"] == 1.0


def test_tight_boxes_table_prints(tmp_path, capsys):
    path, _ = _files(tmp_path, [20, 20, 30, 22, 24, 30])
    rows = _bench().main(["--tight-boxes", "--tight-data", str(tmp_path), "--tight-epochs", "1"])
    out = capsys.readouterr().out
    assert "3 annotations, 1 without a polygon (1 crowds)" in out, out
    assert "every tight box inside its corners' box" in out, out
    assert len(rows) == 4 and all(r["kept"] >= 1 and r["outside"] <= 0.05 for r in rows), rows
    for r in rows:
        assert f"| {r['mode']} | {r['boxes']:,} | {r['ratio_mean']:.3f} |" in out, out
