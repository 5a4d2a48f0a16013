"""displace.cu (DALI's water and sphere on the device, one launch per batch) against its NumPy
twins (detaug/kernels/displace.py): compiled as host C++ by tests/helpers/cuda_emulation.py and
run through the stand-in cupy on dense and ragged, uint8 and float32 batches, nearest and
bilinear, masked samples copied; then the same on the GPU (``gpu``)."""
import numpy as np
import pytest

from detaug.kernels import displace as kd
from helpers import cuda_emulation as emu


@pytest.fixture(scope="module")
def displace_cu(tmp_path_factory):
    return emu.build(tmp_path_factory.mktemp("displace_cu"), "displace.cu")


@pytest.fixture
def emulated(displace_cu, monkeypatch):
    """The emulated displace.cu behind the stand-in cupy; its launches counted from here."""
    emu.install_fake_cupy(monkeypatch, displace_cu, kd)
    displace_cu.calls.clear()
    return displace_cu


def _batch(rng, dtype, dense):
    shapes = [(23, 31, 3)] * 3 if dense else [(23, 31, 3), (1, 1, 3), (40, 17, 3), (9, 26, 3)]
    if dtype == np.uint8:
        imgs = [rng.integers(0, 256, s, dtype=np.uint8) for s in shapes]
    else:
        imgs = [rng.uniform(-2, 300, s).astype(np.float32) for s in shapes]
    return (np.stack(imgs) if dense else imgs), len(imgs)


def _args(rng, b, dtype):
    params = np.stack([rng.uniform(-8, 8, b), rng.uniform(-8, 8, b), rng.uniform(0, 0.5, b),
                       rng.uniform(0, 0.5, b), rng.uniform(-3, 3, b), rng.uniform(-3, 3, b)],
                      1).astype(np.float32)
    masks = np.ones(b, np.int64)
    masks[1] = 0  # copied
    fill = 17.0 if dtype == np.uint8 else -1.5
    return params, masks, np.full((b, 3), fill, dtype)


def _host(v):
    return [np.asarray(a) for a in (list(v) if not isinstance(v, list) else v)]


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("dense", [True, False])
@pytest.mark.parametrize("linear", [False, True])
def test_displace_emulated_equals_twins(emulated, rng, dtype, dense, linear):
    images, b = _batch(rng, dtype, dense)
    params, masks, fills = _args(rng, b, dtype)
    want_s = _host(kd.sphere_numpy(list(images), linear, masks, fills))
    want_w = _host(kd.water_numpy(list(images), params, linear, masks, fills))
    dev = emu.dev(images) if dense else [emu.dev(a) for a in images]
    got_s = kd.sphere_cupy(dev, linear, masks, fills)
    got_w = kd.water_cupy(dev, params, linear, masks, fills)
    assert emulated.calls == ["displace", "displace"]  # one launch a batch
    assert isinstance(got_s, list) != dense
    for g, w in zip(_host(got_s), want_s):  # sqrt and division exact: to the bit
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    # water's sinf / cosf against NumPy's float32 sin / cos: a last-bit difference moves a
    # sample point by one float32 step, which changes a nearest pixel only at a pixel edge
    for g, w in zip(_host(got_w), want_w):
        assert g.dtype == w.dtype and g.shape == w.shape
        diff = np.abs(g.astype(np.float64) - w)
        assert (diff > (1 if dtype == np.uint8 else 1e-3)).mean() <= 1e-3
    np.testing.assert_array_equal(_host(got_w)[1], np.asarray(images[1]))  # mask 0: copied


def test_an_empty_batch_launches_nothing(emulated):
    assert kd.sphere_cupy([], False, np.zeros(0), np.zeros((0, 3))) == []
    assert emulated.calls == []


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("linear", [False, True])
def test_displace_on_the_gpu_equals_twins(cp, rng, dtype, linear):
    images, b = _batch(rng, dtype, False)
    params, masks, fills = _args(rng, b, dtype)
    dev = [cp.asarray(a) for a in images]
    for got, want, exact in (
            (kd.sphere_cupy(dev, linear, masks, fills),
             kd.sphere_numpy(images, linear, masks, fills), True),
            (kd.water_cupy(dev, params, linear, masks, fills),
             kd.water_numpy(images, params, linear, masks, fills), False)):
        for g, w in zip(got, want):
            g = g.get()
            if exact:
                np.testing.assert_array_equal(g, w)
            else:
                diff = np.abs(g.astype(np.float64) - w)
                assert (diff > (1 if dtype == np.uint8 else 1e-3)).mean() <= 1e-3
