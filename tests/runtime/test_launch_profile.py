"""detaug/runtime/gpu/launch_profile.py: the report of launches' stage stamps (hand-computed),
and that a pipeline run with the profile on stamps its launches in stage order."""
import numpy as np
import pytest
from helpers import fresh_seed

from detaug.runtime.gpu import launch_profile as lp


def test_summary_hand_computed():
    # two launches over a span of 10 s: the first 0->4 s, the second 2->10 s
    a = {"submitted": 0.0, "picked": 1.0, "planned": 2.0, "popped": 4.0}
    b = {"submitted": 2.0, "picked": 2.5, "planned": 6.0, "popped": 10.0}
    text = lp.summary([a, b, {"submitted": 3.0}])  # (one not handed out: left out)
    assert text.startswith("2 launches, 6000.0 ms each in flight")  # (4 + 8) / 2
    assert "submitted->picked 750.00 ms (x0.1)" in text      # (1 + 0.5) / 2; 1.5 s of 10
    assert "picked->planned 2250.00 ms (x0.5)" in text       # (1 + 3.5) / 2; 4.5 s of 10
    assert "planned->popped 3000.00 ms (x0.6)" in text      # the stages between were not stamped
    assert "ring" not in text
    assert lp.summary([{"submitted": 1.0}]) == "no launch was handed out"


def test_stamps_are_off_by_default_and_keyed_by_owner(monkeypatch):
    monkeypatch.setattr(lp, "_marks", {})
    monkeypatch.setattr(lp, "ON", False)
    lp.mark(object(), 0, "submitted")
    assert lp._marks == {}
    monkeypatch.setattr(lp, "ON", True)
    x, y = object(), object()
    lp.mark(x, 0, "submitted")
    lp.mark(y, 0, "submitted")
    lp.mark(x, None, "popped")  # (no launch number: nothing)
    assert set(lp._marks) == {(id(x), 0), (id(y), 0)}


@pytest.mark.parametrize("seed", [0, fresh_seed()])
def test_stamp_order_follows_the_stages(monkeypatch, seed):
    monkeypatch.setattr(lp, "_marks", {})
    monkeypatch.setattr(lp, "ON", True)
    rng = np.random.default_rng(seed)
    owner = object()
    times = np.sort(rng.uniform(0, 1, len(lp.STAGES)))
    clock = iter(times)
    monkeypatch.setattr(lp.time, "perf_counter", lambda: next(clock))
    for st in lp.STAGES:
        lp.mark(owner, 7, st)
    m = lp._marks[(id(owner), 7)]
    assert [m[s] for s in lp.STAGES] == list(times)
    text = lp.summary([m])
    total = 1e3 * (times[-1] - times[0])
    assert f"{total:.1f} ms each in flight" in text
    for k, (a, b) in enumerate(zip(lp.STAGES, lp.STAGES[1:])):
        assert f"{a}->{b} {1e3 * (times[k + 1] - times[k]):.2f} ms" in text
