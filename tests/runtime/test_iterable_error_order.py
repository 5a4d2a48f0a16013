"""An iterable external source that raises at its third batch: the two batches it made are
delivered first, and the error comes at the run() of the batch that failed (docs/bad-input.md).
Prefetch must not move the error earlier. CPU only.

The executor hands out the launches queued before the failing one first, then raises.
"""
import numpy as np
import pytest

from detaug import Pipeline, fn


class Boom(Exception):
    pass


class Source:
    """Each epoch: batches of k's, k = 0, 1, then Boom at the third."""

    def __iter__(self):
        for k in range(2):
            yield [np.full((4, 4, 3), k, np.uint8) for _ in range(2)]
        raise Boom("the source failed at batch 3")


@pytest.mark.parametrize("num_threads,depth", [(1, 2), (1, 4), (2, 2)])
def test_batches_before_the_failing_one_are_delivered(num_threads, depth):
    pipe = Pipeline(batch_size=2, num_threads=num_threads, seed=0, prefetch_queue_depth=depth)
    with pipe:
        pipe.set_outputs(fn.external_source(source=Source(), name="it"))
    try:
        for k in range(2):
            (out,) = pipe.run()
            assert [int(np.asarray(a)[0, 0, 0]) for a in out.data] == [k, k]
        with pytest.raises(Boom, match="batch 3"):
            pipe.run()
    finally:
        pipe.close()
