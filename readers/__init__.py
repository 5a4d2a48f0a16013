"""Dataset formats <-> canonical detection records. CPU only; imports neither detaug nor cupy."""
from . import limits
from .coco import read_coco
from .errors import DatasetError
from .folder import FolderDataset, read_file_list, read_folder
from .records import Dataset, DetectionRecord
from .tfrecord_od import read_tfrecord, write_tfrecord
from .voc import VOC_CLASSES, read_voc, read_voc_classes
from .writers import WriteReport, write_coco, write_voc, write_yolo
from .yolo import read_yolo

__all__ = [
    "Dataset", "DetectionRecord", "DatasetError", "FolderDataset", "VOC_CLASSES", "WriteReport",
    "read_coco", "read_voc", "read_voc_classes", "read_yolo", "read_folder", "read_file_list",
    "write_coco", "write_voc", "write_yolo", "read_tfrecord", "write_tfrecord",
]
