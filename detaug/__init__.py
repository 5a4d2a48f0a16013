"""detaug: data loading and box-aware augmentation for object detection, on the GPU or the CPU.

``import detaug`` needs only the core dependencies (numpy, Pillow, OpenCV, lxml, pycocotools):
cupy, torch and keras are imported where they are used.

This module is the facade: it registers every op (detaug's families in ``detaug.ops``, DALI's
ops under DALI's names in ``detaug.dali.ops``), then makes the two APIs from the one registry:
``detaug.fn`` (functional) and the classes on ``detaug.ops`` (``ops.Flip``, DALI's older style).
The layers below are folders: see docs/design.md, "Layers".
"""
import sys as _sys

from .runtime import startup as _startup

_startup.import_began()  # (pipe.stats['startup']: the import's phase)
from .core.batch import BoxBatch, ImageBatch
from . import ops
from .dali import ops as _dali_ops  # noqa: F401  (registration of DALI's ops)
from .dali import decoders as _dali_decoders  # noqa: F401  (decoders.image_random_crop)
from .dali import tensor_ops as _dali_tensor_ops  # noqa: F401  (box_encoder, cat, reshape, ...)
from .dali import transforms as _dali_transforms  # noqa: F401  (fn.transforms.*)
from .dali import segmentation as _dali_segmentation  # noqa: F401  (fn.segmentation.select_masks)
from .dali import ssd_crop as _dali_ssd_crop  # noqa: F401  (ops.SSDRandomCrop)
from .dali import arithmetic as _dali_arithmetic  # noqa: F401  (DataNode arithmetic, fn.math)
from .ops.boxes import PaddedBoxes
from .ops.registry import make_classes as _make_classes, make_functional as _make_functional

from .dali.fn_names import missing_message as _missing  # noqa: E402

fn = _make_functional(_missing)
# ``import detaug.fn as fn`` (DALI: ``import nvidia.dali.fn as fn``) finds the namespace object
_sys.modules.setdefault(__name__ + ".fn", fn)
ops.fn = fn
_classes = _make_classes(_missing)
vars(ops).update({k: v for k, v in vars(_classes).items() if not k.startswith("_")})


def _ops_getattr(name):
    """``ops.<Name>`` that no op makes: one line naming DALI's op (PEP 562)."""
    if name.startswith("_"):
        raise AttributeError(f"module 'detaug.ops' has no attribute {name!r}")
    return getattr(_classes, name)  # raises NotInDetaug, or gives one of DALI's namespaces


ops.__getattr__ = _ops_getattr

from . import fn  # noqa: E402,F811  (the object above; IDEs read this import: detaug/fn.pyi)
from . import types  # noqa: E402  (detaug.types, as nvidia.dali.types: `import detaug as dali`)
from .pipeline import Pipeline  # noqa: E402
from .pipeline_factory import pipeline_def  # noqa: E402
from . import math, tfrecord  # noqa: E402,F401  (nvidia.dali.math / .tfrecord: `dali.math.min`)

_startup.import_ended()
__version__ = "0.1.0"
__all__ = ["fn", "ops", "types", "Pipeline", "pipeline_def", "ImageBatch", "BoxBatch", "PaddedBoxes"]
