"""detaug.runtime.gpu.device_stage (a pipeline's GPU stage): the check at build that names what
is missing and which ops or decoder asked for the GPU, before anything starts; the one-line
summary of where a pipeline runs; environment overrides; and, on a GPU (``gpu``-marked), the
summary and the outputs a GPU pipeline collects."""
import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core import backend
from detaug.core.backend import DeviceUnavailableError
from detaug.runtime import build_plan
from detaug.runtime.gpu import device_stage
from helpers import COCO, close_pipelines, track  # noqa: F401  (autouse fixture)


def images_pipe(device="cpu", upload=False):
    p = track(Pipeline(batch_size=2, num_threads=1, seed=0, device_id=0 if device != "cpu" else None))
    with p:
        img = fn.external_source(source=lambda info: np.full((8, 6, 3), info.idx_in_epoch, np.uint8),
                                 batch=False, size=4)
        if upload:
            img = img.gpu()
        img = fn.resize(img, size=(4, 4))
        p.set_outputs(fn.flip(img, horizontal=1))
    return p


def coco_pipe(decoder):
    import os

    p = track(Pipeline(batch_size=2, num_threads=1, seed=0, device_id=0, decode_processes=0))
    with p:
        enc, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"))
        p.set_outputs(fn.decoders.image(enc, device=decoder), boxes)
    return p


def test_gpu_ops_without_a_gpu_are_refused_at_build_naming_the_ops(monkeypatch):
    monkeypatch.setattr(backend, "gpu_missing", lambda nvimgcodec=False: "cupy finds no GPU")
    p = images_pipe(upload=True)
    with pytest.raises(DeviceUnavailableError) as e:
        p.build()
    msg = str(e.value)
    assert "this pipeline runs ops on the GPU (" in msg and "resize" in msg and "flip" in msg
    assert "but cupy finds no GPU" in msg and "drop device='gpu' and .gpu() to run on the CPU" in msg
    assert "\n" not in msg  # one line


def test_a_gpu_decoder_without_nvimgcodec_is_refused_naming_the_decoder(monkeypatch):
    asked = []

    def missing(nvimgcodec=False):
        asked.append(nvimgcodec)
        return "nvImageCodec (nvidia-nvimgcodec) is not installed" if nvimgcodec else None

    monkeypatch.setattr(backend, "gpu_missing", missing)
    with pytest.raises(DeviceUnavailableError,
                       match=r"decodes on the GPU \(device='mixed'\) but nvImageCodec .* is not "
                             r"installed.*drop device='mixed' \(or use device='auto'\)"):
        coco_pipe("mixed").build()
    assert asked and all(asked)  # the decoder's check asks for nvImageCodec too


def test_a_cpu_pipeline_needs_no_gpu_and_says_where_it_runs(monkeypatch):
    monkeypatch.setattr(backend, "gpu_missing", lambda nvimgcodec=False: "cupy finds no GPU")
    p = images_pipe()
    p.build()
    assert p.device_summary == "cpu: all 3 ops on the CPU (no GPU stage)"  # source, resize, flip
    (out,) = p.run()
    got = np.asarray(out.as_array() if hasattr(out, "as_array") else out)
    assert got.shape == (2, 4, 4, 3) and got[1].min() == got[1].max() == 1  # constant images


def test_environment_overrides_are_integers_or_none(monkeypatch):
    monkeypatch.delenv("DETAUG_DECODE_THREADS", raising=False)
    assert build_plan._env("DETAUG_DECODE_THREADS") is None
    monkeypatch.setenv("DETAUG_DECODE_THREADS", "")
    assert build_plan._env("DETAUG_DECODE_THREADS") is None
    monkeypatch.setenv("DETAUG_DECODE_THREADS", "3")
    assert build_plan._env("DETAUG_DECODE_THREADS") == 3


def as_numpy(batch):
    """A batch's samples as host arrays (a DALI TensorList sample by sample: decoded images
    are ragged)."""
    batch = batch.as_cpu() if hasattr(batch, "as_cpu") else batch
    if hasattr(batch, "at"):
        return [np.asarray(batch.at(i)) for i in range(len(batch))]
    return [np.asarray(a) for a in batch]


@pytest.mark.gpu
def test_gpu_pipeline_summary_and_outputs_equal_the_cpus():
    import re

    cpu, gpu = images_pipe(), images_pipe("gpu", upload=True)
    gpu.build()
    m = re.fullmatch(r"gpu 0: decode on the CPU, (\d+) ops on the GPU, (\d+) on the CPU; "
                     r"device memory budget \d+\.\d\d GB", gpu.device_summary)
    assert m and int(m[1]) >= 2, gpu.device_summary  # resize and flip at least
    for w, g in zip(as_numpy(cpu.run()[0]), as_numpy(gpu.run()[0]), strict=True):
        np.testing.assert_array_equal(g, w)  # constant images: no rounding to differ


@pytest.mark.gpu
def test_gpu_decoder_pipeline_summary_names_the_decoder():
    pytest.importorskip("nvidia.nvimgcodec")
    p = coco_pipe("mixed")
    p.build()
    assert p.device_summary.startswith("gpu 0: decode on the GPU (nvImageCodec, 0 decode processes)")
    got = [a.shape for a in as_numpy(p.run()[0])]
    assert got == [a.shape for a in as_numpy(coco_pipe("cpu").run()[0])]
