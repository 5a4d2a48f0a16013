"""Issue 31 on the device: the programs of tests/test_dali_port.py with DALI's device="mixed"
decoders and device="gpu" ops (DALI's ResNet-50 example as written, with its .gpu() calls), and
decoders.image_random_crop on the GPU against the CPU (same keyed windows, same pixels: PNG
decodes exactly on both)."""
import numpy as np
import pytest

import test_dali_port as T
from helpers import close_pipelines, track  # noqa: F401  (fixture)

pytestmark = pytest.mark.gpu

flat_folder = T.flat_folder


@pytest.fixture(autouse=True)
def collect_before_close(close_pipelines):
    """The test's garbage is collected while its pipelines (and their decoders' streams) still
    exist, before close_pipelines closes them. Without it, running this file then
    tests/test_ddp_gpu.py died of a segmentation fault in the garbage collector at the next
    test, 3 of 3 times (H200, 2026-11-26): decoded GPU images of a DALI-mode pipeline freed
    after its streams, the class of fault session 12 found in test_skip_external. The library
    side is open (see the issue's note)."""
    yield
    import gc

    gc.collect()


@pytest.fixture(autouse=True)
def on_the_gpu(monkeypatch):
    pytest.importorskip("cupy")
    monkeypatch.setitem(T.DEVICE, "decoder", "mixed")
    monkeypatch.setitem(T.DEVICE, "ops", "gpu")


@pytest.mark.parametrize("is_training", [True, False], ids=["train", "val"])
def test_resnet50_example_gpu(flat_folder, is_training):
    T.test_resnet50_example_train_and_val(flat_folder, is_training)


def test_getting_started_gpu(flat_folder):
    T.test_getting_started_tutorial_tensor_lists(flat_folder)


def test_external_source_generic_iterator_gpu(flat_folder):
    T.test_external_source_generic_iterator(flat_folder)


def test_old_ops_api_gpu(flat_folder):
    T.test_old_ops_api_program(flat_folder)


def test_image_random_crop_windows_gpu(tmp_path, rng):
    T.test_image_random_crop_gives_windows_of_the_source(tmp_path, rng)


def test_image_random_crop_gpu_equals_cpu_also_resized(tmp_path, rng):
    """The same windows on both devices (exact pixels), and the crop followed by a resize (the
    chain the GPU runs as one warp) within a grey level of the CPU's."""
    from detaug import Pipeline, fn

    srcs = [rng.integers(0, 256, (int(rng.integers(30, 80)), int(rng.integers(30, 80)), 3), np.uint8)
            for _ in range(8)]
    for k, s in enumerate(srcs):
        (tmp_path / f"{k}.png").write_bytes(T._png(s))
    outs = {}
    for dev in ("cpu", "mixed"):
        pipe = track(Pipeline(batch_size=8, num_threads=1, seed=5))
        with pipe:
            jpegs, _ = fn.readers.file(file_root=str(tmp_path), files=[f"{k}.png" for k in range(8)],
                                       labels=list(range(8)))
            crop = fn.decoders.image_random_crop(jpegs, device=dev, random_area=[0.2, 1.0])
            pipe.set_outputs(crop, fn.resize(crop, resize_x=16, resize_y=16))
        outs[dev] = pipe.run()
    for k in range(8):
        np.testing.assert_array_equal(outs["cpu"][0].at(k), outs["mixed"][0].as_cpu().at(k))
        d = np.abs(outs["cpu"][1].at(k).astype(int) - outs["mixed"][1].as_cpu().at(k).astype(int))
        assert d.max() <= 1, d.max()


def test_external_source_tutorial_gpu(flat_folder):
    T.test_external_source_tutorial_run_outputs(flat_folder)
