"""Backend selection: NumPy on the host, cupy on the device. cupy is imported only when a GPU
batch is made; ``import detaug`` never imports it."""
from __future__ import annotations

import numpy as np

_CPU_WARP = {"impl": "opencv"}


def xp_for(device: str):
    """The array module of ``device`` ('cpu' or 'gpu')."""
    if device == "cpu":
        return np
    if device == "gpu":
        import cupy

        return cupy
    raise ValueError(f"unknown device {device!r}: expected 'cpu' or 'gpu'")


def is_device_array(a) -> bool:
    return type(a).__module__.split(".")[0] == "cupy"


def device_of(a) -> str:
    return "gpu" if is_device_array(a) else "cpu"


def to_host(a):
    """Device-to-host copy; only the pipeline's output stage calls this."""
    return a.get() if is_device_array(a) else np.asarray(a)


def set_cpu_warp(impl: str) -> None:
    """Choose the CPU backend's warp: 'opencv' (fast, default) or 'reference' (the NumPy twin,
    used by the CPU/GPU parity tests and wherever bit-level agreement with the twin matters)."""
    if impl not in ("opencv", "reference"):
        raise ValueError(f"cpu warp must be 'opencv' or 'reference', not {impl!r}")
    _CPU_WARP["impl"] = impl


def cpu_warp() -> str:
    return _CPU_WARP["impl"]


def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False
