"""detaug.runtime.batch_making (how a Pipeline makes a launch's batches) and build_plan: the number of
host worker processes build decides (argument, DETAUG_HOST_PROCESSES, the default from num_threads, refusals
where workers cannot run), iter_setup called once per batch of a launch so that feed_input gives
each batch its own data, and a fed source with nothing fed named in the error."""
import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core.errors import NotFed
from detaug.runtime import build_plan, host_workers
from helpers import close_pipelines, track  # noqa: F401  (autouse fixture)


def values(batch):
    """The first value of each sample of an output (a dense array or a TensorList)."""
    return [int(np.asarray(v).ravel()[0]) for v in (batch.as_array() if hasattr(batch, "as_array") else batch)]


def counting_pipe(num_threads=1, host_processes=None, size=6):
    p = track(Pipeline(batch_size=2, num_threads=num_threads, seed=0, host_processes=host_processes))
    with p:
        x = fn.external_source(source=lambda info: np.array([info.idx_in_epoch], np.int64),
                               batch=False, size=size)
        p.set_outputs(x)
    return p


@pytest.mark.parametrize("threads,env,want", [(1, None, 0), (4, "0", 0), (1, "0", 0)])
def test_host_processes_resolved_from_threads_and_environment(monkeypatch, threads, env, want):
    if env is None:
        monkeypatch.delenv("DETAUG_HOST_PROCESSES", raising=False)
    else:
        monkeypatch.setenv("DETAUG_HOST_PROCESSES", env)
    p = counting_pipe(num_threads=threads)
    p.build()
    assert p.host_processes == want
    assert values(p.run()[0]) == [0, 1]


def test_default_is_one_worker_per_thread_where_workers_can_run(monkeypatch):
    monkeypatch.delenv("DETAUG_HOST_PROCESSES", raising=False)
    monkeypatch.setattr(host_workers, "unavailable", lambda: None)
    p = counting_pipe(num_threads=3)
    # decided at build from the arguments (detaug/runtime/build_plan.py)
    assert build_plan.host_processes(p._settings(), False, False) == 3
    monkeypatch.setenv("DETAUG_HOST_PROCESSES", "2")
    assert build_plan.host_processes(p._settings(), False, False) == 2
    monkeypatch.setenv("DETAUG_HOST_PROCESSES", "-4")  # clamped
    assert build_plan.host_processes(p._settings(), False, False) == 0


def test_workers_that_cannot_run_are_refused_when_asked_for_else_threads(monkeypatch):
    monkeypatch.delenv("DETAUG_HOST_PROCESSES", raising=False)
    monkeypatch.setattr(host_workers, "unavailable", lambda: "no fork here")
    p = counting_pipe(num_threads=2, host_processes=2)
    with pytest.raises(ValueError, match=r"host_processes=2: no fork here; leave it unset"):
        p.build()
    p = counting_pipe(num_threads=2)  # the default falls back
    assert build_plan.host_processes(p._settings(), False, False) == 0


class Fed(Pipeline):
    """feed_input in iter_setup: batch k of the run is fed [10 k, 10 k + 1]."""

    def __init__(self, **kw):
        super().__init__(batch_size=2, num_threads=1, seed=0, **kw)
        self.calls = 0
        with self:
            self.x = fn.external_source(name="x")
            self.set_outputs(self.x)

    def iter_setup(self):
        k = self.calls
        self.calls += 1
        self.feed_input(self.x, [np.array([10 * k], np.int64), np.array([10 * k + 1], np.int64)])


@pytest.mark.parametrize("per_launch", [1, 3])
def test_iter_setup_runs_once_per_batch_and_each_batch_gets_its_own_feed(per_launch):
    p = track(Fed(batches_per_launch=per_launch))
    got = [values(p.run()[0]) for _ in range(3)]
    assert got == [[0, 1], [10, 11], [20, 21]]  # in feeding order
    assert p.calls >= 3  # (and ahead: the prefetched launches were fed too)


def test_a_fed_source_with_nothing_fed_is_named():
    p = track(Pipeline(batch_size=2, num_threads=1, seed=0))
    with p:
        x = fn.external_source(name="pixels")
        p.set_outputs(x)
    with pytest.raises(NotFed, match=r"pixels: no data fed; call pipe.feed_input\(\)"):
        p.run()
