"""detaug: data loading and box-aware augmentation for object detection, on the GPU or the CPU.

``import detaug`` needs only the core dependencies (numpy, Pillow, OpenCV, lxml, pycocotools):
cupy, torch and keras are imported where they are used.

This module is the facade: it registers every op (detaug's families in ``detaug.ops``, DALI's
ops under DALI's names in ``detaug.dali.ops``), then makes the two APIs from the one registry:
``detaug.fn`` (functional) and the classes on ``detaug.ops`` (``ops.Flip``, DALI's older style).
The layers below are folders: see docs/design.md, "Layers".
"""
import sys as _sys

from .core.batch import BoxBatch, ImageBatch
from . import ops
from .dali import ops as _dali_ops  # noqa: F401  (registration of DALI's ops)
from .ops.boxes import PaddedBoxes
from .ops.registry import make_classes as _make_classes, make_functional as _make_functional

fn = _make_functional()
# ``import detaug.fn as fn`` (DALI: ``import nvidia.dali.fn as fn``) finds the namespace object
_sys.modules.setdefault(__name__ + ".fn", fn)
ops.fn = fn
vars(ops).update({k: v for k, v in vars(_make_classes()).items() if not k.startswith("_")})

from . import fn  # noqa: E402,F811  (the object above; IDEs read this import: detaug/fn.pyi)
from . import types  # noqa: E402  (detaug.types, as nvidia.dali.types: `import detaug as dali`)
from .pipeline import Pipeline, pipeline_def  # noqa: E402

__version__ = "0.1.0"
__all__ = ["fn", "ops", "types", "Pipeline", "pipeline_def", "ImageBatch", "BoxBatch", "PaddedBoxes"]
