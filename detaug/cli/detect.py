"""``detaug-convert`` without ``--from``: the source's format, told from its layout.

The rules, first match wins (each looks at names only; nothing is parsed):

- a file ending ``.json``: ``coco`` (the annotations JSON);
- a file whose name holds ``.tfrecord``, a glob pattern, or a folder with ``*.tfrecord*`` files:
  ``tfrecord``;
- a folder with ``Annotations/``: ``voc``;
- a folder with ``images/`` and ``labels/``: ``yolo``;
- a folder with ``annotations.json`` (or ``annotations/*.json``): an error naming that JSON (a
  COCO source is the JSON file, not its folder).

Anything else is an error that names what was looked for and asks for ``--from``.
"""
from __future__ import annotations

import glob
import os


class UndetectedFormat(ValueError):
    """The source's layout names no format: give ``--from``."""


def detect_format(src: str) -> tuple:
    """``(format, reason)`` for source ``src`` (see the module's rules); UndetectedFormat else."""
    if os.path.isfile(src):
        name = os.path.basename(src).lower()
        if name.endswith(".json"):
            return "coco", "a .json file (COCO annotations)"
        if ".tfrecord" in name:
            return "tfrecord", "a .tfrecord file"
        raise UndetectedFormat(f"source {src} is a file that is neither .json (COCO) nor "
                               ".tfrecord: give --from")
    if not os.path.exists(src) and glob.has_magic(src):
        return "tfrecord", "a glob pattern (TFRecord files)"
    if not os.path.isdir(src):
        raise UndetectedFormat(f"source {src} does not exist")
    if glob.glob(os.path.join(glob.escape(src), "*.tfrecord*")):
        return "tfrecord", "a folder of .tfrecord files"
    if os.path.isdir(os.path.join(src, "Annotations")):
        return "voc", "a folder with Annotations/ (Pascal VOC)"
    if os.path.isdir(os.path.join(src, "images")) and os.path.isdir(os.path.join(src, "labels")):
        return "yolo", "a folder with images/ and labels/ (YOLO)"
    jsons = ([os.path.join(src, "annotations.json")] if os.path.isfile(os.path.join(src, "annotations.json"))
             else sorted(glob.glob(os.path.join(glob.escape(src), "annotations", "*.json"))))
    if jsons:
        raise UndetectedFormat(f"source {src} is a folder with COCO annotations: give the JSON "
                               f"itself as SRC ({jsons[0]})")
    raise UndetectedFormat(f"source {src}: no Annotations/ (VOC), images/ + labels/ (YOLO) or "
                           "*.tfrecord files (TFRecord), and not a .json file (COCO): give --from")


def choose_format(src: str, say) -> str:
    """The format of ``src``, with one line to ``say`` naming it and why (``--from`` left out)."""
    fmt, why = detect_format(src)
    say(f"detaug-convert: --from not given: reading {src} as {fmt} ({why})")
    return fmt
