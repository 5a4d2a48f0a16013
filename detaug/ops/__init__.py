"""Op families; importing this package registers every op and builds ``fn`` and the class API.

The class API lives on this module itself, as DALI's ``ops``: ``ops.Flip``, ``ops.readers.COCO``,
``ops.decoders.Image``, ``ops.random.Uniform``.
"""
from . import boxes, color, crops, decode, geometry, rand, sources, targets, tfrecord  # noqa: F401  (registration)
from .registry import REGISTRY, make_classes, make_functional, op_table

fn = make_functional()
globals().update({k: v for k, v in vars(make_classes()).items() if not k.startswith("_")})

__all__ = ["fn", "REGISTRY", "op_table"]
