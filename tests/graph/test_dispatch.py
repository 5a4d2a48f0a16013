"""Kernels per (op, backend), chosen in one place (detaug/graph/dispatch.py): the backend of a
batch's device and of the host setting, the GPU kernel handed the stream, the host kernel run
over the host threads on slices of the per-sample parameters, and every op that registers a
host kernel and runs on the GPU registering its GPU kernel too."""
from __future__ import annotations

import types

import numpy as np
import pytest

import detaug  # noqa: F401 (registers every op and its kernels)
from detaug.core import backend
from detaug.core.batch import ImageBatch
from detaug.graph import dispatch as D
from detaug.graph.trace import REGISTRY


class _Ctx:
    stream = "the-stream"

    def __init__(self, threads):
        self.threads = threads

    def map_chunks(self, fn, n):
        bounds = [n * j // self.threads for j in range(self.threads + 1)]
        return [fn(lo, hi) for lo, hi in zip(bounds, bounds[1:])]


def _op(name):
    return types.SimpleNamespace(schema=types.SimpleNamespace(name=name), name=name)


@pytest.fixture
def kernels(monkeypatch):
    monkeypatch.setattr(D, "KERNELS", {})
    calls = []

    def host(images, add, scale=1, tag=None):
        calls.append(("cpu", len(images), list(add)))
        return [im * scale + a for im, a in zip(images, add)]

    def twin(images, add, scale=1, tag=None):
        calls.append(("reference", len(images), list(add)))
        return [im * scale + a for im, a in zip(images, add)]

    def gpu(images, add, scale=1, tag=None, stream=None):
        calls.append(("gpu", stream))
        return images + np.asarray(add)[:, None, None, None]

    D.register_kernel("_t", "cpu", host)
    D.register_kernel(("_t", "_u"), "gpu", gpu)
    D.register_kernel("_u", "cpu", twin)
    D.register_kernel("_u", "reference", twin)
    return calls


def test_backend_by_device_and_host_setting(kernels, monkeypatch):
    assert D.get_kernel("_t", "gpu")[1] == "gpu"
    assert D.get_kernel("_t", "cpu")[1] == "cpu"
    monkeypatch.setattr(backend, "cpu_warp", lambda: "reference")
    assert D.get_kernel("_u", "cpu")[1] == "reference"
    assert D.get_kernel("_t", "cpu")[1] == "cpu"  # no twin of its own: its host kernel is it
    with pytest.raises(NotImplementedError, match="_v: no kernel registered for backend 'gpu'"):
        D.get_kernel("_v", "gpu")
    with pytest.raises(ValueError):
        D.register_kernel("_t", "tpu", lambda: None)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_launch_slices_per_sample_parameters(kernels, rng, threads):
    imgs = rng.integers(0, 100, (5, 4, 3, 3)).astype(np.int64)
    add = rng.integers(0, 9, 5)
    out = D.launch(_Ctx(threads), _op("_t"), ImageBatch(imgs, "cpu"), add, per_sample=(0,),
                   scale=2)
    np.testing.assert_array_equal(out.data, imgs * 2 + add[:, None, None, None])
    assert out.device == "cpu" and len(kernels) == threads
    assert sum(c[1] for c in kernels) == 5 and [a for c in kernels for a in c[2]] == list(add)


def test_launch_on_the_gpu_takes_the_whole_batch_and_the_stream(kernels, rng):
    imgs = rng.integers(0, 100, (3, 2, 2, 3))
    ctx = _Ctx(2)
    out = D.launch(ctx, _op("_t"), ImageBatch(imgs, "gpu"), np.arange(3), per_sample=(0,))
    assert kernels == [("gpu", "the-stream")] and out.device == "gpu"
    np.testing.assert_array_equal(out.data, imgs + np.arange(3)[:, None, None, None])
    D.kernel(ctx, _op("_u"), "gpu")(imgs, np.zeros(3))
    assert kernels[-1] == ("gpu", "the-stream")


def test_every_device_op_with_a_host_kernel_has_its_gpu_kernel():
    hosts = {n for n, be in D.KERNELS if be in ("cpu", "reference")}
    missing = sorted(n for n in hosts if "gpu" in REGISTRY[n].devices and (n, "gpu") not in D.KERNELS)
    assert not missing
    assert {"hsv", "photometric_distort", "noise.shot", "gaussian_blur", "mosaic",
            "erase"} <= {n for n, be in D.KERNELS if be == "gpu"}
