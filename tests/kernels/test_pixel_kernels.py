"""NumPy twins of detaug/kernels/blur.py and noise.py against references written from the
definitions (torchvision's gaussian_blur in float64, direct 2-D), hand-computed cases, and
statistics of the noise on large images; blur.cu and noise.cu compiled with g++ and run on the
CPU against the twins."""
from __future__ import annotations

import contextlib
import ctypes
import math
import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

from detaug.core.rng import SampleRNG, counter_bits, to_unit
from detaug.kernels import blur as KB
from detaug.kernels import noise as KN
from helpers import fresh_seed, random_images
from helpers.cases import tv_gaussian_blur, tv_kernel1d


@pytest.mark.parametrize("seed", [0, 1, fresh_seed()])
def test_blur_twin_against_torchvision_definition(seed):
    rng = np.random.default_rng(seed)
    for _ in range(4):
        h, w = int(rng.integers(12, 50)), int(rng.integers(12, 50))
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        kx, ky = (int(rng.integers(0, 6)) * 2 + 1 for _ in range(2))
        sx, sy = rng.uniform(0.1, 4.0, 2)
        got = KB.gaussian_blur_numpy([img], [KB.gaussian_weights(kx, sx)], [KB.gaussian_weights(ky, sy)])[0]
        ref = tv_gaussian_blur(img, (kx, ky), (sx, sy))
        d = np.abs(got.astype(np.float64) - ref)
        assert d.max() <= 1, f"seed {seed}"
        assert (d > 0).mean() < 1e-3, f"seed {seed}: {(d > 0).mean()} of the values off by one"


def test_gaussian_weights_and_window_rules():
    for k, s in ((1, 0.5), (3, 0.8), (7, 1.4), (11, 2.5)):
        np.testing.assert_allclose(KB.gaussian_weights(k, s), tv_kernel1d(k, s), rtol=1e-6)
    assert KB.gaussian_weights(1, 3.0).tolist() == [1.0]
    # DALI: window 2 ceil(3 sigma) + 1
    assert KB.window_from_sigma([0.5, 1.0, 1.5, 1.01]).tolist() == [5, 7, 11, 9]
    # DALI / OpenCV: sigma = 0.3 ((window - 1) / 2 - 1) + 0.8
    np.testing.assert_allclose(KB.sigma_from_window([1, 3, 7, 9]), [0.5, 0.8, 1.4, 1.7])
    with pytest.raises(ValueError, match="odd"):
        KB.gaussian_blur_numpy([np.zeros((4, 4, 3), np.uint8)], [np.ones(4)], [np.ones(3)])


def test_blur_hand_values_fold_and_constant():
    # a 1 x 2 image under a 5-tap kernel: the reflection folds twice
    img = np.array([[[100], [200]]], np.uint8)
    wx = np.array([0.1, 0.2, 0.4, 0.2, 0.1], np.float32)
    out = KB.gaussian_blur_numpy([img], [wx], [np.ones(1, np.float32)])[0]
    assert out[0, :, 0].tolist() == [140, 160]  # 0.6 a + 0.4 b, 0.4 a + 0.6 b
    one = np.full((1, 1, 3), 77, np.uint8)
    assert (KB.gaussian_blur_numpy([one], [KB.gaussian_weights(9, 2.0)], [KB.gaussian_weights(5, 1.0)])[0] == 77).all()
    flat = np.full((9, 13, 3), 201, np.uint8)
    out = KB.gaussian_blur_numpy(np.stack([flat]), [KB.gaussian_weights(7, 3.0)], [KB.gaussian_weights(3, 0.3)])
    assert out.shape == (1, 9, 13, 3) and (np.abs(out.astype(int) - 201) <= 1).all()
    assert KB.reflect101(np.array([-3, -1, 0, 3, 4, 7]), 4).tolist() == [3, 1, 0, 3, 2, 1]


def test_blur_launch_plan_refuses_a_too_tall_kernel():
    with pytest.raises(ValueError, match="window_size"):
        KB.launch_plan([(10, 10, 3)], [np.ones(3)], [np.ones(2 * KB.MAX_RADIUS_Y + 3)])
    plan = KB.launch_plan([(70, 33, 3), (5, 80, 1)], [np.ones(3), np.ones(5)], [np.ones(7), np.ones(1)])
    assert plan["grid"] == (3, 3, 2) and plan["shared"] == (32 + 6) * 32 * 4
    assert plan["dims"].tolist() == [[70, 33, 3, 1, 3], [5, 80, 1, 2, 0]]
    assert plan["offsets"].tolist() == [0, 10]


# ---- the counter-based hash --------------------------------------------------------------------
def test_counter_bits_is_the_sample_streams_words():
    rng = SampleRNG(7, 3, 2, np.array([0, 5, 11]))
    key = rng._key.copy()
    words = rng.bits(6)
    np.testing.assert_array_equal(counter_bits(key[:, None], np.arange(6)[None, :]), words)
    np.testing.assert_array_equal(to_unit(words[:, :2]), SampleRNG(7, 3, 2, np.array([0, 5, 11])).uniform(2))


def test_normal_at_is_standard_normal():
    z = KN.normal_at(np.uint64(12345), np.arange(1_000_000))
    assert abs(z.mean()) < 0.005 and abs(z.std() - 1) < 0.005
    assert abs((np.abs(z) < 1).mean() - 0.682689) < 0.002
    assert abs((np.abs(z) < 2).mean() - 0.954500) < 0.001


@pytest.mark.parametrize("lam", [0.3, 2.5, 12.75, 31.9, 32.0, 80.0])
def test_poisson_at_distribution(lam):
    n = 400_000
    k = KN.poisson_at(np.uint64(99), np.arange(n), np.full(n, lam))
    assert (k == np.round(k)).all() and (k >= 0).all()
    tol = 5 * math.sqrt(lam / n)
    assert abs(k.mean() - lam) < tol
    assert abs(k.var() / lam - 1) < 0.02
    if lam < 32:  # inversion: the frequencies are the pmf's
        for v in range(int(lam) + 3):
            p = math.exp(-lam) * lam ** v / math.factorial(v)
            assert abs((k == v).mean() - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-9, v


# ---- noise on images ---------------------------------------------------------------------------
def test_gaussian_noise_statistics_and_per_channel():
    img = np.full((1, 512, 512, 3), 128, np.uint8)
    params = np.array([[2.0, 10.0, 0, 0]])
    out = KN.noise_numpy(img, np.array([5], np.uint64), "gaussian", params, True)
    d = out.astype(np.float64) - 128
    assert abs(d.mean() - 2.0) < 0.06
    assert abs(d.std() - math.sqrt(100 + 1 / 12)) < 0.05   # rounding adds 1/12 of variance
    assert (out[0, ..., 0] != out[0, ..., 1]).mean() > 0.9  # channels drawn apart
    same = KN.noise_numpy(img, np.array([5], np.uint64), "gaussian", params, False)
    assert (same[0, ..., 0] == same[0, ..., 1]).all() and (same[0, ..., 1] == same[0, ..., 2]).all()
    # clamped, and std 0 is the identity
    hot = KN.noise_numpy(np.full((1, 64, 64, 1), 250, np.uint8), np.array([1], np.uint64), "gaussian",
                         np.array([[0.0, 50.0, 0, 0]]), True)
    assert hot.max() == 255 and (hot == 255).mean() > 0.4
    r = random_images(np.random.default_rng(3), [(9, 7, 3)])
    assert np.array_equal(KN.noise_numpy(r, np.array([1], np.uint64), "gaussian", np.zeros((1, 4)), True)[0], r[0])


def test_salt_and_pepper_fractions():
    img = np.full((1, 400, 500, 3), 128, np.uint8)
    amount, svp = 0.1, 0.3
    out = KN.noise_numpy(img, np.array([77], np.uint64), "salt_and_pepper",
                         np.array([[amount, svp, 255.0, 0.0]]), False)[0]
    n = 400 * 500
    salt, pepper = (out == 255).all(-1).mean(), (out == 0).all(-1).mean()
    for got, p in ((salt, amount * svp), (pepper, amount * (1 - svp))):
        assert abs(got - p) < 5 * math.sqrt(p * (1 - p) / n)
    assert ((out == 128).all(-1) | (out == 255).all(-1) | (out == 0).all(-1)).all()  # whole pixels
    per = KN.noise_numpy(img, np.array([77], np.uint64), "salt_and_pepper",
                         np.array([[amount, svp, 250.0, 3.0]]), True)[0]
    assert set(np.unique(per).tolist()) == {3, 128, 250}
    assert ((per == 128).any(-1) & (per != 128).any(-1)).mean() > 0.1  # channels drawn apart
    assert abs((per != 128).mean() - amount) < 0.005


def test_shot_noise_mean_and_variance():
    x = 100
    img = np.full((1, 300, 300, 3), x, np.uint8)
    f = 4.0
    out = KN.noise_numpy(img, np.array([3], np.uint64), "shot", np.array([[f, 0, 0, 0]]), True)
    v = out.astype(np.float64)
    assert abs(v.mean() - x) < 0.2
    assert abs(v.var() / (f * x) - 1) < 0.03       # poisson(x / f) * f: variance f x
    assert (v % f == 0).all()                      # multiples of the factor (under 255)
    assert np.array_equal(KN.noise_numpy(img, np.array([3], np.uint64), "shot", np.zeros((1, 4)), True), img)


def test_noise_is_keyed():
    imgs = random_images(np.random.default_rng(4), [(20, 30, 3), (20, 30, 3)])
    params = np.tile([0.0, 20.0, 0, 0], (2, 1))
    a = KN.noise_numpy(imgs, np.array([1, 2], np.uint64), "gaussian", params, True)
    b = KN.noise_numpy(imgs[::-1], np.array([2, 1], np.uint64), "gaussian", params, True)
    assert np.array_equal(a[0], b[1]) and np.array_equal(a[1], b[0])
    assert not np.array_equal(a[0], KN.noise_numpy(imgs[:1], np.array([3], np.uint64), "gaussian", params[:1], True)[0])


# ---- erase and jitter --------------------------------------------------------------------------
def test_erase_hand_values():
    img = np.arange(5 * 6 * 2, dtype=np.uint8).reshape(5, 6, 2)
    rects = np.array([[1, 2, 3, 5], [4, -3, 9, 1]])   # the second reaches outside: clipped
    out = KN.erase_numpy([img], rects, [0, 2], np.array([[7, 9]]), [False], [0])[0]
    want = img.copy()
    want[1:3, 2:5] = [7, 9]
    want[4:5, 0:1] = [7, 9]
    np.testing.assert_array_equal(out, want)
    rnd = KN.erase_numpy([img], rects[:1], [0, 1], np.zeros((1, 2)), [True], [np.uint64(42)])[0]
    e = ((np.arange(1, 3)[:, None, None] * 6 + np.arange(2, 5)[None, :, None]) * 2 + np.arange(2)).astype(np.uint64)
    np.testing.assert_array_equal(rnd[1:3, 2:5], (counter_bits(np.uint64(42), e) >> np.uint64(56)).astype(np.uint8))
    np.testing.assert_array_equal(np.delete(rnd, np.s_[1:3], 0), np.delete(img, np.s_[1:3], 0))


def test_erase_random_bytes_are_uniform():
    img = np.zeros((256, 256, 3), np.uint8)
    out = KN.erase_numpy([img], [[0, 0, 256, 256]], [0, 1], np.zeros((1, 3)), [True], [np.uint64(9)])[0]
    counts = np.bincount(out.reshape(-1), minlength=256)
    expect = out.size / 256
    assert np.abs(counts - expect).max() < 6 * math.sqrt(expect)


def test_jitter_rules():
    rng = np.random.default_rng(6)
    img = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    key = np.array([11], np.uint64)
    assert np.array_equal(KN.jitter_numpy([img], key, 1, [1], [[0, 0, 0]])[0], img)   # no move
    assert np.array_equal(KN.jitter_numpy([img], key, 5, [0], [[0, 0, 0]])[0], img)   # mask 0
    out = KN.jitter_numpy([img], key, 3, [1], [[1, 2, 3]])[0]
    # reference: the displacement of pixel p from words 2p (x) and 2p + 1 (y), mod 3, minus 1
    p = np.arange(30 * 40, dtype=np.uint64)
    dx = (counter_bits(key[0], 2 * p) % np.uint64(3)).astype(int) - 1
    dy = (counter_bits(key[0], 2 * p + np.uint64(1)) % np.uint64(3)).astype(int) - 1
    for k in range(0, 1200, 7):
        y, x = divmod(k, 40)
        sy, sx = y + dy[k], x + dx[k]
        want = img[sy, sx] if 0 <= sy < 30 and 0 <= sx < 40 else [1, 2, 3]
        np.testing.assert_array_equal(out[y, x], want)
    assert all(abs((dx == v).mean() - 1 / 3) < 0.05 for v in (-1, 0, 1))


@pytest.mark.parametrize("seed", [21, fresh_seed()])
def test_opencv_blur_equals_twin_within_one_level(seed):
    rng = np.random.default_rng(seed)
    shapes = [(40, 50, 3), (3, 2, 3), (1, 7, 1), (60, 33, 4), (0, 5, 3), (120, 90, 3)]
    imgs = random_images(rng, shapes)
    sig = rng.uniform(0.2, 6.0, (len(shapes), 2))
    wy = [KB.gaussian_weights(int(2 * np.ceil(3 * s[0]) + 1), s[0]) for s in sig]
    wx = [KB.gaussian_weights(int(2 * np.ceil(3 * s[1]) + 1), s[1]) for s in sig]
    for got, want in zip(KB.gaussian_blur_cv2(imgs, wx, wy), KB.gaussian_blur_numpy(imgs, wx, wy)):
        assert got.shape == want.shape and got.dtype == np.uint8
        if got.size:
            d = np.abs(got.astype(int) - want)
            assert d.max() <= 1 and (d > 0).mean() < 1e-3, seed


def test_poisson_inversion_equals_the_kernels_linear_search():
    """pixel.cu's loop, written out: k = 0, p = F = exp(-lam); while u > F and k < 1000:
    k += 1, p *= lam / k, F += p."""
    rng = np.random.default_rng(22)
    x = rng.integers(0, 256, 3000)
    key = np.uint64(5)
    n = np.arange(3000, dtype=np.uint64)
    u_all = to_unit(counter_bits(key, 2 * n))
    for factor in (0.5, 3.0, 8.0, 20.0):
        lam = x / factor
        want = []
        for u, lm in zip(u_all, lam):
            p = f = math.exp(-lm)
            k = 0.0
            while u > f and k < 1000.0:
                k += 1.0
                p = p * (lm / k)
                f = f + p
            want.append(k)
        small = (lam > 0) & (lam < KN.SHOT_INVERSION_MAX)
        got = KN.poisson_at(key, n, lam)
        np.testing.assert_array_equal(got[small], np.array(want)[small])
        np.testing.assert_array_equal(KN.poisson_at(key, n, lam, np.arange(256) / factor, x), got)
        assert (got[lam == 0] == 0).all()


# -------------------------------------------------------------- blur.cu and noise.cu on the CPU
_SHIM = r"""
#include <cmath>
#include <cstring>
using namespace std;
struct Dim3 { unsigned int x, y, z; };
static Dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
#define __shared__
static inline void __syncthreads() {}
float hbuf[1 << 16];  // the blur's dynamic shared memory
#include "pixel.cu"

static void grid(unsigned gx, unsigned gy, unsigned gz) {
    gridDim.x = gx; gridDim.y = gy; gridDim.z = gz;
    blockDim.x = blockDim.y = blockDim.z = 1;
    threadIdx.x = threadIdx.y = threadIdx.z = 0;
}
#define EACH_BLOCK(call) \
    for (unsigned z = 0; z < gridDim.z; ++z) for (unsigned y = 0; y < gridDim.y; ++y) \
        for (unsigned x = 0; x < gridDim.x; ++x) { blockIdx.x = x; blockIdx.y = y; blockIdx.z = z; call; }

extern "C" void run_blur(unsigned gx, unsigned gy, unsigned gz, const unsigned long long* in,
                         const unsigned long long* out, const int* dims, const long long* woff,
                         const float* w) {
    grid(gx, gy, gz); EACH_BLOCK(gaussian_blur(in, out, dims, woff, w));
}
extern "C" void run_noise(unsigned gx, unsigned gy, const unsigned long long* in,
                          const unsigned long long* out, const long long* meta,
                          const unsigned long long* keys, const double* params, int b, int mode,
                          int per_channel) {
    grid(gx, gy, 1); EACH_BLOCK(pixel_noise(in, out, meta, keys, params, b, mode, per_channel));
}
extern "C" void run_erase(unsigned gx, unsigned gy, const unsigned long long* in,
                          const unsigned long long* out, const long long* meta, const int* ro,
                          const int* rects, const unsigned char* fills, int stride,
                          const int* random, const unsigned long long* keys, int b) {
    grid(gx, gy, 1); EACH_BLOCK(erase(in, out, meta, ro, rects, fills, stride, random, keys, b));
}
extern "C" void run_jitter(unsigned gx, unsigned gy, const unsigned long long* in,
                           const unsigned long long* out, const long long* meta,
                           const unsigned long long* keys, const unsigned char* fills, int stride,
                           int nd, int b) {
    grid(gx, gy, 1); EACH_BLOCK(jitter(in, out, meta, keys, fills, stride, nd, b));
}
"""


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ to emulate the CUDA source")
    d = tmp_path_factory.mktemp("pixel_cu")
    (d / "shim.cpp").write_text(_SHIM)
    kdir = os.path.dirname(KB.__file__)
    # -ffp-contract=off: no fused multiply-add, as the kernels are compiled (--fmad=false)
    subprocess.run([cxx, "-std=c++17", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-w",
                    f"-I{kdir}", str(d / "shim.cpp"), "-o", str(d / "pixel_emu.so")], check=True)
    return ctypes.CDLL(str(d / "pixel_emu.so"))


class _Dev(np.ndarray):
    """A host array that answers cupy's ``.data.ptr``."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


def _dev(a):
    return np.asarray(a).view(_Dev)


@pytest.fixture
def emulated(lib, monkeypatch):
    """cupy, the upload and the launch replaced by host stand-ins that run the emulated kernels;
    the launches made are recorded."""
    fake = types.SimpleNamespace(
        ascontiguousarray=lambda a: _dev(np.ascontiguousarray(a)),
        empty=lambda n, dtype: _dev(np.full(n, 77, dtype)), uint8=np.uint8,
        cuda=types.SimpleNamespace(get_current_stream=lambda: contextlib.nullcontext()))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    calls = []

    def fake_launch(kernel, grid, block, args, *, shared_mem=0, stream=None, name=None):
        calls.append(name)
        c = [ctypes.c_void_p(a.ctypes.data) if isinstance(a, np.ndarray) else ctypes.c_int(int(a))
             for a in args]
        g = [ctypes.c_uint(int(v)) for v in grid]
        if name == "gaussian_blur":
            lib.run_blur(*g, *c)
        else:
            getattr(lib, {"pixel_noise": "run_noise", "erase": "run_erase", "jitter": "run_jitter"}[name])(
                *g[:2], *c)

    for mod in (KB, KN):
        monkeypatch.setattr(mod, "upload_many", lambda arrays, stream=None: [_dev(np.ascontiguousarray(a)) for a in arrays])
        monkeypatch.setattr(mod, "get_kernel", lambda src, name, options=(): name)
        monkeypatch.setattr(mod, "launch", fake_launch)
    return calls


def _batch(rng, dense):
    shapes = [(37, 45, 3)] * 3 if dense else [(37, 45, 3), (1, 1, 3), (70, 33, 3), (5, 80, 1)]
    imgs = random_images(rng, shapes)
    return (np.stack(imgs).view(_Dev), imgs) if dense else ([_dev(i) for i in imgs], imgs)


def _same(got, want):
    assert isinstance(got, list) == isinstance(want, list)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), w)


@pytest.mark.parametrize("dense", [True, False])
def test_blur_emulated_equals_twin(emulated, rng, dense):
    dev, host = _batch(rng, dense)
    b = len(host)
    sig = rng.uniform(0.3, 6.0, (b, 2))
    win = [(int(2 * np.ceil(3 * s[0]) + 1), int(rng.integers(0, 6)) * 2 + 1) for s in sig]
    wy = [KB.gaussian_weights(w[0], s[0]) for w, s in zip(win, sig)]
    wx = [KB.gaussian_weights(w[1], s[1]) for w, s in zip(win, sig)]
    got = KB.gaussian_blur_cupy(dev, wx, wy)
    _same(got, KB.gaussian_blur_numpy(np.stack(host) if dense else host, wx, wy))
    assert emulated == ["gaussian_blur"]


@pytest.mark.parametrize("mode,per_channel", [("gaussian", True), ("gaussian", False),
                                              ("salt_and_pepper", False), ("salt_and_pepper", True),
                                              ("shot", True)])
def test_noise_emulated_equals_twin(emulated, rng, mode, per_channel):
    dev, host = _batch(rng, False)
    b = len(host)
    keys = rng.integers(0, 2**63, b, dtype=np.uint64)
    params = {"gaussian": np.stack([rng.uniform(-5, 5, b), rng.uniform(0, 40, b), 0 * keys, 0 * keys], 1),
              "salt_and_pepper": np.stack([rng.uniform(0, 0.5, b), rng.uniform(0, 1, b),
                                           np.full(b, 250.0), np.full(b, 7.0)], 1),
              "shot": np.stack([np.array([20.0, 0.0, 0.5, 3.0])[:b], 0 * keys, 0 * keys, 0 * keys], 1)}[mode]
    got = KN.noise_cupy(dev, keys, mode, params, per_channel)
    _same(got, KN.noise_numpy(host, keys, mode, params, per_channel))
    assert emulated == ["pixel_noise"]


def test_erase_and_jitter_emulated_equal_twins(emulated, rng):
    dev, host = _batch(rng, False)
    b = len(host)
    rects = np.array([[2, 3, 20, 40], [10, 0, 12, 45], [0, 0, 1, 1], [1, 1, 60, 20], [0, 50, 5, 80]])
    offsets = np.array([0, 2, 3, 4, 5])
    fills = rng.integers(0, 256, (b, 3), dtype=np.uint8)
    random = np.array([False, True, False, True])
    keys = rng.integers(0, 2**63, b, dtype=np.uint64)
    _same(KN.erase_cupy(dev, rects, offsets, fills, random, keys),
          KN.erase_numpy(host, rects, offsets, fills, random, keys))
    masks = np.array([1, 1, 0, 1])
    for nd in (1, 2, 5):
        _same(KN.jitter_cupy(dev, keys, nd, masks, fills), KN.jitter_numpy(host, keys, nd, masks, fills))
    assert emulated == ["erase"] + ["jitter"] * 3


def test_empty_batches_launch_nothing(emulated):
    assert KB.gaussian_blur_cupy([], [], []) == []
    assert KN.noise_cupy([], np.zeros(0, np.uint64), "gaussian", np.zeros((0, 4))) == []
    assert KN.erase_cupy([_dev(np.zeros((0, 4, 3), np.uint8))], np.zeros((0, 4)), [0, 0],
                         np.zeros((1, 3)), [False], [0])[0].shape == (0, 4, 3)
    assert emulated == []
