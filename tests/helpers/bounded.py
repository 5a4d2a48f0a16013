"""Run a snippet in a child process under a memory cap and a time limit: a test of a bound
(an input that once took gigabytes or minutes) fails there, cleanly, instead of taking the
machine down with it."""
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_bounded(code: str, *, mem_mb: int | None = 1024,
                timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Run ``code`` (dedented) with ``python -c`` from the repository root, its private memory
    (RLIMIT_DATA: heap and anonymous maps, not a file mapped to be read) capped at ``mem_mb``
    MiB above what the interpreter holds at start (None: no cap; CUDA's mappings would count),
    and killed after ``timeout`` seconds (``subprocess.TimeoutExpired``)."""
    prelude = textwrap.dedent(f"""
        import resource, sys
        sys.path.insert(0, {REPO!r})
        def _data():
            with open('/proc/self/status') as f:
                line = next(x for x in f if x.startswith('VmData:'))
            return int(line.split()[1]) * 1024
        if {mem_mb!r} is not None:
            _cap = _data() + {mem_mb!r} * 2**20
            resource.setrlimit(resource.RLIMIT_DATA, (_cap, _cap))
    """)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)
