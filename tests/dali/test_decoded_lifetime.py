"""Decoded GPU images keep the stream they were decoded on alive, and go before it (once, a
DALI-mode pipeline's decoded images, kept by the program past the pipeline, were freed after
their stream at a later garbage collection: a segmentation fault). The ordering is checked here
with stand-ins that record when they go; the real thing runs on the device (gpu-marked)."""
import gc
import os
import sys

import pytest

from detaug.ops import gpu_decode
from detaug.ops.gpu_decode import StreamBound, _bound, _sweep

from helpers.bounded import run_bounded


class Recorder:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def __del__(self):
        self.log.append(self.name)


def test_images_go_before_their_stream_when_dropped():
    log = []
    bound = StreamBound([Recorder("image", log)], Recorder("stream", log))
    del bound
    assert log == ["image"]  # the stream is retired, not dropped, while a collection may run
    _sweep()
    assert log == ["image", "stream"]


def test_images_go_before_their_stream_inside_a_collected_cycle():
    """The pipeline (holding the stream) and the images' owner in one garbage cycle: the
    collector may clear either first; the images still go first."""
    for trial in range(20):
        log = []

        class Pipe:
            pass

        pipe = Pipe()
        stream = Recorder("stream", log)
        pipe.streams = [stream]
        pipe.outputs = StreamBound([Recorder("image", log), pipe], stream)
        pipe.cycle = pipe
        del pipe, stream
        gc.collect()
        assert log == ["image"], (trial, log)
        _sweep()
        assert log == ["image", "stream"], (trial, log)


def test_images_held_outlive_the_pipeline_with_their_stream():
    log = []
    stream = Recorder("stream", log)
    held = StreamBound([Recorder("image", log)], stream)
    del stream  # the pipeline's reference went (closed, dropped)
    gc.collect()
    assert log == []  # the stream lives while its images are held
    held.release()
    _sweep()
    assert log == ["image", "stream"]


def test_release_at_exit_reaches_every_held_owner():
    log = []
    held = StreamBound([Recorder("image", log)], Recorder("stream", log))
    assert held in set(_bound)

    keep = dict(gpu_decode._decoders)
    try:
        gpu_decode._release()
    finally:
        gpu_decode._decoders.update(keep)
    assert log == ["image", "stream"]


GPU_SCRIPT = """
    import gc, os, io, numpy as np
    from PIL import Image
    from detaug import Pipeline, fn
    folder = {folder!r}
    for k in range(8):
        Image.fromarray(np.full((40 + k, 64, 3), 20 * k, np.uint8)).save(os.path.join(folder, f"{{k}}.jpg"))
    kept = []
    for round in range(6):
        pipe = Pipeline(batch_size=4, num_threads=2, device_id=0, seed=round)
        with pipe:
            jpegs, labels = fn.readers.file(file_root=folder, files=[f"{{k}}.jpg" for k in range(8)])
            images = fn.decoders.image(jpegs, device="mixed")
            pipe.set_outputs(images, labels)   # a DALI-mode program: decoded images handed out
        pipe.build()
        out = pipe.run()
        kept.append(out)          # held past the pipeline
        pipe.cycle = pipe         # dropped into a cycle: freed by the collector, in any order
        del pipe, out
        gc.collect()
    import cupy as cp
    sums = [int(cp.asnumpy(im).sum()) for out in kept for im in out[0].data]
    del kept
    gc.collect()
    cp.cuda.runtime.deviceSynchronize()
    print("ok", len(sums))
"""


@pytest.mark.gpu
def test_dali_mode_images_kept_past_their_pipeline_do_not_crash(tmp_path):
    pytest.importorskip("nvidia.nvimgcodec")
    proc = run_bounded(GPU_SCRIPT.format(folder=str(tmp_path)), mem_mb=None, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert proc.stdout.strip().endswith("ok 24")
