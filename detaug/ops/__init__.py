"""detaug's op families; importing this package registers each of them.

The class API lives on this module, as DALI's ``ops``: ``ops.Flip``, ``ops.readers.COCO``,
``ops.decoders.Image``, ``ops.random.Uniform``. The facade (``detaug/__init__.py``) attaches it,
with ``detaug.fn``, once every op is registered: detaug's families here and DALI's ops under
their own names in ``detaug/dali/ops.py`` (a layer above this one).
"""
from . import (boxes, color, crops, decode, displace, erase, external_source,  # noqa: F401
               geometry, instance_masks, multi, photometric, pixel, rand, recipes_geometry,
               sources, targets, tfrecord)  # (registration)
from .registry import REGISTRY, op_table

__all__ = ["fn", "REGISTRY", "op_table"]
