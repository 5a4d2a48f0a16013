"""Where the ported programs find their data: the repository's samples (examples/data), in
place of DALI_extra's (the one change besides the imports)."""
import os

ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "data")
COCO_IMAGES = os.path.join(ROOT, "coco-mini", "images")
COCO_ANNOTATIONS = os.path.join(ROOT, "coco-mini", "annotations.json")
VOC_IMAGES = os.path.join(ROOT, "voc-mini", "JPEGImages")
