"""Worker processes for the host stage of a CPU pipeline, with results in shared memory.

The host stage of a batch (reading, decoding, planning, box math, warps) is a pure function of
the pipeline definition and the launch key ``(epoch, first batch, count)``: every random draw is
keyed by the sample (detaug/core/rng.py). So it can run in any process. A :class:`HostWorkers` forks N
processes that each hold the built pipeline (fork copies it: nothing is pickled, lambdas in an
external source work, and so does a notebook). Each runs one launch at a time, single-threaded.
A launch goes to the worker that owes the fewest, or, given a group (a run of consecutive
launches, :meth:`HostWorkers.submit`), to the worker that took the group's first launch, whose
caches then serve the rest (detaug/runtime/decode_cache.py); where a launch runs changes no value.

Results do not travel as pickles. A worker pickles its result with protocol 5: the arrays go
out of band, and their bytes are copied once into a *slot*, an anonymous shared-memory file
(``memfd``, so the size of ``/dev/shm`` does not matter) that the worker keeps and reuses. The
slot's file descriptor crosses to the caller once (SCM_RIGHTS), which maps it; each result is
unpickled onto views of the mapping (no copy). The arrays a batch hands out all have one base
array; when the last of them is gone the slot goes back to its worker (a finaliser sends
"free"). A slot in use is never written: a batch stays valid for as long as the user keeps it,
and a worker with no free slot makes another (memory grows with what the user holds, as with
any loader).

Failure: an exception in a worker reaches the caller with its type and message (and the
worker's traceback as a note); a worker that dies (killed, out of memory), is stopped (SIGSTOP,
a debugger) for ``STOPPED_S`` seconds or sends nothing for ``STALL_S`` seconds while it owes
work fails the batches it owed with :class:`WorkerDied`, naming the worker, why and the batch
(a watch thread checks every second; the worker is killed), so ``run()`` never waits forever;
workers ignore Ctrl-C (the caller decides), die with the process that started them
(:func:`_die_with_parent`: tied to that process, not to the thread that forked them, so a
pipeline first run in a thread that ends keeps its workers), and are stopped by ``close()``.
"""
from __future__ import annotations

import collections
import contextlib
import concurrent.futures as cf
import itertools
import mmap
import multiprocessing as mp
import os
import pickle
import select
import signal
import sys
import threading
import time
import traceback
import weakref
from multiprocessing import reduction

import numpy as np

ALIGN = 64  # byte alignment of every array in a slot
_SLOT_ROUND = 1 << 20  # slot sizes are rounded up to whole MiB, plus 1/8 headroom


class WorkerDied(RuntimeError):
    """A host worker process ended while it owed batches."""


def unavailable() -> str | None:
    """Why this process cannot have host workers (None if it can): they need fork, memfd and
    Unix sockets (Linux), and a daemonic process (a multiprocessing Pool's worker) may not start
    processes."""
    if not (sys.platform.startswith("linux") and hasattr(os, "memfd_create")
            and "fork" in mp.get_all_start_methods()):
        return "host_processes needs Linux (fork and memfd)"
    if mp.current_process().daemon:
        return "this is a daemonic process (a multiprocessing worker), which may not start processes"
    if _IN_WORKER:  # (a Keras sequence's process workers rebuild pipelines here)
        return "this process is itself a host worker, which runs its work single-threaded"
    return None


# set in a worker process: it never forks workers of its own (a nested fork inherited OpenCV's
# thread pool from a forked parent and hung on its condition variable: the Keras process workers
# in CI)
_IN_WORKER = False


# ---- the worker process ----------------------------------------------------------------------
class _Slot:
    """One shared-memory file of the worker, mapped; ``sent`` once its descriptor has crossed."""

    def __init__(self, sid, size):
        self.id, self.size, self.sent = sid, size, False
        self.fd = os.memfd_create(f"detaug-slot-{sid}", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)
        self.mm = mmap.mmap(self.fd, size)

    def close(self):
        self.mm.close()
        os.close(self.fd)


def _layout(sizes):
    """Offsets of buffers of ``sizes`` bytes packed at ALIGN, and the total."""
    spans, end = [], 0
    for n in sizes:
        spans.append((end, n))
        end += -(-n // ALIGN) * ALIGN
    return spans, end


def _die_with_parent(parent_pid):
    """SIGKILL this worker when the process ``parent_pid`` (its parent) ends, by any means.

    Not ``PR_SET_PDEATHSIG``: that fires when the *thread* that forked the worker exits, and a
    pipeline is often first run in a thread that ends (a helper thread, a per-epoch prefetch
    thread) while the process and its pipeline go on. A daemon thread watches the parent process
    instead: it blocks on a pidfd of the parent (readable when the whole process has exited; no
    polling), or where pidfds are missing (Linux < 5.3) checks ``os.getppid()`` once a second (a
    worker is re-parented when its parent dies)."""
    def gone():
        os.kill(os.getpid(), signal.SIGKILL)

    def watch_pidfd(fd):
        try:
            poll = select.poll()  # (not select.select: a forked worker's fds may pass 1024)
            poll.register(fd, select.POLLIN)
            while not poll.poll():  # readable once the parent process has exited
                pass
        finally:
            gone()

    def watch_ppid():
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        gone()

    fd = None
    try:
        fd = os.pidfd_open(parent_pid)
    except (AttributeError, OSError):
        pass
    if os.getppid() != parent_pid:  # the parent died before the watch began
        gone()
    # (checked after the pidfd is open: the pid then names the parent, not a reused pid)
    target, args = (watch_pidfd, (fd,)) if fd is not None else (watch_ppid, ())
    threading.Thread(target=target, args=args, daemon=True, name="detaug-parent-watch").start()


def _worker_main(conn, run, parent_pid, inherited, cv2_loaded):
    """Serve ``("task", id, key, prepared)`` with ``run(key, prepared)``; ``("free", slot)``
    returns a slot; ``("stop",)`` ends. Replies ``("ok", id, meta, slot, size, spans, retired)``
    (the slot's descriptor follows when it is new) or ``("err", id, exception, text)``."""
    global _IN_WORKER
    _IN_WORKER = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid)
    for c in inherited:  # the caller's ends of the other workers' sockets: EOF must reach them
        try:
            c.close()
        except OSError:
            pass
    if not cv2_loaded:  # one thread per worker: the parallelism is the workers (see _forking)
        import cv2

        cv2.setNumThreads(1)
    slots, free, ids, tasks = {}, [], itertools.count(), collections.deque()

    def receive(block):
        """Read what has arrived (wait for one message if ``block``); False on stop or EOF."""
        while block or conn.poll():
            block = False
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return False
            if msg[0] == "free":
                free.append(msg[1])
            elif msg[0] == "stop":
                return False
            else:
                tasks.append(msg)
        return True

    def take(total):
        """A free slot of at least ``total`` bytes (the smallest), or a new one; the slots
        retired to make room."""
        retired = []
        fits = [s for s in free if slots[s].size >= total]
        if fits:
            sid = min(fits, key=lambda s: slots[s].size)
        else:
            if free:  # a free slot too small: replace it (sizes of one pipeline rarely vary)
                old = max(free, key=lambda s: slots[s].size)
                free.remove(old)
                slots.pop(old).close()
                retired.append(old)
            size = -(-(total + total // 8) // _SLOT_ROUND) * _SLOT_ROUND
            sid = next(ids)
            slots[sid] = _Slot(sid, size)
            free.append(sid)
        free.remove(sid)
        return slots[sid], retired

    try:
        while True:
            if not tasks and not receive(True):
                break
            if not tasks:
                continue
            _, tid, key, prepared = tasks.popleft()
            try:
                bufs = []
                meta = pickle.dumps(run(key, prepared), protocol=5, buffer_callback=bufs.append)
            except BaseException as e:  # noqa: BLE001  (every error goes back to the caller)
                text = traceback.format_exc()
                try:
                    e.add_note(f"(in host worker pid {os.getpid()})\n{text}")
                    blob = pickle.dumps(e)
                    pickle.loads(blob)
                except Exception:
                    blob = None
                conn.send(("err", tid, blob, f"{type(e).__name__}: {e}\n{text}"))
                continue
            raws = [b.raw() for b in bufs]
            spans, total = _layout([r.nbytes for r in raws])
            if not total:
                conn.send(("ok", tid, meta, None, 0, spans, []))
                continue
            if not receive(False):
                break
            slot, retired = take(total)
            for (off, n), r in zip(spans, raws):
                slot.mm[off:off + n] = r
            del raws, bufs
            new = not slot.sent
            conn.send(("ok", tid, meta, slot.id, slot.size if new else 0, spans, retired))
            if new:
                reduction.send_handle(conn, slot.fd, parent_pid)
                slot.sent = True
    finally:
        for s in slots.values():
            s.close()
        conn.close()


# ---- the caller's side -----------------------------------------------------------------------
# A worker that owes batches is failed (its batches raise WorkerDied, naming it and why) when it
# has been stopped (SIGSTOP, SIGTSTP, a debugger) for STOPPED_S seconds, or has sent nothing for
# STALL_S seconds; it is killed. None: no limit. Checked every WATCH_S seconds.
STOPPED_S = 10.0
STALL_S = 600.0
WATCH_S = 1.0


def _proc_state(pid) -> str:
    """The state letter of process ``pid`` in /proc ('R', 'S', 'T' stopped, 't' traced, 'Z'
    zombie, ...), or '' where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def _watch(ref):
    """Fail and kill the workers of ``ref()`` that owe work and are stopped, gone or silent
    (see STOPPED_S, STALL_S); ends when the HostWorkers is closed or collected."""
    while True:
        time.sleep(WATCH_S)
        self = ref()
        if self is None or self._closed:
            return
        now = time.monotonic()
        for w in self.workers:
            if w.dead is not None or not w.pending:
                w.stopped_since = None
                continue
            state = _proc_state(w.proc.pid)
            why = None
            if state in ("Z", "X", "") and w.proc.exitcode is not None:
                code = w.proc.exitcode
                why = (f"was killed by signal {-code}" if code < 0 else f"exited with code {code}")
            elif state in ("T", "t"):
                w.stopped_since = w.stopped_since or now
                if STOPPED_S is not None and now - w.stopped_since >= STOPPED_S:
                    why = (f"has been stopped (state {state!r}: SIGSTOP, SIGTSTP or a debugger) "
                           f"for {now - w.stopped_since:.0f} s (host_workers.STOPPED_S)")
            else:
                w.stopped_since = None
            if why is None and STALL_S is not None and now - w.heard >= STALL_S:
                why = (f"has sent nothing for {now - w.heard:.0f} s while it owed work "
                       "(host_workers.STALL_S)")
            if why is not None:
                self._fail(w, f"host worker {w.index} (pid {w.proc.pid}) {why}")
                if w.proc.exitcode is None:  # (never a reaped pid: it may be another's now)
                    try:
                        os.kill(w.proc.pid, signal.SIGKILL)  # our child: it may be stopped
                    except OSError:
                        pass
        del self


def _settle(entry, result=None, error=None):
    """Give a pending task's future its result or error (a cancelled one drops it)."""
    if entry is None:
        return
    try:
        if error is not None:
            entry[0].set_exception(error)
        else:
            entry[0].set_result(result)
    except cf.InvalidStateError:
        pass  # cancelled (a reset or close): the result is dropped and its slot freed


class _Worker:
    def __init__(self, index, proc, conn):
        self.index, self.proc, self.conn = index, proc, conn
        self.send_lock = threading.Lock()
        self.maps = {}  # slot id -> mmap of this process
        self.pending = {}  # task id -> (future, key)
        self.dead = None  # why, once the worker is gone
        self.heard = time.monotonic()  # its last message (or the first task it then owed)
        self.stopped_since = None  # when it was first seen stopped (SIGSTOP, a debugger)


@contextlib.contextmanager
def _forking():
    """Around the forks: OpenCV's thread pool does not survive a fork (a child that touches it,
    even to resize it, waits forever on a condition variable its parent's threads held), so a
    loaded cv2 is set to one thread while the workers are forked (they inherit that: one thread
    each) and given its thread count back after. Yields whether cv2 was loaded; a worker that
    imports it itself sets one thread."""
    cv2 = sys.modules.get("cv2")
    before = cv2.getNumThreads() if cv2 is not None else None
    if cv2 is not None:
        cv2.setNumThreads(1)
    try:
        yield cv2 is not None
    finally:
        if cv2 is not None:
            cv2.setNumThreads(before)


class HostWorkers:
    """``n`` forked processes running ``run(key, prepared)``; :meth:`submit` gives a Future of
    the result, whose arrays live in the worker's shared memory until they are dropped."""

    def __init__(self, n, run, name="detaug-host", hold=False):
        ctx = mp.get_context("fork")
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        # hold: tasks submitted wait here until release() (the executor makes the first launch
        # in this process's threads, on every core, and lets the workers start after it)
        self._held = [] if hold else None
        self._groups = collections.OrderedDict()  # group -> its worker (submit)
        self.workers = []
        parent_ends = []
        with _forking() as cv2_loaded:
            for i in range(n):
                a, b = ctx.Pipe(duplex=True)
                parent_ends.append(a)
                proc = ctx.Process(target=_worker_main, name=f"{name}-{i}", daemon=True,
                                   args=(b, run, os.getpid(), list(parent_ends), cv2_loaded))
                proc.start()
                b.close()
                self.workers.append(_Worker(i, proc, a))
        self._readers = [threading.Thread(target=self._read, args=(w,), daemon=True,
                                          name=f"{name}-reader-{w.index}") for w in self.workers]
        for t in self._readers:
            t.start()
        threading.Thread(target=_watch, args=(weakref.ref(self),), daemon=True,
                         name=f"{name}-watch").start()

    @property
    def pids(self):
        return [w.proc.pid for w in self.workers]

    def submit(self, key, prepared, group=None) -> cf.Future:
        """Run ``key`` on the worker that owes the fewest results, or where ``group`` (any
        hashable: a run of consecutive launches) is given, on the worker that took the group's
        first launch while it lives (its caches then serve the group's later launches:
        detaug/runtime/decode_cache.py). Which worker runs a launch changes no value."""
        fut = cf.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the pipeline's host workers are closed")
            live = [w for w in self.workers if w.dead is None]
            if not live:
                raise WorkerDied(self.workers[0].dead)
            w = self._groups.get(group) if group is not None else None
            if w is None or w.dead is not None:
                w = min(live, key=lambda w: len(w.pending))
                if group is not None:
                    self._groups[group] = w
                    while len(self._groups) > 2 * len(self.workers):  # the recent groups
                        self._groups.popitem(last=False)
            tid = next(self._ids)
            if not w.pending:
                w.heard = time.monotonic()  # the stall clock runs while a worker owes work
            w.pending[tid] = (fut, key)
            if self._held is not None:
                self._held.append((w, tid, fut, key, prepared))
                return fut
        self._send_task(w, tid, key, prepared)
        return fut

    @property
    def holding(self) -> bool:
        return self._held is not None

    def release(self) -> None:
        """Send the tasks held since the start, in order (those cancelled meanwhile are dropped),
        and every later one at once. (Tasks submitted while the held ones are sent are held too,
        and sent after them: each worker gets its tasks in the order they were submitted.)"""
        while True:
            with self._lock:
                if self._held is None:
                    return
                batch = self._held
                if self._closed or not batch:
                    self._held = None
                    return
                self._held = []
            for w, tid, fut, key, prepared in batch:
                if fut.cancelled():
                    with self._lock:
                        w.pending.pop(tid, None)
                    continue
                self._send_task(w, tid, key, prepared)

    def _send_task(self, w, tid, key, prepared):
        try:
            with w.send_lock:
                w.conn.send(("task", tid, key, prepared))
        except (OSError, ValueError) as e:
            self._fail(w, f"host worker {w.index} (pid {w.proc.pid}) cannot take work ({e})")

    def _read(self, w):
        """The reader thread of one worker: results to futures, until EOF."""
        while True:
            try:
                msg = w.conn.recv()
                w.heard = time.monotonic()
                if msg[0] == "ok":
                    _, tid, meta, sid, size, spans, retired = msg
                    for old in retired:
                        mm = w.maps.pop(old, None)
                        if mm is not None:
                            mm.close()
                    if size:
                        fd = reduction.recv_handle(w.conn)
                        try:
                            w.maps[sid] = mmap.mmap(fd, size)
                        finally:
                            os.close(fd)
                    _settle(w.pending.pop(tid, None), self._unpack(w, meta, sid, spans))
                else:
                    _, tid, blob, text = msg
                    _settle(w.pending.pop(tid, None),
                            error=pickle.loads(blob) if blob else RuntimeError(text))
            except (EOFError, OSError):
                break
        w.proc.join(timeout=2)
        code = w.proc.exitcode
        how = (f"was killed by signal {-code}" if code is not None and code < 0 else
               f"exited with code {code}" if code is not None else "stopped answering")
        self._fail(w, f"host worker {w.index} (pid {w.proc.pid}) {how}")

    def _unpack(self, w, meta, sid, spans):
        if sid is None:
            return pickle.loads(meta)
        total = spans[-1][0] + spans[-1][1]
        region = np.frombuffer(w.maps[sid], np.uint8, count=total)  # one base for the batch
        result = pickle.loads(meta, buffers=[region[o:o + n] for o, n in spans])
        weakref.finalize(region, self._free, w, sid)
        return result

    def _free(self, w, sid):
        if self._closed or w.dead is not None:
            return
        try:
            with w.send_lock:
                w.conn.send(("free", sid))
        except (OSError, ValueError):
            pass

    def _fail(self, w, why):
        with self._lock:
            if w.dead is None:
                w.dead = why
            owed, w.pending = list(w.pending.values()), {}
        if self._closed:
            why = "the pipeline was closed"
        for entry in owed:
            key = entry[1]
            _settle(entry, error=WorkerDied(f"{why} while making batch {key[1]} of epoch {key[0]}"))

    def abandon(self):
        """In a forked child: these workers are the parent's. Never send to, wait for, free or
        stop them from here (the parent's ``close`` does)."""
        self._closed = True

    def close(self, wait=True):
        """Stop the workers (kill those that do not stop within 5 s when ``wait``)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for w in self.workers:
            try:
                with w.send_lock:
                    w.conn.send(("stop",))
            except (OSError, ValueError):
                pass
        if not wait:
            for w in self.workers:
                if w.proc.is_alive():
                    w.proc.terminate()
            return
        for w in self.workers:
            w.proc.join(timeout=5)
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(timeout=5)
        for t in self._readers:
            t.join(timeout=5)
        for w in self.workers:
            w.conn.close()
            for mm in w.maps.values():
                try:
                    mm.close()
                except BufferError:
                    pass  # arrays the user still holds keep the mapping (freed with them)
            w.maps.clear()
