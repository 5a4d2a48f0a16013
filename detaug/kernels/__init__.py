"""Kernels: each CUDA source beside its NumPy reference twin (same signature, `xp`-free)."""
