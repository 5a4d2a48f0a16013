"""The Python examples of the README and of the pages under docs/ run as printed, on the machine
the tests run on (docs/api.md, generated from the registry, shows signatures, not examples).

Which blocks run: every fenced block whose info string is exactly ``python`` (```` ```python ````).
Blocks with any other info string are shown, not run: ```` ```bash ````, ```` ```text ````, or
```` ```python no-run ```` (still highlighted as Python by Markdown renderers), which the README
uses for snippets that need more than the package (torchvision, a model, a dataset).

Each block runs as a script (``__name__ == "__main__"``) in a subprocess with the repository as
its working directory (the examples' data is in examples/data). It must either run to completion,
or, where this machine cannot run GPU ops (no GPU, cupy or nvImageCodec), fail at ``build()`` with
exactly one line: ``detaug.core.backend.DeviceUnavailableError: this pipeline ... but <what is
missing>: pip install '.[gpu]', or drop ... to run on the CPU``.
"""
import os
import re
import subprocess
import sys

import pytest

from helpers import REPO, VOC

README = os.path.join(REPO, "README.md")
GENERATED = {"api.md"}  # docs pages generated from the registry: signatures, not examples
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
ONE_LINE = re.compile(r"^detaug\.core\.backend\.DeviceUnavailableError: this pipeline (decodes on the GPU "
                      r"\(device='mixed'\)|runs ops on the GPU \([^)]*\)) but [^\n:]+: "
                      r"pip install '\.\[gpu\]', or drop [^\n]+ to run on the CPU$")


def doc_pages():
    """The README and every hand-written page under docs/, as paths relative to the repository."""
    docs = sorted(f for f in os.listdir(os.path.join(REPO, "docs"))
                  if f.endswith(".md") and f not in GENERATED)
    return ["README.md"] + [f"docs/{f}" for f in docs]


def fenced_blocks(page="README.md"):
    """(info string, code) of every fenced block of ``page``, in order."""
    with open(os.path.join(REPO, page), encoding="utf-8") as f:
        return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(f.read())]


def readme_blocks():
    return fenced_blocks("README.md")


def python_blocks(page="README.md"):
    return [code for info, code in fenced_blocks(page) if info == "python"]


DOC_BLOCKS = [(page, i) for page in doc_pages() for i in range(len(python_blocks(page)))]


def run_block(code, tmp_path, timeout=180):
    script = tmp_path / "readme_block.py"
    script.write_text(code)
    path = os.pathsep.join([REPO] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    env = dict(os.environ, KERAS_BACKEND="torch", PYTHONWARNINGS="ignore", PYTHONPATH=path)
    proc = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return proc


def _gpu_missing():
    from detaug.core.backend import gpu_missing

    return gpu_missing(nvimgcodec=True)


@pytest.mark.parametrize("page", doc_pages())
def test_doc_page_block_selection(page):
    """Every block says how it is treated: run (python), shown (the rest); no other info string."""
    infos = {info for info, _ in fenced_blocks(page)}
    assert infos <= {"python", "python no-run", "bash", "text"}, (page, infos)


def test_readme_and_docs_have_python_blocks_to_run():
    assert python_blocks(), "README.md has no ```python block to run"
    assert len({page for page, _ in DOC_BLOCKS}) >= 3, DOC_BLOCKS  # README, training, readers


@pytest.mark.parametrize("page,index", DOC_BLOCKS)
def test_doc_python_block_runs(page, index, tmp_path):
    proc = run_block(python_blocks(page)[index], tmp_path)
    if proc.returncode == 0:
        return  # ran to completion
    lines = proc.stderr.strip().splitlines()
    where = f"{page} block {index}"
    assert _gpu_missing() is not None, f"{where} failed on a machine with a GPU:\n{proc.stderr}"
    assert lines and ONE_LINE.match(lines[-1]), (f"{where} failed without the one-line "
                                                 f"message:\n{proc.stdout}\n{proc.stderr}")
    assert "_check_gpu" in proc.stderr  # from build(), before any process started


def test_readme_main_example_runs_here(tmp_path):
    """The main example (device='auto') runs to completion here, and says where it ran."""
    code = next(c for c in python_blocks() if "pipeline_def" in c)
    assert 'device="auto"' in code
    proc = run_block(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    where = "gpu" if _gpu_missing() is None else "cpu"
    assert proc.stdout.strip().splitlines()[-1].startswith(f"{where}:"), proc.stdout


def test_readme_main_example_with_mixed_fails_in_one_line_without_gpu(tmp_path):
    if _gpu_missing() is None:
        pytest.skip("this machine can decode on the GPU")
    code = next(c for c in python_blocks() if "pipeline_def" in c).replace('device="auto"', 'device="mixed"')
    proc = run_block(code, tmp_path)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert ONE_LINE.match(last), proc.stderr
    assert last.startswith("detaug.core.backend.DeviceUnavailableError: this pipeline decodes on the GPU "
                           "(device='mixed') but "), last
    assert "ModuleNotFoundError" not in proc.stderr


# ---- the same, in process: the check comes first, 'auto' placement, the summary ------------------
def _pipe(device, **kw):
    from detaug import fn, pipeline_def

    @pipeline_def(batch_size=2, num_threads=1, seed=1, **kw)
    def p():
        jpegs, boxes = fn.readers.voc(root=VOC)
        images = fn.decoders.image(jpegs, device=device)
        images, boxes = fn.resize(images, boxes, size=(32, 32))
        return images, boxes

    return p()


def test_mixed_without_gpu_raises_at_build_before_any_process(monkeypatch):
    from detaug.core import backend
    from detaug.runtime.gpu import decode_proc
    from detaug.core.backend import DeviceUnavailableError

    monkeypatch.setattr(backend, "gpu_missing", lambda nvimgcodec=False: "cupy is not installed")

    def no_service(*a, **k):
        raise AssertionError("the decode service started before the check")

    monkeypatch.setattr(decode_proc, "DecodeService", no_service)
    pipe = _pipe("mixed", device_id=0)
    with pytest.raises(DeviceUnavailableError) as e:
        pipe.build()
    msg = str(e.value)
    assert "\n" not in msg
    assert msg == ("this pipeline decodes on the GPU (device='mixed') but cupy is not installed: "
                   "pip install '.[gpu]', or drop device='mixed' (or use device='auto') to run on "
                   "the CPU")


def test_gpu_ops_without_gpu_name_them(monkeypatch):
    from detaug.core import backend
    from detaug import fn, pipeline_def
    from detaug.core.backend import DeviceUnavailableError

    monkeypatch.setattr(backend, "gpu_missing", lambda nvimgcodec=False: "cupy finds no GPU")

    @pipeline_def(batch_size=2, num_threads=1, seed=1)
    def p():
        jpegs, boxes = fn.readers.voc(root=VOC)
        images = fn.decoders.image(jpegs)
        return fn.flip(images, device="gpu", name="my_flip")

    with pytest.raises(DeviceUnavailableError, match=r"^this pipeline runs ops on the GPU \(my_flip\) "
                       r"but cupy finds no GPU: pip install '\.\[gpu\]', or drop device='gpu' and "
                       r"\.gpu\(\) to run on the CPU$"):
        p().build()


def test_auto_places_the_decoder(monkeypatch):
    from detaug.core import backend

    monkeypatch.setattr(backend, "gpu_missing", lambda nvimgcodec=False: "cupy is not installed")
    pipe = _pipe("auto")
    dec = [op for op in pipe.graph.ops if op.schema.name == "decoders.image"]
    assert [op.device for op in dec] == ["cpu"]
    pipe.build()
    assert pipe.device_summary == "cpu: all 3 ops on the CPU (no GPU stage)"
    images, boxes = pipe.run()
    assert images.data[0].shape == (32, 32, 3)

    monkeypatch.setattr(backend, "gpu_missing", lambda nvimgcodec=False: None)
    pipe = _pipe("auto")
    dec = [op for op in pipe.graph.ops if op.schema.name == "decoders.image"]
    assert [op.device for op in dec] == ["mixed"]
    assert [op.device for op in pipe.graph.ops if op.schema.name == "resize"] == ["gpu"]


def test_auto_only_where_documented():
    from detaug import fn, pipeline_def
    from detaug.ops.registry import op_docstring

    assert "'auto'" in op_docstring("decoders.image")

    @pipeline_def(batch_size=2, num_threads=1, seed=1)
    def p():
        jpegs, boxes = fn.readers.voc(root=VOC)
        return fn.flip(fn.decoders.image(jpegs), device="auto")

    with pytest.raises(ValueError, match="device 'auto' not supported"):
        p()
