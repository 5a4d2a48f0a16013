"""``detaug.math`` (DALI's ``nvidia.dali.math``): importable so that a DALI program's imports
run; DALI's arithmetic on DataNodes (``math.clamp``, ``math.sqrt``, ``a * b`` inside a
pipeline, ...) is not in detaug, and each function raises one line naming itself and pointing
to docs/dali.md#not-in-detaug."""


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    raise AttributeError(f"detaug.math.{name}: DALI's math on DataNodes is not in detaug; see "
                         "docs/dali.md#not-in-detaug (compute such values in an external_source "
                         "or on the pipeline's outputs)")
