"""detaug.visualize: boxes where they are, class-name tags readable on their colour and never on
top of each other."""
import itertools

import numpy as np
import pytest
from PIL import Image

from detaug import visualize as V


def test_contrast_ratio_hand_values():
    assert V.contrast_ratio(V.BLACK, V.WHITE) == pytest.approx(21.0)
    assert V.contrast_ratio((128, 128, 128), (128, 128, 128)) == pytest.approx(1.0)
    # sRGB 128 -> linear 0.2158605; (1.05) / (0.2158605 + 0.05) = 3.9496
    assert V.contrast_ratio(V.WHITE, (128, 128, 128)) == pytest.approx(1.05 / 0.2658605, rel=1e-6)


@pytest.mark.parametrize("color", V.PALETTE)
def test_tag_text_is_the_more_readable_of_black_and_white(color):
    text = V.text_color(color)
    other = V.WHITE if text == V.BLACK else V.BLACK
    assert V.contrast_ratio(text, color) >= V.contrast_ratio(other, color)
    assert V.contrast_ratio(text, color) >= 4.5  # WCAG AA for normal text, on every class colour


def test_dark_tags_get_white_text_and_light_tags_black():
    assert V.text_color((0, 0, 128)) == V.WHITE and V.text_color((128, 0, 0)) == V.WHITE
    assert V.text_color((255, 225, 25)) == V.BLACK and V.text_color((70, 240, 240)) == V.BLACK


def _disjoint(rects):
    return all(not V._overlaps(a, b) for a, b in itertools.combinations(rects, 2))


def test_tags_of_boxes_sharing_a_corner_do_not_overlap():
    boxes = [(50, 40, 150 + 10 * k, 120 + 5 * k) for k in range(6)]
    rects = V.place_tags(boxes, [(40, 12)] * 6, (300, 200))
    assert rects[0] == (50, 28, 90, 40)  # the first sits just above its box's top-left corner
    assert rects[1] == (50, 40, 90, 52)  # the next just inside the box
    assert _disjoint(rects)
    assert all(0 <= x0 and 0 <= y0 and x1 <= 300 and y1 <= 200 for x0, y0, x1, y1 in rects)


def test_tag_of_a_box_at_the_top_edge_goes_inside():
    assert V.place_tags([(0, 0, 30, 30)], [(20, 10)], (64, 64)) == [(0, 0, 20, 10)]
    # at the right edge the tag is moved left to stay in the image
    assert V.place_tags([(60, 20, 64, 40)], [(20, 10)], (64, 64)) == [(44, 10, 64, 20)]


def test_many_random_tags_never_overlap_while_there_is_room(rng):
    boxes = []
    for _ in range(25):
        x0, y0 = rng.uniform(0, 400, 2)
        boxes.append((x0, y0, x0 + rng.uniform(5, 100), y0 + rng.uniform(5, 100)))
    sizes = [(int(rng.integers(20, 60)), 12) for _ in boxes]
    rects = V.place_tags(boxes, sizes, (512, 512))
    assert _disjoint(rects)
    assert [(x1 - x0, y1 - y0) for x0, y0, x1, y1 in rects] == sizes


def test_draw_boxes_outline_tag_and_text():
    img = np.full((100, 120, 3), 100, np.uint8)
    before = img.copy()
    out = np.asarray(V.draw_boxes(img, [[20, 30, 70, 90]], [18], [f"c{k}" for k in range(20)]))
    np.testing.assert_array_equal(img, before)  # the input is not drawn on
    navy = V.class_color(18)
    assert navy == (0, 0, 128)
    # 2-px outline on the box's own pixels: columns 20, 21 and 68, 69; rows 30, 31 and 88, 89
    for y in (50, 60):
        for x in (20, 21, 68, 69):
            assert tuple(out[y, x]) == navy
        assert tuple(out[y, 22]) == (100, 100, 100) and tuple(out[y, 19]) == (100, 100, 100)
    assert tuple(out[89, 40]) == navy and tuple(out[90, 40]) == (100, 100, 100)
    # the tag sits above the box, filled navy, written in white
    tag = out[:30, 20:60]
    rows = np.flatnonzero((tag == navy).all(-1).any(1))
    assert rows.max() == 29  # its bottom row touches the box's top
    cols = np.flatnonzero((tag == navy).all(-1).any(0))
    assert cols.min() == 0  # its left edge is the box's
    text = tag[rows.min():rows.max() + 1, :cols.max() + 1]
    assert (text == navy).all(-1).mean() > 0.4
    t = text.astype(int)  # every pixel a blend of navy and white (none of black text)
    assert ((t[..., 0] == t[..., 1]) & (t[..., 2] >= 128) & (t[..., 2] >= t[..., 0])).all()
    assert (text.min(-1) >= 200).sum() >= 5  # near-white pixels: the letters


def test_draw_boxes_checks_its_input():
    with pytest.raises(TypeError, match="uint8"):
        V.draw_boxes(np.zeros((8, 8, 3), np.float32), [[0, 0, 4, 4]], [0])
    with pytest.raises(ValueError, match="2 boxes but 1 labels"):
        V.draw_boxes(np.zeros((8, 8, 3), np.uint8), [[0, 0, 4, 4], [1, 1, 2, 2]], [0])
    im = V.draw_boxes(Image.new("RGB", (8, 8)), np.zeros((0, 4)), [])
    assert im.size == (8, 8) and not np.asarray(im).any()


def test_draw_grid_places_sample_k_in_its_cell():
    images = [np.full((40, 80, 3), 30 * k, np.uint8) for k in range(5)]
    targets = [{"boxes": np.array([[0, 0, 40, 20]], np.float32), "labels": np.array([3])}] * 5
    grid = np.asarray(V.draw_grid(images, targets, None, cols=2, cell=32, rows=3))
    assert grid.shape == (96, 64, 3)
    for k in range(5):
        r, c = divmod(k, 2)
        cell = grid[r * 32:(r + 1) * 32, c * 32:(c + 1) * 32]
        assert tuple(cell[20, 20]) == (30 * k,) * 3  # the image, stretched to the cell
        assert tuple(cell[12, 0]) == V.class_color(3)  # box x0 = 0, scaled y 0..16: left edge
        assert tuple(cell[20, 0]) == (30 * k,) * 3
    assert not grid[64:, 32:].any()  # the sixth cell stays empty


def test_readme_draw_boxes_snippet_runs(tmp_path, monkeypatch):
    """The README's draw_boxes block (marked no-run: it needs a pipe) runs given one that ends
    as the README's Example does (normalised CHW floats, padded boxes); the Example itself:
    tests/frontends/test_docs_snippets.py."""
    import os
    import re

    from helpers import REPO, VOC
    from detaug import fn, pipeline_def

    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    (block,) = [b for b in re.findall(r"```python no-run\n(.*?)```", text, re.S)
                if "draw_boxes(" in b]

    @pipeline_def(batch_size=2, num_threads=1, seed=0)
    def small():
        enc, boxes = fn.readers.voc(root=VOC)
        img, boxes = fn.resize(fn.decoders.image(enc), boxes, size=(96, 128))
        img = fn.normalize(img, mean=[124, 116, 104], std=[58, 57, 57], output_layout="CHW")
        return img, fn.pad_boxes(boxes)

    pipe = small()
    monkeypatch.chdir(tmp_path)
    try:
        exec(compile(block, "README.md", "exec"), {"pipe": pipe})
    finally:
        pipe.close()
    assert Image.open(tmp_path / "sample.png").size == (128, 96)
