"""The runtime layer: how batches are made. Host side: ``context`` (BatchContext),
``executor``, ``host_workers`` (the host stage in worker processes), ``retries`` (on_error="skip").
The GPU stage is ``runtime/gpu``."""
