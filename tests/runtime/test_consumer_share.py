"""What the outputs' consumer takes of a GPU pipeline's budget (memory_plan.ConsumerShare),
declared to build: set aside first, the decode side and the output slots planned within the rest
(``BuildPlan.room``), refused with the figure where it does not fit, and the torch adapter's
share (its CUDA context and scratch; with list targets the masks it makes of polygons, a plane
of the canvas a box for each batch the caller holds) declared by ``DetaugIterator``. Checked on
the CPU against hand-computed figures (the decode processes stood in for: nothing starts)."""
import os
import sys
import warnings

import numpy as np
import pytest

from detaug.runtime import build_plan
from detaug.runtime.build_plan import BuildPlan
from detaug.runtime.executor import OutputSlots
from detaug.runtime.gpu import memory_plan as mp
from detaug.runtime.gpu import output_sizes
from detaug.runtime.gpu.output_budget import OutputBudget
from helpers import REPO, close_pipelines  # noqa: F401  (autouse fixture)
from helpers.cases import BuildStopped, plan_stops_build

sys.path.insert(0, os.path.join(REPO, "benchmarks"))
import gpu_common  # noqa: E402  (the instance-segmentation recipe of the benchmarks)

MASK = 1024 * 1024  # a mask plane of the recipe's 1024 x 1024 canvas


def test_share_and_refusal_hand_computed():
    share = mp.ConsumerShare(fixed=100, box_planes=True, what="X")
    lb = output_sizes.LaunchBytes(outputs=1000, working=0, planes=30)
    assert share.bytes(lb) == 100 + mp.CALLER_LAUNCHES * 30 and share.bytes(None) == 100
    assert mp.ConsumerShare(fixed=100).bytes(lb) == 100  # planes only where it makes them
    mp.check_budget(2_000, 400, "d", 500, 0, reserved=100)  # 400 + 3 x 500 + 100: fits
    with pytest.raises(mp.BudgetError) as e:
        mp.check_budget(2_000, 400, "d", 500, 0, reserved=101, reserved_what="the thing")
    assert e.value.need == 2_001 and "what the thing takes beside the pipeline" in str(e.value)
    # the output slots as launches are made: within the budget less the share
    plan = BuildPlan(seed=0, budget=2_000_000_000, reserved=300_000_000,
                     decode_bytes=500_000_000, prefetch_queue_depth=12)
    slots, budget = OutputSlots(1), OutputBudget(plan)
    budget.measured(6 * mp.POOL_CHUNK)  # launches of 201,326,592 bytes (6 of the pool's chunks)
    budget.after_launch_out(slots)
    assert plan.room == 1_700_000_000
    # (the caller's 2 launches and the one being freed, in the pool's chunks)
    chunks = 201_326_592
    assert budget.slots == slots.n == (1_700_000_000 - 500_000_000 - 3 * chunks) // chunks == 2


def test_a_consumer_declared_after_build_is_warned_of():
    share = mp.ConsumerShare(fixed=50_000_000, what="the adapter")
    gpu = BuildPlan(seed=0, budget=10**9, device_ops=("an op",))
    with pytest.warns(UserWarning, match="built before the adapter declared .*~50 MB"):
        build_plan.check_consumer(gpu, share)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_plan.check_consumer(BuildPlan(seed=0, budget=10**9, device_ops=("an op",),
                                            consumer=share, reserved=50_000_000), share)
        build_plan.check_consumer(BuildPlan(seed=0, budget=10**9), share)  # no GPU stage
        build_plan.check_consumer(gpu, None)


def _needed(pipe):
    with pipe:
        pass
    return pipe._needed_ops()


@pytest.mark.parametrize("mode", gpu_common.SEG_MODES)
def test_planes_of_the_boxes_a_consumer_rasterises(mode):
    """Polygons moved to the 1024 x 1024 canvas: a plane each box (2.5 boxes a sample here);
    masks made in the graph (fn.instance_masks) and plain boxes: none."""
    pipe = gpu_common.make_seg_pipe("x", "gpu", mode, batch_size=4)
    b = output_sizes.batch_bytes(_needed(pipe), pipe._outputs, [[480, 640]], 4,
                                 boxes_per_sample=2.5)
    assert b.planes == (4 * int(np.ceil(2.5 * MASK)) if mode == "polygons" else 0)
    if mode == "masks":  # (its masks are outputs: counted there, once)
        assert dict(b.parts)[pipe._outputs[1].name] == 4 * (output_sizes.BOX_BYTES + 2.5 * MASK)


@pytest.fixture(scope="module")
def seg_data(tmp_path_factory):
    return gpu_common.make_seg_dataset(str(tmp_path_factory.mktemp("seg")), 8, 1)


@pytest.fixture
def fake_gpu(monkeypatch):
    """build() without a GPU: the plans of the decode processes recorded; the build stops there."""
    log = plan_stops_build(monkeypatch)
    for var in ("DETAUG_DEVICE_MEMORY_BUDGET", "DETAUG_DECODE_PROCESSES", "DETAUG_DECODE_THREADS"):
        monkeypatch.delenv(var, raising=False)
    return log["plans"]


def _built(pipe, consumer=None):
    with pytest.raises(BuildStopped):
        pipe.build(consumer=consumer)
    return pipe.build_plan


def test_torch_iterator_declares_its_share_and_the_plan_keeps_within(seg_data, fake_gpu):
    torch_adapter = pytest.importorskip("detaug.adapters.torch")
    pytest.importorskip("torch")
    plain = _built(gpu_common.make_seg_pipe(seg_data, "gpu", "polygons"))
    assert plain.reserved == 0 and plain.room == mp.DEFAULT_BUDGET
    pipe = gpu_common.make_seg_pipe(seg_data, "gpu", "polygons")
    with pytest.raises(BuildStopped):  # (the iterator builds the pipeline, declaring its share)
        torch_adapter.DetaugIterator(pipe, output_map=["images", "targets"], boxes_format="list")
    bp = pipe.build_plan
    b = bp.batch_bytes
    per_sample = build_plan.boxes_per_sample(pipe._sources)
    assert b.planes == 16 * int(np.ceil(per_sample * MASK))
    fixed = torch_adapter.TORCH_CONTEXT_BYTES + (16 << 20) + (8 << 20)
    assert bp.reserved == fixed + 2 * b.planes and bp.room == mp.DEFAULT_BUDGET - bp.reserved
    assert "torch adapter" in bp.consumer.what and "masks it makes" in bp.consumer.what
    # the decode side within the decode share of what is left, the slots after it
    out, pool = b.outputs, mp.pool_bytes(b.outputs)  # (as the pool takes them: whole chunks)
    assert bp.decode.bytes <= mp.decode_cap(bp.room, out, b.working) < plain.decode.bytes
    held = mp.CALLER_LAUNCHES + mp.FREEING_LAUNCHES
    assert bp.decode.bytes + (held + bp.output_slots) * pool <= bp.room
    assert bp.output_slots == min(bp.prefetch_queue_depth, (bp.room - bp.decode.bytes - held * pool)
                                  // (pool + b.working))
    assert [(p, t) for p, t in fake_gpu] == [(plain.decode.processes, plain.decode.threads),
                                             (bp.decode.processes, bp.decode.threads)]
    # boxes only: no masks made, the fixed part alone
    boxes = gpu_common.make_seg_pipe(seg_data, "gpu", "boxes")
    assert _built(boxes, torch_adapter.consumer_share("list")).reserved == fixed


def test_a_budget_the_share_does_not_leave_room_in_is_refused_with_the_figure(seg_data, fake_gpu):
    share = mp.ConsumerShare(fixed=150_000_000, what="the consumer here")
    with pytest.raises(mp.BudgetError) as e:  # the least the recipe runs with, alone
        gpu_common.make_seg_pipe(seg_data, "gpu", "masks", device_memory_budget=10**8).build()
    alone = e.value.need
    _built(gpu_common.make_seg_pipe(seg_data, "gpu", "masks", device_memory_budget=alone))
    with pytest.raises(mp.BudgetError) as e:
        gpu_common.make_seg_pipe(seg_data, "gpu", "masks", device_memory_budget=alone).build(
            consumer=share)
    assert e.value.need == alone + 150_000_000
    assert "what the consumer here takes beside the pipeline (150 MB)" in str(e.value)
    bp = _built(gpu_common.make_seg_pipe(seg_data, "gpu", "masks", device_memory_budget=e.value.need),
                share)
    assert bp.reserved == 150_000_000 and bp.room == alone
