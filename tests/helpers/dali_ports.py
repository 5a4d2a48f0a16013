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


def run(framework, name, repo_root, timeout=300, record=False, replay=None):
    """Run port ``name`` under ``framework`` ("detaug" or "dali") in a subprocess; returns its
    flat outputs (see the module's docstring). A failing run raises RuntimeError with the
    program's stderr tail.

    With ``record``, the DALI run also records what each call of a random op (``random.uniform``,
    ``random.coin_flip``, ``random_bbox_crop``, in the fn and the ops API) gave, batch by batch,
    as ``outputs["__draws__"]`` (the recorded nodes are extra pipeline outputs that ``run()``
    takes off again). Given ``replay`` (those draws), the detaug run's calls of the same ops, in
    the same order, become external sources handing out DALI's values, so that everything
    computed from the draws can be compared value by value."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.pkl")
        env = dict(os.environ)
        if record:
            env["DALI_PORTS_RECORD"] = "1"
        if replay is not None:
            env["DALI_PORTS_REPLAY"] = os.path.join(tmp, "replay.pkl")
            with open(env["DALI_PORTS_REPLAY"], "wb") as f:
                pickle.dump(replay, f)
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
    """On a machine without CUDA (or with ``DALI_PORTS_CPU`` set), DALI's pipelines get
    ``device_id=None`` (DALI refuses a ``device_id`` there; the ports' ops are all CPU ones):
    the one adaptation of the DALI run."""
    from nvidia.dali.pipeline import Pipeline

    init = Pipeline.__init__

    def cpu_init(self, *args, **kwargs):
        if len(args) >= 3:
            args = args[:2] + (None,) + args[3:]
        kwargs.update(device_id=None) if len(args) < 3 else None
        init(self, *args, **kwargs)

    Pipeline.__init__ = cpu_init


_DRAWS: list = []          # per recorded call: its output nodes (DALI) / None once attached
_DRAWN_VALUES: dict = {}   # {call: {output: [batch, ...]}}, each batch a list of samples


def _record_dali_draws():
    """Record the outputs of DALI's random ops (see run()): each call's nodes are appended to
    the outputs of the pipeline it belongs to and taken off the results of its run()."""
    import nvidia.dali.ops as ops
    from nvidia.dali.pipeline import Pipeline

    for cls in {ops.random.Uniform, ops.Uniform, ops.random.CoinFlip, ops.CoinFlip,
                ops.RandomBBoxCrop}:
        def call(self, *a, _orig=cls.__call__, **k):
            res = _orig(self, *a, **k)
            _DRAWS.append(list(res) if isinstance(res, (list, tuple)) else [res])
            return res
        cls.__call__ = call

    def unattached(pipe):
        keys, nodes = [], []
        for i, ns in enumerate(_DRAWS):
            if ns is not None:
                keys += [(i, j) for j in range(len(ns))]
                nodes += ns
                _DRAWS[i] = None
        pipe._draw_keys = keys
        return nodes

    set_outputs = Pipeline.set_outputs
    Pipeline.set_outputs = lambda self, *n: set_outputs(self, *n, *unattached(self))
    build_graph = Pipeline._build_graph

    def _build_graph(self, define_graph=None):
        if define_graph is None and self._graph_out is None:
            own = self.define_graph

            def define_graph():
                res = own()
                return list(res if isinstance(res, (list, tuple)) else [res]) + unattached(self)
        return build_graph(self, define_graph)

    Pipeline._build_graph = _build_graph
    run = Pipeline.run

    def run_taking_draws(self, *a, **k):
        res = run(self, *a, **k)
        keys = getattr(self, "_draw_keys", [])
        if keys:
            for (i, j), tl in zip(keys, res[-len(keys):]):
                _DRAWN_VALUES.setdefault(i, {}).setdefault(j, []).append(_samples(tl))
            res = res[:-len(keys)]
        return res

    Pipeline.run = run_taking_draws


def _replay_draws(path):
    """detaug's calls of the random ops, in order, become per-batch external sources of the
    recorded DALI values (batch after batch, the last one repeated)."""
    import detaug.ops.registry as registry

    with open(path, "rb") as f:
        draws = pickle.load(f)
    call_op, count = registry.call_op, [0]
    names = {"random.uniform", "uniform", "random.coin_flip", "coin_flip", "random_bbox_crop"}

    def replaying(name, inputs, kwargs):
        if name not in names:
            return call_op(name, inputs, kwargs)
        rec = draws[count[0]]
        count[0] += 1
        n, state = len(rec), [0]

        def source():
            k = state[0]
            state[0] += 1
            batches = [rec[j][min(k, len(rec[j]) - 1)] for j in range(n)]
            return tuple(batches) if n > 1 else batches[0]

        return call_op("external_source", (), {"source": source,
                                                "num_outputs": n if n > 1 else None})

    registry.call_op = replaying


def _main(framework, name, out):
    if os.environ.get("DALI_PORTS_REPLAY") and framework == "detaug":
        _replay_draws(os.environ["DALI_PORTS_REPLAY"])
    if framework == "dali":
        if os.environ.get("DALI_PORTS_RECORD"):
            _record_dali_draws()
        if not _has_cuda() or os.environ.get("DALI_PORTS_CPU"):
            _dali_on_cpu()
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, name + ".py"), "w") as f:
            f.write(dali_source(name))
        sys.path[:0] = [folder, PORTS]
    else:
        sys.path.insert(0, PORTS)
    module = importlib.import_module(name)
    flat = collect(vars(module))
    if framework == "dali" and os.environ.get("DALI_PORTS_RECORD"):
        flat["__draws__"] = _DRAWN_VALUES
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
