"""detaug.runtime.build_plan: what build decides is one frozen record made by one function of the
graph, the sources, the seed, the budget and the settings, with no step depending on another
having run on the pipeline first: called again on the same arguments it gives an equal record,
and the pipeline's figures (``batches_per_launch``, ``prefetch_queue_depth``, ...) are read off
it. (The GPU figures: tests/runtime/test_memory_plan.py and test_plan_ahead.py, through build.)"""
import dataclasses

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.runtime import build_plan, partners
from helpers import close_pipelines, fresh_seed, track  # noqa: F401  (autouse fixture)


def _pipe(seed, **kw):
    p = track(Pipeline(batch_size=2, num_threads=1, seed=seed, **kw))
    with p:
        x = fn.external_source(source=lambda info: np.full((4, 4, 3), info.idx_in_epoch, np.uint8),
                               batch=False, size=6)
        p.set_outputs(fn.flip(x, horizontal=fn.random.coin_flip()))
    return p


def test_the_record_is_frozen_and_read_by_the_pipelines_figures():
    seed = fresh_seed()
    p = _pipe(seed, prefetch_queue_depth=3, batches_per_launch=2, device_memory_budget="1GB")
    before = p.build_plan
    assert (before.seed, before.budget, before.host_ops) == (seed, 10**9, ())
    assert (p.prefetch_queue_depth, p.batches_per_launch, p.device_workers) == (3, 2, 3)
    p.build()
    bp = p.build_plan
    with pytest.raises(dataclasses.FrozenInstanceError):
        bp.batches_per_launch = 4
    assert bp.seed == seed and bp.budget == 10**9 and not bp.has_device_stage
    names = [op.schema.name for op in bp.host_ops]
    assert names[0] == "external_source" and "flip" in names and bp.device_ops == ()
    assert (p.prefetch_queue_depth, p.batches_per_launch, p.host_processes) == (3, 2, 0)
    assert not p.plan_ahead and bp.ahead.rest_ops == () and p.memory_plan is None


def test_decide_is_a_function_of_its_arguments():
    p = _pipe(5)
    p.build()
    args = (p._needed_ops(), p._outputs, p._sources)
    levels, decode_level = partners.setup(p._needed_ops(), p._outputs, True)
    kw = dict(levels=levels, decode_level=decode_level)
    one = build_plan.decide(*args, seed=5, budget=p.device_memory_budget, settings=p._settings(), **kw)
    two = build_plan.decide(*args, seed=5, budget=p.device_memory_budget, settings=p._settings(), **kw)
    assert one == two == p.build_plan
    other = build_plan.decide(*args, seed=9, budget=123, settings=dataclasses.replace(
        p._settings(), batches_per_launch=3, prefetch_queue_depth=5), **kw)
    assert (other.seed, other.budget, other.batches_per_launch, other.prefetch_queue_depth,
            other.device_workers) == (9, 123, 3, 5, 5)
    assert p.build_plan == one  # the pipeline's record untouched
