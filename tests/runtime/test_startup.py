"""Start-up (detaug/runtime/startup.py, the first launch of runtime/executor.py, the early decode
processes): the timeline's phases exist and are in order (no durations are asserted), the new
start order gives the same batches as threads, random access and resume still hold, a spawned
child does not run the main script again, and the list of kernels to load ahead."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import detaug
from detaug import fn
from detaug.runtime import startup
from detaug.runtime.host_workers import HostWorkers, unavailable

from helpers import VOC as VOC_MINI

needs_workers = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


def det_pipe(host_processes, num_threads=2, seed=5, device="cpu"):
    pipe = detaug.Pipeline(batch_size=4, num_threads=num_threads, seed=seed,
                           host_processes=host_processes, **({"device_id": 0} if device != "cpu" else {}))
    with pipe:
        enc, boxes = fn.readers.voc(root=VOC_MINI, random_shuffle=True)
        img = fn.decoders.image(enc, device=device)
        img, boxes = fn.random_iou_crop(img, boxes)
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        img, boxes = fn.resize(img, boxes, size=(64, 80))
        pipe.set_outputs(img, boxes)
    return pipe


def host(batch):
    img = batch[0].data if hasattr(batch[0], "data") else batch[0]
    on_host = lambda a: a.get() if hasattr(a, "get") else np.asarray(a)  # noqa: E731 (cupy or numpy)
    return tuple(on_host(a) for a in (img, batch[1].boxes, batch[1].labels, batch[1].offsets))


def assert_same(a, b):
    for x, y in zip(host(a), host(b)):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)


def first_batches(pipe, n=3):
    try:
        return [pipe.run() for _ in range(n)], pipe.stats["startup"]
    finally:
        pipe.close()


def spans(phases):
    return {p["phase"]: (p["start"], p["end"]) for p in phases}


@pytest.fixture(scope="module")
def reference():
    return first_batches(det_pipe(0, num_threads=1))[0]


@needs_workers
def test_first_launch_here_then_workers_same_batches_and_ordered_phases(reference):
    """host_processes=2: the first launch is made in this process's threads while the workers
    wait; batches equal those of one thread, and the timeline says so in order."""
    got, phases = first_batches(det_pipe(2))
    for a, b in zip(reference, got):
        assert_same(a, b)
    s = spans(phases)
    for name in ("import", "build", "build.graph", "build.readers", "build.plan",
                 "run.host_workers", "first_launch.host", "first_batch"):
        assert name in s, name
    assert "interpreter" in s or not sys.platform.startswith("linux")
    assert all(a <= b for a, b in s.values())
    assert s["import"][1] <= s["build"][0]
    assert s["build.graph"][1] <= s["build.readers"][0] <= s["build.readers"][1] <= s["build.plan"][0]
    assert s["build"][0] <= s["build.graph"][0] and s["build.plan"][1] <= s["build"][1]
    assert s["build"][1] <= s["run.host_workers"][0]
    assert s["run.host_workers"][1] <= s["first_launch.host"][0]
    assert s["first_launch.host"][1] <= s["first_batch"][1]
    assert s["first_batch"][0] == s["build"][0]
    assert phases[-1]["phase"] == "first_batch"
    assert [p["start"] for p in phases[:-1]] == sorted(p["start"] for p in phases[:-1])
    # no GPU phase on a CPU pipeline
    assert not [n for n in s if "decode_processes" in n or n in ("build.cuda", "first_launch.device")]


@needs_workers
def test_first_launch_over_as_many_threads_as_workers(reference):
    """host_processes=3 with one host thread: the first launch's samples go over 3 threads of
    this process (detaug/runtime/executor.py); the same batches."""
    got, phases = first_batches(det_pipe(3, num_threads=1))
    for a, b in zip(reference, got):
        assert_same(a, b)
    assert "first_launch.host" in spans(phases)


def test_threads_pipeline_has_its_first_launch_timed(reference):
    got, phases = first_batches(det_pipe(0, num_threads=2))
    for a, b in zip(reference, got):
        assert_same(a, b)
    s = spans(phases)
    assert "run.host_workers" not in s
    assert s["build"][1] <= s["first_launch.host"][0] <= s["first_launch.host"][1] <= s["first_batch"][1]


@needs_workers
def test_random_access_first_and_resume_with_held_workers(reference):
    """A pipeline whose first call is random access lets its workers go (nothing of this process
    to wait for); resume from a state starts with a first launch made here, at the right batch."""
    pipe = det_pipe(2)
    try:
        assert_same(reference[2], pipe.run_batch(2))
        assert_same(reference[0], pipe.run())
        state = pipe.state_dict()
    finally:
        pipe.close()
    resumed = det_pipe(2)
    try:
        resumed.load_state_dict(state)
        assert_same(reference[1], resumed.run())
        assert_same(reference[2], resumed.run())
        assert "first_launch.host" in spans(resumed.stats["startup"])
    finally:
        resumed.close()


def _square(key, prepared):
    return {"key": key, "x": np.full(3, prepared * prepared)}


@needs_workers
def test_held_tasks_go_out_in_order_and_cancelled_ones_are_dropped():
    w = HostWorkers(2, _square, hold=True)
    try:
        assert w.holding
        futs = [w.submit((0, k, 1), k) for k in range(5)]
        assert futs[2].cancel()  # (held: still pending)
        w.release()
        assert not w.holding
        late = w.submit((0, 5, 1), 5)
        for k, f in enumerate(futs + [late]):
            if k == 2:
                assert f.cancelled()
                continue
            r = f.result(timeout=60)
            assert r["key"] == (0, k, 1) and np.array_equal(r["x"], np.full(3, k * k))
        assert all(not wk.pending for wk in w.workers)
    finally:
        w.close()


def test_spawned_child_does_not_run_the_main_script_again(tmp_path):
    """startup.without_main: a spawn child started inside it does not import the main script
    as __mp_main__ (one started outside does: the control)."""
    mark = tmp_path / "imported"
    script = tmp_path / "main_script.py"
    script.write_text(textwrap.dedent(f"""
        import multiprocessing as mp
        import os
        if __name__ != "__main__":
            with open({str(mark)!r}, "a") as f:
                f.write(__name__ + "\\n")
        from detaug.runtime.startup import without_main

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            p = ctx.Process(target=os.getpid)
            with without_main():
                p.start()
            p.join()
            assert p.exitcode == 0, p.exitcode
            assert not os.path.exists({str(mark)!r})
            assert __file__.endswith("main_script.py")  # given back
            q = ctx.Process(target=os.getpid)
            q.start()
            q.join()
            print("ok")
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    assert mark.read_text().split() == ["__mp_main__"]  # the control's child only


def test_kernel_list_notes_each_module_once(tmp_path, monkeypatch):
    from detaug.kernels import launch

    path = tmp_path / "k" / "kernels.json"
    monkeypatch.setenv("DETAUG_KERNEL_LIST", str(path))
    monkeypatch.setattr(launch, "_noted", set())
    launch._note("warp.cu", "warp_a", ("-std=c++17",))
    launch._note("warp.cu", "warp_b", ("-std=c++17",))  # same module: not listed again
    launch._note("boxes.cu", "pad_boxes", ("-std=c++17", "-O3"))
    monkeypatch.setattr(launch, "_noted", set())  # (another process)
    launch._note("warp.cu", "warp_c", ("-std=c++17",))
    assert json.loads(path.read_text()) == [["warp.cu", "warp_a", ["-std=c++17"]],
                                            ["boxes.cu", "pad_boxes", ["-std=c++17", "-O3"]]]
    assert launch._read_list(str(path))[1] == ("boxes.cu", "pad_boxes", ("-std=c++17", "-O3"))
    monkeypatch.setenv("DETAUG_KERNEL_LIST", str(tmp_path / "none.json"))
    assert launch.preload(0) is None  # nothing listed: no thread
    monkeypatch.setenv("DETAUG_KERNEL_LIST", "")
    assert launch.kernel_list_path() is None


def test_timeline_records_each_phase_once_and_tables():
    tl = startup.Timeline()
    tl.record("b", tl.origin + 2.0, tl.origin + 3.0)
    tl.record("a", tl.origin + 1.0, tl.origin + 1.5)
    tl.record("a", tl.origin + 5.0, tl.origin + 6.0)  # recorded once: the first
    tl.begin("open")  # not ended: not listed
    tl.record("first_batch", tl.origin + 0.5, tl.origin + 4.0)
    got = [p for p in tl.as_list() if p["phase"] not in ("interpreter", "import")]
    assert [(p["phase"], p["start"], p["end"], p["seconds"]) for p in got] == [
        ("a", 1.0, 1.5, 0.5), ("b", 2.0, 3.0, 1.0), ("first_batch", 0.5, 4.0, 3.5)]
    lines = startup.table(got).splitlines()
    assert lines[0].split() == ["phase", "start", "s", "end", "s", "seconds"]
    assert lines[1].split() == ["a", "1.000", "1.500", "0.500"]


@pytest.mark.gpu
def test_mixed_pipeline_decode_processes_start_before_the_index_same_batches(monkeypatch):
    """device='mixed': the decode processes are spawned before the readers index and connected
    after this process's CUDA; the batches equal those of processes started after the index
    (DETAUG_EARLY_START=0)."""
    pytest.importorskip("nvidia.nvimgcodec")
    # (the first launches decoded here while they come up: tests/runtime/test_early_decode.py)
    monkeypatch.setenv("DETAUG_EARLY_DECODE", "0")
    early, phases = first_batches(det_pipe(None, device="mixed"))
    s = spans(phases)
    for name in ("build.gpu_check", "build.decode_processes.spawn", "build.cuda_context",
                 "build.readers", "build.decode_processes", "build.cuda",
                 "build.decode_processes.ready", "first_launch.device", "first_launch.decode",
                 "first_launch.outputs", "first_batch"):
        assert name in s, name
    assert (s["first_launch.device"][0] <= s["first_launch.decode"][0] <= s["first_launch.decode"][1]
            <= s["first_launch.outputs"][0] <= s["first_launch.outputs"][1] <= s["first_launch.device"][1])
    assert s["build.decode_processes.spawn"][1] <= s["build.readers"][0]
    assert s["build.decode_processes.spawn"][1] <= s["build.cuda_context"][0] <= s["build.cuda"][1]
    assert s["build.cuda"][1] <= s["build.decode_processes.ready"][0]
    assert s["build.decode_processes.ready"][1] <= s["build"][1] <= s["first_launch.device"][0]
    monkeypatch.setenv("DETAUG_EARLY_START", "0")
    late, phases = first_batches(det_pipe(None, device="mixed"))
    assert not {"build.decode_processes.spawn", "build.cuda_context"} & set(spans(phases))
    for a, b in zip(early, late):
        assert_same(a, b)


def test_import_and_a_cpu_coco_pipeline_load_no_heavy_module():
    """``import detaug``, building a CPU COCO pipeline and its first batch import none of torch,
    cupy, keras, tensorflow, jax (nor lxml: only VOC reads XML), in a fresh process."""
    from helpers import COCO

    code = textwrap.dedent(f"""
        import os, sys
        import detaug
        from detaug import fn
        heavy = ("torch", "cupy", "keras", "tensorflow", "jax", "lxml")
        print("import", sorted(m for m in heavy if m in sys.modules))
        pipe = detaug.Pipeline(batch_size=2, num_threads=1, seed=0, host_processes=0)
        with pipe:
            enc, boxes = fn.readers.coco(file_root=os.path.join({COCO!r}, "images"),
                                         annotations_file=os.path.join({COCO!r}, "annotations.json"))
            img, boxes = fn.resize(fn.decoders.image(enc), boxes, size=(32, 32))
            pipe.set_outputs(img, boxes)
        pipe.build()
        pipe.run()
        print("run", sorted(m for m in heavy if m in sys.modules))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["import []", "run []"], r.stdout
