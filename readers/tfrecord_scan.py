"""The fast index of one TFRecord shard in the Object Detection API layout: whole-shard framing
and a vectorised ``tf.train.Example`` scan limited to the features ``read_tfrecord`` reads.

:func:`index_shard` reads the file once and

1. walks the 12-byte headers (one ``struct.unpack_from`` a record; the position of a record
   depends on the length before it, so this walk is sequential), checks every length CRC at
   once (a table-driven CRC-32C in NumPy over the ``(N, 8)`` length fields) and each data CRC
   with google-crc32c (``readers.tfrecord.crc32c``);
2. walks the Example of every record in lockstep (NumPy over all records at once: step ``k``
   reads the ``k``-th map entry of every record), finds the keys by hashing their bytes (the
   hash is checked byte for byte) and reads the features: packed floats and varints are
   decoded by NumPy over all records, byte lists by a lockstep walk; features the layout does
   not model are read the same way and kept as lists (``extra["tfrecord_features"]``);
3. checks what ``tfrecord_od._decode`` checks (one image, a positive size, per-box lengths
   alike, labels >= 0, flags 0 / 1, boxes inside their images) over all records at once.

It is an exact *fast path*, not a second parser: a record is kept here only where the scan has
read it completely and found nothing to say. Everything else (a data CRC mismatch, a wire
form other than the canonical one -- unpacked or merged lists, a repeated map key, an empty
Feature --, a key that is not UTF-8, a missing size, any fault) is listed in
``slow`` and handed whole to the reference parser (``readers.tfrecord.parse_example`` and
``tfrecord_od._record``), which gives its values or names its fault. A fault in a length field
(the rest of the file cannot be located) is ``terminal``. Records keep file order.

The result is a dict of flat NumPy arrays (the cache in ``tfrecord_cache`` stores it as is).
The file is read into memory with ordinary reads, up to the end of what can be located
(``readers.tfrecord.read_locatable``): a file truncated by another process while it is read
gives a DatasetError naming it. (It is not mapped: with a mapping, a truncation during the scan
ends the process with SIGBUS.)
"""
from __future__ import annotations

import os
import struct

import numpy as np

from . import tfrecord as T
from ._common import validate_boxes
from .tfrecord_example import AREA, BOX_KEYS, FLAGS, LABEL, MODELED, TEXT, _sniff

ENCODED, FILENAME, SOURCE_ID = "image/encoded", "image/filename", "image/source_id"
WIDTH, HEIGHT, FORMAT = "image/width", "image/height", "image/format"
_KIND = {"bytes": 1, "float": 2, "int": 3}  # Feature's oneof field numbers
_Q = struct.Struct("<Q")


def _crc_table():
    t = np.zeros(256, np.uint32)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t[n] = c
    return t


_TABLE = _crc_table()


def masked_crc_rows(rows: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC-32C of each row of a ``(N, k)`` uint8 array, vectorised (the
    reference loop of ``readers.tfrecord.crc32c_python``, over all rows at once)."""
    c = np.full(len(rows), 0xFFFFFFFF, np.uint32)
    for j in range(rows.shape[1]):
        c = _TABLE[(c ^ rows[:, j]) & 0xFF] ^ (c >> np.uint32(8))
    c ^= np.uint32(0xFFFFFFFF)
    return ((c >> np.uint32(15)) | (c << np.uint32(17))) + np.uint32(0xA282EAD8)


# ---- framing --------------------------------------------------------------------------------
# Records walked between checks of their length CRCs: a walk over a zero-filled tail (what a
# cut-short copy leaves: every 16 zero bytes read as an empty record) stops within one chunk.
FRAME_CHECK_EVERY = 4096
_BAD_LENGTH_CRC = ("length CRC mismatch: not a TFRecord file, or corrupt at this record (the "
                   "rest of the file cannot be located)")


def _first_bad_head(arr, heads):
    """Index in ``heads`` of the first record header whose length CRC does not match, or None."""
    rows = arr[heads[:, None] + np.arange(12)]
    bad = np.flatnonzero(masked_crc_rows(rows[:, :8]) != rows[:, 8:].copy().view("<u4")[:, 0])
    return int(bad[0]) if len(bad) else None


def frame_shard(path, buf):
    """``(offsets, lengths, crc_ok, terminal)`` of the records in ``buf`` (the file's bytes):
    int64 arrays, the bool data-CRC check of each, and ``(offset, reason)`` of a fault in a
    length field (the records before it are listed) or None. Reasons are those of
    ``readers.tfrecord.iter_records``. Length CRCs are checked every ``FRAME_CHECK_EVERY``
    records as it walks: a zero-filled stretch ends it within one chunk, not the file's size."""
    size, arr = len(buf), np.frombuffer(buf, np.uint8)
    offs, lens, terminal, checked = [], [], None, 0
    off, unpack, limit = 0, _Q.unpack_from, T.MAX_RECORD_BYTES
    while off < size:
        if len(offs) - checked >= FRAME_CHECK_EVERY:
            k = _first_bad_head(arr, np.asarray(offs[checked:], np.int64))
            if k is not None:
                terminal = (offs[checked + k], _BAD_LENGTH_CRC)
                del offs[checked + k:], lens[checked + k:]
                break
            checked = len(offs)
        if size - off < 12:
            terminal = (off, f"truncated record header ({size - off} of 12 bytes at the end "
                             "of the file)")
            break
        (n,) = unpack(buf, off)
        if n > size - off - 16:
            terminal = (off, f"truncated record: {n} data bytes announced, "
                             f"{max(size - off - 16, 0)} left in the file")
            break
        if limit is not None and n > limit:
            terminal = (off, f"record of {n:,} bytes is over the limit of {limit:,} "
                             "(readers.tfrecord.MAX_RECORD_BYTES)")
            break
        offs.append(off)
        lens.append(n)
        off += 16 + n
    offs, lens = np.asarray(offs, np.int64), np.asarray(lens, np.int64)
    heads = offs if terminal is None else np.append(offs, terminal[0])
    heads = heads[heads + 12 <= size]
    k = _first_bad_head(arr, heads)
    if k is not None:  # the first bad length CRC ends the file (before any later fault)
        terminal = (int(heads[k]), _BAD_LENGTH_CRC)
        offs, lens = offs[:k], lens[:k]
    foot = arr[(offs + 12 + lens)[:, None] + np.arange(4)].copy().view("<u4")[:, 0]
    # google-crc32c takes bytes only (not a view): a slice of the map is one copy
    crc = getattr(T, "_gcrc", None)
    crc = T.crc32c if crc is None else crc.value
    data = np.fromiter((crc(buf[o + 12:o + 12 + n]) for o, n in
                        zip(offs.tolist(), lens.tolist())), np.uint32, len(offs))
    masked = ((data >> np.uint32(15)) | (data << np.uint32(17))) + np.uint32(0xA282EAD8)
    return offs, lens, masked == foot, terminal


# ---- vectorised protobuf ----------------------------------------------------------------------
def _varint(buf, pos, end, width=5):
    """``(value, next, ok)`` of the varints at ``pos`` (int64 arrays), each ending before
    ``end``; ``width`` bytes at most (5: lengths and tags)."""
    last = len(buf) - 1
    first = buf[np.minimum(pos, last)].astype(np.int64)
    one = (first < 0x80) & (pos < end)
    if one.all():  # the common case: one-byte varints
        return first, pos + 1, one
    second = buf[np.minimum(pos + 1, last)].astype(np.int64)
    two = ~one & (first >= 0x80) & (second < 0x80) & (pos + 1 < end)
    value = np.where(two, (first & 0x7F) | (second << 7), first)
    nxt, ok = pos + 1 + two, one | two
    if ok.all():  # lengths below 16 KiB
        return value, nxt, ok
    many = np.flatnonzero(~ok)
    v, x, o = _varint_wide(buf, pos[many], end[many], width)
    value[many], nxt[many], ok[many] = v, x, o
    return value, nxt, ok


def _varint_wide(buf, pos, end, width):
    idx = pos[:, None] + np.arange(width)
    b = buf[np.minimum(idx, len(buf) - 1)].astype(np.int64)
    stop = (b < 0x80) & (idx < end[:, None])
    k = stop.argmax(1)
    mask = np.arange(width) <= k[:, None]
    value = (((b & 0x7F) << (7 * np.arange(width))) * mask).sum(1)
    return value, pos + k + 1, stop.any(1)


def _items(buf, start, end, tag=0x0A, ordered=True):
    """The length-delimited fields ``tag`` that tile each span ``[start, end)``, walked in
    lockstep over all spans. Returns ``(owner, item start, item end, bad)``: items ordered by
    owner then position (``ordered=False``: by position in their span, then owner); ``bad``
    marks spans holding anything else."""
    pos, bad = start.copy(), np.zeros(len(start), bool)
    active = np.flatnonzero(pos < end)
    parts = []
    while len(active):
        p, e = pos[active], end[active]
        n, s, ok = _varint(buf, p + 1, e)
        ok &= (buf[p] == tag) & (s + n <= e)
        bad[active[~ok]] = True
        a, s, n = active[ok], s[ok], n[ok]
        parts.append((a, s, s + n))
        pos[a] = s + n
        active = a[s + n < end[a]]
    if not parts:
        z = np.zeros(0, np.int64)
        return z, z, z, bad
    owner, s, e = (np.concatenate(x) for x in zip(*parts))
    if not ordered:
        return owner, s, e, bad
    order = np.argsort(owner, kind="stable")
    return owner[order], s[order], e[order], bad


def _gather(buf, start, end):
    """The bytes of the spans, concatenated, and the (n + 1,) offsets of each in it."""
    n = end - start
    off = np.zeros(len(n) + 1, np.int64)
    np.cumsum(n, out=off[1:])
    idx = np.arange(off[-1]) + np.repeat(start - off[:-1], n)
    return buf[idx], off


_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], np.uint64)  # the low k bytes


def _words(buf, start, n, width):
    """``(M, width)`` uint64: the bytes of each span as little-endian words, zero past its
    length (one gather, through an array of the unaligned words at every byte)."""
    limit = len(buf) - 8  # the last byte a whole word starts at
    at = start[:, None] + 8 * np.arange(width)
    left = np.clip(n[:, None] - 8 * np.arange(width), 0, 8)
    if limit >= 0:
        every = np.ndarray((limit + 1,), "<u8", buf, 0, (1,))
        out = every[np.minimum(at, limit)]
    else:
        out = np.zeros(at.shape, np.uint64)
    for i, j in zip(*np.nonzero((left > 0) & (at > limit))):  # the file's last bytes
        out[i, j] = int.from_bytes(bytes(buf[at[i, j]:at[i, j] + 8]), "little")
    return out & _MASKS[left]


def unique_spans(buf, start, end):
    """``(codes, values)``: the byte strings of the spans, numbered so that equal strings have
    equal codes (``values[code]`` is the string as bytes). Rows are hashed (their words and
    length), numbered by hash one distinct value at a time (few: keys, class names), then
    compared word for word with their value's first row; past 64 distinct values, and for a
    hash collision, rows are numbered through a dict."""
    codes = np.full(len(start), -1, np.int64)
    if not len(start):
        return codes, []
    n = end - start
    words = _words(buf, start, n, max(1, -(-int(n.max()) // 8)))
    h = n.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    for j in range(words.shape[1]):
        h = (h ^ words[:, j]) * np.uint64(0x100000001B3)
        h ^= h >> np.uint64(29)
    first = []
    while len(first) < 64:
        i = int(np.argmax(codes < 0))
        if codes[i] >= 0:
            break
        codes = np.where(h == h[i], len(first), codes)
        first.append(i)
    first = np.asarray(first, np.int64)
    rep = first[np.maximum(codes, 0)]
    exact = (codes >= 0) & (n == n[rep]) & (words == words[rep]).all(1)
    values = [bytes(buf[start[i]:end[i]]) for i in first.tolist()]
    rest = np.flatnonzero(~exact)
    if len(rest):  # many distinct values, or a collision
        table = {v: k for k, v in enumerate(values)}
        for i in rest.tolist():
            codes[i] = table.setdefault(bytes(buf[start[i]:end[i]]), len(table))
        values = list(table)
    return codes, values


def _packed(buf, start, end):
    """A packed repeated scalar field (``0a len bytes``, or nothing) tiling each span: the
    payload ``(start, end)`` and ok."""
    s, e, ok = start.copy(), start.copy(), np.ones(len(start), bool)
    full = np.flatnonzero(start < end)
    if len(full):
        a, b = start[full], end[full]
        n, s[full], good = _varint(buf, a + 1, b)
        e[full] = s[full] + n
        ok[full] = good & (buf[a] == 0x0A) & (e[full] == b)
    return s, e, ok


def _floats(buf, start, end):
    """float32 values of the payloads and their counts; ok where a payload is whole floats."""
    ok = (end - start) % 4 == 0
    raw, off = _gather(buf, start, np.where(ok, end, start))
    return raw.view("<f4"), (off[1:] - off[:-1]) // 4, ok


def _int64s(buf, start, end):
    """int64 values of packed varints (two's complement) and their counts; ok where each
    payload is whole varints of 10 bytes at most, within 64 bits."""
    raw, off = _gather(buf, start, end)
    nonempty = end > start
    if not len(raw):
        return np.zeros(0, np.int64), np.zeros(len(start), np.int64), np.ones(len(start), bool)
    ok = ~nonempty | (raw[np.maximum(off[1:] - 1, 0)] < 0x80)
    term = raw < 0x80
    term[off[1:][nonempty] - 1] = True  # no varint runs into the next payload (ok says why)
    first = np.flatnonzero(np.r_[True, term[:-1]]) if len(raw) else np.zeros(0, np.int64)
    vid = np.cumsum(term) - term
    j = np.arange(len(raw)) - first[np.minimum(vid, len(first) - 1)] if len(raw) else vid
    over = (j > 9) | ((j == 9) & (raw > 1))
    owner = np.repeat(np.arange(len(start)), end - start)
    ok &= ~np.bincount(owner[over], minlength=len(start)).astype(bool)
    contrib = (raw & 0x7F).astype(np.uint64) << np.minimum(7 * j, 63).astype(np.uint64)
    values = np.bitwise_or.reduceat(contrib, first) if len(first) else np.zeros(0, np.uint64)
    counts = np.bincount(owner[term], minlength=len(start))
    return values.view(np.int64), counts, ok


def _strings(buf, start, end):
    """``(texts, bad)``: the spans decoded as UTF-8 (one decode for all when they are ASCII),
    and the indices of the spans that are not UTF-8 (their text is "")."""
    raw, off = _gather(buf, start, end)
    bounds = off.tolist()
    if not len(raw) or raw.max() < 0x80:
        text = raw.tobytes().decode("ascii")
        return [text[a:b] for a, b in zip(bounds[:-1], bounds[1:])], []
    out, bad = [], []
    for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        try:
            out.append(raw[a:b].tobytes().decode("utf-8"))
        except UnicodeDecodeError:
            out.append("")
            bad.append(k)
    return out, bad


# ---- one shard ------------------------------------------------------------------------------
def index_shard(path) -> dict:
    """The fast index of one TFRecord file (see the module's docstring for what it holds).

    Raises:
        DatasetError: the file is missing, not a regular file, GZIP-compressed, or truncated
        while it is read.
    """
    path = os.fspath(path)
    data = T.read_locatable(path)
    T.refuse_gzip(path, data[:2])
    return _scan(path, data)


class _Shard:
    """The records of one shard while they are scanned: ``slow`` collects the ones for the
    reference parser; the map entries of the others are ``rec, code, kind, ls, le``."""

    def __init__(self, buf, n):
        self.buf, self.n = buf, n
        self.slow = np.zeros(n, bool)

    def mark(self, records):
        self.slow[records] = True

    def feature(self, name, kind):
        """``(has, start, end)`` per record: the list payload of feature ``name`` (an empty
        span where absent); a record holding it as another kind goes to the reference."""
        has = np.zeros(self.n, bool)
        start, end = np.zeros(self.n, np.int64), np.zeros(self.n, np.int64)
        code = self.codes.get(name)
        if code is not None:
            sel = np.flatnonzero(self.code == code)
            r = self.rec[sel]
            self.mark(r[self.kind[sel] != _KIND[kind]])
            has[r], start[r], end[r] = True, self.ls[sel], self.le[sel]
        return has, start, end

    def single_bytes(self, name, required=False):
        """``(count, start, end)`` of a bytes feature of one value (more: reference)."""
        _, a, b = self.feature(name, "bytes")
        owner, vs, ve, bad = _items(self.buf, a, b)
        count = np.bincount(owner, minlength=self.n)
        self.mark(bad | (count > 1) | ((count == 0) if required else False))
        start, end = np.zeros(self.n, np.int64), np.zeros(self.n, np.int64)
        start[owner], end[owner] = vs, ve
        return count, start, end

    def numbers(self, name, kind):
        """``(has, values, counts)``: the packed values of a float or int64 feature."""
        has, a, b = self.feature(name, kind)
        s, e, ok = _packed(self.buf, a, b)
        values, counts, ok2 = (_floats if kind == "float" else _int64s)(self.buf, s, e)
        self.mark(~(ok & ok2))
        return has, values, counts


def _scan(path, m):
    offs, lens, crc_ok, terminal = frame_shard(path, m) if len(m) else (
        np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, bool), None)
    buf = np.frombuffer(m, np.uint8) if len(m) else np.zeros(1, np.uint8)
    sh = _Shard(buf, len(offs))
    sh.mark(~crc_ok)
    s, e = offs + 12, offs + 12 + lens
    n1, fs, ok = _varint(buf, s + 1, e)
    sh.mark(~(ok & (lens > 0) & (buf[s] == 0x0A) & (fs + n1 == e)))
    cand = np.flatnonzero(~sh.slow)
    owner, es, ee, bad = _items(buf, fs[cand], e[cand], ordered=False)
    sh.mark(cand[bad])
    _entries(sh, cand[owner], es, ee)
    return _features(path, sh, offs, lens, terminal)


def _entries(sh, rec, es, ee):
    """Map entries ``0a klen key 12 flen (tag llen list)``: their keys numbered by name."""
    buf, last = sh.buf, len(sh.buf) - 1
    kl, ks, ok = _varint(buf, es + 1, ee)
    ke = ks + kl
    ok &= (buf[es] == 0x0A) & (ke < ee) & (buf[np.minimum(ke, last)] == 0x12)
    fl, fs, ok2 = _varint(buf, ke + 1, ee)
    tag = buf[np.minimum(fs, last)]
    ok &= ok2 & (fs + fl == ee) & (fl > 0) & ((tag == 0x0A) | (tag == 0x12) | (tag == 0x1A))
    ll, ls, ok3 = _varint(buf, fs + 1, ee)
    ok &= ok3 & (ls + ll == ee)
    sh.mark(rec[~ok])
    rec, ks, ke, tag, ls, le = rec[ok], ks[ok], ke[ok], tag[ok], ls[ok], (ls + ll)[ok]
    code, values = unique_spans(buf, ks, ke)
    sh.codes, sh.others = {}, []
    for k, v in enumerate(values):
        try:
            name = v.decode("utf-8")
        except UnicodeDecodeError:  # the reference names the fault
            sh.mark(rec[code == k])
            continue
        sh.codes[name] = k
        if name not in MODELED:  # kept in extra["tfrecord_features"]
            sh.others.append(name)
    k = max(len(values), 1)
    twice = np.flatnonzero(np.bincount(rec * k + code, minlength=sh.n * k) > 1)
    sh.mark(twice // k)  # a key given twice (protobuf keeps the last: the reference reads it)
    sh.rec, sh.code, sh.kind, sh.ls, sh.le, sh.es = rec, code, tag >> 3, ls, le, es[ok]


def _first(values, counts):
    """The first value of each record's list (0 where it is empty)."""
    start = np.cumsum(counts) - counts
    return np.where(counts > 0, values[np.minimum(start, max(len(values) - 1, 0))]
                    if len(values) else 0, 0)


def _owners(counts):
    return np.repeat(np.arange(len(counts)), counts)


def _features(path, sh, offs, lens, terminal):
    """Read and check the modeled features; the records that pass, as flat arrays."""
    from ._common import CLIP_TOLERANCE_PX

    buf, n = sh.buf, sh.n
    _, img_s, img_e = sh.single_bytes(ENCODED, required=True)
    strings = {}
    for name in (FILENAME, SOURCE_ID, FORMAT):
        count, a, b = sh.single_bytes(name)
        if name == SOURCE_ID:
            sid_int, sid_is_int = _decimal(buf, np.where(count > 0, a, b), b)
        strings[name], bad = _strings(buf, a, b)  # "" where absent: read as absent
        sh.mark(bad)
    size = []
    for name in (WIDTH, HEIGHT):
        _, values, counts = sh.numbers(name, "int")
        v = _first(values, counts)
        sh.mark((counts != 1) | (v <= 0) | (v >= 2**31))
        size.append(v)
    cols = [sh.numbers(k, "float") for k in BOX_KEYS]
    nbox = cols[0][2]
    _, ids, id_counts = sh.numbers(LABEL, "int")
    _, ta, tb = sh.feature(TEXT, "bytes")
    t_owner, t_s, t_e, bad = _items(buf, ta, tb)
    t_counts = np.bincount(t_owner, minlength=n)
    sh.mark(bad | ((t_counts != 0) & (t_counts != nbox)))
    flags = {f: sh.numbers(key, "int") for f, key in FLAGS.items()}
    area = sh.numbers(AREA, "float")
    for has, values, counts in [(True, ids, id_counts), *flags.values(), area] + [
            (True, v, c) for _, v, c in cols[1:]]:  # box keys and labels count when absent
        sh.mark(has & (counts != nbox))
    sh.mark(_owners(id_counts)[ids < 0])
    for _, values, counts in flags.values():
        sh.mark(_owners(counts)[(values != 0) & (values != 1)])
    others = [(name, *_other(sh, name)) for name in sh.others]
    # texts, decoded once per distinct value
    fast = ~sh.slow
    t_keep = np.repeat(fast, t_counts)
    t_code, t_values = unique_spans(buf, t_s[t_keep], t_e[t_keep])
    texts = []
    for k, v in enumerate(t_values):
        try:
            texts.append(v.decode("utf-8"))
        except UnicodeDecodeError:
            texts.append(None)
            sh.mark(t_owner[t_keep][t_code == k])
    # boxes: normalised -> pixels, checked as tfrecord_od._decode checks them
    fast = ~sh.slow
    pick = [v[np.repeat(fast, c)].astype(np.float64) for _, v, c in cols]
    w = np.repeat(size[0][fast], nbox[fast]).astype(np.float64)
    h = np.repeat(size[1][fast], nbox[fast]).astype(np.float64)
    b = np.stack(pick, 1).reshape(-1, 4) * np.stack([w, h, w, h], 1)
    boxes, bad_box, _ = validate_boxes(b, w, h)
    box_owner = np.repeat(np.flatnonzero(fast), nbox[fast])
    sh.mark(box_owner[bad_box])
    keep = ~sh.slow
    kb = keep[box_owner]
    moved = (np.abs(np.clip(b[kb], 0.0, np.stack([w, h, w, h], 1)[kb]) - b[kb])
             > CLIP_TOLERANCE_PX).any(1)
    nb = nbox[keep]
    owner = _owners(nb)
    F = np.flatnonzero(keep)
    with_text = np.repeat(t_counts[keep] > 0, nb)
    text_code = np.full(int(nb.sum()), -1, np.int64)
    text_code[with_text] = t_code[keep[t_owner[t_keep]]]
    out = {
        "offset": offs[F], "length": lens[F], "img_start": img_s[F] - offs[F] - 12,
        "img_stop": img_e[F] - offs[F] - 12, "width": size[0][F], "height": size[1][F],
        "nbox": nb, "boxes": boxes[kb], "clipped": np.bincount(owner[moved], minlength=len(F)),
        "ids": ids[np.repeat(keep, id_counts)], "text_code": text_code,
        "area_present": area[0][F], "area": _per_box(area, keep, nb, np.float32),
        "slow_offset": offs[sh.slow], "slow_length": lens[sh.slow],
    }
    for field, numbers in flags.items():
        out[f"flag_present_{field}"] = numbers[0][F]
        out[f"flag_{field}"] = _per_box(numbers, keep, nb, np.uint8)
    out["image_id_int"], out["image_id_is_int"] = sid_int[F], sid_is_int[F]
    out["terminal"] = terminal
    out["others"] = _others_by_record(others, keep, F)
    out["texts"] = texts
    out["source_id"] = [strings[SOURCE_ID][k] for k in F.tolist()]
    out["name"] = _names(buf, F, offs, img_s, img_e, strings)
    return out


def _other(sh, name):
    """``(records, entry starts, values)`` of a feature this layout does not model: its
    values as ``tfrecord_od`` keeps them (bytes, or Python floats of the float32 values, or
    ints), one list per entry; a record whose list is not canonical goes to the reference."""
    buf = sh.buf
    sel = np.flatnonzero(sh.code == sh.codes[name])
    rec, kind, ls, le = sh.rec[sel], sh.kind[sel], sh.ls[sel], sh.le[sel]
    values = [None] * len(sel)
    for number in (1, 2, 3):
        part = np.flatnonzero(kind == number)
        if not len(part):
            continue
        if number == 1:
            owner, vs, ve, bad = _items(buf, ls[part], le[part])
            flat = [bytes(buf[a:b]) for a, b in zip(vs.tolist(), ve.tolist())]
            counts = np.bincount(owner, minlength=len(part))
        else:
            a, b, ok = _packed(buf, ls[part], le[part])
            got, counts, ok2 = (_floats if number == 2 else _int64s)(buf, a, b)
            flat, bad = got.tolist(), ~(ok & ok2)
        sh.mark(rec[part][bad])
        bounds = np.r_[0, np.cumsum(counts)].tolist()
        for j, k in enumerate(part.tolist()):
            values[k] = flat[bounds[j]:bounds[j + 1]]
    return rec, sh.es[sel], values


def _others_by_record(others, keep, F):
    """``{name: values}`` of each kept record's unmodeled features, in the order the record
    holds them (as ``parse_example`` fills its dict), or None."""
    found = []
    for name, rec, es, values in others:
        found += [(r, e, name, v) for r, e, v in zip(rec.tolist(), es.tolist(), values)
                  if keep[r]]
    by_record = {}
    for r, _, name, v in sorted(found, key=lambda t: (t[0], t[1])):
        by_record.setdefault(r, {})[name] = v
    return [by_record.get(k) for k in F.tolist()]


def _decimal(buf, start, end):
    """``(value, ok)``: each span read as a canonical decimal below 2**63 (``tfrecord_example.
    image_id``'s rule: ASCII digits, no leading zero, not empty)."""
    n = end - start
    ok = (n > 0) & (n <= 19)
    width = int(np.clip(n, 1, 19).max()) if len(n) else 1
    idx = start[:, None] + np.arange(width)
    d = buf[np.minimum(idx, len(buf) - 1)].astype(np.int64) - 48
    inside = np.arange(width) < n[:, None]
    ok &= ((d >= 0) & (d <= 9) | ~inside).all(1) & ((d[:, 0] != 0) | (n == 1))
    value = np.zeros(len(start), np.uint64)
    for j in range(width):
        step = inside[:, j] & ok
        value[step] = value[step] * np.uint64(10) + d[step, j].astype(np.uint64)
    ok &= value < np.uint64(2**63)
    return np.where(ok, value, 0).astype(np.int64), ok


def _per_box(numbers, keep, nb, dtype):
    """A per-box feature's values aligned with the boxes of the kept records (0 in records
    without it)."""
    has, values, counts = numbers
    out = np.zeros(int(nb.sum()), dtype)
    out[np.repeat(has[keep], nb)] = values[np.repeat(keep, counts)]
    return out


def _names(buf, F, offs, img_s, img_e, strings):
    """``image/filename``, or ``<source_id or offset>.<format or the image's kind>`` (as
    ``tfrecord_od._decode`` names a record)."""
    fname, sid, fmt = strings[FILENAME], strings[SOURCE_ID], strings[FORMAT]

    def made(k):
        kind = fmt[k] or _sniff(buf[img_s[k]:min(img_s[k] + 8, img_e[k])].tobytes())
        return f"{sid[k] or int(offs[k])}.{kind}"

    return [fname[k] or made(k) for k in F.tolist()]
