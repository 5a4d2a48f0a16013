"""benchmarks/gpu_ceilings.py as a script: throughput ratios of detaug to its decode ceiling from
paired bench_gpu JSONs (each pair one invocation), their median against the project's targets."""
import json
import os
import sys

import numpy as np
import pytest

from helpers import REPO, load_benchmark


def _mod():
    """benchmarks/gpu_ceilings.py as a module (helpers.load_benchmark)."""
    return load_benchmark("gpu_ceilings")


def _write(tmp_path, name, det, one=None, multi=None, mem=None, plus=None):
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps({"detaug_img_s": det, "detaug_device_mem_mb": mem,
                             "decode_ceiling_one_process_img_s": one,
                             "decode_ceiling_processes_img_s": {str(k): v for k, v in (multi or {}).items()},
                             "decode_ceiling_outputs_processes_img_s":
                                 {str(k): v for k, v in (plus or {}).items()}}))
    return str(p)


def test_pairs_against_the_ceiling_that_writes_outputs_are_their_own_kind(tmp_path):
    """bench_gpu --ceiling-outputs: the P-process ceiling that also writes each batch's outputs;
    its pairs are named as such and cannot be mixed with the decode-only ceiling's."""
    m = _mod()
    p = [_write(tmp_path, "o1", 21_000, plus={3: 23_000, 4: 24_000}, mem=5_900),   # 0.875x
         _write(tmp_path, "o2", 22_800, plus={3: 24_000, 4: 23_000}, mem=6_000)]   # 0.95x
    line = m.table([("8GB", x) for x in p]).splitlines()[2]
    assert "| 8GB | best P-process + outputs |" in line
    assert "21,000 / 24,000 (0.88x)" in line and "22,800 / 24,000 (0.95x)" in line
    assert "| 0.91x | reference | 5,900-6,000 |" in line  # (a reference, no target)
    with pytest.raises(ValueError, match="different ceilings"):
        m.table([("s", p[0]), ("s", _write(tmp_path, "m", 1.0, multi={3: 1.0}))])


def test_pairs_give_each_ratio_and_the_median_against_the_target(tmp_path):
    m = _mod()
    d = [_write(tmp_path, "d1", 13_200, one=12_000, mem=1_794),    # 1.10x
         _write(tmp_path, "d2", 16_900, one=13_000, mem=1_800),    # 1.30x
         _write(tmp_path, "d3", 15_000, one=12_000, mem=1_797)]    # 1.25x
    b = [_write(tmp_path, "b1", 25_200, multi={3: 27_000, 4: 28_000}, mem=5_906),  # 0.90x of 28k
         _write(tmp_path, "b2", 20_000, multi={3: 25_000, 4: 24_000}, mem=6_216)]  # 0.80x of 25k
    out = m.table([("defaults", p) for p in d] + [("8GB", p) for p in b])
    rows = {line.split("|")[1].strip(): line for line in out.splitlines()[2:]}
    assert "13,200 / 12,000 (1.10x)" in rows["defaults"] and "16,900 / 13,000 (1.30x)" in rows["defaults"]
    assert "| 1.25x | 1.20x met | 1,794-1,800 |" in rows["defaults"]
    assert "25,200 / 28,000 (0.90x)" in rows["8GB"] and "20,000 / 25,000 (0.80x)" in rows["8GB"]
    assert "| 0.85x | 0.90x NOT met | 5,906-6,216 |" in rows["8GB"]


def test_pairs_on_fresh_random_rates_match_a_float64_median(tmp_path):
    m = _mod()
    rng = np.random.default_rng()
    n = int(rng.integers(1, 7))
    det, one = rng.uniform(5e3, 3e4, n), rng.uniform(5e3, 3e4, n)
    paths = [_write(tmp_path, f"r{k}", float(det[k]), one=float(one[k])) for k in range(n)]
    line = m.table([("x", p) for p in paths]).splitlines()[2]
    med = float(np.median(det / one))
    assert f"| {med:.2f}x | 1.20x {'met' if med >= 1.2 else 'NOT met'} | - |" in line


def test_a_pair_without_its_ceiling_or_row_is_refused(tmp_path):
    m = _mod()
    with pytest.raises(ValueError, match="no decode ceiling"):
        m.pair(_write(tmp_path, "a", 1.0))
    with pytest.raises(ValueError, match="no detaug row"):
        m.pair(_write(tmp_path, "b", None, one=1.0))
    with pytest.raises(ValueError, match="different ceilings"):
        m.table([("s", _write(tmp_path, "c", 1.0, one=1.0)), ("s", _write(tmp_path, "d", 1.0, multi={3: 1.0}))])
