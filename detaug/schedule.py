"""The schedule of an epoch: which records (and how many) each batch holds. Pure functions of
sizes and policies, shared by the pipeline's launches and its random access (``run_batch``).

Sources with a size give batches from the shard's epoch order; ``last_batch_policy`` decides the
last one: 'partial' (shorter), 'fill' (wraps around to the start of the order), 'drop' (left
out). Sources fed whole batches (an iterable, ``feed_input``) set each batch's length
themselves: :func:`fit_to_fed`.
"""
from __future__ import annotations

import numpy as np


def shard_size(n: int, shard_id: int, num_shards: int) -> int:
    """Records of shard ``shard_id`` of ``num_shards`` over ``n`` records (contiguous shards
    whose sizes differ by at most one)."""
    return (shard_id + 1) * n // num_shards - shard_id * n // num_shards


def batches_per_epoch(n: int, batch_size: int, policy: str) -> int:
    return n // batch_size if policy == "drop" else -(-n // batch_size)


def batch_positions(n: int, batch_index: int, count: int, batch_size: int, policy: str):
    """(positions in the epoch order, batch sizes) of batches ``batch_index .. batch_index +
    count - 1`` of an epoch of ``n`` records, concatenated."""
    parts, sizes = [], []
    for b in range(batch_index, batch_index + count):
        lo = b * batch_size
        pos = np.arange(lo, min(lo + batch_size, n))
        if policy == "fill" and len(pos) < batch_size and n:
            pos = np.concatenate([pos, np.arange(lo + len(pos), lo + batch_size) % n])
        parts.append(pos)
        sizes.append(len(pos))
    return (np.concatenate(parts) if parts else np.zeros(0, np.int64)), sizes


def unsized_indices(batch_index: int, count: int, batch_size: int):
    """(sample indices, batch sizes) of a source without size: batch b has room for
    ``batch_size`` samples, indices ``b * batch_size + arange(batch_size)`` (distinct across the
    batches of an epoch)."""
    lo = batch_index * batch_size
    return np.arange(lo, lo + count * batch_size, dtype=np.int64), [batch_size] * count


def fit_to_fed(idx, pos, sizes, fed_sizes, where):
    """The schedule cut down to the fed batches. A fed batch's length sets its number of
    samples (and so of random draws): batch j of the launch fed n_j samples keeps the first n_j
    of the sample indices (and positions) the schedule gives it, so a full batch keeps them all
    and a shorter one (an iterable's last batch, a smaller feed) its first n_j. The schedule's
    size is the most a batch may hold (``batch_size``, or what a sized source's last batch and
    ``last_batch_policy`` leave): a fed batch longer than that would reuse another batch's
    indices, and raises ValueError (``where(j, n, room)`` words it). Launch batches after an
    iterable's last one are dropped."""
    for j, (n, room) in enumerate(zip(fed_sizes, sizes)):
        if n > room:
            raise ValueError(where(j, n, room))
    fed_sizes = list(fed_sizes[:len(sizes)])
    starts = np.concatenate([[0], np.cumsum(sizes)[:len(fed_sizes) - 1]]).astype(np.int64)
    out_off = np.concatenate([[0], np.cumsum(fed_sizes)]).astype(np.int64)
    keep = np.repeat(starts - out_off[:-1], fed_sizes) + np.arange(out_off[-1])
    return idx[keep], (None if pos is None else pos[keep]), fed_sizes
