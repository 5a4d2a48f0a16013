"""Warp of a fused chain whose last canvases are only copied (a resize, then a crop or a flip):
its region's clamp is wider than its rect (geometry.valid_region: the copied canvases cut the
content but do not clamp the taps). warp.cu on the CPU (tests/helpers/cuda_emulation.py) and on
the GPU (``gpu``-marked) against the twin, and the twin against the resize materialised then
cropped. Tolerances as in test_warp.py (1 grey level for uint8)."""
from __future__ import annotations

import numpy as np
import pytest

from detaug.core import geometry as G
from detaug.core.batch import _identity_geometry
from detaug.kernels.warp import warp_cupy, warp_numpy
from helpers import fresh_seed
from helpers.warp import _emulate, _host, emulated_kernels  # noqa: F401 (a fixture)


def _chains(rng, b=6):
    """Per sample: a resize, then a crop window (partly past the resized image in some samples),
    then a horizontal flip in some; images, matrices, output sizes, regions, and the resize's
    own (matrix, size) with the window's integer offset."""
    imgs, mats, outs, regions, parts = [], [], [], [], []
    for k in range(b):
        ih, iw = (int(v) for v in rng.integers(8, 50, 2))
        oh, ow = (int(v) for v in rng.integers(4, 70, 2))
        ch, cw = int(rng.integers(1, oh + 3)), int(rng.integers(1, ow + 3))
        x0, y0 = int(rng.integers(-2, ow - cw + 3)), int(rng.integers(-2, oh - ch + 3))
        g = _identity_geometry([(ih, iw)], 3)
        res = g.then(G.scale([ow / iw], [oh / ih]), [(oh, ow)])
        # a fill of the crop's own in half the samples: the chain then takes the general path
        # (the resize's canvas as a slab of the other fill)
        fill = [[7.0, 8.0, 9.0]] if k % 2 else None
        g = res.then(G.translate([-float(x0)], [-float(y0)]), [(ch, cw)], fill=fill)
        flip = bool(k % 3 == 0)
        if flip:
            g = g.then(G.flip([cw], [ch], [True], [False]), [(ch, cw)])
        imgs.append(rng.integers(0, 256, (ih, iw, 3), dtype=np.uint8))
        mats.append(g.matrices)
        outs.append([(ch, cw)])
        region = g.valid_region()
        regions.append(dict(fill=g.fill, region=region[:1] + region[2:]))
        parts.append((res.matrices[0], (oh, ow), (x0, y0), flip, g.fill[0]))
    return imgs, mats, outs, regions, parts


def _materialised(img, part, out_hw, dtype=np.uint8):
    """The resize warped on its own (the twin), then the integer window copied (fill outside),
    then the flip."""
    m, (oh, ow), (x0, y0), flip, fill = part
    full = warp_numpy([img], m[None], [(oh, ow)], out_dtype=dtype)[0].astype(np.float64)
    ch, cw = out_hw[0]
    out = np.broadcast_to(fill, (ch, cw, 3)).copy()
    ys, xs = slice(max(y0, 0), min(y0 + ch, oh)), slice(max(x0, 0), min(x0 + cw, ow))
    if ys.start < ys.stop and xs.start < xs.stop:
        out[ys.start - y0:ys.stop - y0, xs.start - x0:xs.stop - x0] = full[ys, xs]
    return out[:, ::-1] if flip else out


@pytest.mark.parametrize("seed", [41, None])
def test_twin_of_a_copied_window_is_the_materialised_resize(seed):
    rng = np.random.default_rng(fresh_seed() if seed is None else seed)
    imgs, mats, outs, regions, parts = _chains(rng)
    for b in range(len(imgs)):
        got = warp_numpy([imgs[b]], mats[b], outs[b], **regions[b])[0]
        want = _materialised(imgs[b], parts[b], outs[b])
        # the same sample points through other matrices: a value at a half may round either way
        exact = _materialised(imgs[b], parts[b], outs[b], np.float32)
        tie = np.abs(exact - np.floor(exact) - 0.5) < 1e-4
        d = np.abs(np.asarray(got, np.float64) - want)
        assert d.max() <= 1 and (tie | (d == 0)).all(), (seed, b)


@pytest.mark.parametrize("seed", [42, None])
def test_cuda_source_with_a_clamp_wider_than_the_rect(emulated_kernels, seed):
    rng = np.random.default_rng(fresh_seed() if seed is None else seed)
    imgs, mats, outs, regions, _ = _chains(rng)
    for b in range(len(imgs)):
        got = _emulate(emulated_kernels, [imgs[b]], mats[b], outs[b], **regions[b])[0]
        ref = warp_numpy([imgs[b]], mats[b], outs[b], **regions[b])[0]
        assert np.abs(got.astype(np.float64) - ref).max() <= 1, (seed, b)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", [43, None])
def test_gpu_with_a_clamp_wider_than_the_rect(cp, seed):
    rng = np.random.default_rng(fresh_seed() if seed is None else seed)
    imgs, mats, outs, regions, _ = _chains(rng)
    for b in range(len(imgs)):
        got = _host(warp_cupy([cp.asarray(imgs[b])], mats[b], outs[b], **regions[b]))[0]
        ref = warp_numpy([imgs[b]], mats[b], outs[b], **regions[b])[0]
        assert np.abs(np.asarray(got, np.float64) - ref).max() <= 1, (seed, b)
