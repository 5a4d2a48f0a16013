"""The schedule of an epoch: which records (and how many) each batch holds. Pure functions of
sizes and policies, shared by the pipeline's launches and its random access (``run_batch``).

Shards: every epoch order is cut into contiguous parts, one a shard, that a shard policy evens
out ('pad' by default, so that every rank of a data-parallel run takes the same number of
steps: :func:`shard_positions`). Sources with a size give batches from the shard's epoch order;
``last_batch_policy`` decides the last one: 'partial' (shorter), 'fill' (wraps around to the
start of the order), 'drop' (left out). Sources fed whole batches (an iterable, ``feed_input``)
set each batch's length themselves: :func:`fit_to_fed`.
"""
from __future__ import annotations

import numpy as np


PAD = "pad"  # every shard padded to the largest one's length (DALI's pad_last_batch)
SHARD_POLICIES = (PAD, "drop", "uneven")


def check_shard_policy(policy, what: str = "shard policy") -> str:
    """``policy`` if it is one of :data:`SHARD_POLICIES`, else a ValueError naming ``what``."""
    if policy not in SHARD_POLICIES:
        raise ValueError(f"{what} must be one of {SHARD_POLICIES}, not {policy!r}")
    return policy


def shard_positions(n: int, shard_id: int, num_shards: int, policy: str = "pad") -> np.ndarray:
    """Positions in the epoch order (of ``n`` records) that shard ``shard_id`` of ``num_shards``
    reads, in its order. Shard k owns the contiguous part ``[k * n // num_shards, (k + 1) * n //
    num_shards)``; the parts are disjoint, cover the order once and differ in size by at most
    one. ``policy`` makes every shard as long as the others, so that every rank of a
    data-parallel run takes the same number of steps:

    - ``'pad'``: every shard holds ``ceil(n / num_shards)`` positions; a shorter part repeats its
      own first position(s) (a part with none, when ``n < num_shards``, the first of the epoch
      order). The epoch is the dataset once plus ``ceil(n / num_shards) * num_shards - n``
      repeats (fewer than ``num_shards``).
    - ``'drop'``: every shard holds ``n // num_shards`` positions, the first of its part; the
      last position of each longer part is left out of that epoch (``n % num_shards`` records,
      other ones every epoch when the order is shuffled).
    - ``'uneven'``: the part as it is (DALI's readers without ``pad_last_batch``): sizes differ
      by one where ``num_shards`` does not divide ``n``, and so may the step counts.
    """
    check_shard_policy(policy)
    if not 0 <= shard_id < num_shards:
        raise ValueError(f"shard_id {shard_id} not in [0, {num_shards})")
    lo, hi = shard_id * n // num_shards, (shard_id + 1) * n // num_shards
    own = np.arange(lo, hi, dtype=np.int64)
    if policy == "uneven":
        return own
    if policy == "drop":
        return own[:n // num_shards]
    short = -(-n // num_shards) - len(own)
    if short == 0:
        return own
    base = own if len(own) else np.arange(n, dtype=np.int64)
    return np.concatenate([own, base[np.arange(short) % len(base)]])


def shard_size(n: int, shard_id: int, num_shards: int, policy: str = "uneven") -> int:
    """Records that shard ``shard_id`` of ``num_shards`` reads per epoch of ``n`` records under
    ``policy`` (see :func:`shard_positions`): ``ceil(n / num_shards)`` for 'pad',
    ``n // num_shards`` for 'drop', the contiguous part's size for 'uneven'."""
    check_shard_policy(policy)
    if policy == "pad":
        return -(-n // num_shards)
    if policy == "drop":
        return n // num_shards
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
