"""Data-parallel input on GPUs (run on the device): a GPU pipeline's epoch-end turnover in the
torch iterator, and examples/retinanet_ddp.py on two GPUs under torchrun (NCCL), each rank's
pipeline on its own GPU (device_id from LOCAL_RANK)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, VOC

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


def _gpus() -> int:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


def _gpu_pipe(batch_size):
    from detaug import fn, pipeline_def

    @pipeline_def
    def det():
        enc, boxes = fn.readers.voc(root=VOC, random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed")
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        img, boxes = fn.resize(img, boxes, size=(128, 128))
        return img, boxes

    return det(batch_size=batch_size, num_threads=2, seed=5, device_id=0)


def test_gpu_pipeline_epoch_end_keeps_the_next_epochs_launches(monkeypatch):
    """As tests/test_ddp_pipeline.py's CPU check, on a GPU pipeline (4 batches a launch): the
    iterator ('drop') ends each epoch before its 'fill' pipeline; no launch is made twice and
    the batches are those of random access."""
    from detaug.runtime import executor
    from detaug.adapters.torch import DetaugIterator

    keys, submit = [], executor.Executor.submit
    monkeypatch.setattr(executor.Executor, "submit", lambda self, k: (keys.append(k), submit(self, k))[1])
    pipe, ref = _gpu_pipe(6), _gpu_pipe(6)
    it = DetaugIterator(pipe, boxes_format="padded", last_batch_policy="drop", auto_reset=True)
    ref_it = DetaugIterator(ref, boxes_format="padded")
    assert len(it) == 6 and len(pipe) == 7
    try:
        for epoch in range(3):
            for b in range(6):
                got = next(it)
                want = ref_it._convert(ref, ref.run_batch(b, epoch=epoch))
                assert set(got) == set(want)
                for k in got:
                    np.testing.assert_array_equal(got[k].cpu().numpy(), want[k].cpu().numpy())
            with pytest.raises(StopIteration):
                next(it)
        assert len(keys) == len(set(keys)), keys
        assert any(k[:2] == (1, 0) for k in keys) and any(k[:2] == (2, 0) for k in keys)
    finally:
        pipe.close()
        ref.close()


@pytest.mark.skipif(_gpus() < 2, reason="needs two GPUs")
def test_ddp_example_on_two_gpus():
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.join(REPO, "examples", "retinanet_ddp.py"), "--dry-run", "--iters", "40",
           "--size", "256", "--batch-size", "8", "--report", "10"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for r in (0, 1):
        assert re.search(rf"rank {r}/2: pipeline on cuda:{r}, shard {r} of 2, 20 of 40 images", out), out
    steps = re.findall(r"rank (\d): steps per epoch \{([^}]*)\}", out)
    assert len(steps) == 2 and steps[0][1] == steps[1][1], out
    assert len(re.findall(r"img/s \(2 ranks\)", out)) == 4, out
