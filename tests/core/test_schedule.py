"""detaug.core.schedule: the epoch's batches, hand-computed."""
import numpy as np
import pytest

from detaug.core import schedule as S


def test_shards_cover_the_records_once():
    for n, ns in ((40, 3), (7, 7), (5, 2), (100, 8)):
        sizes = [S.shard_size(n, k, ns) for k in range(ns)]
        assert sum(sizes) == n and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("policy,count,last", [("partial", 3, [8, 9]), ("fill", 3, [8, 9, 0, 1]),
                                               ("drop", 2, None)])
def test_last_batch_policy(policy, count, last):
    assert S.batches_per_epoch(10, 4, policy) == count
    pos, sizes = S.batch_positions(10, 2, 1, 4, policy)
    if last is None:
        assert S.batches_per_epoch(10, 4, policy) == 2
    else:
        assert pos.tolist() == last and sizes == [len(last)]
    pos, sizes = S.batch_positions(10, 0, 2, 4, policy)
    assert pos.tolist() == list(range(8)) and sizes == [4, 4]


def test_fit_to_fed_keeps_the_first_indices_of_each_batch():
    idx, sizes = S.unsized_indices(3, 2, 4)
    assert idx.tolist() == [12, 13, 14, 15, 16, 17, 18, 19] and sizes == [4, 4]
    got, pos, fed = S.fit_to_fed(idx, None, sizes, [2, 3], lambda *a: "too long")
    assert got.tolist() == [12, 13, 16, 17, 18] and pos is None and fed == [2, 3]
    got, pos, fed = S.fit_to_fed(idx, np.arange(8), sizes, [4], lambda *a: "too long")
    assert got.tolist() == [12, 13, 14, 15] and pos.tolist() == [0, 1, 2, 3] and fed == [4]
    with pytest.raises(ValueError, match="batch 1: 5 > 4"):
        S.fit_to_fed(idx, None, sizes, [4, 5], lambda j, n, room: f"batch {j}: {n} > {room}")


@pytest.mark.parametrize("kw", [dict(batch_size=0), dict(batch_size=-3), dict(num_threads=0)])
def test_pipeline_refuses_empty_batches_and_no_threads(kw):
    from detaug import Pipeline

    with pytest.raises(ValueError, match="must be at least 1"):
        Pipeline(**kw)


# ---- shard policies (equal steps on every rank) ----------------------------------------------------
def test_shard_positions_hand_computed():
    """40 records, 3 shards: parts [0, 13), [13, 26), [26, 40)."""
    pad = [S.shard_positions(40, k, 3, "pad").tolist() for k in range(3)]
    assert pad == [list(range(13)) + [0], list(range(13, 26)) + [13], list(range(26, 40))]
    drop = [S.shard_positions(40, k, 3, "drop").tolist() for k in range(3)]
    assert drop == [list(range(13)), list(range(13, 26)), list(range(26, 39))]
    uneven = [S.shard_positions(40, k, 3, "uneven").tolist() for k in range(3)]
    assert uneven == [list(range(13)), list(range(13, 26)), list(range(26, 40))]
    # fewer records than shards: an empty part repeats the start of the epoch order
    assert [S.shard_positions(2, k, 3, "pad").tolist() for k in range(3)] == [[0], [0], [1]]
    assert [S.shard_positions(2, k, 3, "drop").tolist() for k in range(3)] == [[], [], []]
    assert S.shard_positions(0, 0, 2, "pad").tolist() == []


@pytest.mark.parametrize("policy", ["pad", "drop"])
def test_even_shards_take_the_same_steps_and_cover_the_epoch(policy, rng):
    for n, ns in [(40, 3), (17, 2), (1, 4), (99, 8)] + [tuple(rng.integers(1, 60, 2)) for _ in range(30)]:
        n, ns = int(n), int(ns)
        parts = [S.shard_positions(n, k, ns, policy) for k in range(ns)]
        lengths = {len(p) for p in parts}
        assert lengths == {-(-n // ns) if policy == "pad" else n // ns}, (n, ns)
        assert all(S.shard_size(n, k, ns, policy) == len(p) for k, p in enumerate(parts))
        own = [p[:S.shard_size(n, k, ns, "uneven")] for k, p in enumerate(parts)]
        if policy == "pad":  # the parts, disjoint and the whole order, then the repeats
            assert sorted(np.concatenate(own).tolist()) == list(range(n)), (n, ns)
            repeats = np.concatenate([p[len(o):] for p, o in zip(parts, own)])
            assert len(repeats) == -(-n // ns) * ns - n
        else:  # disjoint, n % ns left out
            flat = np.concatenate(parts).tolist()
            assert len(set(flat)) == len(flat) == n - n % ns
        for b in (1, 3, 8):
            for last in ("fill", "drop", "partial"):
                steps = {S.batches_per_epoch(len(p), b, last) for p in parts}
                assert len(steps) == 1, (n, ns, b, last, policy)


def test_uneven_shards_can_differ_in_steps():
    """What 'pad' and 'drop' are for: 17 records on 2 ranks in batches of 8 give 1 and 2 steps."""
    sizes = [S.shard_size(17, k, 2, "uneven") for k in range(2)]
    assert sizes == [8, 9]
    assert [S.batches_per_epoch(s, 8, "fill") for s in sizes] == [1, 2]
    assert [S.batches_per_epoch(S.shard_size(17, k, 2, "pad"), 8, "fill") for k in range(2)] == [2, 2]
    assert [S.batches_per_epoch(S.shard_size(17, k, 2, "drop"), 8, "fill") for k in range(2)] == [1, 1]


def test_shard_policy_is_checked():
    with pytest.raises(ValueError, match="shard policy must be one of"):
        S.shard_positions(10, 0, 2, "even")
    with pytest.raises(ValueError, match="shard_id 2 not in"):
        S.shard_positions(10, 2, 2)
    from detaug import Pipeline

    with pytest.raises(ValueError, match="shard_policy must be one of"):
        Pipeline(shard_policy="repeat")
