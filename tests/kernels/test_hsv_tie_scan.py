"""The hsv CPU kernel's scan for values near a rounding tie (kernels/color.py ``_differing``,
8 bytes at a time): the same indices as a byte-wise comparison, at any length and alignment, and
the kernel still the float64 sum rounded half up, bit for bit, on odd sizes."""
import numpy as np
import pytest

from detaug.kernels import color as kc
from helpers import fresh_seed


@pytest.mark.parametrize("seed", [0, fresh_seed()])
def test_differing_is_the_bytewise_comparison(seed):
    rng = np.random.default_rng(seed)
    for n in [0, 1, 7, 8, 9, 63, 64, 65, 1000, int(rng.integers(1, 5000))]:
        a = rng.integers(0, 256, n, dtype=np.uint8)
        b = a.copy()
        k = int(rng.integers(0, n + 1))
        at = rng.choice(n, size=min(k, n), replace=False) if n else np.empty(0, np.int64)
        b[at] ^= rng.integers(1, 256, len(at), dtype=np.uint8)  # a real change each
        for off in (0, 1):  # an unaligned start too
            got = kc._differing(a[off:], b[off:])
            assert np.array_equal(got, np.flatnonzero(a[off:] != b[off:])), (n, off)


@pytest.mark.parametrize("seed", [1, fresh_seed()])
def test_hsv_numpy_is_the_float64_sum_on_odd_sizes(seed):
    rng = np.random.default_rng(seed)
    for h, w in [(1, 1), (1, 2), (3, 5), (7, 13), (37, 53)]:
        im = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        hue, sat, val = rng.uniform(-180, 180), rng.uniform(0, 2), rng.uniform(0, 2)
        m = kc.hsv_matrices(np.array([hue]), np.array([sat]), np.array([val]))[0].astype(np.float64)
        v = im.astype(np.float64)
        ref = (m[:, 0] * v[..., :1] + m[:, 1] * v[..., 1:2]) + m[:, 2] * v[..., 2:3]
        ref = np.clip(np.floor(ref + 0.5), 0, 255).astype(np.uint8)
        assert np.array_equal(kc.hsv_numpy([im], [hue], [sat], [val])[0], ref), (h, w)
