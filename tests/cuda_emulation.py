"""detaug's CUDA sources run on the CPU, so that CPU-only CI checks them against their NumPy twins.

A ``.cu`` file is compiled as host C++ by g++ behind a shim: the CUDA keywords become plain C++
(``__shared__`` a static shared by the block's threads), the device intrinsics used by detaug's
kernels their round-to-nearest host operations, and each ``extern "C" __global__`` kernel gets a
wrapper that takes its arguments as ``void**`` (as ``cuLaunchKernel`` does). A launch runs the
grid's blocks one after the other. A kernel that synchronises (``__syncthreads``, warp
shuffles) runs each block's threads as real threads, with a barrier per block and one per warp
of 32; any other kernel runs its threads in a loop. Float contraction is off (``--fmad=false``).

:func:`install_fake_cupy` makes a module's ``*_cupy`` host code run with the emulated kernels:
host arrays stand in for device arrays (``.data.ptr`` answers), uploads are identities, and
``launch`` runs the emulation, which checks each scalar argument's width against the kernel's
parameter type (a host-side ``np.int64`` for an ``int`` parameter is a bug on the GPU too).
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

KERNEL_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "detaug", "kernels")

_SHIM = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
using namespace std;
struct Dim3 { unsigned int x, y, z; };
static thread_local Dim3 blockIdx, threadIdx;
static Dim3 blockDim, gridDim;
static barrier<>* emu_block_barrier = nullptr;
static vector<unique_ptr<barrier<>>> emu_warp_barriers;
static unsigned long long emu_exchange[1024];
static inline unsigned emu_tid() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
static inline void __syncthreads() { emu_block_barrier->arrive_and_wait(); }
// Warp shuffles: every lane of the warp must take part (true of detaug's kernels).
template <class T> static inline T emu_shuffle(T v, int src_lane) {
    const unsigned t = emu_tid(), base = t & ~31u;
    unsigned long long bits = 0; memcpy(&bits, &v, sizeof(T)); emu_exchange[t] = bits;
    emu_warp_barriers[t >> 5]->arrive_and_wait();
    T r; memcpy(&r, &emu_exchange[base + src_lane], sizeof(T));
    emu_warp_barriers[t >> 5]->arrive_and_wait();
    return r; }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int m) {
    return emu_shuffle(v, (int)((emu_tid() & 31) ^ m)); }
template <class T> static inline T __shfl_up_sync(unsigned, T v, int d) {
    const int lane = emu_tid() & 31; T r = emu_shuffle(v, lane >= d ? lane - d : lane);
    return lane >= d ? r : v; }
static inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) {
    unsigned long long old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST,
                                                   __ATOMIC_SEQ_CST)) {}
    return old; }
// round-to-nearest device intrinsics are the plain host operations
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline int __double2loint(double d) {
    unsigned long long u; memcpy(&u, &d, 8); return (int)(unsigned)u; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __fadd_rd(float a, float b) {  // exact in double for the operands used
    double s = (double)a + (double)b; float f = (float)s;
    return (double)f > s ? nextafterf(f, -INFINITY) : f; }
template <class T> static inline T __ldg(const T* p) { return *p; }
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define asm(...) (void)0
#include "SOURCE"
typedef void (*emu_call_t)(void**);
extern "C" void emu_launch(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, void** args, int threaded) {
    gridDim = {gx, gy, gz}; blockDim = {bx, by, bz};
    const unsigned n = bx * by * bz;
    for (unsigned z = 0; z < gz; ++z) for (unsigned y = 0; y < gy; ++y)
    for (unsigned x = 0; x < gx; ++x) {
        if (!threaded) {
            blockIdx = {x, y, z};
            for (unsigned t = 0; t < n; ++t) {
                threadIdx = {t % bx, (t / bx) % by, t / (bx * by)};
                ((emu_call_t)fn)(args);
            }
            continue;
        }
        barrier<> block(n);
        emu_block_barrier = &block;
        emu_warp_barriers.clear();
        for (unsigned w = 0; w < (n + 31) / 32; ++w)
            emu_warp_barriers.emplace_back(new barrier<>(min(32u, n - 32 * w)));
        vector<thread> threads;
        for (unsigned t = 0; t < n; ++t)
            threads.emplace_back([=] {
                blockIdx = {x, y, z};
                threadIdx = {t % bx, (t / bx) % by, t / (bx * by)};
                ((emu_call_t)fn)(args);
            });
        for (auto& th : threads) th.join();
    }
}
"""

_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s*)?'
                     r'(\w+)\s*\(([^{]*?)\)\s*\{', re.S)
_SCALARS = {"int": np.int32, "unsigned": np.uint32, "unsigned int": np.uint32,
            "long long": np.int64, "unsigned long long": np.uint64, "float": np.float32,
            "double": np.float64, "bool": np.bool_}


def kernel_signatures(source_text: str) -> dict:
    """``{kernel name: [parameter C type, ...]}`` of every ``extern "C" __global__`` kernel."""
    out = {}
    for name, params in _KERNEL.findall(source_text):
        out[name] = [_param_type(p) for p in params.split(",")]
    return out


def _param_type(param: str) -> str:
    words = param.replace("__restrict__", " ").replace("*", " * ").split()
    return " ".join(words[:-1]).replace(" *", "*")


class Emulation:
    """A compiled ``.cu``: :meth:`launch` runs one of its kernels over a grid on the CPU."""

    def __init__(self, lib, signatures, threaded):
        self.lib, self.signatures, self.threaded = lib, signatures, set(threaded)
        self.calls = []

    def launch(self, name, grid, block, args):
        """Run kernel ``name``; ``args`` are arrays (passed as their data pointer) and NumPy
        scalars of the parameter's exact type, in the kernel's order."""
        types_ = self.signatures[name]
        if len(args) != len(types_):
            raise TypeError(f"{name}: {len(args)} arguments for {len(types_)} parameters")
        keep, ptrs = [], (ctypes.c_void_p * max(len(args), 1))()
        for i, (a, t) in enumerate(zip(args, types_)):
            if t.endswith("*"):
                if not isinstance(a, np.ndarray):
                    raise TypeError(f"{name}: parameter {i} ({t}) needs an array, got {type(a)}")
                box = np.array([a.ctypes.data], np.uint64)
            else:
                want = _SCALARS[t.replace("const ", "")]
                if not isinstance(a, np.generic) or np.dtype(type(a)) != np.dtype(want):
                    raise TypeError(f"{name}: parameter {i} is {t}, got {type(a).__name__} {a!r}")
                box = np.array(a)
            keep.append(box)
            ptrs[i] = box.ctypes.data
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        block = tuple(int(b) for b in block) + (1,) * (3 - len(block))
        threaded = name in self.threaded
        if threaded and (block[0] * block[1] * block[2]) % 32:
            raise ValueError(f"{name}: a synchronising kernel needs whole warps, got {block}")
        self.calls.append(name)
        fn = ctypes.cast(getattr(self.lib, "emu_call_" + name), ctypes.c_void_p)
        self.lib.emu_launch(fn, *(ctypes.c_uint(v) for v in grid + block), ptrs,
                            ctypes.c_int(int(threaded)))


def build(tmp_dir, source: str, *, defines=(), signatures=None, threaded=()) -> Emulation:
    """Compile ``detaug/kernels/<source>`` (``-D`` ``defines``) into ``tmp_dir``. ``signatures``
    (``{name: [C types]}``) is read from the source where not given; ``threaded`` names the
    kernels that synchronise. Skips the test where g++ is missing."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ to emulate the CUDA source")
    if signatures is None:
        with open(os.path.join(KERNEL_DIR, source)) as f:
            signatures = kernel_signatures(f.read())
    wrappers = "".join(
        f'extern "C" void emu_call_{n}(void** a) {{ {n}('
        + ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(ts)) + "); }\n"
        for n, ts in signatures.items())
    text = _SHIM.replace("SOURCE", source) + wrappers
    tag = hashlib.sha1((text + repr(defines)).encode()).hexdigest()[:12]
    cpp, so = os.path.join(str(tmp_dir), f"{tag}.cpp"), os.path.join(str(tmp_dir), f"{tag}.so")
    with open(cpp, "w") as f:
        f.write(text)
    subprocess.run([cxx, "-std=c++20", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-w",
                    "-pthread", f"-I{KERNEL_DIR}", *(f"-D{d}" for d in defines), cpp, "-o", so],
                   check=True)
    return Emulation(ctypes.CDLL(so), signatures, threaded)


# ----------------------------------------------------------------------------- fake cupy
class FakeDeviceArray(np.ndarray):
    """A host array that answers cupy's ``.data.ptr`` / ``.data.mem.ptr`` and ``.get()``."""

    @property
    def data(self):
        base = self
        while isinstance(base.base, np.ndarray):
            base = base.base
        return types.SimpleNamespace(ptr=self.ctypes.data,
                                     mem=types.SimpleNamespace(ptr=base.ctypes.data))

    def get(self):
        return np.asarray(self).copy()


def dev(a):
    """``a`` as a fake device array (a view, no copy where it already is an array)."""
    return np.asarray(a).view(FakeDeviceArray)


class _FakeCupy(types.ModuleType):
    """cupy's array functions as NumPy ones returning fake device arrays; ``empty`` is filled
    with 77 so that what a kernel fails to write shows."""

    ndarray = FakeDeviceArray

    def __init__(self):
        super().__init__("cupy")
        stream = contextlib.nullcontext()
        self.cuda = types.SimpleNamespace(get_current_stream=lambda: stream,
                                          Device=lambda *a: types.SimpleNamespace(id=0))

    def empty(self, shape, dtype=np.float64):
        return dev(np.full(shape, 77, dtype))

    def empty_like(self, a, dtype=None):
        return dev(np.full(np.shape(a), 77, dtype or np.asarray(a).dtype))

    def __getattr__(self, name):
        value = getattr(np, name)
        if callable(value) and not isinstance(value, type):
            def wrapped(*args, **kwargs):
                out = value(*args, **kwargs)
                return dev(out) if isinstance(out, np.ndarray) else out
            return wrapped
        return value


def install_fake_cupy(monkeypatch, emulation: Emulation, *modules):
    """Make ``modules``' cupy code run on the CPU: ``cupy`` is the fake, their ``upload`` /
    ``upload_many`` identities onto fake device arrays, ``get_kernel`` gives the kernel's name
    and ``launch`` (theirs and detaug.kernels.launch's) runs ``emulation``. Returns the fake."""
    from detaug.kernels import launch as launch_mod

    fake = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)

    def fake_launch(kernel, grid, block, args, *, shared_mem=0, stream=None, name=None):
        emulation.launch(kernel, grid, block, args)

    for m in (*modules, launch_mod):
        if hasattr(m, "launch"):
            monkeypatch.setattr(m, "launch", fake_launch)
        if hasattr(m, "get_kernel"):
            monkeypatch.setattr(m, "get_kernel", lambda src, name, options=(): name)
        if hasattr(m, "upload"):
            monkeypatch.setattr(m, "upload", lambda a, stream=None: dev(np.array(a)))
        if hasattr(m, "upload_many"):
            monkeypatch.setattr(m, "upload_many",
                                lambda arrays, stream=None: [dev(np.array(a)) for a in arrays])
    return fake
