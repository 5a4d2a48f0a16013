import os
import zlib

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOC = os.path.join(REPO, "examples", "data", "voc-mini")
COCO = os.path.join(REPO, "examples", "data", "coco-mini")


def _gpu():
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with cupy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request):
    """Random inputs from a fixed seed per test (the CRC-32 of its id: the same every run, a
    different stream for each test), printed so that a failure names it."""
    seed = zlib.crc32(request.node.nodeid.encode())
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)


def pytest_configure(config):
    """One fresh seed per test run, drawn before pytest-xdist starts its workers (they inherit
    it), so that parametrised 'fresh' cases are the same in every worker's collection. Set
    DETAUG_FRESH_SEED to replay a run."""
    os.environ.setdefault("DETAUG_FRESH_SEED", str(int(np.random.SeedSequence().entropy % (1 << 30))))


def fresh_seed() -> int:
    """This run's fresh seed (printed in a failing test's parameters)."""
    return int(os.environ.get("DETAUG_FRESH_SEED") or np.random.SeedSequence().entropy % (1 << 30))
