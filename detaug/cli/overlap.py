"""The converter's one source-and-destination overlap check, over real paths.

``detaug-convert --overwrite`` removes what DST held, and every run writes under DST. A source
may reach into DST, or DST into the source, through a symbolic link anywhere in it (a VOC
``JPEGImages`` that links to ``DST/images``, a YOLO ``labels/train`` that links into DST, a COCO
image whose name is a link): comparing the source's root folder alone misses those. This module
gathers every path the converter reads (the source's folders down to the format's data folders,
each image file and its folder, the annotation files), resolves each with ``os.path.realpath``
(every link on the way followed), and refuses a destination that holds any of them, equals
one of the folders, or lies inside one.
"""
from __future__ import annotations

import os

# How deep below a source root its folders are resolved: a VOC root's JPEGImages/ and
# ImageSets/Main/, a YOLO root's images/<split>/ and labels/<split>/. Files deeper than this are
# covered one by one (each record's image and its folder).
FOLDER_DEPTH = 2


class Overlap(ValueError):
    """The destination overlaps something the converter reads; the message names both."""


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def source_folders(roots, depth: int = FOLDER_DEPTH):
    """(shown path, real path) of each root and of every folder (or link to one) down to
    ``depth`` levels below it. Folders are listed, not files, so a big image folder costs
    one directory listing."""
    out, level = [], [(r, r) for r in roots]
    for _ in range(depth + 1):
        nxt = []
        for shown, path in level:
            out.append((shown, os.path.realpath(path)))
            try:
                entries = list(os.scandir(path))
            except OSError:
                continue
            for e in entries:
                try:
                    if e.is_dir():  # follows links: a linked folder is what the check is for
                        nxt.append((os.path.join(shown, e.name), e.path))
                except OSError:
                    continue
        level = nxt
    return out


def read_paths(dataset):
    """(shown path, real path) of every image file a dataset's records read, and of its folder."""
    seen, out = set(), []
    for record in dataset.records:
        for path in (record.path, os.path.dirname(record.path)):
            if path not in seen:
                seen.add(path)
                out.append((path, os.path.realpath(path)))
    return out


def check_overlap(dst_shown: str, dst_real: str, folders, files) -> None:
    """Raise :class:`Overlap` where the destination ``dst_real`` (a real path) holds a source
    folder or file, is one of the source folders, or lies inside one. ``folders`` and ``files``:
    (shown path, real path) pairs from :func:`source_folders` and :func:`read_paths`; a file's
    own folder only counts as held (a destination beside an image is allowed when that folder
    is not a source folder)."""
    for shown, real in folders:
        if _inside(real, dst_real):
            raise Overlap(f"source path {shown} resolves to {real}, inside the destination "
                          f"{dst_shown}: --overwrite would remove it; choose another destination")
        if _inside(dst_real, real):
            raise Overlap(f"destination {dst_shown} is inside the source folder {shown} "
                          f"(real path {real}): choose a folder outside the source")
    for shown, real in files:
        if _inside(real, dst_real):
            raise Overlap(f"source file {shown} resolves to {real}, inside the destination "
                          f"{dst_shown}: --overwrite would remove it; choose another destination")
