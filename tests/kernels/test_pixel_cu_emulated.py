"""detaug/kernels/pixel.cu compiled as host C++ (g++, CUDA keywords shimmed, as tests/test_warp.py
does for warp.cu) and run on the CPU, against the NumPy twins: the same bytes. The launchers'
host code (blur.py / noise.py ``*_cupy``: pointers, metadata, views of one buffer) runs with the
emulated kernels through a stand-in for cupy.

A block is emulated with one thread: every kernel walks its work with strides of the block's
thread count, so one thread does what the block does, and ``__syncthreads`` has nothing to wait for.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

from detaug.kernels import blur as KB
from detaug.kernels import noise as KN
from helpers import random_images

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
