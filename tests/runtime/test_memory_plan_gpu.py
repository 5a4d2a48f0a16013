"""The device memory budget on the GPU (issue 32): the benchmark's RetinaNet input pipeline
(benchmarks/bench_gpu.py make_det_pipe(retinanet=True)) stays within its budget, measured with
cudaMemGetInfo (the whole device: this process and its decode processes), and a pipeline that
cannot fit is refused at build before it takes any device memory."""
import gc
import os
import sys

import pytest

from helpers import close_pipelines  # noqa: F401  (autouse fixture)

pytestmark = pytest.mark.gpu

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import bench_gpu  # noqa: E402

BATCHES = 60


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("det"))
    bench_gpu.make_dataset(root, 256, 2)
    return root


def _free(sync=True):
    import cupy as cp

    if sync:
        cp.cuda.runtime.deviceSynchronize()
    return cp.cuda.runtime.memGetInfo()[0]


def _settle():
    """This process's context up and its pool empty, so the drop measured is the pipeline's."""
    import cupy as cp

    cp.zeros(1).sum()
    gc.collect()
    cp.get_default_memory_pool().free_all_blocks()
    return _free()


@pytest.mark.parametrize("batch_size", [16])  # 32: 1,002 MB a batch, refused (2 x 1,002 + decode)
def test_retinanet_within_the_default_budget(data, batch_size, monkeypatch):
    from detaug.runtime.gpu import memory_plan

    monkeypatch.delenv("DETAUG_DEVICE_MEMORY_BUDGET", raising=False)
    before = _settle()
    pipe = bench_gpu.make_det_pipe(data, "mixed", retinanet=True, batch_size=batch_size,
                                   device_id=0, seed=0)
    pipe.build()
    lowest = _free()
    try:
        for _ in range(BATCHES):  # each batch dropped before the next is asked for (the plan
            # counts one batch in the caller's hands: memory_plan.minimum_outputs)
            try:
                out = pipe.run()
            except StopIteration:  # (16 batches an epoch)
                pipe.reset()
                out = pipe.run()
            assert out[3].shape == (batch_size, 76_725, 81)
            del out
            lowest = min(lowest, _free(sync=False))  # (allocations show without a sync)
        lowest = min(lowest, _free())
        drop = before - lowest
        budget = memory_plan.DEFAULT_BUDGET
        import cupy as cp

        pool = cp.get_default_memory_pool()
        assert drop <= budget, (
            f"{drop / 1e6:,.0f} MB over {BATCHES} batches at a {budget / 1e6:,.0f} MB budget; "
            f"plan {pipe.memory_plan.describe()}, launch outputs {pipe._launch_out_bytes / 1e6:,.0f}"
            f" MB, output slots {pipe.output_slots} (peak {pipe.output_slots_peak}), cupy pool "
            f"{pool.total_bytes() / 1e6:,.0f} MB ({pool.used_bytes() / 1e6:,.0f} in use), "
            f"batches held at once {pipe._handed.peak}")
    finally:
        pipe.close()


def test_retinanet_batch_64_refused_at_the_default_budget(data, monkeypatch):
    from detaug.runtime.gpu.memory_plan import BudgetError

    monkeypatch.delenv("DETAUG_DEVICE_MEMORY_BUDGET", raising=False)
    before = _settle()
    pipe = bench_gpu.make_det_pipe(data, "mixed", retinanet=True, batch_size=64, device_id=0, seed=0)
    # 2 x 2,004 MB of outputs, the pool's slack (1,591 MB of one-hot labels) and the decode side
    with pytest.raises(BudgetError, match=r"device_memory_budget='6\.\dGB'"):
        pipe.build()
    # refused, and the decode processes started early closed: nothing held (a few MB of slack
    # for the driver)
    assert before - _free() < 32_000_000
    assert pipe._decode_service is None
