"""Canonical detection records: what every reader produces and every writer consumes.

Coordinates follow docs/design.md ("Data model", "Coordinates"): a box is float32
``[x0, y0, x1, y1]`` in absolute pixels of the stored image grid, continuous coordinates (the
image covers ``[0, W] x [0, H]``).
Labels are contiguous and 0-based; ``Dataset.category_ids[label]`` is the dataset's own id.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .segments import Ragged


@dataclass
class DetectionRecord:
    """One image and its annotations.

    Attributes:
        path: absolute path of the image file.
        width, height: stored image size in pixels (0 only where unknown).
        boxes: float32 (N, 4) xyxy, absolute continuous pixel coordinates.
        labels: int64 (N,), contiguous 0-based class indices.
        fields: per-box arrays of length N, e.g. ``iscrowd`` (uint8), ``difficult`` (uint8),
            ``truncated`` (uint8), ``annotation_id`` (int64). Every field stays aligned with
            ``boxes``: whoever drops a box drops its fields in the same step.
        image_id: the dataset's own image id (COCO int id, VOC file stem).
        extra: anything the source held that has no canonical slot, keyed by name; writers
            carry what their target can hold and report the rest. A list value is per box
            (aligned with ``boxes``, None where absent), any other value is per image:
            ``segmentation`` (COCO masks), ``box_keys`` (list of dicts: the annotation keys /
            VOC object elements no field models, e.g. ``area``, ``pose``, ``occluded``,
            ``part``), ``image_keys`` (dict: COCO image keys such as ``license``, ``coco_url``;
            VOC elements such as ``source``, ``owner``, ``segmented``). Values are JSON-like:
            str / numbers, dicts and lists of them (VOC elements give text and nested dicts).
    """

    path: str
    width: int
    height: int
    boxes: np.ndarray
    labels: np.ndarray
    fields: dict = field(default_factory=dict)
    image_id: object = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.boxes = np.asarray(self.boxes, dtype=np.float32).reshape(-1, 4)
        self.labels = np.asarray(self.labels, dtype=np.int64).reshape(-1)
        n = len(self.boxes)
        if len(self.labels) != n:
            raise ValueError(f"{self.path}: {n} boxes but {len(self.labels)} labels")
        for name, values in self.fields.items():
            if len(values) != n:
                raise ValueError(f"{self.path}: field {name!r} has {len(values)} values for {n} boxes")

    @property
    def num_boxes(self) -> int:
        return len(self.boxes)

    def subset(self, keep) -> "DetectionRecord":
        """A copy holding only the boxes where the bool mask ``keep`` is set, with their
        fields and per-box (list) extras."""
        keep = np.asarray(keep, dtype=bool)
        idx = np.flatnonzero(keep)
        extra = {k: ([v[i] for i in idx] if isinstance(v, list) else v)
                 for k, v in self.extra.items()}
        return DetectionRecord(self.path, self.width, self.height, self.boxes[keep],
                               self.labels[keep],
                               {k: v[keep] if isinstance(v, Ragged) else np.asarray(v)[keep]
                                for k, v in self.fields.items()},
                               self.image_id, extra)


def trusted_record(path, width, height, boxes, labels, fields, image_id, extra):
    """A :class:`DetectionRecord` from parts a reader has already made canonical (float32
    (N, 4) boxes, int64 (N,) labels, fields of length N, int sizes): the same object as the
    constructor gives, without ``__post_init__``'s conversions and checks (a reader building
    a million records pays them a million times)."""
    record = object.__new__(DetectionRecord)
    record.path = path
    record.width = width
    record.height = height
    record.boxes = boxes
    record.labels = labels
    record.fields = fields
    record.image_id = image_id
    record.extra = extra
    return record


@dataclass
class Dataset:
    """Records plus the class list.

    Attributes:
        records: one DetectionRecord per image, in a stable order (the sample index used by
            detaug's random streams is the position in this list): a list, or a sequence that
            makes each record when first asked for (read_coco's ``RecordTable``).
        class_names: name of each 0-based label.
        category_ids: the dataset's own id of each label (COCO category id; for VOC/YOLO the
            label itself), so that writers and evaluators can map back.
        root: the dataset root that every record path lies under.
        skipped: (file, reason) for each item skipped under ``on_error="skip"``.
        clipped: number of boxes that reached past an image edge and were clipped to it.
        dropped: what the reader's own options removed (not faults), as ``{what: count}``,
            e.g. ``{"empty images (skip_empty)": 3}``, so that nothing leaves without a count.
        emptied: images kept with no boxes because every box they had was bad and skipped
            (``on_error="skip"``).
        instances: what the instance fields of the records need beside them (readers/segments.py):
            ``keypoint_names`` (K names), ``skeleton`` (0-based pairs of keypoints),
            ``flip_index`` (the keypoint each one becomes in a mirror image); empty without
            keypoints.
        extra: dataset-level content with no canonical slot: COCO's top-level keys besides
            images / annotations / categories (``info``, ``licenses``, ...), and
            ``category_keys`` (one dict per label: category keys besides id and name, such
            as ``supercategory``).
    """

    records: list
    class_names: list
    category_ids: list = None
    root: str = ""
    skipped: list = field(default_factory=list)
    clipped: int = 0
    dropped: dict = field(default_factory=dict)
    emptied: int = 0
    extra: dict = field(default_factory=dict)
    instances: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.category_ids is None:
            self.category_ids = list(range(len(self.class_names)))

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i) -> DetectionRecord:
        return self.records[i]

    def __iter__(self):
        return iter(self.records)  # (a RecordTable makes its records a run at a time)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)
