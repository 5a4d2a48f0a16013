"""Launches of several batches where a partner pool shares samples across batches
(runtime/partners.py ``samples_in_launch``, output_sizes.LaunchBytes.launch, the memory plan's
launch size, ring and depth counted in batches): a launch of k consecutive batches holds at a
pool's level at most k + (the pools' k) batches of samples, not k times a batch's; its working
memory and decoded images follow that, so the plan takes the largest of 4, 2, 1 batches a launch
that fits; pipelines whose launches share nothing (the detection pipeline, 'batch' and 'epoch'
partners) keep their plan. Hand-computed figures; on the CPU with the decode processes stood in
for (the build stops where they would start)."""
import json
import os
import sys

import numpy as np
import pytest

from detaug.runtime import partners
from detaug.runtime.gpu import memory_plan as mp
from detaug.runtime.gpu import output_sizes
from helpers import REPO, close_pipelines, fresh_seed, load_benchmark  # noqa: F401
from helpers.cases import BuildStopped, flat_pipe, plan_stops_build

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import bench_gpu  # noqa: E402  (the benchmark's data and detection pipeline)

IMAGE = 640 * 640 * 3  # one 640 x 640 uint8 image: the recipe's crop, mixup, hsv, letterbox


def test_samples_in_launch_hand_computed():
    # mosaic (4) then mixup (2), both from a pool of 1 batch back: the union of the windows
    # [(j0 - 2) B, (j0 + k) B), k + 2 batches, where 8 k without the pool's overlap
    assert [partners.samples_in_launch((8, 2), k) for k in (1, 2, 4, 8)] == [3, 4, 6, 10]
    assert [partners.samples_in_launch((8, None), k) for k in (1, 2, 4)] == [8, 16, 32]  # 'epoch'
    assert [partners.samples_in_launch((4, 0), k) for k in (1, 3)] == [1, 3]  # a pool of its batch
    assert partners.samples_in_launch((2, 5), 1) == 2  # the group bounds a short launch
    assert partners.samples_in_launch((1, None), 4) == 4  # the batches themselves


def _flat(k_pool, bsz, n=48, seed=5, mode="pool"):
    """helpers.cases.flat_pipe with mixup, built."""
    return flat_pipe(n, bsz, k_pool, partners=mode, mixup=True, seed=seed).build()


@pytest.mark.parametrize("k_pool", [1, 2])
def test_a_launch_holds_at_most_its_batches_and_the_pools(k_pool):
    """On the keyed draws of fresh seeds: every level of a launch of k batches holds at most
    B * samples_in_launch samples (distinct positions), the top level exactly its k B, and a
    launch of several batches needs fewer than its batches apart somewhere."""
    bsz, n = 4, 48
    pipe = _flat(k_pool, bsz, n, seed=fresh_seed())
    by_id = {op.id: op for op in pipe.graph.ops}
    paths = set(pipe.build_plan.levels.values())
    assert paths and partners.shares_across_batches(list(pipe.graph.ops), pipe.build_plan.levels)
    saved = 0
    for k in (1, 2, 3, 4):
        for first in range(0, n // bsz - k + 1):
            idx, pos, sizes = pipe.schedule.batches(0, first, k)
            lv = partners.LaunchLevels(pipe.graph, pipe.schedule, 0, idx, pos, sizes)
            assert len(lv.get(()).sample_index) == k * bsz
            for path in paths:
                shape = partners.level_shape(path, by_id)
                assert shape[1] == (k_pool * len(path))
                held = len(lv.get(path).sample_index)
                assert held <= bsz * partners.samples_in_launch(shape, k), (k, first, path)
                if k > 1:
                    apart = sum(len(partners.LaunchLevels(pipe.graph, pipe.schedule, 0,
                                                          *pipe.schedule.batches(0, first + j, 1))
                                    .get(path).sample_index) for j in range(k))
                    assert held <= apart
                    saved += apart - held
    assert saved > 0


def test_what_shares_across_batches():
    for mode, k_pool, want in (("pool", 1, True), ("pool", 0, False), ("batch", 1, False),
                               ("epoch", 1, False)):
        pipe = _flat(k_pool, 4, mode=mode)
        ops, levels = list(pipe.graph.ops), pipe.build_plan.levels
        assert partners.shares_across_batches(ops, levels) == want, (mode, k_pool)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("pool_plan"))
    bench_gpu.make_dataset(root, 8, 1)
    return root


def _recipe(root, mode, **kw):
    return load_benchmark("bench_yolo").detaug_pipe(root, 640, 64, "gpu", 0, mode, 0.5, **kw)


def test_the_recipes_launch_bytes_hand_computed(data):
    """bench_yolo's recipe, batch 64: held per output sample at the mixup's level (2 samples
    of a pool of 1 batch back: 1 + 1) the mosaic's 1,280 x 1,280 canvas and the cut 640 x 640
    (read by the mixup), at the top level the mixup's and the hsv's outputs. A launch of k
    batches holds k + 1 batches of the mixup's level, not 2 k."""
    for mode, shared in (("pool", True), ("batch", False), ("epoch", False)):
        pipe = _recipe(data, mode)
        with pipe:
            pass
        ops = pipe._needed_ops()
        levels = partners.plan_levels(ops, pipe._outputs)
        b = output_sizes.batch_bytes(ops, pipe._outputs, [[480, 640]], 64, levels)
        assert b.outputs == 64 * (IMAGE + output_sizes.BOX_BYTES)
        assert partners.shares_across_batches(ops, levels) == shared
        for k in (1, 2, 4, 8):
            out, work = b.launch(k)
            assert out == k * b.outputs
            if mode == "batch":  # partners from the batch itself: no level below the outputs
                want = 64 * k * (4 * IMAGE + IMAGE + IMAGE + IMAGE)
            else:
                mixup_level = min(2 * k, k + 1) if shared else 2 * k
                want = 64 * (mixup_level * (4 * IMAGE + IMAGE) + 2 * k * IMAGE)
            assert work == want, (mode, k)
            if k == 1:
                assert work == b.working
        if shared:  # 943.7 MB a batch; 2,595.2 MB a launch of 4 (3,774.9 as 4 launches)
            assert b.working == 943_718_400 and b.launch(4)[1] == 2_595_225_600
        assert partners.fan_out(ops, levels, 4) == (6 if shared else 32 if mode == "epoch" else 4)


@pytest.fixture
def fake_gpu(monkeypatch):
    """build() without a GPU: the decode processes stood in for; the plan's stop the build (its
    record is made by then)."""
    plan_stops_build(monkeypatch)
    for env in ("DETAUG_DEVICE_MEMORY_BUDGET", "DETAUG_DECODE_PROCESSES", "DETAUG_DECODE_THREADS",
                "DETAUG_PLAN_AHEAD", "DETAUG_EARLY_START", "DETAUG_EARLY_DECODE"):
        monkeypatch.delenv(env, raising=False)


def _decoded_bytes(root) -> int:
    """The decoded bytes of the data set's images (each 256-byte aligned, as the ring holds them)."""
    with open(os.path.join(root, "annotations.json")) as f:
        return sum(-(-im["height"] * im["width"] * 3 // 256) * 256 for im in json.load(f)["images"])


def _plan(pipe):
    try:
        pipe.build()
    except BuildStopped:
        pass
    return pipe.build_plan


def test_the_pool_recipe_takes_the_largest_launch_that_fits(data, fake_gpu):
    """The least the recipe runs with, by hand, for launches of k batches: one decode process
    (its context, a ring of 3 launches of decoded images: 2 of the queue, counted in batches,
    and one for random access; its decoders' part this process's early decoder with 2 launches
    of images), one launch being made (outputs, working) and two the caller holds. The plan
    takes 4 where that fits, else 2, else 1; at the default budget it is refused with k = 1's
    figure, as before."""
    every = _decoded_bytes(data)
    out = 64 * (IMAGE + output_sizes.BOX_BYTES)

    def need(k):
        images = 64 * min(8 * k, k + 2)         # the decoder's level: k + 2 batches of the pool
        launch = every * images // 8             # the data set's 8 images, repeated
        ring = -(-3 * launch // 2**20) * 2**20
        decoders = max(2 * mp.DECODER_BYTES, mp.DECODER_BYTES + 2 * launch)
        work = 64 * (min(2 * k, k + 1) * 5 * IMAGE + 2 * k * IMAGE)
        return mp.CONTEXT_BYTES + ring + decoders + 3 * k * out + work

    n1, n2, n4 = need(1), need(2), need(4)
    assert n1 < n2 < n4 < mp.BIG_BUDGET
    with pytest.raises(mp.BudgetError) as e:
        _plan(_recipe(data, "pool"))
    assert e.value.need == n1
    for budget, k, depth in ((n1, 1, 12), (n2 - 1, 1, 12), (n2, 2, 12), (n4 - 1, 2, 12), (n4, 4, 12)):
        bp = _plan(_recipe(data, "pool", budget=budget))
        assert (bp.batches_per_launch, bp.prefetch_queue_depth) == (k, depth), budget
        assert (bp.decode.launches, bp.decode.slots) == (2, 3)
        assert bp.launch_bytes() == (k * out, 64 * (min(2 * k, k + 1) * 5 + 2 * k) * IMAGE)
        if budget == need(k):  # the least: one decode process, nothing to spare
            assert bp.decode.processes == 1 and bp.output_slots == 1
            assert bp.decode.bytes + 3 * k * out + bp.launch_bytes()[1] == budget
    # (a budget just short of k = 2's least gives k = 1 a second decode process)
    assert _plan(_recipe(data, "pool", budget=n2 - 1)).decode.processes == 2
    # launches of 4 set by hand: the figure the refusal gives is k = 4's (it was 9.95 GB on the
    # benchmark's 1,024 images before the pool's overlap and the ring were counted in batches)
    with pytest.raises(mp.BudgetError) as e:
        _plan(_recipe(data, "pool", batches_per_launch=4))
    assert e.value.need == n4


def test_pipelines_that_share_nothing_keep_their_plan(data, fake_gpu):
    """The detection pipeline at the default budget: 2 decode processes of 2 threads, 12
    launches of one batch in flight; 'batch' and 'epoch' partners stay at one batch a launch
    at 8 GB (planned ahead: launches of several batches would save them nothing)."""
    bp = _plan(bench_gpu.make_det_pipe(data, "mixed", batch_size=64, seed=0))
    assert (bp.batches_per_launch, bp.prefetch_queue_depth, bp.device_workers) == (1, 12, 6)
    assert (bp.decode.processes, bp.decode.threads, bp.decode.launches) == (2, 2, 2)
    for mode in ("batch", "epoch"):
        bp = _plan(_recipe(data, mode, budget=8_000_000_000))
        assert bp.batches_per_launch == 1 and bp.prefetch_queue_depth >= 12, mode


def test_ring_depth_and_launch_size_rules():
    # the ring's launches counted in batches: 2 (4 from BIG_BUDGET) batches' worth, at least 2
    assert [mp.ring_launches(2.3e9, k) for k in (1, 2, 4, 8)] == [2, 2, 2, 2]
    assert [mp.ring_launches(8e9, k) for k in (1, 2, 3, 4, 8)] == [4, 2, 2, 2, 2]
    launch = 384 * 990_000  # a launch of 384 images of about 660 x 500
    p = mp.plan_decode(8_000_000_000, launch, processes=1, threads=2, batches=4)
    assert (p.launches, p.slots, p.ring_bytes) == (2, 3, -(-3 * launch // 2**20) * 2**20)
    # the largest of 4, 2, 1 that fits, for a pipeline that shares across batches
    assert mp.batches_per_launch(2.3e9, True, fits=lambda k: True) == 4
    assert mp.batches_per_launch(2.3e9, True, fits=lambda k: k <= 2) == 2
    assert mp.batches_per_launch(8e9, False, fits=lambda k: False) == 1
    asked = []
    mp.batches_per_launch(8e9, True, fits=lambda k: asked.append(k) or k == 1)
    assert asked == [4, 2]  # 1 is never asked: it is the least, refused by build itself


def test_a_ring_set_by_hand_bounds_the_launch(data, fake_gpu):
    """``decode_buffer_mb``: a launch of k batches is taken only where a ring slot (a third of
    the ring) holds its images: at 20 GB (launches of 4 by the budget alone), a ring whose
    slots hold the 192 images of k = 1 but not the 256 of k = 2 keeps launches of one batch;
    one holding the 384 of k = 4 takes 4."""
    every = _decoded_bytes(data)
    assert _plan(_recipe(data, "pool", budget=20_000_000_000)).batches_per_launch == 4
    for images, k in ((192, 1), (384, 4)):
        mib = -(-3 * every * images // 8 // 2**20)  # slots of at least `images` images
        assert mib * 2**20 // 3 < every * 256 // 8 or k > 1
        pipe = _recipe(data, "pool", budget=20_000_000_000)
        pipe.decode_buffer_mb = mib  # (bench_yolo's pipeline takes no decode_buffer_mb)
        bp = _plan(pipe)
        assert (bp.batches_per_launch, bp.decode.ring_bytes) == (k, mib << 20), images
