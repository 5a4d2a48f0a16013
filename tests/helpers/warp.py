"""The warp kernel tests' shared draws and the CPU emulation of warp.cu (tests/kernels/test_warp.py,
test_warp_region.py, test_warp_projective.py; tests/runtime/test_plan_ahead.py): random images,
affine matrices, axis-aligned cases and fused-chain regions; warp.cu and resample.cu (DALI's
triangle filter) built as host C++ and run with their own launch plans; the GPU cases' host
copy and tolerances."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from detaug.core import geometry as G
from detaug.kernels import warp as W
from detaug.kernels.warp import warp_cv2, warp_numpy
from helpers import cuda_emulation as emu

MEAN = np.array([123.675, 116.28, 103.53])


STD = np.array([58.395, 57.12, 57.375])


def rand_image(rng, h=40, w=50, c=3):
    return rng.integers(0, 256, (h, w, c), dtype=np.uint8)


def random_affine(rng, in_hw, out_hw, scale=(0.3, 3.0)):
    """Rotation, anisotropic scale, shear, random flip, centred plus a random translation."""
    a = rng.uniform(-np.pi, np.pi)
    s = rng.uniform(*scale)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    A = rot @ np.array([[s, rng.uniform(-0.3, 0.3)], [0.0, s * rng.uniform(0.7, 1.4)]])
    if rng.random() < 0.5:
        A = A @ np.diag([-1.0, 1.0])
    M = np.eye(3)
    M[:2, :2] = A
    c_in = np.array([in_hw[1], in_hw[0]]) / 2
    c_out = np.array([out_hw[1], out_hw[0]]) / 2
    M[:2, 2] = c_out - A @ c_in + rng.uniform(-5, 5, 2)
    return M


# ----------------------------------------------------------------------------- CUDA source on CPU
def _warp_signatures():
    """warp.cu's kernels are made by a macro: their names and output types from its uses."""
    with open(os.path.join(emu.KERNEL_DIR, "warp.cu")) as f:
        text = f.read()
    uses = re.findall(r"^DETAUG_WARP_KERNEL\((\w+), \d, ([\w ]+), \w+\)", text, re.M)
    head = ["const unsigned long long*", "const long long*", "const double*", "const float*"]
    # the uint8 HWC kernels writing into a pitched place (a mosaic's canvas: warp_canvas.py)
    uses += [(name, "unsigned char") for name in
             re.findall(r"^DETAUG_WARP_PITCHED_KERNEL\((\w+), \d\)", text, re.M)]
    # each use makes NAME (affine batches) and NAME_p (batches holding projective samples)
    return {n: head + [f"{out_t}*"] for name, out_t in uses for n in (name, name + "_p")}


def _build_emulation(tmp_path_factory, *defines):
    """warp.cu compiled as host C++ (tests/helpers/cuda_emulation.py; the float16 store is not emulated)."""
    return emu.build(tmp_path_factory.mktemp("warp_cu"), "warp.cu",
                     defines=(f"DETAUG_WARP_PPL={W._PIX_PER_LANE}", *defines),
                     signatures=_warp_signatures())


def build_resample_emulation(tmp_path_factory):
    """resample.cu as host C++; its kernels are made by a macro: names and output types from
    its uses (the float16 store is not emulated)."""
    with open(f"{emu.KERNEL_DIR}/resample.cu") as f:
        uses = re.findall(r"^DETAUG_RESAMPLE_KERNEL\((\w+), \d, ([\w ]+), \w+\)", f.read(), re.M)
    head = ["const unsigned long long*", "const long long*", "const int*", "const float*",
            "const float*"]
    return emu.build(tmp_path_factory.mktemp("resample_cu"), "resample.cu",
                     signatures={name: head + [f"{t}*"] for name, t in uses})


@pytest.fixture(scope="module")
def emulated_kernels(tmp_path_factory):
    return _build_emulation(tmp_path_factory)


@pytest.fixture(scope="module")
def emulated_general_path(tmp_path_factory):
    """The same source without the axis-aligned fast path (every sample takes the general loop)."""
    return _build_emulation(tmp_path_factory, "DETAUG_WARP_AXIS=0")


def _emulate(lib, images, matrices, out_sizes, **kw):
    """Run warp.cu's kernel on the CPU with warp_cupy's own launch plan."""
    spec = W._prepare(images, matrices, out_sizes, kw.get("fill", 0.0), kw.get("antialias", True),
                      kw.get("max_taps", 8), kw.get("mean"), kw.get("std"),
                      kw.get("out_dtype", np.uint8), kw.get("layout", "HWC"), kw.get("region"))
    plan = W.launch_plan(spec)
    imgs = [np.ascontiguousarray(x) for x in spec.images]
    ptrs = np.array([x.ctypes.data for x in imgs], np.uint64)
    flat = np.zeros(int(plan["offsets"][-1]), spec.out_dtype)
    lib.launch(plan["name"], plan["grid"], plan["block"],
               [ptrs, plan["meta_i"], plan["inv"], plan["meta_f"], flat])
    o = plan["offsets"]
    outs = [flat[o[b]:o[b + 1]].reshape(W._out_shape(spec, b)) for b in range(spec.B)]
    return np.stack(outs) if W._is_dense(spec) else outs


def axis_aligned_cases(rng, b):
    """Crop / flip / resize / zoom-out matrices (no rotation: off-diagonals exactly 0 or -0):
    windows partly or wholly outside the image, up- and down-scaling, output widths below and
    above 32 and not multiples of it, integer crops whose taps fall on pixel centres."""
    in_sizes, out_sizes, mats = [], [], []
    for k in range(b):
        h, w = int(rng.integers(1, 70)), int(rng.integers(1, 70))
        oh, ow = int(rng.integers(1, 50)), int(rng.choice([int(rng.integers(1, 32)), 32, 64,
                                                           int(rng.integers(33, 90))]))
        if k % 4 == 3:  # integer crop, output = window size: exact pixel centres
            sx = sy = 1.0
            tx, ty = -float(rng.integers(-3, w + 1)), -float(rng.integers(-3, h + 1))
        else:
            sx, sy = ow / rng.uniform(0.2, 2.0) / w, oh / rng.uniform(0.2, 2.0) / h
            tx, ty = rng.uniform(-0.5, 0.5) * ow, rng.uniform(-0.5, 0.5) * oh
        m = np.array([[sx, 0.0, tx], [0.0, sy, ty], [0.0, 0.0, 1.0]])
        if rng.random() < 0.5:  # mirror about the output's vertical centre line
            m = np.array([[-1.0, 0.0, ow], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]) @ m
        if rng.random() < 0.5:
            m[0, 1], m[1, 0] = -0.0, -0.0
        in_sizes.append((h, w))
        out_sizes.append((oh, ow))
        mats.append(m)
    return in_sizes, out_sizes, np.stack(mats)


# ----------------------------------------------------------------------------- fused-chain region
def random_region(rng, in_sizes, out_sizes, c, max_slabs=2):
    """A region as a fused chain passes it: a rect in source coordinates (partly past the image
    or inside it), its clamp columns / rows, and up to ``max_slabs`` output-space slabs through
    the output (random directions), each with its own fill."""
    b = len(in_sizes)
    ih = np.array([h for h, _ in in_sizes], float)
    iw = np.array([w for _, w in in_sizes], float)
    x0, x1 = np.sort(rng.uniform(-0.3, 1.3, (b, 2)) * iw[:, None], 1).T
    y0, y1 = np.sort(rng.uniform(-0.3, 1.3, (b, 2)) * ih[:, None], 1).T
    rect = np.stack([x0, x1, y0, y1], -1)
    clamp = G.clamp_of_rect(rect, np.stack([ih, iw], -1))
    s = int(rng.integers(0, max_slabs + 1))
    nslab = rng.integers(0, s + 1, b)
    slabs = np.zeros((b, s, 4))
    for k in range(b):
        oh, ow = out_sizes[k]
        for j in range(s):
            d = rng.normal(size=2)
            d /= np.hypot(*d)
            width = rng.uniform(0.3, 1.0) * (oh + ow) / 2
            centre = np.array([ow, oh]) * rng.uniform(0.3, 0.7, 2)
            slabs[k, j] = [d[0], d[1], width / 2 - d @ centre, width]
    return rect, clamp, slabs, rng.integers(0, 256, (b, s, c)).astype(float), nslab


def _host(x):
    import cupy

    return [cupy.asnumpy(a) for a in x] if isinstance(x, list) else cupy.asnumpy(x)


def _assert_close(gpu, ref, dtype, normalized):
    gpu = [np.asarray(g, np.float64) for g in gpu]
    ref = [np.asarray(r, np.float64) for r in ref]
    assert len(gpu) == len(ref), (len(gpu), len(ref))
    for g, r in zip(gpu, ref, strict=True):
        assert g.shape == r.shape
        d = np.abs(g - r)
        if dtype == np.uint8:
            assert d.max() <= 1, d.max()
        elif dtype == np.float16:
            assert np.all(d <= 1e-3 + 1e-3 * np.abs(r)), d.max()
        else:
            assert d.max() <= (1e-4 if normalized else 2e-3), d.max()


IMPLS = [warp_numpy, warp_cv2]


def _rng(seed=0):
    return np.random.default_rng(seed)


def one(impl, img, M, out_hw, **kw):
    return impl([img], np.asarray(M, float)[None], [out_hw], **kw)[0]
