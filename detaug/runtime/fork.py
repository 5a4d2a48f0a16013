"""What a pipeline does in a child of ``os.fork`` (multiprocessing's 'fork', a DataLoader worker,
a forking server, detaug's own host workers).

A fork copies the process's memory but only the thread that called it. A pipeline that has run
once holds things that do not come with it: its executor's threads (the futures of the batches
in flight never complete in the child), its host worker processes (children of the parent,
whose sockets and reader threads are the parent's), locks a parent thread may have held at the
moment of the fork, OpenCV's thread pool, and on a GPU the CUDA context. Before this module a
child that called ``run()`` waited forever; and a pipeline dropped in the parent but not yet
collected ran its ``__del__`` in the child, stopping processes that are not the child's
(``AssertionError: can only test a child process``).

Hooks registered with ``os.register_at_fork``:

- in the child, every live pipeline (:func:`track`) is told it was forked
  (:func:`after_fork_in_child`): a CPU pipeline drops the parent's executor, host workers
  and prefetched batches without touching them, makes fresh locks, and adopts the child as its
  owner, so its next ``run()`` starts its own threads (or workers) and gives the same batches
  from the same cursor (the host stage is a pure function of the launch key). A pipeline with a
  GPU stage cannot follow (CUDA does not survive a fork): it raises :class:`ForkedPipelineError`
  at its next use, saying to use 'spawn' or to build the pipeline in the child. Neither
  finalises anything of the parent's;
- before a fork, a loaded OpenCV is set to one thread and given its count back after, in the
  parent (a child that touches a pool its parent's threads held waits forever on a condition
  variable); the child keeps one thread.
"""
from __future__ import annotations

import os
import sys
import threading
import weakref

_LIVE: "weakref.WeakSet" = weakref.WeakSet()
_CV2_THREADS = []


class ForkedPipelineError(RuntimeError):
    """A pipeline with a GPU stage used in a child of ``os.fork`` of the process that ran it."""


def track(pipe) -> None:
    """Own ``pipe`` in this process, and reset it in a child when this process forks."""
    pipe._owner_pid, pipe._fork_error = os.getpid(), None
    _LIVE.add(pipe)


def _before():
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        try:
            _CV2_THREADS.append(cv2.getNumThreads())
            cv2.setNumThreads(1)
        except Exception:  # a cv2 without the call: nothing to protect
            pass


def _after_in_parent():
    cv2 = sys.modules.get("cv2")
    if cv2 is not None and _CV2_THREADS:
        try:
            cv2.setNumThreads(_CV2_THREADS.pop())
        except Exception:
            pass


def owned_here(pipe) -> bool:
    """Whether this process may stop ``pipe``'s threads and processes (close, ``__del__``):
    it made them, or adopted the pipeline after a fork (a CPU pipeline)."""
    return getattr(pipe, "_owner_pid", None) == os.getpid()


def check_usable(pipe) -> None:
    """Raise :class:`ForkedPipelineError` where ``pipe`` cannot run in this process."""
    why = getattr(pipe, "_fork_error", None)
    if why is not None:
        raise ForkedPipelineError(why)


def after_fork_in_child(pipe) -> None:
    """Reset ``pipe`` in a forked child (see the module's docstring). Nothing of the parent's is
    stopped, joined, freed or sent to: its executor and host workers are abandoned as they are."""
    pipe._cursor_lock, pipe._build_lock = threading.RLock(), threading.RLock()
    pipe._skips.after_fork()
    timeline = getattr(pipe, "_startup", None)
    if timeline is not None and hasattr(timeline, "_lock"):
        timeline._lock = threading.Lock()
    ex = pipe._queue.after_fork()  # (a new lock, nothing in flight)
    if ex is not None and ex.workers is not None:
        ex.workers.abandon()
    gpu = pipe.has_device_stage or pipe._decode_service is not None or pipe._stream is not None
    if gpu:
        pipe._fork_error = (
            f"this pipeline has a GPU stage and was run in process {pipe._owner_pid}; this process "
            f"({os.getpid()}) is a fork of it, where CUDA cannot be used. Build the pipeline in "
            "the child, or start children with the 'spawn' or 'forkserver' method "
            "(multiprocessing.set_start_method('spawn'); a DataLoader's "
            "multiprocessing_context='spawn')")
    else:
        pipe._owner_pid = os.getpid()
        pipe._fork_error = None


def _after_in_child():
    _CV2_THREADS.clear()  # the child keeps one OpenCV thread
    for pipe in list(_LIVE):
        try:
            after_fork_in_child(pipe)
        except AttributeError:  # a half-made pipeline (its __init__ raised): nothing to reset
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before, after_in_parent=_after_in_parent,
                        after_in_child=_after_in_child)
