"""Counter-based per-sample random streams.

Every draw is a pure function of ``(seed, op_id, epoch, sample_index, draw_number)``: a
SplitMix64 hash of the key, vectorised with NumPy over the samples of a batch. The sample index is
the record's position in the dataset, so a sample's augmentation does not depend on batch
composition, thread timing, device, or which batches ran before it (random access for Keras, exact
resume from ``state_dict``). Draws are made on the host for both backends, which is what makes the
CPU and GPU backends sample identical parameters.
"""
from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK53 = np.float64(1.0 / (1 << 53))


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _key(seed: int, op_id: int, epoch: int, sample_index: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        k = _mix(np.full(np.shape(sample_index), np.uint64(seed & 0xFFFFFFFFFFFFFFFF)) + _GOLDEN)
        for part in (np.uint64(op_id), np.uint64(epoch & 0xFFFFFFFFFFFFFFFF)):
            k = _mix(k ^ (part * _GOLDEN + np.uint64(0x632BE59BD9B4E019)))
        return _mix(k ^ (np.asarray(sample_index, dtype=np.uint64) * _GOLDEN))


class SampleRNG:
    """Random streams for the samples of one batch, for one op.

    Args:
        seed: the pipeline seed.
        op_id: the op's position in the traced graph.
        epoch: the epoch number.
        sample_index: (B,) record indices (positions in the dataset).

    Successive calls continue each sample's stream; calls must be made in a fixed order inside
    an op (never conditionally on data) so that the streams replay.
    """

    def __init__(self, seed: int, op_id: int, epoch: int, sample_index):
        self.sample_index = np.asarray(sample_index, dtype=np.int64).reshape(-1)
        self._key = _key(seed, op_id, epoch, self.sample_index)
        self._counter = 0

    def __len__(self) -> int:
        return len(self.sample_index)

    def bits(self, k: int) -> np.ndarray:
        """(B, k) uint64 random words."""
        j = np.arange(self._counter, self._counter + k, dtype=np.uint64)
        self._counter += k
        with np.errstate(over="ignore"):
            return _mix(self._key[:, None] + (j[None, :] + np.uint64(1)) * _GOLDEN)

    def uniform(self, k: int = 1, low=0.0, high=1.0) -> np.ndarray:
        """(B, k) float64 uniform on [low, high)."""
        u = (self.bits(k) >> np.uint64(11)).astype(np.float64) * _MASK53
        return low + (np.asarray(high, dtype=np.float64) - low) * u

    def normal(self, k: int = 1, mean=0.0, stddev=1.0) -> np.ndarray:
        """(B, k) float64 normal draws (Box-Muller on two uniforms per value)."""
        u = self.uniform(2 * k)
        u1 = np.maximum(u[:, :k], 1e-300)
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u[:, k:])
        return mean + stddev * z

    def integers(self, k: int, n) -> np.ndarray:
        """(B, k) int64 uniform on [0, n)."""
        return np.minimum((self.uniform(k) * n).astype(np.int64), np.asarray(n) - 1)


def counter_bits(key, counter) -> np.ndarray:
    """uint64 words ``SplitMix64(key + (counter + 1) * golden)``, broadcast over ``key`` and
    ``counter`` (wrapping arithmetic): the stream of one key at positions ``counter``, as
    :meth:`SampleRNG.bits` makes it. Pixel kernels draw per-pixel values with it from a per-sample
    key (one :meth:`SampleRNG.bits` draw) and the pixel's index; their CUDA versions compute the
    same words (detaug/kernels/pixel.cu), so CPU and GPU draw the same noise."""
    with np.errstate(over="ignore"):
        z = np.asarray(key, dtype=np.uint64) + (np.asarray(counter, dtype=np.uint64) + np.uint64(1)) * _GOLDEN
        for shift, mult in ((30, _M1), (27, _M2)):  # _mix, in place (large per-pixel arrays)
            z ^= z >> np.uint64(shift)
            z *= mult
        z ^= z >> np.uint64(31)
        return z


def to_unit(bits) -> np.ndarray:
    """float64 uniform on [0, 1) from uint64 words: the top 53 bits times 2**-53 (exact)."""
    return (np.asarray(bits, np.uint64) >> np.uint64(11)).astype(np.float64) * _MASK53


def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    """The shuffled order of ``n`` records for ``epoch``: the same on every shard and process.

    Sorting by a hash of (seed, epoch, index) gives a uniform random permutation that needs no
    shared generator state.
    """
    keys = _key(seed, 0xFFFF_FFFF, epoch, np.arange(n, dtype=np.int64))
    return np.argsort(keys, kind="stable").astype(np.int64)
