"""Run a ported DALI program (tests/dali/ports/<name>.py) under detaug or under NVIDIA DALI and
collect every output it produced.

The DALI run is the port's own text with its ``detaug`` import lines written back to
``nvidia.dali`` (nothing else changes). Each run is a subprocess (``python -m
helpers.dali_ports FRAMEWORK NAME OUT``): the two libraries never share a process, and a port
that starts workers runs as it would on its own. The port is imported as a module of its own
name, then its module-level values are walked: every TensorList (anything with ``at(i)`` and a
length: detaug's batches, DALI's TensorListCPU / TensorListGPU), torch tensors, NumPy arrays,
numbers and strings, inside dicts, lists and tuples, become a flat {path: value} dict (a
TensorList a list of NumPy samples), pickled to OUT for the parent to compare."""
import importlib
import os
import pickle
import re
import subprocess
import sys
import tempfile

import numpy as np

PORTS = os.path.join(os.path.dirname(__file__), "..", "dali", "ports")
_IMPORT = re.compile(r"^(\s*(?:from|import)\s+)detaug\b", re.M)


def dali_source(name):
    """The port's text with its ``detaug`` imports made ``nvidia.dali`` ones."""
    with open(os.path.join(PORTS, name + ".py")) as f:
        return _IMPORT.sub(r"\1nvidia.dali", f.read())


def run(framework, name, repo_root, timeout=300):
    """Run port ``name`` under ``framework`` ("detaug" or "dali") in a subprocess; returns its
    flat outputs (see the module's docstring). A failing run raises RuntimeError with the
    program's stderr tail."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.pkl")
        env = dict(os.environ)
        path = [os.path.join(repo_root, "tests")]
        if framework == "detaug":
            path.insert(0, repo_root)
        env["PYTHONPATH"] = os.pathsep.join(path + [env.get("PYTHONPATH", "")])
        proc = subprocess.run([sys.executable, "-m", "helpers.dali_ports", framework, name, out],
                              env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=tmp)
        if proc.returncode != 0:
            raise RuntimeError(f"port {name} under {framework} failed:\n{proc.stderr[-3000:]}")
        with open(out, "rb") as f:
            return pickle.load(f)


def _samples(v):
    if hasattr(v, "as_cpu") and "GPU" in type(v).__name__:
        v = v.as_cpu()
    return [np.array(v.at(i)) for i in range(len(v))]


def collect(values):
    """{path: value} for the TensorLists, tensors, arrays, numbers and strings in ``values`` (a
    module's namespace), nested containers walked with their keys / indices in the path."""
    flat = {}

    def walk(path, v, depth):
        if depth > 5:
            return
        tname = type(v).__module__ + "." + type(v).__name__
        if callable(getattr(v, "at", None)) and hasattr(v, "__len__"):
            flat[path] = _samples(v)
        elif tname.startswith("torch.") and hasattr(v, "numpy"):
            flat[path] = v.detach().cpu().numpy()
        elif isinstance(v, (np.ndarray, np.generic, int, float, str, bool)) or v is None:
            flat[path] = np.array(v) if isinstance(v, np.ndarray) else v
        elif tname == "torch.dtype":
            flat[path] = str(v)
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(f"{path}[{k!r}]", x, depth + 1)
        elif isinstance(v, (list, tuple)):
            for k, x in enumerate(v):
                walk(f"{path}[{k}]", x, depth + 1)

    for name, v in values.items():
        if not name.startswith("_") and not isinstance(v, type(os)):
            walk(name, v, 0)
    return flat


def _has_cuda():
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def _dali_on_cpu():
    """On a machine without CUDA, DALI's pipelines get ``device_id=None`` (DALI refuses a
    ``device_id`` there; the ports' ops are all CPU ones): the one adaptation of the DALI run."""
    from nvidia.dali.pipeline import Pipeline

    init = Pipeline.__init__

    def cpu_init(self, *args, **kwargs):
        if len(args) >= 3:
            args = args[:2] + (None,) + args[3:]
        kwargs.update(device_id=None) if len(args) < 3 else None
        init(self, *args, **kwargs)

    Pipeline.__init__ = cpu_init


def _main(framework, name, out):
    if framework == "dali":
        if not _has_cuda():
            _dali_on_cpu()
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, name + ".py"), "w") as f:
            f.write(dali_source(name))
        sys.path[:0] = [folder, PORTS]
    else:
        sys.path.insert(0, PORTS)
    module = importlib.import_module(name)
    flat = collect(vars(module))
    with open(out, "wb") as f:
        pickle.dump(flat, f)
    # the pipelines closed here, their worker processes and threads with them (an orphaned
    # worker would keep the parent's pipes open)
    for v in _pipelines(vars(module)):
        getattr(v, "close", None) and v.close()
        getattr(v, "_shutdown", None) and v._shutdown()


def _pipelines(values):
    found = []
    for v in values.values():
        for x in (list(v.values()) if isinstance(v, dict) else [v]):
            if not isinstance(x, type) and hasattr(x, "define_graph"):
                found.append(x)
    return found


if __name__ == "__main__":
    _main(*sys.argv[1:4])
