"""GPU parity of detaug/kernels/photometric.py: the cupy kernels against their NumPy twins on fresh
random inputs (the staged kernels bit for bit on uint8), the launches per call, and the ops on a
GPU pipeline giving the CPU pipeline's batches. Skipped without a GPU."""
import numpy as np
import pytest

cp = pytest.importorskip("cupy")


def _has_gpu():
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no driver / no device
        return False


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA device")]

from detaug import fn  # noqa: E402
from detaug.kernels import photometric as KP  # noqa: E402
from detaug.kernels.launch import launch_counts, reset_launch_counts  # noqa: E402
from helpers import random_images, run_graph  # noqa: E402
from conftest import fresh_seed  # noqa: E402

SEEDS = [0, fresh_seed()]


def _params(rng, b, extra=0):
    return KP.photometric_params(b, rng.integers(0, 64, b) | extra, brightness=rng.uniform(0.5, 1.5, b),
                                 contrast=rng.uniform(0, 2, b), saturation=rng.uniform(0, 2, b),
                                 hue=rng.uniform(-0.5, 0.5, b), perm=rng.integers(0, 6, b))


def _shapes(rng, b):
    return [(int(h), int(w), 3) for h, w in rng.integers(1, 200, (b, 2))]


@pytest.mark.parametrize("seed", SEEDS)
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


def test_staged_kernels_float_images_bit_for_bit():
    rng = np.random.default_rng(3)
    imgs = [(i / 255.0).astype(np.float32) for i in random_images(rng, _shapes(rng, 6))]
    ip, fp = _params(rng, 6, KP.CONTRAST)
    for g, w in zip(KP.photometric_cupy([cp.asarray(i) for i in imgs], ip, fp),
                    KP.photometric_numpy(imgs, ip, fp)):
        assert g.dtype == cp.float32
        np.testing.assert_array_equal(cp.asnumpy(g), w)  # fixed-point means: exact in any order


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
