"""The TFRecord container and ``tf.train.Example`` messages, without TensorFlow.

**Framing** (TensorFlow's ``core/lib/io/record_writer.cc``): a file is a sequence of records,
each ::

    uint64 length           little-endian
    uint32 masked_crc(length bytes)
    byte   data[length]
    uint32 masked_crc(data)

where ``masked_crc(b) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2**32)`` with ``c`` the
CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of ``b``. CRC-32C is computed by
``google-crc32c`` (hardware instructions) where it is installed, else by a table-driven pure
Python loop (same values; a few MB/s, so install ``detaug[tfrecord]`` for real datasets).

**Example** (``tensorflow/core/example/{example,feature}.proto``)::

    Example   { Features features = 1; }
    Features  { map<string, Feature> feature = 1; }        // entries: key = 1, value = 2
    Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                             Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed = true]; }
    Int64List { repeated int64 value = 1 [packed = true]; }

The parser follows protobuf's rules: unknown fields are skipped, packed and unpacked repeated
scalars are both accepted, a message field given twice is merged (its repeated values
concatenated), a map key given twice keeps the last value, int64 varints are two's complement.
Anything else (a truncated varint or field, a wire type that cannot occur here, a key that is
not UTF-8) raises :class:`ProtoError` with the byte position inside the record.

Files are untrusted: a length field beyond the end of the file or over ``MAX_RECORD_BYTES`` is
refused before anything is allocated for it.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from . import limits
from .errors import DatasetError

# One record's data (usually one encoded image with its annotations) may be at most this many
# bytes; settable like readers.limits (None: no limit besides the file's size).
MAX_RECORD_BYTES = 1 << 30

_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_U32 = struct.Struct("<I")
_GZIP_MAGIC = b"\x1f\x8b"


# ---- CRC-32C --------------------------------------------------------------------------------
def _make_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def crc32c_python(data, crc: int = 0) -> int:
    """CRC-32C of ``data`` (bytes-like), continuing from ``crc``: the reference loop."""
    c = crc ^ 0xFFFFFFFF
    table = _TABLE
    for b in bytes(data):
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


try:  # Google's CRC-32C: SSE4.2 / ARMv8 instructions, GB/s
    import google_crc32c as _gcrc

    def crc32c(data) -> int:
        """CRC-32C (Castagnoli) of ``data`` (bytes-like)."""
        return _gcrc.value(bytes(data) if isinstance(data, memoryview) and not data.contiguous
                           else data)

    CRC_IMPLEMENTATION = "google-crc32c (" + getattr(_gcrc, "implementation", "c") + ")"
except ImportError:  # pragma: no cover - exercised where google-crc32c is absent
    crc32c = crc32c_python
    CRC_IMPLEMENTATION = "pure Python (pip install google-crc32c for speed)"


def masked_crc(data) -> int:
    """TFRecord's masked CRC-32C of ``data``."""
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF


# ---- framing --------------------------------------------------------------------------------
def frame(data) -> bytes:
    """One record in the TFRecord layout (header, data, footer)."""
    head = struct.pack("<Q", len(data))
    return head + _U32.pack(masked_crc(head)) + bytes(data) + _U32.pack(masked_crc(data))


class RecordFault(DatasetError):
    """A bad record: the message names the file, the byte offset of the record and the fault.

    Attributes:
        offset: byte offset of the record's header in the file.
        resumable: False when the fault is in the length field: the position of the next
            record is unknown, so the rest of the file cannot be read.
    """

    def __init__(self, file, offset, reason, resumable):
        self.offset, self.resumable = int(offset), resumable
        super().__init__(file, f"byte offset {offset}: {reason}")


def open_record_file(path):
    """``path`` opened for reading, or a DatasetError naming the file and the fault (missing, a
    folder, no permission, not a regular file or over the size limit)."""
    try:
        limits.check_file(path, None, "TFRecord file")
        return open(path, "rb")
    except FileNotFoundError:
        raise DatasetError(path, "TFRecord file not found") from None
    except IsADirectoryError:
        raise DatasetError(path, "TFRecord file is a folder") from None
    except PermissionError as exc:
        raise DatasetError(path, f"cannot read the TFRecord file ({exc.strerror})") from None


def refuse_gzip(path, head):
    """DatasetError where the file's first bytes ``head`` are GZIP's magic number."""
    if head[:2] == _GZIP_MAGIC:
        raise DatasetError(path, "GZIP-compressed TFRecords are not read (random access "
                                 "needs plain records): decompress the file first")


WINDOW = 1 << 20  # bytes read at once while read_locatable walks the record headers


def read_locatable(path) -> bytes:
    """The bytes of the TFRecord file ``path`` as far as its records can be located: all of
    them, or up to the end of a record header whose length CRC fails (a zero-filled tail,
    garbage), at or past where a framing walk ends the file. The headers are walked first with
    reads of ``WINDOW`` bytes (one read a header where records are larger), the length CRC of
    each window's first header checked, so that neither memory nor time follows a tail that
    holds no record. Ordinary reads, no mapping: a file truncated meanwhile is a DatasetError
    naming it (a mapped read would end the process with SIGBUS); one that is missing or not a
    regular file too (:func:`open_record_file`)."""
    unpack = struct.Struct("<Q").unpack_from
    with open_record_file(path) as f:
        size = os.fstat(f.fileno()).st_size
        off, w0, win, end = 0, 0, b"", size
        while off + 12 <= size:
            if not w0 <= off <= w0 + len(win) - 12:
                f.seek(off)
                w0, win = off, f.read(WINDOW)
                if len(win) < min(WINDOW, size - off):
                    _truncated(path, size, off + len(win))
                if masked_crc(win[:8]) != int.from_bytes(win[8:12], "little"):
                    end = off + 12
                    break
            off += 16 + unpack(win, off - w0)[0]
        f.seek(0)
        data = f.read(end) if end else b""  # buffered: it reads on to ``end`` or the file's end
    if len(data) < end:
        _truncated(path, size, len(data))
    return data


def _truncated(path, size, got):
    raise DatasetError(path, f"the file had {size:,} bytes when opened and ended after {got:,} "
                             "while it was read: truncated meanwhile (by another process?); "
                             "read it again once it is whole")


def iter_records(path, *, verify=True):
    """Read the records of one TFRecord file in order.

    Yields:
        ``(offset, data)``: the byte offset of the record's header (its data starts 12 bytes
        later) and the data as ``bytes``; or, for a record whose data CRC does not match
        (``verify=True``), ``(offset, RecordFault)`` with ``resumable=True``: the caller raises
        or counts it, and the records after it follow (their position is known).

    Raises:
        RecordFault: a truncated header, data or footer, a length CRC that does not match, a
            length past the end of the file or over ``MAX_RECORD_BYTES``: the rest of the file
            cannot be located (``resumable=False``).
        DatasetError: the file is missing, not a regular file, or GZIP-compressed.
    """
    path = os.fspath(path)
    with open_record_file(path) as f:
        size = os.fstat(f.fileno()).st_size
        offset = 0
        while offset < size:
            head = f.read(12)
            if offset == 0:
                refuse_gzip(path, head)
            length = _check_header(path, offset, head, size, verify)
            data = f.read(length)
            foot = f.read(4)
            if len(data) < length or len(foot) < 4:
                raise RecordFault(path, offset, f"truncated record: {length} data bytes and a "
                                  f"4-byte CRC announced, {size - offset - 12} left in the "
                                  "file", False)
            if verify and _U32.unpack(foot)[0] != masked_crc(data):
                data = RecordFault(path, offset, "data CRC mismatch: the record is corrupt", True)
            yield offset, data
            offset += 16 + length


def _check_header(path, offset, head, size, verify):
    if len(head) < 12:
        raise RecordFault(path, offset, f"truncated record header ({len(head)} of 12 bytes at "
                          "the end of the file)", False)
    length, crc = _HEADER.unpack(head)
    if verify and crc != masked_crc(head[:8]):
        raise RecordFault(path, offset, "length CRC mismatch: not a TFRecord file, or corrupt "
                          "at this record (the rest of the file cannot be located)", False)
    if length > size - offset - 16:
        raise RecordFault(path, offset, f"truncated record: {length} data bytes announced, "
                          f"{max(size - offset - 16, 0)} left in the file", False)
    if MAX_RECORD_BYTES is not None and length > MAX_RECORD_BYTES:
        raise RecordFault(path, offset, f"record of {length:,} bytes is over the limit of "
                          f"{MAX_RECORD_BYTES:,} (readers.tfrecord.MAX_RECORD_BYTES)", False)
    return length


def read_record_at(path, offset, length, *, verify=True, fd=None) -> bytes:
    """The data of the record whose header is at ``offset`` and whose data is ``length`` bytes
    (as :func:`iter_records` found it), read with one ``os.pread`` (no seek: thread-safe), and
    its data CRC checked again (the file may have changed since it was indexed).

    Raises:
        RecordFault: short read or CRC mismatch, naming the file and offset.
    """
    own = fd is None
    if own:
        fd = os.open(path, os.O_RDONLY)
    try:
        buf = os.pread(fd, length + 4, offset + 12)
    finally:
        if own:
            os.close(fd)
    if len(buf) < length + 4:
        raise RecordFault(path, offset, "truncated record (the file is shorter than when it "
                          "was indexed)", False)
    data = buf[:length]
    if verify and _U32.unpack_from(buf, length)[0] != masked_crc(data):
        raise RecordFault(path, offset, "data CRC mismatch: the record is corrupt", True)
    return data


def write_records(path, payloads) -> int:
    """Write each bytes-like of ``payloads`` as one record; return the number written."""
    n = 0
    with open(path, "wb") as f:
        for data in payloads:
            f.write(frame(data))
            n += 1
    return n


# ---- protobuf wire format ---------------------------------------------------------------------
class ProtoError(ValueError):
    """Malformed protobuf data; the message says what and at which byte of the record."""


def _varint(buf, pos, end):
    """``(value, next position)`` of the varint at ``pos`` (unsigned, < 2**64)."""
    result = shift = 0
    while True:
        if pos >= end:
            raise ProtoError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            if result >= 1 << 64:
                raise ProtoError(f"varint over 64 bits ending at byte {pos}")
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtoError(f"varint longer than 10 bytes at byte {pos}")


def _fields(buf, pos, end):
    """Yield ``(field number, wire type, value)`` of the message in ``buf[pos:end]``: the value
    is an int for varint / fixed wire types and ``(start, stop)`` for length-delimited ones."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise ProtoError(f"field number 0 at byte {pos}")
        if wire == 0:
            value, pos = _varint(buf, pos, end)
        elif wire == 2:
            n, start = _varint(buf, pos, end)
            if n > end - start:
                raise ProtoError(f"field {number}: {n} bytes announced at byte {start}, "
                                 f"{end - start} left")
            value, pos = (start, start + n), start + n
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            if pos + width > end:
                raise ProtoError(f"truncated fixed{width * 8} at byte {pos}")
            value = int.from_bytes(buf[pos:pos + width], "little")
            pos += width
        else:
            raise ProtoError(f"wire type {wire} (groups or invalid) at byte {pos}")
        yield number, wire, value


def _signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v


class Example:
    """A parsed ``tf.train.Example``: the feature names and their typed values.

    Values are read lazily from the record's buffer: ``bytes_list`` values as ``(start, stop)``
    spans (so a reader can find the image inside the record without copying it).
    """

    KINDS = ("bytes_list", "float_list", "int64_list")

    def __init__(self, buf, features: dict):
        self.buf, self.features = buf, features

    def __contains__(self, name):
        return name in self.features

    def kind(self, name):
        """``"bytes_list"``, ``"float_list"``, ``"int64_list"``, or None (no value set)."""
        entry = self.features.get(name)
        return None if entry is None else entry[0]

    def _values(self, name, kind):
        entry = self.features.get(name)
        if entry is None or entry[0] is None:
            return None
        if entry[0] != kind:
            raise ProtoError(f"feature {name!r} is a {entry[0]}, not a {kind}")
        return entry[1]

    def spans(self, name) -> list:
        """``(start, stop)`` in the record of each value of a bytes feature ([] if absent)."""
        return self._values(name, "bytes_list") or []

    def bytes(self, name) -> list:
        return [bytes(self.buf[s:e]) for s, e in self.spans(name)]

    def floats(self, name) -> np.ndarray:
        parts = self._values(name, "float_list") or []
        return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)

    def int64s(self, name) -> np.ndarray:
        parts = self._values(name, "int64_list") or []
        return np.asarray([v for p in parts for v in p], np.int64)


def parse_example(buf) -> Example:
    """Parse a serialized ``tf.train.Example`` (bytes). Raises ProtoError when malformed."""
    features: dict = {}
    end = len(buf)
    for number, wire, value in _fields(buf, 0, end):
        if number == 1 and wire == 2:  # Example.features (merged when repeated)
            for n2, w2, entry in _fields(buf, *value):
                if n2 == 1 and w2 == 2:  # Features.feature map entry
                    name, feature = _map_entry(buf, *entry)
                    features[name] = feature
                elif n2 == 1:
                    raise ProtoError(f"Features.feature has wire type {w2}, not 2")
        elif number == 1:
            raise ProtoError(f"Example.features has wire type {wire}, not 2")
    return Example(buf, features)


def _map_entry(buf, start, stop):
    name, feature = "", (None, [])
    for number, wire, value in _fields(buf, start, stop):
        if number == 1 and wire == 2:
            try:
                name = bytes(buf[value[0]:value[1]]).decode("utf-8")
            except UnicodeDecodeError:
                raise ProtoError(f"feature name at byte {value[0]} is not UTF-8") from None
        elif number == 2 and wire == 2:
            feature = _feature(buf, *value, feature)
        elif number in (1, 2):
            raise ProtoError(f"map entry field {number} has wire type {wire}, not 2")
    return name, feature


def _feature(buf, start, stop, previous):
    kind, values = previous
    for number, wire, value in _fields(buf, start, stop):
        if number not in (1, 2, 3):
            continue
        if wire != 2:
            raise ProtoError(f"Feature field {number} has wire type {wire}, not 2")
        new = Example.KINDS[number - 1]
        if new != kind:  # oneof: another kind replaces what was set
            kind, values = new, []
        values = values + [_list(buf, *value, number)]
    if kind == "bytes_list":  # flatten the spans of merged lists
        values = [[s for part in values for s in part]] if values else []
        return kind, values[0] if values else []
    return kind, values


def _list(buf, start, stop, number):
    """The values of one BytesList (spans), FloatList (float32 array) or Int64List (ints)."""
    out = []
    for n, wire, value in _fields(buf, start, stop):
        if n != 1:
            continue
        if number == 1:
            if wire != 2:
                raise ProtoError(f"BytesList value has wire type {wire}, not 2")
            out.append(value)
        elif number == 2:
            if wire == 5:
                out.append(np.frombuffer(_U32.pack(value), "<f4"))
            elif wire == 2:
                if (value[1] - value[0]) % 4:
                    raise ProtoError(f"packed floats of {value[1] - value[0]} bytes at byte "
                                     f"{value[0]} (not a multiple of 4)")
                out.append(np.frombuffer(bytes(buf[value[0]:value[1]]), "<f4"))
            else:
                raise ProtoError(f"FloatList value has wire type {wire}")
        else:
            if wire == 0:
                out.append(_signed64(value))
            elif wire == 2:
                pos, end = value
                while pos < end:
                    v, pos = _varint(buf, pos, end)
                    out.append(_signed64(v))
            else:
                raise ProtoError(f"Int64List value has wire type {wire}")
    if number == 2:
        return np.concatenate(out) if out else np.zeros(0, np.float32)
    return out


# ---- writing ---------------------------------------------------------------------------------
def _enc_varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _len_field(number, payload) -> bytes:
    return _enc_varint(number << 3 | 2) + _enc_varint(len(payload)) + payload


def bytes_feature(values) -> bytes:
    """A serialized ``Feature`` holding a BytesList (bytes or str values, str as UTF-8)."""
    body = b"".join(_len_field(1, v.encode("utf-8") if isinstance(v, str) else bytes(v))
                    for v in values)
    return _len_field(1, body)


def float_feature(values) -> bytes:
    """A serialized ``Feature`` holding a packed FloatList (values rounded to float32)."""
    arr = np.asarray(values, dtype="<f4").reshape(-1)
    return _len_field(2, _len_field(1, arr.tobytes()) if len(arr) else b"")


def int64_feature(values) -> bytes:
    """A serialized ``Feature`` holding a packed Int64List."""
    body = b"".join(_enc_varint(int(v)) for v in np.asarray(values, np.int64).reshape(-1))
    return _len_field(3, _len_field(1, body) if body else b"")


def serialize_example(features: dict) -> bytes:
    """A serialized ``tf.train.Example`` of ``{name: serialized Feature}`` (from the three
    ``*_feature`` functions), map entries in the given order."""
    entries = b"".join(_len_field(1, _len_field(1, name.encode("utf-8")) + _len_field(2, feat))
                       for name, feat in features.items())
    return _len_field(1, entries)
