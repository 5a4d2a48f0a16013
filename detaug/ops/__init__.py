"""Op families; importing this package registers every op and builds ``fn`` and the class API.

The class API lives on this module itself, as DALI's ``ops``: ``ops.Flip``, ``ops.readers.COCO``,
``ops.decoders.Image``, ``ops.random.Uniform``.
"""
import sys

from . import boxes, color, compat, crops, decode, geometry, rand, sources, targets, tfrecord  # noqa: F401  (registration)
from .. import types  # noqa: F401  (detaug.types, as nvidia.dali.types, for `import detaug as dali`)
from .registry import REGISTRY, make_classes, make_functional, op_table

fn = make_functional()
# ``import detaug.fn as fn`` (DALI: ``import nvidia.dali.fn as fn``) finds the namespace object
sys.modules.setdefault(__name__.rsplit(".", 1)[0] + ".fn", fn)
globals().update({k: v for k, v in vars(make_classes()).items() if not k.startswith("_")})

__all__ = ["fn", "REGISTRY", "op_table"]
