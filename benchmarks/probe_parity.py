"""Device probe: which setting makes the decode-process batches differ from in-thread decode
(tests/test_gpu_pipeline.py's same-batches tests). Prints mismatch counts per variant."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import test_gpu_pipeline as t  # noqa: E402
from detaug.pipeline import Pipeline  # noqa: E402


def diff(a, b):
    bad = []
    for k, (x, y) in enumerate(zip(a, b)):
        d = np.abs(x[0].astype(np.float64) - y[0]).max()
        if d > 0:
            n = [(s, float(np.abs(x[0][s] - y[0][s]).max())) for s in range(len(x[0])) if (x[0][s] != y[0][s]).any()]
            bad.append((k, n[:4]))
    return bad[:4], len(bad)


def old_run_device_on(self, host_result, pool, stream, admit):
    key, prepared, ctx = host_result
    ctx.stream = stream or self._stream
    admit.decode(); admit()
    self._run_ops(ctx, self._device_ops)
    out = self._collect(ctx)
    admit.decoded()
    return out


def main():
    ref1 = t._epochs(t._coco_decode_pipe(0))
    print("threads bpl1 vs threads bpl1:", diff(ref1, t._epochs(t._coco_decode_pipe(0))))
    print("threads bpl3 vs threads bpl1:", diff(ref1, t._epochs(t._coco_decode_pipe(0, batches_per_launch=3))))
    print("procs2 bpl1:", diff(ref1, t._epochs(t._coco_decode_pipe(2, batches_per_launch=1))))
    print("procs2 bpl3:", diff(ref1, t._epochs(t._coco_decode_pipe(2, batches_per_launch=3))))
    p = t._coco_decode_pipe(2, batches_per_launch=3)
    p.decode_buffer_mb = 2048
    print("procs2 bpl3 ring 2 GiB:", diff(ref1, t._epochs(p)))
    os.environ["DETAUG_DECODE_THREADS"] = "1"
    print("procs1 T1 bpl1 prefetch6:", diff(ref1, t._epochs(t._coco_decode_pipe(1, prefetch=6))))
    os.environ["DETAUG_DECODE_THREADS"] = "2"
    print("procs1 T2 bpl1 prefetch6:", diff(ref1, t._epochs(t._coco_decode_pipe(1, prefetch=6))))
    print("procs1 T2 bpl1 prefetch2:", diff(ref1, t._epochs(t._coco_decode_pipe(1, prefetch=2))))
    del os.environ["DETAUG_DECODE_THREADS"]
    Pipeline._run_device_on = old_run_device_on
    print("OLD device stage, procs2 bpl3:", diff(ref1, t._epochs(t._coco_decode_pipe(2, batches_per_launch=3))))
    print("OLD device stage, threads bpl1:", diff(ref1, t._epochs(t._coco_decode_pipe(0))))


if __name__ == "__main__":
    main()
