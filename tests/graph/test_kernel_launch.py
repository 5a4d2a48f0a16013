"""graph/dispatch.py's ``launch`` over images planned ahead: the op's GPU kernel launch is
planned (a KernelLaunch in a DeferredLaunch, pickled as a worker sends it) and, once the images
are made, runs the very kernel with the very arguments: the same bytes as the kernel run at
once, for ragged images (a list of views) and packed ones (one dense array), with color.cu
emulated on the CPU (tests/helpers/cuda_emulation.py). A kernel whose output differs from the
planned shapes is refused by name."""
from __future__ import annotations

import pickle
import types

import numpy as np
import pytest

from helpers import cuda_emulation as emu
from helpers import fresh_seed

from detaug.core.batch import DeviceImages, ImageBatch, PlannedImages  # noqa: E402
from detaug.core.deferred import DeferredLaunch, realize  # noqa: E402
from detaug.graph import dispatch  # noqa: E402
from detaug.kernels import color as KC  # noqa: E402


@pytest.fixture(scope="module")
def color_cu(tmp_path_factory):
    return emu.build(tmp_path_factory.mktemp("color_cu"), "color.cu")


def _op(name):
    return types.SimpleNamespace(name=f"{name}_3", schema=types.SimpleNamespace(name=name))


@pytest.mark.parametrize("packed", [False, True])
def test_a_planned_kernel_launch_makes_the_bytes_of_one_made_at_once(color_cu, monkeypatch, packed):
    emu.install_fake_cupy(monkeypatch, color_cu, KC)
    rng = np.random.default_rng(fresh_seed())
    b = 4
    if packed:  # one dense array: the images lie one after another
        dense = emu.dev(rng.integers(0, 256, (b, 9, 13, 3), np.uint8))
        arrays = [dense[k] for k in range(b)]
    else:
        arrays = [emu.dev(rng.integers(0, 256, (int(rng.integers(3, 20)), int(rng.integers(3, 20)), 3),
                                       np.uint8)) for _ in range(b)]
    made = DeviceImages.from_arrays(arrays)
    params = (rng.uniform(-30, 30, b), rng.uniform(0.3, 1.7, b), rng.uniform(0.5, 1.5, b))
    now = KC.hsv_cupy(dense if packed else arrays, *params)
    planned = PlannedImages(made.shapes, None, "RGB", 64, None)
    out = dispatch.launch(None, _op("hsv"), ImageBatch(planned, "gpu"), *params)
    assert isinstance(out.raw, DeferredLaunch) and out.sizes().tolist() == made.shapes[:, :2].tolist()
    later = pickle.loads(pickle.dumps(out.raw))
    got = realize(later, {id(later.sources[0]): made}, None, {})
    assert isinstance(got, list) != packed  # packed images go to the kernel as one array
    for a, e in zip(got, now):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(e))
    # the twin agrees within a grey level (float32 kernel, float64 twin)
    twin = KC.hsv_numpy([np.asarray(a) for a in arrays], *params)
    assert max(int(np.abs(np.asarray(a, np.int16) - t).max()) for a, t in zip(got, twin)) <= 1


def test_a_kernel_that_changes_the_shapes_is_refused(color_cu, monkeypatch):
    emu.install_fake_cupy(monkeypatch, color_cu, KC)
    made = DeviceImages.from_arrays([emu.dev(np.zeros((4, 5, 3), np.uint8))])
    planned = PlannedImages(made.shapes, None, "RGB", 64, None)
    monkeypatch.setitem(dispatch.KERNELS, ("_halves", "gpu"),
                        lambda images, stream=None: [a[:2] for a in images])
    out = dispatch.launch(None, _op("_halves"), ImageBatch(planned, "gpu"))
    with pytest.raises(RuntimeError, match="_halves: its kernel made images of shapes"):
        realize(out.raw, {id(planned): made}, None, {})
