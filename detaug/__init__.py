"""detaug: data loading and box-aware augmentation for object detection, on the GPU or the CPU.

``import detaug`` needs only the core dependencies (numpy, Pillow, OpenCV, lxml, pycocotools):
cupy, torch and keras are imported where they are used.
"""
from .batch import BoxBatch, ImageBatch
from . import ops
from . import fn  # the namespace detaug.ops registered as detaug.fn (IDEs read detaug/fn.pyi)
from .ops.boxes import PaddedBoxes
from .pipeline import Pipeline, pipeline_def

__version__ = "0.1.0"
__all__ = ["fn", "ops", "Pipeline", "pipeline_def", "ImageBatch", "BoxBatch", "PaddedBoxes"]
