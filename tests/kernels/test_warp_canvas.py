"""Tiles warped straight into their canvases (kernels/warp_canvas.py): warp.cu's _pitched kernels
(emulated on the CPU, and on the GPU) give the twin's canvases, which are the plain warp's tiles
pasted by compose (the fused path changes no pixel), on fresh random mosaics."""
from __future__ import annotations

import numpy as np
import pytest

from helpers import cuda_emulation as emu
from helpers import fresh_seed
from helpers.warp import _build_emulation

from detaug.core import geometry as G
from detaug.kernels import compose as K
from detaug.kernels import warp as W
from detaug.kernels import warp_canvas as WC
from detaug.ops.multi import mosaic_plan

FRESH = fresh_seed()


@pytest.fixture(scope="module")
def emulated_kernels(tmp_path_factory):
    return _build_emulation(tmp_path_factory)


def _case(rng, c, s=24, b=3):
    """A mosaic's tiles: b canvases 2s x 2s, groups of 4 or 1, random images and centres, the
    resize and crop of mosaic_plan then a random small rotation (not axis-aligned)."""
    counts = rng.choice([1, 4], b)
    groups = np.concatenate([[0], np.cumsum(counts)])
    m = int(groups[-1])
    imgs = [rng.integers(0, 256, (int(rng.integers(9, 50)), int(rng.integers(9, 50)), c), np.uint8)
            for _ in range(m)]
    centre = rng.integers(s // 2, 3 * s // 2, (b, 2))
    mats, tiles, origins = mosaic_plan([i.shape[:2] for i in imgs], groups, centre, s)
    centres = tiles[:, ::-1] / 2.0
    turn = G.linear_about(G.rotation_linear(rng.uniform(-10, 10, m)), centres, centres)
    return imgs, turn @ mats, tiles, origins, groups, np.full((b, 2), 2 * s), rng.integers(0, 256, (b, c))


@pytest.mark.parametrize("seed", [0, FRESH])
def test_twin_is_the_warp_then_compose(seed):
    rng = np.random.default_rng(seed)
    imgs, mats, tiles, origins, groups, canvas, fill = _case(rng, 3)
    got = WC.warp_canvas_numpy(imgs, mats, tiles, origins, groups, canvas, fill, tile_fill=7)
    tiles_px = W.warp_numpy(imgs, mats, tiles, fill=7)
    ref = K.compose_numpy(list(tiles_px), origins, groups, canvas, fill, mode="first")
    np.testing.assert_array_equal(got, ref)
    # a canvas pixel no tile covers is the fill; a tile's pixel is its warp's
    o, (h, w) = origins[0], tiles[0]
    np.testing.assert_array_equal(got[0][o[1]:o[1] + h, o[0]:o[0] + w], tiles_px[0])


@pytest.mark.parametrize("seed", [0, FRESH])
def test_pitched_kernel_equals_the_twin(emulated_kernels, monkeypatch, seed):
    """The CUDA source (emulated) of the fused launch: the twin's canvases to the bit, and the
    plain warp's tiles (which warp.cu makes with the very same code, unpitched)."""
    rng = np.random.default_rng(seed)
    for c in (1, 3):
        imgs, mats, tiles, origins, groups, canvas, fill = _case(rng, c)
        kw = dict(tile_fill=float(rng.integers(0, 256)), antialias=bool(rng.integers(2)))
        ref = WC.warp_canvas_numpy(imgs, mats, tiles, origins, groups, canvas, fill, **kw)
        emu.install_fake_cupy(monkeypatch, emulated_kernels, W, WC)
        got = WC.warp_canvas_cupy([emu.dev(i) for i in imgs], mats, tiles, origins, groups,
                                  canvas, fill, **kw)
        plain = W.warp_cupy([emu.dev(i) for i in imgs], mats, tiles, fill=kw["tile_fill"],
                            antialias=kw["antialias"])
        monkeypatch.undo()
        assert emulated_kernels.calls[-2:] == [f"warp_u8_hwc_c{c}_pitched", f"warp_u8_hwc_c{c}"]
        pasted = K.compose_numpy(list(plain), origins, groups, canvas, fill, mode="first")
        np.testing.assert_array_equal(np.asarray(got), pasted)  # fusing changes no pixel
        # the kernel against the float64 twin: warp.cu's float32 weights, one level at most
        assert np.abs(np.asarray(got, np.int16) - ref).max() <= 1


def test_tiles_must_be_disjoint_and_inside():
    img = np.zeros((4, 4, 3), np.uint8)
    eye = np.tile(np.eye(3), (2, 1, 1))
    with pytest.raises(ValueError, match="disjoint"):
        WC.warp_canvas_numpy([img, img], eye, [(4, 4)] * 2, [(0, 0), (2, 2)], [0, 2], [(8, 8)], 0)
    with pytest.raises(ValueError, match="inside"):
        WC.warp_canvas_numpy([img], eye[:1], [(4, 4)], [(6, 0)], [0, 1], [(8, 8)], 0)


@pytest.mark.gpu
@pytest.mark.parametrize("seed", [0, FRESH])
def test_gpu_canvas_warp_equals_warp_then_compose(seed):
    import cupy as cp

    rng = np.random.default_rng(seed)
    for c in (1, 3):
        imgs, mats, tiles, origins, groups, canvas, fill = _case(rng, c)
        dev = [cp.asarray(i) for i in imgs]
        got = WC.warp_canvas_cupy(dev, mats, tiles, origins, groups, canvas, fill, tile_fill=3)
        plain = W.warp_cupy(dev, mats, tiles, fill=3)
        pasted = K.compose_cupy(plain, origins, groups, canvas, fill, mode="first")
        np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(pasted))
        ref = WC.warp_canvas_numpy(imgs, mats, tiles, origins, groups, canvas, fill, tile_fill=3)
        assert np.abs(cp.asnumpy(got).astype(np.int16) - ref).max() <= 1
