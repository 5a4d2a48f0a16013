"""What the tests share (no test module imports another): the repository's paths and sample
data, this run's fresh seed, the GPU probe, optional modules imported on first use, running a
graph on given images and boxes (or, in DALI's form, on images alone), and closing the pipelines
a test made.

Submodules hold the larger shared pieces: ``helpers.reader_files`` (dataset builders and the
readers' quirk fixtures), ``helpers.fuzz`` (the fuzzers' budget, corpus and mutations),
``helpers.cuda_emulation`` (detaug's CUDA sources run on the CPU), ``helpers.warp`` (the warp
kernels' random cases and emulation), ``helpers.geometry`` (pixel and box comparisons of the
geometry tests), ``helpers.cases`` (small case tables and builders used by several families),
``helpers.retinanet_cases``, ``helpers.voc_reader_before`` (the frozen VOC reader) and
``helpers.list_targets_before`` (the torch adapter's list targets as it made them before).
"""
import importlib
import importlib.util
import os
import sys
import types

import numpy as np
import pytest

from detaug import Pipeline, fn, pipeline_def

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(TESTS)
VOC = os.path.join(REPO, "examples", "data", "voc-mini")
COCO = os.path.join(REPO, "examples", "data", "coco-mini")
# the project's shared data (shared/ beside the clone, as on CI; DETAUG_SHARED_DATA names another)
SHARED_DATA = os.environ.get("DETAUG_SHARED_DATA") or os.path.join(os.path.dirname(REPO), "shared",
                                                                  "data")

_OPEN = []


def has_gpu() -> bool:
    """Whether cupy imports and sees a CUDA device (conftest skips ``gpu``-marked tests where
    not)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no cupy, no driver, no device
        return False


def fresh_seed() -> int:
    """This run's fresh seed (printed in a failing test's parameters; conftest draws it once per
    run, DETAUG_FRESH_SEED replays one)."""
    return int(os.environ.get("DETAUG_FRESH_SEED") or np.random.SeedSequence().entropy % (1 << 30))


class _LazyModule(types.ModuleType):
    def __getattr__(self, attr):
        # pytest's collection probes every module-level name for private attributes
        # (_mock_name, __test__, ...): answering those without the import keeps collection
        # from importing the module; the tests use only public names
        if attr.startswith("_") and self.__name__ not in sys.modules:
            raise AttributeError(attr)
        return getattr(importlib.import_module(self.__name__), attr)


def optional_module(name: str):
    """``pytest.importorskip(name)`` decided at collection without importing ``name``: the
    test module is skipped where ``name`` is not installed, and ``name`` (TensorFlow, keras: seconds
    to import) is imported on first use, by the pytest-xdist worker that runs a test needing
    it, not by every worker that collects the file."""
    if importlib.util.find_spec(name.split(".")[0]) is None:
        pytest.skip(f"could not import {name!r}: not installed", allow_module_level=True)
    return _LazyModule(name)


# cupy for the ``gpu``-marked tests of a module that also holds CPU tests: imported on first
# use, which only a gpu test (run where conftest found a GPU) makes
cupy = _LazyModule("cupy")


@pytest.fixture(autouse=True)
def close_pipelines():
    """Close every pipeline a test made with :func:`track` when the test ends, so that its
    threads (and decode processes) stop then, not whenever the garbage collector runs. A module
    that imports this fixture gets it for all its tests."""
    yield
    while _OPEN:
        _OPEN.pop().close()


def random_images(rng, shapes):
    """uint8 images of the given shapes, uniform over 0..255."""
    return [rng.integers(0, 256, s, dtype=np.uint8) for s in shapes]


def track(pipe):
    """Register ``pipe`` with :func:`close_pipelines`; returns it."""
    _OPEN.append(pipe)
    return pipe


def run_graph(images, boxes, graph, *, labels=None, fields=None, seed=0, batch_size=None,
              num_threads=1, device="cpu"):
    """Feed ``images`` (list of HWC uint8) and ``boxes`` (list of (n, 4)) through ``graph(img, bx)``
    (which returns the outputs) and return the first batch's outputs."""
    n = len(images)
    labels = labels if labels is not None else [np.arange(len(b)) for b in boxes]
    fields = fields if fields is not None else [{} for _ in boxes]

    def src(info):
        i = info.idx_in_epoch
        return images[i], {"boxes": np.asarray(boxes[i], np.float32).reshape(-1, 4),
                           "labels": np.asarray(labels[i]), **fields[i]}

    pipe = Pipeline(batch_size=batch_size or n, num_threads=num_threads, seed=seed,
                    device_id=0 if device == "gpu" else None)
    with pipe:
        img, bx = fn.external_source(source=src, batch=False, num_outputs=2, size=n)
        if device == "gpu":
            img, bx = img.gpu(), bx.gpu()
        outs = graph(img, bx)
        pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
    out = pipe.run()
    pipe.close()
    return out


def run_images(images, build):
    """The first batch of a pipeline in DALI's form (``@pipeline_def``, CPU, seed 1, the batch
    ``images``) whose outputs are ``build(images)``, the images fed as HWC."""
    @pipeline_def(batch_size=len(images), num_threads=1, device_id=None, seed=1)
    def pipe():
        return build(fn.external_source(source=lambda: images, layout="HWC"))

    p = pipe()
    p.build()
    return p.run()


def to_np(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def images_of(batch):
    return [to_np(a) for a in batch.data]


def boxes_of(boxbatch):
    return boxbatch.per_sample()


def load_benchmark(name):
    """Import ``benchmarks/<name>.py`` as a module (it imports its neighbours from its folder),
    leaving this process's sys.path and environment (bench_gpu sets OMP_NUM_THREADS and friends)
    as they were."""
    import importlib.util

    bench = os.path.join(REPO, "benchmarks")
    spec = importlib.util.spec_from_file_location(name, os.path.join(bench, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    path, env = list(sys.path), dict(os.environ)
    sys.path.insert(0, bench)
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path[:] = path
        os.environ.clear()
        os.environ.update(env)
    return mod


def torchvision_or_skip():
    """torchvision, imported; the test is skipped where it is absent, or installed but unable to
    import (PyPI's wheel links the CUDA build of torch: on a CPU torch its C++ operators fail to
    load and ``import torchvision`` raises RuntimeError)."""
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed")
    try:
        return importlib.import_module("torchvision")
    except (ImportError, RuntimeError) as e:
        pytest.skip(f"torchvision does not import here ({type(e).__name__}: {e})")
