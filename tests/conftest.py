import os
import zlib

import numpy as np
import pytest

from helpers import COCO, VOC, has_gpu


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own naming of the groups
def pytest_collection_modifyitems(config, items):
    _name_groups(config, items)
    if has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with cupy")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cp():
    """cupy, for ``gpu``-marked tests (skipped above where there is no GPU, so the import happens
    only where one is)."""
    import cupy

    return cupy


@pytest.fixture(params=("opencv", "reference"))
def cpu_warp(request):
    """Each test once per CPU warp (``backend.set_cpu_warp``), the one before restored after."""
    from detaug.core import backend

    before = backend.cpu_warp()
    backend.set_cpu_warp(request.param)
    yield request.param
    backend.set_cpu_warp(before)


@pytest.fixture(scope="module")
def shape_kernels_cu(tmp_path_factory):
    """shapes.cu and boxes.cu compiled as host C++, once per module
    (``helpers.cuda_emulation.build_shape_kernels``)."""
    from helpers import cuda_emulation as emu

    return emu.build_shape_kernels(tmp_path_factory)


@pytest.fixture
def shape_kernels(shape_kernels_cu, monkeypatch):
    """detaug.kernels.shapes' and .boxes' cupy code run on the emulated kernels for this test;
    the shapes.cu emulation, its ``calls`` cleared."""
    from helpers import cuda_emulation as emu

    return emu.install_shape_kernels(monkeypatch, shape_kernels_cu)


@pytest.fixture(scope="module")
def masks_cu(tmp_path_factory):
    """masks.cu (polygons to masks, the label map) compiled as host C++, once per module."""
    from helpers import cuda_emulation as emu

    return emu.build(tmp_path_factory.mktemp("masks_cu"), "masks.cu")


@pytest.fixture(scope="module")
def resample_cu(tmp_path_factory):
    """resample.cu compiled as host C++, once per module
    (``helpers.warp.build_resample_emulation``)."""
    from helpers.warp import build_resample_emulation

    return build_resample_emulation(tmp_path_factory)


@pytest.fixture(scope="module")
def run_port():
    """``run_port(name)``: the globals of tests/dali/ports/<name>.py run as a script under detaug
    (once per module; the ports folder on sys.path meanwhile); the ports' pipelines closed after."""
    import runpy
    import sys

    from detaug.pipeline import Pipeline
    from helpers import dali_ports

    ports = os.path.normpath(dali_ports.PORTS)
    sys.path.insert(0, ports)
    done = {}

    def run(name):
        if name not in done:
            done[name] = runpy.run_path(os.path.join(ports, name + ".py"))
        return done[name]

    yield run
    sys.path.remove(ports)
    for g in done.values():  # the ports' pipelines (and their worker threads) closed
        for v in list(g.values()) + [p for v in g.values() if isinstance(v, dict)
                                     for p in v.values()]:
            if isinstance(v, Pipeline):
                v.close()


@pytest.fixture
def rng(request):
    """Random inputs from a fixed seed per test (the CRC-32 of its id: the same every run, a
    different stream for each test), printed so that a failure names it."""
    seed = zlib.crc32(_ungrouped(request.node.nodeid).encode())
    print(f"rng seed {seed}")
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def voc_small(tmp_path_factory):
    """The VOC sample (VOC) at an eighth of its size, written once per test process: the same 40
    photographs, ids, labels, flags and split, each image resized to 1/8 (about 62 x 47) and its
    boxes scaled by the same factors. For tests that read VOC only to feed a pipeline whose
    output is small anyway (a fused warp to 64 x 64 from 500 x 375 supersamples the full image)."""
    import dataclasses

    from PIL import Image

    from readers.records import Dataset
    from readers.voc import read_voc
    from readers.writers import write_voc

    src = read_voc(VOC)
    folder = tmp_path_factory.mktemp("voc_small_images")
    records = []
    for r in src.records:
        w, h = max(8, round(r.width / 8)), max(8, round(r.height / 8))
        path = str(folder / os.path.basename(r.path))
        with Image.open(r.path) as im:
            im.convert("RGB").resize((w, h), Image.BILINEAR).save(path, "JPEG", quality=90)
        scale = np.array([w / r.width, h / r.height] * 2, np.float32)
        records.append(dataclasses.replace(r, path=path, width=w, height=h, boxes=r.boxes * scale))
    root = str(tmp_path_factory.mktemp("voc_small"))
    write_voc(Dataset(records=records, class_names=list(src.class_names)), root)
    return root


@pytest.fixture(scope="session")
def coco_small(tmp_path_factory):
    """The COCO sample (COCO) at 1/8 of its size, written once per test process: the same
    images (resized), ids, categories and annotations, boxes and areas scaled by the same
    factors, segmentations left out (the tests that use it read boxes only). For pipelines whose
    output is small anyway (see voc_small)."""
    import json

    from PIL import Image

    root = tmp_path_factory.mktemp("coco_small")
    os.makedirs(root / "images")
    with open(os.path.join(COCO, "annotations.json"), encoding="utf-8") as f:
        ann = json.load(f)
    scale = {}
    for im in ann["images"]:
        w, h = max(8, round(im["width"] / 8)), max(8, round(im["height"] / 8))
        with Image.open(os.path.join(COCO, "images", im["file_name"])) as src:
            src.convert("RGB").resize((w, h), Image.BILINEAR).save(root / "images" / im["file_name"],
                                                                   "JPEG", quality=90)
        scale[im["id"]] = (w / im["width"], h / im["height"])
        im["width"], im["height"] = w, h
    for a in ann["annotations"]:
        sx, sy = scale[a["image_id"]]
        x, y, bw, bh = a["bbox"]
        a["bbox"] = [x * sx, y * sy, bw * sx, bh * sy]
        a["area"] = a["area"] * sx * sy
        a.pop("segmentation", None)
    (root / "annotations.json").write_text(json.dumps(ann))
    return str(root)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """One fresh seed per test run, drawn before pytest-xdist starts its workers (they inherit
    it), so that parametrised 'fresh' cases are the same in every worker's collection. Set
    DETAUG_FRESH_SEED to replay a run."""
    os.environ.setdefault("DETAUG_FRESH_SEED", str(int(np.random.SeedSequence().entropy % (1 << 30))))
    _use_loadgroup(config)


def _use_loadgroup(config):
    """Under ``-n``, pytest-xdist's default 'load' becomes 'loadgroup': the tests marked
    ``xdist_group`` (those importing TensorFlow in the test process, and those sharing a
    costly module fixture: ranks spawned, a wheel built) run in one worker, which alone pays
    for it; every other test is scheduled as with 'load'.

    The workers must know it too: a worker names a test by its group (``nodeid@group``, what
    the scheduler groups by) only where its own option says loadgroup, and a worker parses the
    command line afresh (``-n 2``: 'load'), so the controller passes it in ``workerinput``
    (pytest_configure_node). Without that the groups were ignored: the TensorFlow tests ran on
    both workers, each importing TensorFlow."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # a pytest-xdist worker
        if workerinput.get("detaug_loadgroup"):
            config.option.loadgroup = True
    elif getattr(config.option, "dist", "no") == "load":
        config.option.dist = "loadgroup"


def _group_of(nodeid: str) -> str | None:
    """The ``@group`` suffix pytest-xdist gives a grouped test's id (None without one); an
    ``@`` inside the parameters' brackets is not one (xdist's own rule)."""
    at = nodeid.rfind("@")
    return nodeid[at + 1:] if at > nodeid.rfind("]") else None


def _ungrouped(nodeid: str) -> str:
    return nodeid if _group_of(nodeid) is None else nodeid[:nodeid.rfind("@")]


def _name_groups(config, items):
    """On a pytest-xdist worker under loadgroup: give each test marked ``xdist_group`` its
    ``@group`` id suffix, which the scheduler groups by. pytest-xdist 3.8 sets it on
    ``item._nodeid``, which pytest 9 no longer reads (its ids are structured, ``item._id``):
    https://github.com/pytest-dev/pytest-xdist/issues/1386, fixed the same way in its pull
    request https://github.com/pytest-dev/pytest-xdist/pull/1388. Where xdist's own
    suffix took effect (older pytest, or a fixed xdist) this does nothing."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                 for m in item.iter_markers("xdist_group")}
        if not names or _group_of(item.nodeid) is not None:
            continue
        try:  # (pytest internals: where they differ, the groups are only not applied)
            item._id = type(item._id).parse(f"{item.nodeid}@{'_'.join(sorted(names))}")
        except (AttributeError, TypeError, ValueError):
            return


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist's controller, per worker: tell it whether tests are scheduled by group."""
    node.workerinput["detaug_loadgroup"] = node.config.option.dist == "loadgroup"
