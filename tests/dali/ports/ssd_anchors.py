"""SSD300's default boxes for the ported SSD programs (written here from the SSD paper's
recipe, as DALI's SSD example's utils.py computes them): feature maps 38, 19, 10, 5, 3, 1; per
cell two square boxes and two per extra aspect ratio; ltrb in [0, 1]."""
from itertools import product
from math import sqrt

import numpy as np


def ssd300_anchors():
    maps = [38, 19, 10, 5, 3, 1]
    steps = [8, 16, 32, 64, 100, 300]
    sizes = [21, 45, 99, 153, 207, 261, 315]
    ratios = [[2], [2, 3], [2, 3], [2, 3], [2], [2]]
    out = []
    for level, n in enumerate(maps):
        small, big = sizes[level] / 300, sizes[level + 1] / 300
        whs = [(small, small), (sqrt(small * big), sqrt(small * big))]
        for r in ratios[level]:
            whs += [(small * sqrt(r), small / sqrt(r)), (small / sqrt(r), small * sqrt(r))]
        cell = steps[level] / 300
        for w, h in whs:
            for row, col in product(range(n), repeat=2):
                cx, cy = min((col + 0.5) * cell, 1.0), min((row + 0.5) * cell, 1.0)
                w, h = min(w, 1.0), min(h, 1.0)
                out.append([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
    return np.array(out, np.float32)
