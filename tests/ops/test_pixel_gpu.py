"""GPU parity of the pixel kernels and ops (run on the device): pixel.cu through cupy against the
NumPy twins (the same bytes; gaussian and shot noise may differ by one level where CUDA's
log / cos / exp and the C library's differ in the last bit at a rounding tie), one launch per
call for any batch size, and whole pipelines on the GPU against the CPU backend."""
import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.kernels import blur as KB
from detaug.kernels import noise as KN
from detaug.kernels.launch import reset_launch_counts, total_launches
from helpers import close_pipelines, random_images, run_graph, to_np, track  # noqa: F401

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")


@pytest.fixture(autouse=True)
def reference_cpu_path():
    from detaug.core import backend

    backend.set_cpu_warp("reference")  # the CPU blur runs the twin, not OpenCV
    yield
    backend.set_cpu_warp("opencv")


def _batches(rng):
    ragged = random_images(rng, [(37, 53, 3), (1, 1, 3), (0, 4, 3), (64, 17, 3), (130, 200, 3), (9, 300, 1)])
    dense = np.stack(random_images(rng, [(33, 45, 3)] * 4))
    return ragged, dense


def _assert_same(got, want, loose=False):
    assert isinstance(got, list) == isinstance(want, list)
    for g, w in zip(got, want):
        g = to_np(g)
        assert g.shape == w.shape and g.dtype == w.dtype
        if loose and w.size:  # one level, at a rounding tie of a last-bit difference: rare
            d = np.abs(g.astype(int) - w)
            assert d.max() <= 1 and (d > 0).mean() < 1e-5
        else:
            np.testing.assert_array_equal(g, w)


def test_blur_parity(rng):
    for batch in _batches(rng):
        b = len(batch)
        sig = rng.uniform(0.2, 8.0, (b, 2))
        wy = [KB.gaussian_weights(int(2 * np.ceil(3 * s[0]) + 1), s[0]) for s in sig]
        wx = [KB.gaussian_weights(int(2 * np.ceil(3 * s[1]) + 1), s[1]) for s in sig]
        d = cp.asarray(batch) if isinstance(batch, np.ndarray) else [cp.asarray(x) for x in batch]
        _assert_same(KB.gaussian_blur_cupy(d, wx, wy), KB.gaussian_blur_numpy(batch, wx, wy))
        for x, y in zip(d, batch):                                           # not mutated
            np.testing.assert_array_equal(to_np(x), y)
    # the tallest kernel the GPU takes
    img = random_images(rng, [(400, 50, 3)])
    w = [KB.gaussian_weights(2 * KB.MAX_RADIUS_Y + 1, 50.0)]
    _assert_same(KB.gaussian_blur_cupy([cp.asarray(img[0])], w, w), KB.gaussian_blur_numpy(img, w, w))


@pytest.mark.parametrize("mode", ["gaussian", "salt_and_pepper", "shot"])
@pytest.mark.parametrize("per_channel", [True, False])
def test_noise_parity(rng, mode, per_channel):
    for batch in _batches(rng):
        b = len(batch)
        keys = rng.integers(0, 2**63, b, dtype=np.uint64)
        params = np.stack([rng.uniform(0, 0.5, b), rng.uniform(0, 30, b), np.full(b, 240.0), np.full(b, 9.0)], 1)
        if mode == "shot":
            params[:, 0] = rng.choice([0.0, 0.25, 3.0, 20.0], b)
        d = cp.asarray(batch) if isinstance(batch, np.ndarray) else [cp.asarray(x) for x in batch]
        _assert_same(KN.noise_cupy(d, keys, mode, params, per_channel),
                     KN.noise_numpy(batch, keys, mode, params, per_channel), loose=mode != "salt_and_pepper")


def test_erase_and_jitter_parity(rng):
    for batch in _batches(rng):
        b = len(batch)
        counts = rng.integers(0, 4, b)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        rects = np.sort(rng.integers(-5, 150, (int(offsets[-1]), 2, 2)), axis=1)
        rects = np.stack([rects[:, 0, 0], rects[:, 0, 1], rects[:, 1, 0], rects[:, 1, 1]], 1)
        fills = rng.integers(0, 256, (b, 3), dtype=np.uint8)
        random = rng.random(b) < 0.5
        keys = rng.integers(0, 2**63, b, dtype=np.uint64)
        d = cp.asarray(batch) if isinstance(batch, np.ndarray) else [cp.asarray(x) for x in batch]
        _assert_same(KN.erase_cupy(d, rects, offsets, fills, random, keys),
                     KN.erase_numpy(batch, rects, offsets, fills, random, keys))
        masks = (rng.random(b) < 0.8).astype(int)
        for nd in (1, 2, 7):
            _assert_same(KN.jitter_cupy(d, keys, nd, masks, fills), KN.jitter_numpy(batch, keys, nd, masks, fills))


def test_one_launch_per_call_for_any_batch_size(rng):
    for b in (1, 64):
        imgs = [cp.asarray(x) for x in random_images(rng, [(8 + i % 5, 9 + i % 3, 3) for i in range(b)])]
        keys = np.arange(b, dtype=np.uint64)
        w = [KB.gaussian_weights(5, 1.0)] * b
        calls = [lambda: KB.gaussian_blur_cupy(imgs, w, w),
                 lambda: KN.noise_cupy(imgs, keys, "gaussian", np.tile([0, 5.0, 0, 0], (b, 1))),
                 lambda: KN.erase_cupy(imgs, np.tile([[1, 1, 4, 4]], (b, 1)), np.arange(b + 1),
                                       np.zeros((b, 3)), np.zeros(b, bool), keys),
                 lambda: KN.jitter_cupy(imgs, keys, 3, np.ones(b), np.zeros((b, 3)))]
        for call in calls:
            reset_launch_counts()
            call()
            assert total_launches() == 1
    cp.cuda.get_current_stream().synchronize()


R = fn.random
OPS = {
    "gaussian_blur": lambda i, b: (fn.gaussian_blur(i, sigma_range=(0.3, 3.0), kernel_size=9), b),
    "gaussian_blur_dali": lambda i, b: (fn.gaussian_blur(i, sigma=R.uniform(range=(0.5, 4.0))), b),
    "noise": lambda i, b: (fn.noise(i, std=(2.0, 30.0), probability=0.7), b),
    "noise_sp": lambda i, b: (fn.noise(i, mode="salt_and_pepper", amount=(0.01, 0.2)), b),
    "noise.gaussian": lambda i, b: (fn.noise.gaussian(i, stddev=R.uniform(range=(1, 20))), b),
    "noise.salt_and_pepper": lambda i, b: (fn.noise.salt_and_pepper(i, prob=0.2, per_channel=True), b),
    "noise.shot": lambda i, b: (fn.noise.shot(i, factor=R.uniform(range=(1, 30))), b),
    "jitter": lambda i, b: (fn.jitter(i, nDegree=3, fill_value=(1, 2, 3), mask=R.coin_flip()), b),
    "random_erasing": lambda i, b: fn.random_erasing(i, b, probability=0.8, value="random", min_visibility=0.6),
    "random_erasing_flag": lambda i, b: fn.random_erasing(*fn.flip(i, b, horizontal=R.coin_flip()),
                                                          probability=1.0, value=(9, 8, 7), min_visibility=0.6,
                                                          box_policy="flag"),
    "erase": lambda i, b: fn.erase(i, b, anchor=(0.1, 0.2, 0.5, 0.5), shape=(0.3, 0.3, 0.2, 0.4),
                                   normalized=True, fill_value=50, min_visibility=0.7),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_pipeline_gpu_equals_cpu(name):
    rng = np.random.default_rng(31)
    imgs = [rng.integers(0, 256, (int(rng.integers(30, 70)), int(rng.integers(30, 90)), 3), dtype=np.uint8)
            for _ in range(6)]
    boxes = []
    for im in imgs:
        h, w = im.shape[:2]
        xy = rng.uniform(0, [w - 2, h - 2], (4, 2))
        boxes.append(np.concatenate([xy, xy + rng.uniform(1, [w / 2, h / 2], (4, 2))], 1))
    fields = [{"annotation_id": np.arange(4) + 10 * k} for k in range(6)]
    cpu = run_graph(imgs, boxes, OPS[name], fields=fields, seed=5)
    gpu = run_graph(imgs, boxes, OPS[name], fields=fields, seed=5, device="gpu")
    loose = name in ("noise", "noise.gaussian", "noise.shot")
    assert gpu[0].device == "gpu"
    _assert_same(list(gpu[0].data), [np.asarray(x) for x in cpu[0].data], loose=loose)
    for a, b in zip(cpu[1].per_sample(), gpu[1].per_sample()):
        assert set(a) == set(b)
        for k in a:
            np.testing.assert_allclose(b[k], a[k], atol=1e-3 if k == "boxes" else 0, err_msg=f"{name}: {k}")


def test_jpeg_compression_refuses_gpu_images():
    pipe = track(Pipeline(batch_size=1, device_id=0))
    with pipe:
        img = fn.external_source(source=[[np.zeros((4, 4, 3), np.uint8)]])
        with pytest.raises(NotImplementedError, match="jpeg_compression.*CPU only"):
            fn.jpeg_compression(img.gpu())
