"""detaug's CUDA sources run on the CPU, so that CPU-only CI checks them against their NumPy twins.

A ``.cu`` file is compiled as host C++ by g++ behind a shim: the CUDA keywords become plain C++
(``__shared__`` a static shared by the block's threads), the device intrinsics used by detaug's
kernels their round-to-nearest host operations, and each ``extern "C" __global__`` kernel gets a
wrapper that takes its arguments as ``void**`` (as ``cuLaunchKernel`` does). A launch runs the
grid's blocks one after the other. A kernel that synchronises (``__syncthreads``, warp
shuffles) runs each block's threads as fibers of one thread (ucontext), switched at every barrier
(a warp's when all its live lanes wait there, the block's when all its live threads do); any
other kernel runs its threads in a loop. Float contraction is off (``--fmad=false``).

:func:`install_fake_cupy` makes a module's ``*_cupy`` host code run with the emulated kernels:
host arrays stand in for device arrays (``.data.ptr`` answers), uploads are identities, and
``launch`` runs the emulation, which checks each scalar argument's width against the kernel's
parameter type (a host-side ``np.int64`` for an ``int`` parameter is a bug on the GPU too).

The shim keeps a launch's grid, its arguments and its ``__shared__`` memory in globals of the
compiled library, so one launch runs at a time in the process (:data:`_LAUNCHING`): a GPU gives
each launch its own, and two pipelines' device threads (each call into the library releases the
GIL) would otherwise run one launch's blocks with the other's arguments, leaving outputs partly
unwritten.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import types

import numpy as np
import pytest

from helpers import REPO

KERNEL_DIR = os.path.join(REPO, "detaug", "kernels")
_LAUNCHING = threading.Lock()  # held while an emulated launch runs (the module docstring says why)


def _new_launch_lock():
    """In a forked child: a lock of its own (one a parent's thread held at the fork stays held)."""
    global _LAUNCHING
    _LAUNCHING = threading.Lock()


os.register_at_fork(after_in_child=_new_launch_lock)


_SHIM = r"""
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <ucontext.h>
using namespace std;
struct Dim3 { unsigned int x, y, z; };
static Dim3 blockIdx, threadIdx, blockDim, gridDim;
// A synchronising kernel's threads are fibers of this one thread (ucontext), run by a scheduler
// that releases a warp barrier when every live lane of the warp waits at it and the block barrier
// when every live thread waits at it: __syncthreads and warp shuffles keep their CUDA meaning,
// deterministically and without OS threads.
enum { EMU_RUN = 0, EMU_BLOCK = 1, EMU_WARP = 2, EMU_DONE = 3 };
struct EmuFiber { ucontext_t ctx; int state; Dim3 tid; unsigned flat; };
static ucontext_t emu_sched;
static vector<EmuFiber> emu_fibers;
static vector<char> emu_stacks;
static const size_t EMU_STACK = 1 << 16;
static EmuFiber* emu_cur = nullptr;
static void* emu_fn = nullptr;
static void** emu_args = nullptr;
static unsigned long long emu_exchange[1024];
typedef void (*emu_call_t)(void**);
static void emu_wait(int state) { emu_cur->state = state; swapcontext(&emu_cur->ctx, &emu_sched); }
static inline void __syncthreads() { emu_wait(EMU_BLOCK); }
template <class T> static inline T emu_shuffle(T v, int src_lane) {
    const unsigned t = emu_cur->flat, base = t & ~31u;
    unsigned long long bits = 0; memcpy(&bits, &v, sizeof(T)); emu_exchange[t] = bits;
    emu_wait(EMU_WARP);
    T r; memcpy(&r, &emu_exchange[base + src_lane], sizeof(T));
    emu_wait(EMU_WARP);
    return r; }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int m) {
    return emu_shuffle(v, (int)((emu_cur->flat & 31) ^ m)); }
template <class T> static inline T __shfl_up_sync(unsigned, T v, int d) {
    const int lane = emu_cur->flat & 31; T r = emu_shuffle(v, lane >= d ? lane - d : lane);
    return lane >= d ? r : v; }
static inline unsigned long long atomicMax(unsigned long long* p, unsigned long long v) {
    const unsigned long long old = *p; if (v > old) *p = v; return old; }
// round-to-nearest device intrinsics are the plain host operations
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
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
static void emu_entry() { ((emu_call_t)emu_fn)(emu_args); emu_cur->state = EMU_DONE; }
static void emu_run_block(unsigned n) {
    emu_fibers.assign(n, EmuFiber());
    if (emu_stacks.size() < n * EMU_STACK) emu_stacks.resize(n * EMU_STACK);
    for (unsigned t = 0; t < n; ++t) {
        EmuFiber& f = emu_fibers[t];
        f.state = EMU_RUN; f.flat = t;
        f.tid = {t % blockDim.x, (t / blockDim.x) % blockDim.y, t / (blockDim.x * blockDim.y)};
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = emu_stacks.data() + t * EMU_STACK;
        f.ctx.uc_stack.ss_size = EMU_STACK;
        f.ctx.uc_link = &emu_sched;
        makecontext(&f.ctx, emu_entry, 0);
    }
    for (;;) {
        for (unsigned t = 0; t < n; ++t) {
            EmuFiber& f = emu_fibers[t];
            if (f.state != EMU_RUN) continue;
            emu_cur = &f; threadIdx = f.tid;
            swapcontext(&emu_sched, &f.ctx);
        }
        bool live = false, released = false, all_block = true;
        for (unsigned w = 0; w < (n + 31) / 32; ++w) {
            bool all_warp = true, any = false;
            for (unsigned t = 32 * w; t < min(n, 32 * w + 32); ++t) {
                const int st = emu_fibers[t].state;
                if (st == EMU_DONE) continue;
                any = true;
                if (st != EMU_WARP) all_warp = false;
            }
            if (any && all_warp) {
                for (unsigned t = 32 * w; t < min(n, 32 * w + 32); ++t)
                    if (emu_fibers[t].state == EMU_WARP) emu_fibers[t].state = EMU_RUN;
                released = true;
            }
        }
        for (unsigned t = 0; t < n; ++t) {
            const int st = emu_fibers[t].state;
            if (st != EMU_DONE) live = true;
            if (st != EMU_DONE && st != EMU_BLOCK) all_block = false;
        }
        if (!live) return;
        if (released) continue;
        if (all_block) {
            for (auto& f : emu_fibers) if (f.state == EMU_BLOCK) f.state = EMU_RUN;
            continue;
        }
        fprintf(stderr, "emulation: threads of a block wait at different barriers\n");
        abort();
    }
}
extern "C" void emu_launch(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, void** args, int threaded) {
    gridDim = {gx, gy, gz}; blockDim = {bx, by, bz};
    emu_fn = fn; emu_args = args;
    const unsigned n = bx * by * bz;
    for (unsigned z = 0; z < gz; ++z) for (unsigned y = 0; y < gy; ++y)
    for (unsigned x = 0; x < gx; ++x) {
        blockIdx = {x, y, z};
        if (threaded) { emu_run_block(n); continue; }
        for (unsigned t = 0; t < n; ++t) {
            threadIdx = {t % bx, (t / bx) % by, t / (bx * by)};
            ((emu_call_t)fn)(args);
        }
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
        with _LAUNCHING:
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
    flags = ["-std=c++20", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-w",
             f"-I{KERNEL_DIR}", *(f"-D{d}" for d in defines)]
    with open(os.path.join(KERNEL_DIR, source), "rb") as f:
        key = hashlib.sha1(f.read() + text.encode() + repr((cxx, flags)).encode()).hexdigest()
    # built once per content (pytest-xdist workers and test modules share it): keyed by the
    # source, the shim and the flags, so a stale build is never loaded
    cache = os.path.join(tempfile.gettempdir(), f"detaug-cuda-emulation-{os.getuid()}")
    so = os.path.join(cache, f"{source}-{key[:16]}.so")
    if not os.path.exists(so):
        os.makedirs(cache, exist_ok=True)
        # one compiler at a time per build: a second process (the other xdist worker, which
        # runs tests of the same modules) waits for the first one's file instead of compiling
        # the same source beside it on the same cores
        with open(f"{so}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(so):
                cpp, tmp_so = os.path.join(str(tmp_dir), f"{key}.cpp"), f"{so}.{os.getpid()}.tmp"
                with open(cpp, "w") as f:
                    f.write(text)
                subprocess.run([cxx, *flags, cpp, "-o", tmp_so], check=True)
                os.replace(tmp_so, so)  # atomic: a load without the lock sees the whole file
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


def _unowned_memory(ptr, size, owner, device_id=0):
    """cupy.cuda.UnownedMemory: host memory at ``ptr`` (a DeviceImages' views are made of it)."""
    return types.SimpleNamespace(ptr=int(ptr), size=int(size), owner=owner)


def _memory_pointer(mem, offset):
    """cupy.cuda.MemoryPointer: a buffer over the host memory ``mem`` describes, which
    ``cupy.ndarray(shape, dtype, pointer, strides=)`` (the fake's FakeDeviceArray) views."""
    return (ctypes.c_ubyte * max(mem.size - int(offset), 1)).from_address(mem.ptr + int(offset))


class _FakeCupy(types.ModuleType):
    """cupy's array functions as NumPy ones returning fake device arrays; ``empty`` is filled
    with 77 so that what a kernel fails to write shows."""

    ndarray = FakeDeviceArray

    def __init__(self):
        super().__init__("cupy")
        stream = contextlib.nullcontext()
        self.cuda = types.SimpleNamespace(get_current_stream=lambda: stream,
                                          Device=lambda *a: types.SimpleNamespace(id=0),
                                          UnownedMemory=_unowned_memory,
                                          MemoryPointer=_memory_pointer)

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


def build_shape_kernels(tmp_path_factory):
    """shapes.cu (its synchronising ``mask_boxes`` threaded) and boxes.cu (its ``pad_boxes``),
    built for a module's tests: what the box materialisation of instance fields and their
    padding launch."""
    return (build(tmp_path_factory.mktemp("shapes_cu"), "shapes.cu", threaded={"mask_boxes"}),
            build(tmp_path_factory.mktemp("boxes_cu"), "boxes.cu", threaded={"pad_boxes"}))


def install_shape_kernels(monkeypatch, kernels):
    """Run detaug.kernels.boxes' and detaug.kernels.shapes' cupy code on ``kernels`` (from
    :func:`build_shape_kernels`). Returns the shapes.cu emulation, its recorded calls cleared."""
    from detaug.kernels import boxes as kb
    from detaug.kernels import shapes as ks

    shapes_cu, boxes_cu = kernels
    shapes_cu.calls.clear()
    install_fake_cupy(monkeypatch, boxes_cu, kb)
    install_fake_cupy(monkeypatch, shapes_cu, ks)
    return shapes_cu


def on_fake_device(batch):
    """The host BoxBatch ``batch`` with its arrays made fake device arrays (:func:`dev`)."""
    return batch.on_device([dev(a) for a in batch.device_arrays()])


def prune_on_host_and_device(host, geometry, **kw):
    """``graph.materialize.prune(..., **kw)`` of the host BoxBatch ``host`` with ``geometry``
    pending, on the host and on fake device arrays: (the host's result, the device's)."""
    from detaug.graph import materialize as M

    return (M.prune(host.with_geometry(geometry), **kw),
            M.prune(on_fake_device(host).with_geometry(geometry), **kw))
