"""photometric.cu on the CPU: compiled with g++ (CUDA keywords shimmed) and run thread by thread
against the NumPy twins of detaug/kernels/photometric.py, bit for bit on the staged kernels; the
cupy launchers' host code through the emulated kernels; and, where nvcc is installed, the device
path compiled with the kernel's options. On the GPU (``gpu``-marked): the staged kernels and the
colour twist bit for bit against the twins, launches per call, and a pipeline's batches equal to
the CPU's."""
from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import subprocess

import numpy as np
import pytest

from detaug import fn
from detaug.kernels import photometric as KP
from detaug.kernels.launch import launch_counts, reset_launch_counts
from helpers import cupy as cp  # imported on first use: by a gpu test, where there is a GPU
from helpers import fresh_seed, random_images, run_graph
from helpers.cases import SEEDS, close, fresh

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


def test_cuda_source_equals_twin_bit_for_bit_float(emulated):
    rng, imgs = fresh(7, [(9, 11, 3), (30, 2, 3), (1, 1, 3), (16, 16, 3)], np.float32)
    imgs[3] = imgs[3] * 2 - 0.9  # out of [0, 1]: a negative grayscale sum (two's complement)
    ip, fp = _random_params(rng, len(imgs))
    ip[:, 0] |= KP.CONTRAST
    ip[3, 0] = KP.CONTRAST | KP.CONTRAST_FIRST
    for got, want in zip(_emulate_photometric(emulated, imgs, ip, fp), KP.photometric_numpy(imgs, ip, fp)):
        np.testing.assert_array_equal(got, want)  # the fixed-point mean is exact in any order


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
    with the emulated kernels (as tests/kernels/test_warp.py does for warp_cupy)."""

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


# ----------------------------------- GPU (the staged kernels and the fused op against the twin)
GPU_SEEDS = [0, fresh_seed()]


def _params(rng, b, extra=0):
    return KP.photometric_params(b, rng.integers(0, 64, b) | extra, brightness=rng.uniform(0.5, 1.5, b),
                                 contrast=rng.uniform(0, 2, b), saturation=rng.uniform(0, 2, b),
                                 hue=rng.uniform(-0.5, 0.5, b), perm=rng.integers(0, 6, b))


def _shapes(rng, b):
    return [(int(h), int(w), 3) for h, w in rng.integers(1, 200, (b, 2))]


@pytest.mark.gpu
@pytest.mark.parametrize("seed", GPU_SEEDS)
def test_staged_kernels_equal_twin_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    imgs = random_images(rng, _shapes(rng, 9) + [(0, 5, 3)])
    ip, fp = _params(rng, len(imgs))
    ip[:3, 0] = [0, KP.CONTRAST, KP.CONTRAST | KP.CONTRAST_FIRST | KP.HUE]
    got = KP.photometric_cupy([cp.asarray(i) for i in imgs], ip, fp)
    for g, w in zip(got, KP.photometric_numpy(imgs, ip, fp)):
        np.testing.assert_array_equal(cp.asnumpy(g), w)
    gip, gfp = KP.photometric_params(len(imgs), ip[:, 0] | KP.GRAY, out_channels=1)
    for g, w in zip(KP.photometric_cupy([cp.asarray(i) for i in imgs], gip, gfp),
                    KP.photometric_numpy(imgs, gip, gfp)):
        assert g.shape == w.shape
        np.testing.assert_array_equal(cp.asnumpy(g), w)
    dense = np.stack(random_images(rng, [(64, 48, 3)] * 5))
    ip, fp = _params(rng, 5, KP.CONTRAST)
    out = KP.photometric_cupy(cp.asarray(dense), ip, fp)
    assert isinstance(out, cp.ndarray) and out.shape == dense.shape
    np.testing.assert_array_equal(cp.asnumpy(out), KP.photometric_numpy(dense, ip, fp))


@pytest.mark.gpu
def test_staged_kernels_float_images_bit_for_bit():
    rng = np.random.default_rng(3)
    imgs = [(i / 255.0).astype(np.float32) for i in random_images(rng, _shapes(rng, 6))]
    ip, fp = _params(rng, 6, KP.CONTRAST)
    for g, w in zip(KP.photometric_cupy([cp.asarray(i) for i in imgs], ip, fp),
                    KP.photometric_numpy(imgs, ip, fp)):
        assert g.dtype == cp.float32
        np.testing.assert_array_equal(cp.asnumpy(g), w)  # fixed-point means: exact in any order


@pytest.mark.gpu
@pytest.mark.parametrize("in_dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("out_dtype", [np.uint8, np.float32])
def test_color_twist_kernel_parity(in_dtype, out_dtype):
    rng = np.random.default_rng(4)
    imgs = random_images(rng, _shapes(rng, 5))
    if in_dtype == np.float32:
        imgs = [(i / 255.0).astype(np.float32) for i in imgs]
    b = len(imgs)
    mats = KP.color_twist_matrices(rng.uniform(0, 2, b), rng.uniform(0, 2, b), rng.uniform(0, 2, b),
                                   rng.uniform(-180, 180, b), 128.0 if in_dtype == np.uint8 else 0.5)
    for g, w in zip(KP.color_twist_cupy([cp.asarray(i) for i in imgs], mats, out_dtype),
                    KP.color_twist_numpy(imgs, mats, out_dtype)):
        assert g.dtype == out_dtype
        np.testing.assert_allclose(cp.asnumpy(g).astype(float), w.astype(float), rtol=1e-5,
                                   atol=1 if out_dtype == np.uint8 else 1e-3)


@pytest.mark.gpu
def test_launches_per_call_do_not_grow_with_the_batch():
    """One launch a call; one more (the grayscale-mean reduction) where a sample adjusts its
    contrast; the same for a batch of 1 and of 64."""
    rng = np.random.default_rng(5)
    for b in (1, 64):
        imgs = [cp.asarray(i) for i in random_images(rng, [(20 + k % 7, 30, 3) for k in range(b)])]
        for extra, want in ((0, {"photometric": 1}), (KP.CONTRAST, {"photometric": 1, "photometric_reduce": 1})):
            ip, fp = KP.photometric_params(b, np.full(b, KP.SATURATION | extra))
            reset_launch_counts()
            KP.photometric_cupy(imgs, ip, fp)
            assert launch_counts() == want
        reset_launch_counts()
        KP.color_twist_cupy(imgs, KP.color_twist_matrices(np.ones(b), np.ones(b), np.ones(b), np.zeros(b), 128.0))
        assert launch_counts() == {"color_twist": 1}
    assert KP.photometric_cupy([], *KP.photometric_params(0, 0)) == []
    cp.cuda.get_current_stream().synchronize()


@pytest.mark.gpu
def test_gpu_pipeline_gives_the_cpu_batches():
    rng = np.random.default_rng(6)
    imgs = random_images(rng, [(int(30 + 7 * k), int(40 - 3 * k), 3) for k in range(6)])
    boxes = [np.array([[1, 1, 10, 10]], np.float32)] * 6

    def graph(i, b):
        i = fn.flip(i, horizontal=fn.random.coin_flip())
        return (fn.photometric_distort(i, p=0.7), fn.grayscale(i, p=0.5),
                fn.color_twist(i, hue=fn.random.uniform(range=(-20.0, 20.0)), contrast=1.3),
                fn.grayscale(i, num_output_channels=1))

    cpu = run_graph(imgs, boxes, graph, seed=9)
    gpu = run_graph(imgs, boxes, graph, seed=9, device="gpu")
    for j, (c, g) in enumerate(zip(cpu, gpu)):
        assert g.device == "gpu"
        for a, d in zip(c.data, g.data):
            tol = 1 if j == 2 else 0  # color_twist: float32 on the device against float64
            assert np.abs(np.asarray(a).astype(int) - cp.asnumpy(d).astype(int)).max() <= tol, j
