"""Training targets computed from boxes: RetinaNet anchors and their encoding (``retinanet``).
Imports core and kernels."""
