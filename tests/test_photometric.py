"""Photometric ops (issues 29 and 31): photometric_distort and grayscale against float64 ports
of torchvision v2's functional colour kernels, color_twist & co. against DALI's own reference
formula, hand-computed boundary cases, keyed draws, and photometric.cu run on the CPU (g++)
against its NumPy twin.

The references below are written from the definitions, not from detaug's module:
torchvision/transforms/v2/functional/_color.py (pytorch/vision): ``_rgb_to_grayscale_image``
(0.2989 R + 0.587 G + 0.114 B), ``_blend`` (``image1 * ratio + image2 * (1 - ratio)``, clamped
to [0, bound], cast back to the image's dtype: truncation for uint8), ``adjust_brightness``
(``image * factor``, clamped, cast), ``adjust_contrast`` (blend with the mean of the grayscale,
floored for integer images), ``adjust_saturation`` (blend with the pixel's grayscale, floored
for integer images), ``adjust_hue`` (to float by ``/ 255``, HSV hexcone model, hue added modulo
1, back, ``to_dtype(scale=True)``: ``trunc(x * 255.999)``); the HSV conversion here is Python's
``colorsys``. ``permute_channels``: ``out = image[perm]``. The order of
``RandomPhotometricDistort._transform``: brightness, contrast if before, saturation, hue,
contrast if after, channel permutation. DALI: dali/test/python/operator_1/test_color_twist.py
``ref_color_twist``: ``((yiq2rgb @ H(hue) S(sat) @ rgb2yiq @ rgb - grey) * contrast + grey) *
brightness``, grey 128 (integer) or 0.5 (float), rounded and clipped.
"""
from __future__ import annotations

import colorsys
import ctypes
import itertools
import os
import shutil
import subprocess

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.kernels import color as KC
from detaug.kernels import photometric as KP
from helpers import close_pipelines, random_images, track  # noqa: F401 (fixture)

# ----------------------------------------------------------------------------- float64 references


def tv_gray(x):
    return x[..., 0] * 0.2989 + x[..., 1] * 0.587 + x[..., 2] * 0.114


def tv_cast(x, u8):
    x = np.clip(x, 0.0, 255.0 if u8 else 1.0)
    return np.trunc(x) if u8 else x


def ref_brightness(x, f, u8):
    return tv_cast(x * f, u8)


def ref_contrast(x, f, u8):
    g = tv_gray(x)
    mean = (np.floor(g) if u8 else g).mean()
    return tv_cast(x * f + mean * (1.0 - f), u8)


def ref_saturation(x, f, u8):
    g = tv_gray(x)
    g = np.floor(g) if u8 else g
    return tv_cast(x * f + g[..., None] * (1.0 - f), u8)


def ref_hue(x, f, u8):
    flat = (x / 255.0 if u8 else x).reshape(-1, 3)
    out = np.empty_like(flat)
    for k, (r, g, b) in enumerate(flat):
        h, s, v = colorsys.rgb_to_hsv(r, g, b)
        out[k] = colorsys.hsv_to_rgb((h + f) % 1.0, s, v)
    out = out.reshape(x.shape)
    return np.trunc(out * 255.999) if u8 else out


def ref_gray(x, u8, channels=3):
    g = tv_gray(x)
    g = np.trunc(g) if u8 else g
    return np.repeat(g[..., None], channels, -1)


def ref_distort(img, b=None, c=None, s=None, h=None, contrast_first=True, perm=None):
    u8 = img.dtype == np.uint8
    x = img.astype(np.float64)
    if b is not None:
        x = ref_brightness(x, b, u8)
    if c is not None and contrast_first:
        x = ref_contrast(x, c, u8)
    if s is not None:
        x = ref_saturation(x, s, u8)
    if h is not None:
        x = ref_hue(x, h, u8)
    if c is not None and not contrast_first:
        x = ref_contrast(x, c, u8)
    if perm is not None:
        x = x[..., list(perm)]
    return x


RGB2YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])


def ref_color_twist(img, hue, sat, brightness, contrast):
    a = np.radians(hue)
    hmat = np.array([[1, 0, 0], [0, np.cos(a) * sat, np.sin(a) * sat],
                     [0, -np.sin(a) * sat, np.cos(a) * sat]])
    m = np.linalg.inv(RGB2YIQ) @ hmat @ RGB2YIQ
    grey = 128.0 if img.dtype == np.uint8 else 0.5
    px = img.reshape(-1, 3).astype(np.float64) @ m.T
    out = (((px - grey) * contrast + grey) * brightness).reshape(img.shape)
    return np.clip(np.round(out), 0, 255) if img.dtype == np.uint8 else out


# ----------------------------------------------------------------------------- helpers


def staged(images, flags, **kw):
    ip, fp = KP.photometric_params(len(images), flags, **kw)
    return KP.photometric_numpy(images, ip, fp)


def close(got, ref, tol=1):
    d = np.abs(np.asarray(got, np.float64) - ref)
    assert d.max() <= tol, f"max difference {d.max()} at {np.unravel_index(d.argmax(), d.shape)}"


def fresh(seed, shapes, dtype=np.uint8):
    rng = np.random.default_rng(seed)
    imgs = random_images(rng, shapes)
    if dtype == np.float32:
        imgs = [(i / 255.0).astype(np.float32) for i in imgs]
    return rng, imgs


SEEDS = [0, 1, int(np.random.SeedSequence().entropy % 100000)]  # two fixed, one fresh per run


# ----------------------------------------------------------------------------- single steps


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_each_step_matches_torchvision_formula(seed, dtype):
    rng, imgs = fresh(seed, [(17, 23, 3), (8, 5, 3), (1, 1, 3)], dtype)
    u8 = dtype == np.uint8
    tol = 1 if u8 else 2e-5
    for img in imgs:
        x = img.astype(np.float64)
        f = float(rng.uniform(0.4, 1.6))
        h = float(rng.uniform(-0.5, 0.5))
        close(staged([img], KP.BRIGHTNESS, brightness=f)[0], ref_brightness(x, f, u8), tol)
        close(staged([img], KP.CONTRAST, contrast=f)[0], ref_contrast(x, f, u8), tol)
        close(staged([img], KP.SATURATION, saturation=f)[0], ref_saturation(x, f, u8), tol)
        close(staged([img], KP.HUE, hue=h)[0], ref_hue(x, h, u8), tol)
        close(staged([img], KP.GRAY)[0], ref_gray(x, u8), tol)
        for k, perm in enumerate(KP.PERMS):
            np.testing.assert_array_equal(staged([img], KP.PERMUTE, perm=k)[0], img[..., perm])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("first", [True, False])
def test_whole_chain_matches_torchvision_order(seed, first):
    rng, imgs = fresh(seed, [(19, 13, 3), (6, 9, 3)])
    for img in imgs:
        b, c, s = rng.uniform(0.875, 1.125), rng.uniform(0.5, 1.5), rng.uniform(0.5, 1.5)
        h, k = rng.uniform(-0.05, 0.05), int(rng.integers(6))
        flags = (KP.BRIGHTNESS | KP.CONTRAST | KP.SATURATION | KP.HUE | KP.PERMUTE
                 | (KP.CONTRAST_FIRST if first else 0))
        got = staged([img], flags, brightness=b, contrast=c, saturation=s, hue=h, perm=k)[0]
        ref = ref_distort(img, b, c, s, h, first, KP.PERMS[k])
        # each step truncates, as torchvision's does; float32 against float64 can move one step
        # by a level, which a later contrast or saturation above 1 may carry: one level at most
        # on nearly every value, two at most anywhere
        d = np.abs(got.astype(float) - ref)
        assert d.max() <= 2 and (d > 1).mean() < 0.01, (d.max(), (d > 1).mean())


# ----------------------------------------------------------------------------- hand-computed


def test_brightness_clips_at_255_and_truncates():
    img = np.array([[[250, 100, 0], [255, 255, 255]]], np.uint8)
    np.testing.assert_array_equal(staged([img], KP.BRIGHTNESS, brightness=1.125)[0],
                                  [[[255, 112, 0], [255, 255, 255]]])           # 112.5 -> 112
    np.testing.assert_array_equal(staged([img], KP.BRIGHTNESS, brightness=0.5)[0],
                                  [[[125, 50, 0], [127, 127, 127]]])            # 127.5 -> 127


def test_contrast_uses_floored_gray_mean_and_clips_at_0_and_255():
    img = np.array([[[0, 0, 0], [255, 255, 255]]], np.uint8)
    # gray of white: 255 * 0.9999 = 254.97 -> 254; mean (0 + 254) / 2 = 127
    np.testing.assert_array_equal(staged([img], KP.CONTRAST, contrast=0.5)[0],
                                  [[[63, 63, 63], [191, 191, 191]]])            # 63.5, 191
    np.testing.assert_array_equal(staged([img], KP.CONTRAST, contrast=1.5)[0],
                                  [[[0, 0, 0], [255, 255, 255]]])               # -63.5, 319
    np.testing.assert_array_equal(staged([img], KP.CONTRAST, contrast=0.0)[0],
                                  [[[127, 127, 127]] * 2])


def test_saturation_hand_values():
    img = np.array([[[255, 0, 0], [200, 100, 50]]], np.uint8)
    # gray(255, 0, 0) = 76.2 -> 76; gray(200, 100, 50) = 124.18 -> 124
    np.testing.assert_array_equal(staged([img], KP.SATURATION, saturation=0.0)[0],
                                  [[[76, 76, 76], [124, 124, 124]]])
    np.testing.assert_array_equal(staged([img], KP.SATURATION, saturation=2.0)[0],
                                  [[[255, 0, 0], [255, 76, 0]]])                 # 2x - g


def test_hue_hand_values_and_wrap_around():
    red = np.array([[[255, 0, 0]]], np.uint8)
    # red is hue 0: +1/4 turn -> (q, v, p) = (0.5, 1, 0); -1/4 -> hue 3/4 -> (t, p, v) = (0.5, 0, 1)
    np.testing.assert_array_equal(staged([red], KP.HUE, hue=0.25)[0], [[[127, 255, 0]]])
    np.testing.assert_array_equal(staged([red], KP.HUE, hue=-0.25)[0], [[[127, 0, 255]]])
    np.testing.assert_array_equal(staged([red], KP.HUE, hue=0.5)[0], [[[0, 255, 255]]])
    np.testing.assert_array_equal(staged([red], KP.HUE, hue=-0.5)[0], [[[0, 255, 255]]])
    # (255, 0, 10) has hue 1 - 10/255/6 = 0.99346; + 0.05 wraps to 0.04346: G = 6 * 0.04346 * 255.999
    np.testing.assert_array_equal(staged([np.array([[[255, 0, 10]]], np.uint8)], KP.HUE, hue=0.05)[0],
                                  [[[255, 66, 0]]])
    # grey has no hue: unchanged by any shift; white stays 255 (v * 255.999 -> 255)
    grey = np.array([[[90, 90, 90], [255, 255, 255], [0, 0, 0]]], np.uint8)
    np.testing.assert_array_equal(staged([grey], KP.HUE, hue=0.3)[0], grey)


def test_grayscale_hand_values():
    img = np.array([[[255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255]]], np.uint8)
    want = [254, 76, 149, 29]  # 254.97, 76.22, 149.69, 29.07 truncated (torchvision's tensor path)
    np.testing.assert_array_equal(staged([img], KP.GRAY)[0], np.repeat(np.array(want)[None, :, None], 3, -1))
    np.testing.assert_array_equal(staged([img], KP.GRAY, out_channels=1)[0][..., 0], [want])
    f = staged([img.astype(np.float32) / 255], KP.GRAY)[0]
    np.testing.assert_allclose(f[0, :, 0], [0.9999, 0.2989, 0.587, 0.114], rtol=1e-6)


def test_float_images_clip_to_one():
    img = np.array([[[0.9, 0.5, 0.0]]], np.float32)
    np.testing.assert_allclose(staged([img], KP.BRIGHTNESS, brightness=1.2)[0], [[[1.0, 0.6, 0.0]]],
                               rtol=1e-6)
    assert staged([img], KP.BRIGHTNESS, brightness=1.2)[0].dtype == np.float32


def test_no_flags_is_identity_and_inputs_untouched():
    _, imgs = fresh(3, [(7, 9, 3), (4, 4, 3)])
    copies = [i.copy() for i in imgs]
    out = staged(imgs, 0, brightness=3.0, contrast=0.0, saturation=0.0, hue=0.4, perm=5)
    for o, i, c in zip(out, imgs, copies):
        np.testing.assert_array_equal(o, i)
        np.testing.assert_array_equal(i, c)
        assert o is not i


def test_params_are_checked():
    with pytest.raises(ValueError, match="permutation"):
        KP.photometric_params(2, 0, perm=6)
    with pytest.raises(ValueError, match="1-channel"):
        KP.photometric_params(2, [KP.GRAY, 0], out_channels=1)
    with pytest.raises(ValueError, match="sample 1"):
        KP.photometric_numpy([np.zeros((2, 2, 3), np.uint8), np.zeros((2, 2, 4), np.uint8)],
                             *KP.photometric_params(2, 0))
    with pytest.raises(ValueError, match="uint8 or float32"):
        KP.photometric_numpy([np.zeros((2, 2, 3), np.int16)], *KP.photometric_params(1, 0))


def test_dense_and_ragged_batches():
    rng, imgs = fresh(4, [(5, 6, 3)] * 3)
    ip, fp = KP.photometric_params(3, KP.SATURATION | KP.HUE, saturation=[0.5, 1, 1.5], hue=[0.1, 0, -0.1])
    dense = KP.photometric_numpy(np.stack(imgs), ip, fp)
    assert isinstance(dense, np.ndarray) and dense.shape == (3, 5, 6, 3)
    np.testing.assert_array_equal(dense, np.stack(KP.photometric_numpy(imgs, ip, fp)))
    empty = KP.photometric_numpy(np.zeros((0, 4, 4, 3), np.uint8), *KP.photometric_params(0, 0))
    assert empty.shape == (0, 4, 4, 3)


# ----------------------------------------------------------------------------- photometric.cu on the CPU
_SHIM = r"""
#include <cmath>
#include <cstring>
using namespace std;
struct Dim3 { unsigned int x, y, z; };
static Dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __constant__ static
#define __forceinline__ inline
static inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
    unsigned long long o = *p; *p += v; return o; }
static inline double atomicAdd(double* p, double v) { double o = *p; *p += v; return o; }
#include "photometric.cu"
typedef void (*reduce_t)(const unsigned long long*, const unsigned long long*, int, const int*,
                         const float*, unsigned long long*);
typedef void (*apply_t)(const unsigned long long*, const unsigned long long*,
                        const unsigned long long*, int, const int*, const float*,
                        const unsigned long long*);
typedef void (*twist_t)(const unsigned long long*, const unsigned long long*,
                        const unsigned long long*, int, const float*);
static void grid(unsigned gx, unsigned gy, unsigned bx) {
    blockDim.x = bx; blockDim.y = blockDim.z = 1; gridDim.x = gx; gridDim.y = gy; gridDim.z = 1; }
#define EACH_THREAD(gx, gy, bx, CALL) \
    grid(gx, gy, bx); \
    for (unsigned y = 0; y < gy; ++y) for (unsigned x = 0; x < gx; ++x) for (unsigned t = 0; t < bx; ++t) { \
        blockIdx.x = x; blockIdx.y = y; threadIdx.x = t; CALL; }
extern "C" void emulate_reduce(void* k, unsigned gx, unsigned gy, unsigned bx,
                               const unsigned long long* in_ptrs, const unsigned long long* counts,
                               int b, const int* ip, const float* fp, unsigned long long* sums) {
    EACH_THREAD(gx, gy, bx, ((reduce_t)k)(in_ptrs, counts, b, ip, fp, sums))
}
extern "C" void emulate_apply(void* k, unsigned gx, unsigned gy, unsigned bx,
                              const unsigned long long* in_ptrs, const unsigned long long* out_ptrs,
                              const unsigned long long* counts, int b, const int* ip,
                              const float* fp, const unsigned long long* sums) {
    EACH_THREAD(gx, gy, bx, ((apply_t)k)(in_ptrs, out_ptrs, counts, b, ip, fp, sums))
}
extern "C" void emulate_twist(void* k, unsigned gx, unsigned gy, unsigned bx,
                              const unsigned long long* in_ptrs, const unsigned long long* out_ptrs,
                              const unsigned long long* counts, int b, const float* mats) {
    EACH_THREAD(gx, gy, bx, ((twist_t)k)(in_ptrs, out_ptrs, counts, b, mats))
}
"""


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """photometric.cu compiled as host C++ (CUDA keywords shimmed, the warp shuffle replaced by
    one atomic add per thread under DETAUG_EMULATE; no contraction, as --fmad=false)."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ to emulate the CUDA source")
    d = tmp_path_factory.mktemp("photometric_cu")
    (d / "shim.cpp").write_text(_SHIM)
    kdir = os.path.dirname(KP.__file__)
    subprocess.run([cxx, "-std=c++17", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-w",
                    "-DDETAUG_EMULATE", f"-I{kdir}", str(d / "shim.cpp"), "-o",
                    str(d / "photometric_emu.so")], check=True)
    return ctypes.CDLL(str(d / "photometric_emu.so"))


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


def _kernel(lib, name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p)


def _emulate_photometric(lib, images, ip, fp, grid_x=3, block=64):
    """Run the kernels on the CPU with a small grid (every grid-stride path is taken)."""
    tag = "u8" if images[0].dtype == np.uint8 else "f32"
    ch = int(ip[0, 2])
    imgs = [np.ascontiguousarray(i) for i in images]
    outs = [np.zeros(i.shape[:2] + (ch,), i.dtype) for i in imgs]
    ptrs = [np.array([a.ctypes.data for a in arrs], np.uint64) for arrs in (imgs, outs)]
    counts = np.array([i.shape[0] * i.shape[1] for i in imgs], np.uint64)
    sums = np.zeros(len(imgs), np.uint64)
    ip, fp = np.ascontiguousarray(ip, np.int32), np.ascontiguousarray(fp, np.float32)
    if np.any(ip[:, 0] & KP.CONTRAST):
        lib.emulate_reduce(_kernel(lib, f"photometric_reduce_{tag}"), ctypes.c_uint(2),
                           ctypes.c_uint(len(imgs)), ctypes.c_uint(block), _ptr(ptrs[0]),
                           _ptr(counts), ctypes.c_int(len(imgs)), _ptr(ip), _ptr(fp), _ptr(sums))
    lib.emulate_apply(_kernel(lib, f"photometric_{tag}"), ctypes.c_uint(grid_x),
                      ctypes.c_uint(len(imgs)), ctypes.c_uint(block), _ptr(ptrs[0]), _ptr(ptrs[1]),
                      _ptr(counts), ctypes.c_int(len(imgs)), _ptr(ip), _ptr(fp), _ptr(sums))
    return outs


def _random_params(rng, b, u8=True):
    flags = rng.integers(0, 64, b)
    return KP.photometric_params(b, flags, brightness=rng.uniform(0.5, 1.5, b),
                                 contrast=rng.uniform(0, 2, b), saturation=rng.uniform(0, 2, b),
                                 hue=rng.uniform(-0.5, 0.5, b), perm=rng.integers(0, 6, b))


@pytest.mark.parametrize("seed", SEEDS)
def test_cuda_source_equals_twin_bit_for_bit_uint8(emulated, seed):
    rng, imgs = fresh(seed, [(int(a), int(b), 3) for a, b in np.random.default_rng(seed).integers(1, 40, (12, 2))])
    ip, fp = _random_params(rng, len(imgs))
    ip[:4, 0] = [0, KP.CONTRAST, KP.CONTRAST | KP.CONTRAST_FIRST | KP.BRIGHTNESS, 127 - KP.GRAY]
    for got, want in zip(_emulate_photometric(emulated, imgs, ip, fp), KP.photometric_numpy(imgs, ip, fp)):
        np.testing.assert_array_equal(got, want)
    gip, gfp = KP.photometric_params(len(imgs), ip[:, 0] | KP.GRAY, out_channels=1)
    for got, want in zip(_emulate_photometric(emulated, imgs, gip, gfp), KP.photometric_numpy(imgs, gip, gfp)):
        np.testing.assert_array_equal(got, want)


def test_cuda_source_equals_twin_float(emulated):
    rng, imgs = fresh(7, [(9, 11, 3), (30, 2, 3), (1, 1, 3), (16, 16, 3)], np.float32)
    ip, fp = _random_params(rng, len(imgs))
    ip[:, 0] |= KP.CONTRAST
    for got, want in zip(_emulate_photometric(emulated, imgs, ip, fp), KP.photometric_numpy(imgs, ip, fp)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("in_dtype,out_dtype", list(itertools.product([np.uint8, np.float32], repeat=2)))
def test_cuda_source_color_twist(emulated, in_dtype, out_dtype):
    rng, imgs = fresh(8, [(7, 5, 3), (12, 13, 3)], in_dtype)
    b = len(imgs)
    mats = KP.color_twist_matrices(rng.uniform(0, 2, b), rng.uniform(0, 2, b), rng.uniform(0, 2, b),
                                   rng.uniform(-180, 180, b), 128.0 if in_dtype == np.uint8 else 0.5)
    outs = [np.zeros(i.shape, out_dtype) for i in imgs]
    ptrs = [np.array([a.ctypes.data for a in arrs], np.uint64) for arrs in (imgs, outs)]
    counts = np.array([i.shape[0] * i.shape[1] for i in imgs], np.uint64)
    m32 = np.ascontiguousarray(mats, np.float32)
    name = f"color_twist_{'u8' if in_dtype == np.uint8 else 'f32'}_{'u8' if out_dtype == np.uint8 else 'f32'}"
    emulated.emulate_twist(_kernel(emulated, name), ctypes.c_uint(2),
                           ctypes.c_uint(b), ctypes.c_uint(32), _ptr(ptrs[0]), _ptr(ptrs[1]),
                           _ptr(counts), ctypes.c_int(b), _ptr(m32))
    for got, want in zip(outs, KP.color_twist_numpy(imgs, mats, out_dtype)):
        close(got, want.astype(np.float64), 1 if out_dtype == np.uint8 else 1e-3)


# ----------------------------------------------------------------------------- DALI's colour twist


@pytest.mark.parametrize("seed", SEEDS)
def test_color_twist_matches_dali_reference(seed):
    rng, imgs = fresh(seed, [(9, 14, 3), (5, 5, 3), (20, 3, 3)])
    b = len(imgs)
    h, s = rng.uniform(-180, 180, b), rng.uniform(0, 2, b)
    br, ct = rng.uniform(0, 2, b), rng.uniform(0, 2, b)
    out = KP.color_twist_numpy(imgs, KP.color_twist_matrices(br, ct, s, h, 128.0))
    fimgs = [(i / 255.0).astype(np.float32) for i in imgs]
    fout = KP.color_twist_numpy(fimgs, KP.color_twist_matrices(br, ct, s, h, 0.5))
    for k in range(b):
        close(out[k], ref_color_twist(imgs[k], h[k], s[k], br[k], ct[k]), 1)
        close(fout[k], ref_color_twist(fimgs[k], h[k], s[k], br[k], ct[k]), 1e-5)
        assert fout[k].dtype == np.float32


def test_hsv_and_brightness_contrast_agree_with_color_twist():
    """fn.hsv(hue, saturation, value) is color_twist(hue, saturation, brightness=value), and
    fn.brightness_contrast about 128 is color_twist(brightness, contrast): same DALI matrices."""
    rng, imgs = fresh(11, [(12, 10, 3), (7, 8, 3)])
    h, s, v = rng.uniform(-90, 90, 2), rng.uniform(0, 2, 2), rng.uniform(0.5, 1.5, 2)
    twist = KP.color_twist_numpy(imgs, KP.color_twist_matrices(v, np.ones(2), s, h, 128.0))
    for a, c in zip(twist, KC.hsv_numpy(imgs, h, s, v)):
        close(a, c.astype(float), 1)
    br, ct = rng.uniform(0.5, 1.5, 2), rng.uniform(0, 2, 2)
    twist = KP.color_twist_numpy(imgs, KP.color_twist_matrices(br, ct, np.ones(2), np.zeros(2), 128.0))
    for a, c in zip(twist, KC.brightness_contrast_numpy(imgs, br, ct, contrast_center=128.0)):
        close(a, c.astype(float), 1)


def test_color_twist_hand_values():
    img = np.array([[[10, 128, 250]]], np.uint8)
    one, zero = np.ones(1), np.zeros(1)
    # brightness 2: 2x, clamped; contrast 0: everything at 128; contrast 2: 128 + 2 (x - 128)
    np.testing.assert_array_equal(KP.color_twist_numpy([img], KP.color_twist_matrices(one * 2, one, one, zero, 128.0))[0],
                                  [[[20, 255, 255]]])
    np.testing.assert_array_equal(KP.color_twist_numpy([img], KP.color_twist_matrices(one, zero, one, zero, 128.0))[0],
                                  [[[128, 128, 128]]])
    np.testing.assert_array_equal(KP.color_twist_numpy([img], KP.color_twist_matrices(one, one * 2, one, zero, 128.0))[0],
                                  [[[0, 128, 255]]])
    # saturation 0: every channel the YIQ luma 0.299 * 10 + 0.587 * 128 + 0.114 * 250 = 106.626
    np.testing.assert_array_equal(KP.color_twist_numpy([img], KP.color_twist_matrices(one, one, zero, zero, 128.0))[0],
                                  [[[107, 107, 107]]])
    # a float output keeps unclamped values in the input's units (DALI)
    f = KP.color_twist_numpy([img], KP.color_twist_matrices(one * 2, one, one, zero, 128.0), np.float32)[0]
    np.testing.assert_allclose(f, [[[20, 256, 500]]], rtol=1e-9)


# ----------------------------------------------------------------------------- the ops in a pipeline


def _pipe(images, graph, batch_size=None, seed=5):
    def src(info):
        return images[info.idx_in_epoch]

    pipe = track(Pipeline(batch_size=batch_size or len(images), num_threads=1, seed=seed))
    with pipe:
        img = fn.external_source(source=src, batch=False, size=len(images))
        out = graph(img)
        pipe.set_outputs(*(out if isinstance(out, tuple) else (out,)))
    return pipe


def _samples(batch):
    return [np.asarray(a) for a in batch.data]


def test_p0_is_identity_and_p1_applies_every_part():
    _, imgs = fresh(12, [(16, 12, 3)] * 6)
    out = _samples(_pipe(imgs, lambda i: fn.photometric_distort(i, p=0.0)).run()[0])
    for o, i in zip(out, imgs):
        np.testing.assert_array_equal(o, i)
    b, c, s, h = 1.1, 0.7, 1.3, 0.02
    out = _samples(_pipe(imgs, lambda i: fn.photometric_distort(
        i, brightness=(b, b), contrast=(c, c), saturation=(s, s), hue=(h, h), p=1.0)).run()[0])
    seen = set()
    for o, img in zip(out, imgs):
        # which of the 12 outcomes (contrast first or last, 6 permutations) this sample drew
        cands = [(first, k) for first in (True, False) for k in range(6)
                 if np.abs(o - ref_distort(img, b, c, s, h, first, KP.PERMS[k])).max() <= 2]
        assert cands, "matches no contrast order and permutation"
        seen.add(cands[0])
    assert len(seen) > 1  # the order and permutation are drawn per sample


def test_photometric_distort_probability_per_part():
    """With p = 0.5 each part is applied about half of the time (here: brightness alone, read off
    the output: a uniform image scaled by 1.125 exactly)."""
    img = np.full((4, 4, 3), 80, np.uint8)
    out = _samples(_pipe([img] * 400, lambda i: fn.photometric_distort(
        i, brightness=(1.125, 1.125), contrast=(1.0, 1.0), saturation=(1.0, 1.0), hue=(0.0, 0.0)),
        batch_size=400).run()[0])
    bright = np.mean([o[0, 0, 0] == 90 for o in out])
    assert all(o[0, 0, 0] in (80, 90) for o in out)
    assert 0.4 < bright < 0.6


def test_keyed_draws_any_order_and_batch_size():
    _, imgs = fresh(13, [(int(8 + k % 4), 10, 3) for k in range(8)])

    def graph(i):
        return fn.photometric_distort(i), fn.grayscale(i, p=0.5), fn.color_twist(
            i, hue=fn.random.uniform(range=(-30.0, 30.0)), saturation=fn.random.uniform(range=(0.5, 1.5)))

    whole = _pipe(imgs, graph, batch_size=4)
    fwd = [whole.run_batch(k) for k in (0, 1)]
    back = [whole.run_batch(k) for k in (1, 0)][::-1]
    single = _pipe(imgs, graph, batch_size=1)
    for k in range(8):
        one = single.run_batch(k)
        for j in range(3):
            a = _samples(fwd[k // 4][j])[k % 4]
            np.testing.assert_array_equal(a, _samples(back[k // 4][j])[k % 4])
            np.testing.assert_array_equal(a, _samples(one[j])[0])
    other_seed = _pipe(imgs, graph, batch_size=4, seed=6).run_batch(0)
    assert any((a != b).any() for a, b in zip(_samples(fwd[0][0]), _samples(other_seed[0])))


def test_per_sample_p_and_grayscale_op():
    _, imgs = fresh(14, [(6, 7, 3)] * 6)
    # p drawn per sample as 0 or 1: a sample is grey exactly where its p is 1
    pipe = _pipe(imgs, lambda i: (lambda p: (p, fn.grayscale(i, p=p)))(fn.random.uniform(values=[0.0, 1.0])))
    p, out = pipe.run()
    out = _samples(out)
    grey = [bool((o == o[..., :1]).all()) for o in out]
    for o, img, g in zip(out, imgs, grey):
        if g:
            np.testing.assert_array_equal(o, ref_gray(img.astype(float), True).astype(np.uint8))
        else:
            np.testing.assert_array_equal(o, img)
    assert grey == [bool(v) for v in np.asarray(p).reshape(-1)]
    assert any(grey) and not all(grey)
    one = _samples(_pipe(imgs, lambda i: fn.grayscale(i, num_output_channels=1)).run()[0])
    assert one[0].shape == (6, 7, 1)


def test_ops_follow_the_fused_warp_and_keep_float_images():
    _, imgs = fresh(15, [(20, 30, 3), (10, 14, 3)])
    a = _samples(_pipe(imgs, lambda i: fn.hue(fn.flip(i, horizontal=1), hue=40.0)).run()[0])
    for o, img in zip(a, imgs):
        want = KP.color_twist_numpy([img[:, ::-1]], KP.color_twist_matrices(
            np.ones(1), np.ones(1), np.ones(1), np.full(1, 40.0), 128.0))[0]
        np.testing.assert_array_equal(o, want)
    f = _samples(_pipe(imgs, lambda i: fn.photometric_distort(
        fn.normalize(i, mean=0.0, std=255.0, dtype="float32"), p=1.0)).run()[0])
    assert all(x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1 for x in f)


@pytest.mark.parametrize("graph,match", [
    (lambda i: fn.photometric_distort(i, hue=(-0.6, 0.0)), "hue"),
    (lambda i: fn.photometric_distort(i, contrast=(1.5, 0.5)), "contrast"),
    (lambda i: fn.photometric_distort(i, brightness=(-1.0, 1.0)), "brightness"),
    (lambda i: fn.photometric_distort(i, p=1.5), "p must be"),
    (lambda i: fn.grayscale(i, num_output_channels=2), "num_output_channels"),
    (lambda i: fn.grayscale(i, p=0.5, num_output_channels=1), "num_output_channels=1"),
    (lambda i: fn.color_twist(i, saturation=-1.0), "saturation"),
    (lambda i: fn.brightness(i, dtype="float16"), "dtype"),
    (lambda i: fn.contrast(fn.normalize(i, mean=0.0, std=1.0, output_layout="CHW"), contrast=2.0), "HWC"),
])
def test_bad_arguments_name_themselves(graph, match):
    _, imgs = fresh(16, [(6, 6, 3)] * 4)
    with pytest.raises(ValueError, match=match):
        _pipe(imgs, graph).run()


def test_cuda_source_compiles_for_the_device(tmp_path):
    """The device path (warp shuffles, atomics: not in the emulation) compiles with the kernel's
    options, where a CUDA compiler is installed; ptxas reports no stack frame (no local memory)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc")
    src = os.path.join(os.path.dirname(KP.__file__), "photometric.cu")
    res = subprocess.run([nvcc, *KP._OPTIONS, "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o",
                          str(tmp_path / "p.cubin"), src], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    frames = [ln for ln in res.stderr.splitlines() if "stack frame" in ln]
    assert len(frames) == 8 and all(ln.strip().startswith("0 bytes stack frame") for ln in frames), frames


class _FakeDeviceArray(np.ndarray):
    """A host array that answers cupy's ``.data.ptr``: lets the cupy launchers' host code run
    with the emulated kernels (as tests/test_warp.py does for warp_cupy)."""

    @property
    def data(self):
        import types

        return types.SimpleNamespace(ptr=self.ctypes.data)


def _fake_cupy():
    import contextlib
    import types

    dev = lambda a: np.asarray(a).view(_FakeDeviceArray)  # noqa: E731
    stream = contextlib.nullcontext()
    return types.SimpleNamespace(
        asarray=dev, ascontiguousarray=lambda a: dev(np.ascontiguousarray(a)),
        empty=lambda shape, dtype: dev(np.full(shape, 77, dtype)), ndarray=_FakeDeviceArray,
        cuda=types.SimpleNamespace(get_current_stream=lambda: stream))


def test_cupy_launchers_host_code_with_emulated_kernels(emulated, monkeypatch):
    """photometric_cupy / color_twist_cupy's pointers, counts, grids, parameter upload and
    output buffers, run through the emulated kernels: equal to the twins; the reduction runs
    only where a sample adjusts its contrast."""
    import sys

    calls = []

    def fake_launch(kernel, grid, block, args, *, shared_mem=0, stream=None, name=None):
        calls.append(name)
        c_args = [ctypes.c_int(int(a)) if isinstance(a, np.int32) else _ptr(a) for a in args]
        runner = {"photometric_reduce": emulated.emulate_reduce, "photometric": emulated.emulate_apply,
                  "color_twist": emulated.emulate_twist}[name]
        runner(_kernel(emulated, kernel), ctypes.c_uint(grid[0]), ctypes.c_uint(grid[1]),
               ctypes.c_uint(block[0]), *c_args)

    fake = _fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    # the pinned staging upload needs real CUDA; the emulation takes the host arrays as they are
    monkeypatch.setattr(KP, "upload_many", lambda arrays, stream=None: [fake.asarray(np.array(a)) for a in arrays])
    monkeypatch.setattr(KP, "get_kernel", lambda src, name, options=(): name)
    monkeypatch.setattr(KP, "launch", fake_launch)
    rng, imgs = fresh(21, [(33, 20, 3), (1, 1, 3), (0, 4, 3), (50, 61, 3)])
    ip, fp = _random_params(rng, len(imgs))
    ip[0, 0] |= KP.CONTRAST
    got = KP.photometric_cupy([fake.asarray(i) for i in imgs], ip, fp)
    for g, w in zip(got, KP.photometric_numpy(imgs, ip, fp)):
        np.testing.assert_array_equal(np.asarray(g), w)
    assert calls == ["photometric_reduce", "photometric"]
    calls.clear()
    dense = np.stack(random_images(rng, [(9, 7, 3)] * 3))
    gip, gfp = KP.photometric_params(3, KP.GRAY, out_channels=1)
    got = KP.photometric_cupy(fake.asarray(dense)[:, :, ::-1], gip, gfp)  # non-contiguous input
    assert got.shape == (3, 9, 7, 1)
    np.testing.assert_array_equal(np.asarray(got), KP.photometric_numpy(dense[:, :, ::-1].copy(), gip, gfp))
    assert calls == ["photometric"]
    calls.clear()
    mats = KP.color_twist_matrices(np.full(3, 0.8), np.full(3, 1.2), np.full(3, 0.5), np.full(3, 25.0), 128.0)
    got = KP.color_twist_cupy(fake.asarray(dense), mats, np.float32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.asarray(got), KP.color_twist_numpy(dense, mats, np.float32), atol=1e-3)
    assert calls == ["color_twist"]
    assert KP.photometric_cupy([], *KP.photometric_params(0, 0)) == []
