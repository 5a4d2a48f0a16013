"""Dataset formats <-> canonical detection records. CPU only; imports neither detaug nor cupy.

The names below are loaded when first used (PEP 562): a pipeline reading COCO imports the COCO
reader only, not lxml (VOC), the TFRecord codec or the writers (start-up time)."""
import importlib
import os

_EXPORTS = {  # name -> its module ("" : the name is a module of the package)
    "limits": "", "read_coco": "coco", "DatasetError": "errors", "FolderDataset": "folder",
    "read_file_list": "folder", "read_folder": "folder", "Dataset": "records",
    "DetectionRecord": "records", "read_tfrecord": "tfrecord_od", "write_tfrecord": "tfrecord_od",
    "VOC_CLASSES": "voc", "read_voc": "voc", "read_voc_classes": "voc", "WriteReport": "writers",
    "write_coco": "writers", "write_voc": "writers", "write_yolo": "writers", "read_yolo": "yolo",
    "Ragged": "segments", "read_coco_instances": "coco_instances", "read_dota": "dota",
    "write_dota": "dota", "read_yolo_task": "yolo_tasks", "write_yolo_task": "yolo_tasks",
    "read_voc_instances": "voc_masks",
}

__all__ = [
    "Dataset", "DetectionRecord", "DatasetError", "FolderDataset", "VOC_CLASSES", "WriteReport",
    "read_coco", "read_voc", "read_voc_classes", "read_yolo", "read_folder", "read_file_list",
    "write_coco", "write_voc", "write_yolo", "read_tfrecord", "write_tfrecord",
    "Ragged", "read_coco_instances", "read_dota", "write_dota", "read_yolo_task",
    "write_yolo_task", "read_voc_instances",
]


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None and os.path.exists(os.path.join(os.path.dirname(__file__), f"{name}.py")):
        module = ""  # a module of the package not yet imported (readers.writers, ...)
    if module is None:
        raise AttributeError(f"module 'readers' has no attribute {name!r}")
    value = importlib.import_module(f".{module or name}", __name__)
    if module:
        value = getattr(value, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
