"""Prefetching executor: a host stage in worker processes or threads, a device stage in order.

Batch k+1's host work (reading, CPU decode, CPU ops) runs in the host workers while batch k's
device work is queued on the pipeline's stream (or batch k is consumed). A CPU pipeline's host
stage runs in ``host_processes`` forked processes (host_workers.py), one launch each at a time,
with results in shared memory; otherwise in threads of this process. Exceptions in a worker
reach the caller through the batch's future (never a hang), with the sample's file named.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import threading

import numpy as np

from .context import BatchContext  # noqa: F401 (importable here as before)
from .errors import SampleError  # noqa: F401


class Executor:
    def __init__(self, pipeline):
        self.p = pipeline
        self.queue = collections.deque()
        self.workers = self.pool = self.batch_pool = self.device_pool = None
        if pipeline.host_processes:
            from .host_workers import HostWorkers

            # forked first, before this executor starts any thread
            self.workers = HostWorkers(pipeline.host_processes, pipeline._run_host_job)
            return
        self.pool = cf.ThreadPoolExecutor(max(1, pipeline.num_threads), thread_name_prefix="detaug-host")
        self.batch_pool = cf.ThreadPoolExecutor(max(1, pipeline.prefetch_queue_depth),
                                                thread_name_prefix="detaug-batch")
        if pipeline.has_device_stage:
            streams = list(pipeline._streams)
            self._local = threading.local()

            def bind():  # each device worker keeps one stream for its whole life
                with self._bind_lock:
                    self._local.stream = streams.pop()
                    import cupy as cp

                    cp.cuda.Device(pipeline.device_id or 0).use()

            self._bind_lock = threading.Lock()
            self.device_pool = cf.ThreadPoolExecutor(len(streams), thread_name_prefix="detaug-device",
                                                     initializer=bind)

    def submit(self, key):
        """Queue the launch ``key = (epoch, first batch, batch count)``; source ops read in order here."""
        prepared = self.p._prepare(key)
        if any(isinstance(v, dict) and v.get("end") for v in prepared.values()):
            return False  # an iterable source is spent: the epoch ends here
        if self.workers is not None:
            self.queue.append((key, self.workers.submit(key, prepared)))
            return True
        fut = self.batch_pool.submit(self.p._run_host, key, prepared, self.pool)
        if self.device_pool is not None:
            fut = self.device_pool.submit(
                lambda f=fut: self.p._run_device(f.result(), self.pool, self._local.stream))
        self.queue.append((key, fut))
        return True

    def pop(self):
        key, fut = self.queue.popleft()
        return key, fut.result()

    def clear(self):
        for _, fut in self.queue:
            fut.cancel()
        for _, fut in self.queue:
            try:
                fut.result()
            except BaseException:
                pass
        self.queue.clear()

    def run_now(self, key, prepared):
        """The host result of ``key`` outside the queue (random access), on a worker."""
        if self.workers is not None:
            return self.workers.submit(key, prepared).result()
        return self.p._run_host(key, prepared, self.pool)

    def shutdown(self, wait=True):
        if wait:
            self.clear()
        if self.workers is not None:
            self.workers.close(wait=wait)
        for pool in (self.batch_pool, self.device_pool, self.pool):
            if pool is not None:
                pool.shutdown(wait=wait, cancel_futures=True)
