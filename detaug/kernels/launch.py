"""The one place detaug launches CUDA kernels: memoised module loading and counted launches.

Every GPU kernel of detaug is started through :func:`launch`, so that tests can show the
contract "one launch per op per batch" by reading :func:`launch_counts` for batch sizes 1 and
64. cupy is imported lazily: importing this module never needs a GPU.
"""
from __future__ import annotations

import collections
import functools
import json
import os
import threading

_KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
_counts = collections.Counter()
_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _module(source_name: str, device_id: int, options: tuple):
    import cupy as cp

    with open(os.path.join(_KERNEL_DIR, source_name)) as f:
        code = f.read()
    with cp.cuda.Device(device_id):
        return cp.RawModule(code=code, options=options)


def get_kernel(source_name: str, kernel_name: str, options: tuple = ("-std=c++17",)):
    """Return ``kernel_name`` from ``detaug/kernels/<source_name>``, compiled once per device
    and option set (cupy caches the binary on disk as well)."""
    import cupy as cp

    device = cp.cuda.Device().id
    loading = _loading.get((source_name, device, tuple(options)))
    if loading is not None:  # being loaded ahead (preload): wait for it rather than load it twice
        loading.wait()
    kernel = _module(source_name, device, tuple(options)).get_function(kernel_name)
    _note(source_name, kernel_name, tuple(options))
    return kernel


# ---- loading ahead ---------------------------------------------------------------------------
# The modules used on this machine are listed in a small file (one entry per source and option
# set, with one kernel of it); a pipeline's build loads them in a background thread (preload),
# so that the first launch finds them compiled (cupy's disk cache: ~/.cupy/kernel_cache) and
# loaded instead of paying for it inside the first batch. DETAUG_KERNEL_LIST: the file ('' off).
_noted = set()
_loading = {}  # (source, device, options) -> Event set once preload has loaded it


def kernel_list_path() -> str | None:
    path = os.environ.get("DETAUG_KERNEL_LIST")
    if path is None:
        path = os.path.join(os.path.expanduser("~"), ".cache", "detaug", "kernels.json")
    return path or None


def _read_list(path):
    try:
        with open(path) as f:
            return [(e[0], e[1], tuple(e[2])) for e in json.load(f)]
    except (OSError, ValueError, TypeError, IndexError):
        return []


def _note(source_name, kernel_name, options):
    """Add the module to the list (once per process and module; never fails a launch)."""
    key = (source_name, options)
    if key in _noted:
        return
    with _lock:
        if key in _noted:
            return
        _noted.add(key)
    path = kernel_list_path()
    if path is None:
        return
    try:
        entries = _read_list(path)
        if any((e[0], e[2]) == key for e in entries):
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            entries.append((source_name, kernel_name, options))
            json.dump([[e[0], e[1], list(e[2])] for e in entries], f)
        os.replace(tmp, path)
    except OSError:
        pass


def preload(device_id: int, on_done=None) -> threading.Thread | None:
    """Load (compile where cupy's cache lacks them) the listed modules on ``device_id`` in a
    background thread; ``on_done()`` after. None where the list is empty."""
    path = kernel_list_path()
    entries = _read_list(path) if path else []
    entries = [e for e in entries if os.path.exists(os.path.join(_KERNEL_DIR, e[0]))]
    if not entries:
        return None
    events = []
    with _lock:
        for source_name, _, options in entries:
            ev = _loading.setdefault((source_name, device_id, options), threading.Event())
            events.append(ev)

    def work():
        try:
            import cupy as cp

            with cp.cuda.Device(device_id):
                for (source_name, kernel_name, options), ev in zip(entries, events):
                    try:
                        _module(source_name, device_id, options).get_function(kernel_name)
                    except Exception:  # a kernel renamed since it was listed: loaded when used
                        pass
                    finally:
                        ev.set()
        except Exception:  # (no usable device here: the launches will say so)
            pass
        finally:
            for (source_name, _, options), ev in zip(entries, events):
                ev.set()
                _loading.pop((source_name, device_id, options), None)
            if on_done is not None:
                on_done()

    t = threading.Thread(target=work, daemon=True, name="detaug-kernel-preload")
    t.start()
    return t


def launch(kernel, grid, block, args, *, shared_mem: int = 0, stream=None, name: str | None = None):
    """Launch ``kernel`` on ``stream`` (default: cupy's current stream) and count it."""
    import cupy as cp

    key = name or getattr(kernel, "name", None) or repr(kernel)
    with _lock:
        _counts[key] += 1
    stream = stream if stream is not None else cp.cuda.get_current_stream()
    with stream:
        kernel(tuple(grid), tuple(block), tuple(args), shared_mem=shared_mem)


def launch_counts() -> dict:
    """Launches per kernel name since the last :func:`reset_launch_counts`."""
    with _lock:
        return dict(_counts)


def total_launches() -> int:
    with _lock:
        return sum(_counts.values())


def reset_launch_counts() -> None:
    with _lock:
        _counts.clear()
