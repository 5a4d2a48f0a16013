"""The CUDA emulation (tests/helpers/cuda_emulation.py) runs launches made from several threads
at once as a GPU does, each with its own grid and arguments: two pipelines' device threads (the
device stage's stand-in, helpers.cases) launch emulated kernels side by side."""
from __future__ import annotations

import threading

import numpy as np

from helpers import fresh_seed
from helpers.warp import _emulate, emulated_kernels, rand_image, random_affine  # noqa: F401


def test_launches_from_two_threads_at_once_each_write_their_own_output(emulated_kernels):
    rng = np.random.default_rng(fresh_seed())
    cases = []
    for _ in range(2):  # two threads' batches, of different sizes and matrices
        h, w = (int(v) for v in rng.integers(48, 96, 2))
        imgs = [rand_image(rng, h, w) for _ in range(2)]
        cases.append((imgs, [random_affine(rng, (h, w), (64, 80)) for _ in imgs], [(64, 80)] * 2))
    alone = [_emulate(emulated_kernels, *c, out_dtype=np.float32) for c in cases]
    for _ in range(4):
        got, start = [None, None], threading.Barrier(2)

        def run(k):
            start.wait()  # both threads enter the emulation together
            got[k] = _emulate(emulated_kernels, *cases[k], out_dtype=np.float32)

        threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for g, want in zip(got, alone):
            np.testing.assert_array_equal(g, want)
