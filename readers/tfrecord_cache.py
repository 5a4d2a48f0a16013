"""A cache of each TFRecord shard's fast index (``readers.tfrecord_scan``), so that a dataset is
scanned once, not at every start.

Where: ``<folder of the shard>/.detaug-index/<shard name>.index``; where that folder cannot
be written, ``$XDG_CACHE_HOME/detaug/tfrecord-index/`` (``~/.cache`` without it), named by a
hash of the shard's real path. ``read_tfrecord(index_cache=False)`` or the environment variable
``DETAUG_TFRECORD_INDEX_CACHE=0`` turn it off; ``index_cache="<folder>"`` puts it there.

What is trusted: nothing blindly. A cache file is used only when

- its format version is this module's ``VERSION``;
- its key equals the shard's now: real path, size, ``st_mtime_ns``, ``st_ctime_ns`` and inode
  (any write, truncation, ``touch``, copy or replacement changes one of them), and the
  ``readers.tfrecord.MAX_RECORD_BYTES`` it was built under;
- every array is there with its dtype, shape and CRC-32C as written, and the arrays agree with
  each other and with the file (records in order inside the file, images inside their
  records, box counts summing to the boxes);
- the length fields of its first, middle and last records, read again from the shard, say
  what it says.

Anything else (a torn or corrupt file, another version, a changed shard) is rebuilt from the
shard and written again. Files are written whole to a temporary name and renamed (atomic).
What the key cannot see: a shard rewritten with the same size, inode and both timestamps.
Timestamps are coarse (a few ms), so a shard changed less than ``RACY_NS`` (2 s) ago is not
cached at all; what remains is setting the clock back. The image bytes'
data CRC is checked again at every read (``read_record_at``) in any case.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import time

import numpy as np

from . import tfrecord as T
from .tfrecord_scan import FLAGS, index_shard

VERSION = 6
# A shard changed less than this long ago is not cached: a second write within the same
# timestamp tick, at the same size, would leave the key unchanged ("racily clean", as git
# calls it). Such a shard is scanned at every read until it has settled.
RACY_NS = 2 * 10**9
_DIR = ".detaug-index"
_PER_RECORD = {"offset": np.int64, "length": np.int64, "img_start": np.int64,
               "img_stop": np.int64, "width": np.int64, "height": np.int64, "nbox": np.int64,
               "clipped": np.int64, "area_present": np.bool_, "image_id_int": np.int64,
               "image_id_is_int": np.bool_,
               **{f"flag_present_{f}": np.bool_ for f in FLAGS}}
_PER_BOX = {"ids": np.int64, "text_code": np.int64, "area": np.float32,
            **{f"flag_{f}": np.uint8 for f in FLAGS}}
_OTHER = {"boxes": np.float32, "slow_offset": np.int64,
          "slow_length": np.int64}
ARRAYS = {**_PER_RECORD, **_PER_BOX, **_OTHER}


def enabled(index_cache) -> bool:
    if index_cache is None:
        return os.environ.get("DETAUG_TFRECORD_INDEX_CACHE", "1") not in ("0", "", "false")
    return index_cache is not False


def cache_paths(path, index_cache=None) -> list:
    """Where the cache of shard ``path`` is looked for, in order (and written: the first
    writable)."""
    real = os.path.realpath(path)
    if isinstance(index_cache, (str, os.PathLike)):
        return [os.path.join(os.fspath(index_cache), _hashed(real))]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [os.path.join(os.path.dirname(real), _DIR, os.path.basename(real) + ".index"),
            os.path.join(base, "detaug", "tfrecord-index", _hashed(real))]


def _hashed(real):
    return hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:32] + ".index"


def shard_key(path) -> dict:
    st = os.stat(path)
    return {"path": os.path.realpath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns, "inode": st.st_ino,
            "max_record_bytes": T.MAX_RECORD_BYTES}


def load_index(path, index_cache=None) -> dict:
    """The fast index of shard ``path``: from its cache when that is valid, else scanned (and
    the cache written). Raises what ``index_shard`` raises."""
    if not enabled(index_cache):
        return index_shard(path)
    try:
        key = shard_key(path)
    except OSError:
        return index_shard(path)  # it names the fault
    places = cache_paths(path, index_cache)
    for place in places:
        index = _load(place, key, path)
        if index is not None:
            return index
    index = index_shard(path)
    settled = time.time_ns() - max(key["mtime_ns"], key["ctime_ns"]) > RACY_NS
    if settled and shard_key(path) == key:  # not changed lately, nor while it was scanned
        for place in places:
            if _save(place, key, index):
                break
    return index


def _crc(a) -> int:
    return T.crc32c(np.ascontiguousarray(a).tobytes())


MAGIC = b"detaug-tfrecord-index\n"


def _json_values(values):
    """A feature's values for the JSON header: bytes as ``{"bytes": [latin-1 text]}``."""
    if values and isinstance(values[0], bytes):
        return {"bytes": [v.decode("latin-1") for v in values]}
    return values


def _values(values):
    if isinstance(values, dict):
        return [v.encode("latin-1") for v in values["bytes"]]
    if not isinstance(values, list):
        raise ValueError("feature values are not a list")
    return values


def _save(place, key, index) -> bool:
    """Write the cache file: ``MAGIC``, the header's length (uint64) and CRC-32C (uint32), the
    JSON header (version, key, strings, and each array's dtype, shape, place and CRC-32C),
    then the arrays' bytes."""
    arrays, at, table = [], 0, {}
    for k in ARRAYS:
        a = np.ascontiguousarray(index[k])
        table[k] = {"dtype": a.dtype.str, "shape": list(a.shape), "at": at, "crc": _crc(a)}
        arrays.append(a)
        at += a.nbytes
    meta = {"version": VERSION, "key": key, "texts": index["texts"], "name": index["name"],
            "source_id": index["source_id"], "terminal": index["terminal"], "arrays": table,
            "others": [None if o is None else {k: _json_values(v) for k, v in o.items()}
                       for o in index["others"]]}
    head = json.dumps(meta).encode("utf-8")
    folder = os.path.dirname(place)
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(MAGIC + len(head).to_bytes(8, "little")
                    + T.crc32c(head).to_bytes(4, "little") + head)
            for a in arrays:
                f.write(a.data)
        os.replace(tmp, place)
        return True
    except OSError:  # a read-only folder: the next place, or no cache
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return False


def _load(place, key, path):
    """The cached index at ``place``, or None when it is missing or fails any check."""
    blob = _read_bounded(place, max_cache_bytes(key["size"]))
    if blob is None:
        return None
    try:
        if blob[:len(MAGIC)] != MAGIC:
            return None
        start = len(MAGIC) + 12
        size = int.from_bytes(blob[len(MAGIC):start - 4], "little")
        head = bytes(blob[start:start + size])
        if T.crc32c(head) != int.from_bytes(blob[start - 4:start], "little"):
            return None
        meta = json.loads(head.decode("utf-8"))
        if meta.get("version") != VERSION or meta.get("key") != key:
            return None
        base, index = start + size, {}
        for k, dtype in ARRAYS.items():
            info = meta["arrays"][k]
            dt, shape = np.dtype(info["dtype"]), tuple(int(v) for v in info["shape"])
            count = int(np.prod(shape, dtype=np.int64))
            at = base + int(info["at"])
            if dt != dtype or at + count * dt.itemsize > len(blob):
                return None
            a = np.frombuffer(blob, dt, count, at).reshape(shape)
            if _crc(a) != info["crc"]:
                return None
            index[k] = a
        for k in ("texts", "name", "source_id"):
            index[k] = meta[k]
        index["terminal"] = None if meta["terminal"] is None else tuple(meta["terminal"])
        index["others"] = [None if o is None else {k: _values(v) for k, v in o.items()}
                           for o in meta["others"]]
        if not _consistent(index, key["size"]) or not _headers_match(path, index):
            return None
    except (KeyError, TypeError, ValueError, OSError, UnicodeDecodeError, AttributeError,
            RecursionError):  # a crafted header nested past Python's stack: rebuilt too
        return None
    return index


def max_cache_bytes(shard_size: int) -> int:
    """The largest cache file that a shard of ``shard_size`` bytes can have: a record takes at
    least 16 bytes of the shard and at most ~100 bytes of arrays, a box 16 bytes (four floats)
    and ~48; texts are at most 6 times their bytes in JSON (``\\u00XX``). A bigger file is
    not read at all (a huge or crafted cache costs no memory)."""
    return 64 * int(shard_size) + (1 << 20)


def _read_bounded(place, limit):
    """The bytes of the cache file at ``place`` when it is a regular file of ``limit`` bytes
    at most, else None. Opened without blocking (a FIFO or device at the cache path would
    block ``open()`` forever) and checked to be a regular file before any read."""
    try:
        fd = os.open(place, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        blob = bytearray(st.st_size)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return blob if f.readinto(blob) == len(blob) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _consistent(ix, size) -> bool:
    n = len(ix["offset"])
    if any(ix[k].shape != (n,) for k in _PER_RECORD):
        return False
    nb = int(ix["nbox"].sum()) if n else 0
    if any(ix[k].shape != (nb,) for k in _PER_BOX) or ix["boxes"].shape != (nb, 4):
        return False
    if len(ix["name"]) != n or len(ix["source_id"]) != n or len(ix["others"]) != n \
            or (ix["nbox"] < 0).any():
        return False
    if len(ix["slow_offset"]) != len(ix["slow_length"]):
        return False
    if not ((ix["text_code"] >= -1) & (ix["text_code"] < len(ix["texts"]))).all():
        return False
    every = np.sort(np.concatenate([ix["offset"], ix["slow_offset"]]))
    length = np.concatenate([ix["length"], ix["slow_length"]])[
        np.argsort(np.concatenate([ix["offset"], ix["slow_offset"]]))]
    ends = every + 16 + length
    return bool((every[1:] >= ends[:-1]).all() and (ends <= size).all()
                and (0 <= ix["img_start"]).all() and (ix["img_start"] <= ix["img_stop"]).all()
                and (ix["img_stop"] <= ix["length"]).all())


def _headers_match(path, ix) -> bool:
    """The length fields of the first, middle and last records, read from the shard again."""
    n = len(ix["offset"])
    if not n:
        return True
    fd = os.open(path, os.O_RDONLY)
    try:
        for k in sorted({0, n // 2, n - 1}):
            head = os.pread(fd, 12, int(ix["offset"][k]))
            if len(head) < 12 or int.from_bytes(head[:8], "little") != int(ix["length"][k]) \
                    or int.from_bytes(head[8:], "little") != T.masked_crc(head[:8]):
                return False
    finally:
        os.close(fd)
    return True
