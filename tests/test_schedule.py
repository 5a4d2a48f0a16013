"""detaug.schedule: the epoch's batches, hand-computed."""
import numpy as np
import pytest

from detaug import schedule as S


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
