"""The GPU benchmark tools on a machine without a GPU: bench_train.py's --cpu-smoke end to
end (as a subprocess, as a user runs it), its option parsing, and bench_gpu.py's P-process decode
ceiling's process orchestration (spawn, barriers, results, a failing process) with a CPU stand-in
for nvImageCodec's decode."""
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from helpers import REPO, load_benchmark

BENCH = os.path.join(REPO, "benchmarks")


def _load(name):
    """A benchmark script as a module (helpers.load_benchmark)."""
    return load_benchmark(name)


def test_bench_train_cpu_smoke(tmp_path):
    pytest.importorskip("torch")
    out_json = tmp_path / "bench_train.json"
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, os.path.join(BENCH, "bench_train.py"), "--cpu-smoke",
                           "--data", str(tmp_path / "data"), "--json", str(out_json)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "| feeder | train img/s | ratio to (a) | device memory (MB) |" in out, out
    stand_in = "needs torchvision" in out
    names = ["(a) one batch kept in memory", "(b) detaug pipeline, defaults",
             "(c) detaug, device_memory_budget=8GB",
             "(a) one batch kept in memory, again"]
    if not stand_in:
        names.insert(3, "(d) torchvision v2 DataLoader, 1 workers")
    for name in names:  # every row measured: a rate and a ratio
        assert re.search(re.escape(f"| {name} | ") + r"[0-9.]+ \| [0-9.]+ \| - \| - \|", out), (name, out)
    assert "FAILED" not in out, out
    data = json.loads(out_json.read_text())
    assert [r["name"] for r in data["rows"]] == names
    assert all(r["steps"] == 2 and r["loss_finite"] for r in data["rows"]), data["rows"]
    # the same seed and data give the detaug rows the same batches, whatever their settings
    det = [r["final_loss"] for r in data["rows"] if r["kind"] == "detaug"]
    assert det[0] == pytest.approx(det[1]), det
    assert data["date"] and data["fixed_mean_img_s"] > 0


def test_bench_train_options():
    pytest.importorskip("torch")
    bt = _load("bench_train")
    assert bt.parse_config("mid=decode_processes=2,prefetch_queue_depth=3,x=abc") == (
        "mid", {"decode_processes": 2, "prefetch_queue_depth": 3, "x": "abc"})
    assert bt.parse_config("plain=") == ("plain", {})
    with pytest.raises(Exception):
        bt.parse_config("no_keywords")
    with pytest.raises(SystemExit):
        bt.main(["--cpu-smoke", "--only", "fixed,nonsense"])
    args = type("A", (), {"config": [("mid", {"batches_per_launch": 2})], "tv_workers": 3,
                          "gpu": True, "only": None})()
    keys = [r["key"] for r in bt.plan_rows(args)]
    assert keys == ["fixed", "defaults", "high-throughput", "mid", "tv", "fixed"]
    args.only = ["fixed", "mid"]
    assert [r["key"] for r in bt.plan_rows(args)] == ["fixed", "mid", "fixed"]
    args.only, args.rounds = None, 2  # (a) and the detaug rows alternate
    rows = bt.plan_rows(args)
    assert [r["key"] for r in rows] == ["fixed", "defaults", "high-throughput", "mid"] * 2 + ["tv", "fixed"]
    assert len({r["label"] for r in rows}) == len(rows), [r["label"] for r in rows]


HARNESS = textwrap.dedent('''
    import argparse, collections, hashlib, os, sys
    sys.path.insert(0, {bench!r})
    import bench_gpu
    import gpu_ceilings
    import gpu_common

    def fake_work(blobs, batch_size, seed=1, with_asarray=False, outputs=0, out_kind="convert"):
        """CPU stand-in for nvImageCodec's decode: hash a batch of the bytes."""
        assert outputs == (gpu_common.SIZE if os.environ.get("OUTPUTS") == "1" else 0), outputs
        assert out_kind == "convert", out_kind
        if os.environ.get("FAIL_PROCESS") == str(seed - 1):
            raise RuntimeError("injected failure")
        idx = gpu_common.index_stream(len(blobs), batch_size, seed=seed)

        def step():
            ids = next(idx)
            for i in ids:
                hashlib.sha1(blobs[i]).digest()
            return len(ids)
        return step, (lambda: None), collections.deque()

    def fake_proc(*a):
        gpu_ceilings.ceiling_work = fake_work
        return gpu_ceilings._ceiling_proc(*a)

    if __name__ == "__main__":
        gpu_ceilings._ceiling_proc = fake_proc
        root = sys.argv[1]
        bench_gpu.make_dataset(root, 16, 1)
        recs, _ = bench_gpu.load_records(root)
        args = argparse.Namespace(ceiling_processes=[1, 2], ceiling_window=0.3, batch_size=4,
                                  warmup=1, ceiling_outputs="convert" if os.environ.get("OUTPUTS") == "1" else None)
        gpu_common.section("decode ceiling, P processes", gpu_ceilings.bench_decode_ceiling_mp,
                          args, recs)
        for r in gpu_common.ROWS:
            print("ROW", r["name"], "|", r.get("img_s"), "|", r.get("error"))
        print("ROUNDS", sorted(gpu_common.EXTRA["decode_ceiling_mp"]["rounds"]))
''')


@pytest.mark.parametrize("fail,outputs", [(None, False), ("1", False), (None, True)])
def test_decode_ceiling_processes_orchestration(tmp_path, fail, outputs):
    """bench_gpu's P-process ceiling with its decode replaced by CPU work: one row per P, the
    rates summed over the processes; a process that fails ends the section at once with its
    error (an earlier probe's multi-process run once never reported)."""
    script = tmp_path / "harness.py"
    script.write_text(HARNESS.format(bench=BENCH))
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if fail:
        env["FAIL_PROCESS"] = fail
    env["OUTPUTS"] = "1" if outputs else "0"  # --ceiling-outputs: its rows, and their work's flag
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "data")], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    rows = re.findall(r"^ROW (.*) \| (.*) \| (.*)$", out, re.M)
    if fail:
        assert rows == [("decode ceiling, P processes", "None", rows[0][2])], out
        assert "injected failure" in rows[0][2], out
    else:
        plus = " + outputs" if outputs else ""
        assert [r[0] for r in rows] == [f"decode ceiling{plus}, P=1 process",
                                        f"decode ceiling{plus}, P=2 processes"], out
        assert all(float(r[1]) > 0 and r[2] == "None" for r in rows), out
        assert "ROUNDS [1, 2]" in out, out


SCRIPTS = sorted(f[:-3] for f in os.listdir(BENCH)
                 if f.endswith(".py") and (f.startswith("bench_") or f == "gpu_ceilings.py"))


def test_the_benchmark_scripts_are_the_ones_results_md_names():
    """Every script a user runs is named in RESULTS.md, and the parts of bench_gpu exist."""
    text = open(os.path.join(BENCH, "RESULTS.md"), encoding="utf-8").read()
    assert {"bench_gpu", "bench_cpu", "bench_train", "bench_memory", "bench_ddp", "bench_readers",
            "bench_retinanet", "bench_tfrecord_index", "gpu_ceilings"} <= set(SCRIPTS)
    for s in SCRIPTS:
        if s.startswith("bench_"):
            assert f"{s}.py" in text, f"benchmarks/RESULTS.md has no figure of {s}.py"


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_script_parses_its_arguments(script):
    """Each script imports (bench_gpu's parts included) and prints its usage, as a user runs it."""
    env = dict(os.environ, PYTHONWARNINGS="ignore",
               PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, os.path.join(BENCH, f"{script}.py"), "--help"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"usage: {script}.py"), proc.stdout


def test_device_runner_parts_are_documented_and_parse():
    """benchmarks/device.sh: bash accepts it, and each part it defines is described in its header
    and refused by name when unknown."""
    path = os.path.join(BENCH, "device.sh")
    assert subprocess.run(["bash", "-n", path], capture_output=True).returncode == 0
    text = open(path, encoding="utf-8").read()
    parts = re.findall(r"^part_(\w+)\(\) \{", text, re.M)
    assert parts == ["tests", "gpu", "pairs", "train", "soak", "cpu", "yolo", "memory", "timeline", "ddp", "startup", "firstdecode", "seg", "multinode"], parts
    header = text.split("\nset -u", 1)[0]
    for p in parts:
        assert re.search(rf"^#   {p}\s", header, re.M), f"device.sh's header does not describe {p!r}"
    assert f"choose from {' '.join(parts)}" in text
