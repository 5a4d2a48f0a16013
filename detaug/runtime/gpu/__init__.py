"""The GPU stage of a Pipeline: ``device_stage`` (launches), ``decode_proc`` (decode processes),
``plan_ahead`` (host planning of launches), ``handout`` (batches held until the caller's queued
work on them has run), ``memory_plan`` (the budget in bytes), ``launch_profile``."""
