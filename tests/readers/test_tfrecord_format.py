"""readers.tfrecord: CRC-32C against published test vectors, the framing and tf.train.Example
bytes against hand-computed encodings, protobuf's decoding rules, and malformed input.
(tests/frontends/test_tfrecord_tf.py checks the same bytes against TensorFlow itself.)"""
import struct

import numpy as np
import pytest

from readers import tfrecord as T

# RFC 3720 (iSCSI) appendix B.4, and the customary check value of "123456789"
VECTORS = [(bytes(32), 0x8A9136AA), (b"\xff" * 32, 0x62A8AB43),
           (bytes(range(32)), 0x46DD794E), (bytes(range(31, -1, -1)), 0x113FDB5C),
           (b"123456789", 0xE3069283), (b"", 0)]


@pytest.mark.parametrize("data,crc", VECTORS)
def test_crc32c_vectors(data, crc):
    assert T.crc32c(data) == crc
    assert T.crc32c_python(data) == crc


def test_crc32c_implementations_agree_on_random_data(rng):
    for n in (1, 7, 64, 1000, 4097):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert T.crc32c(data) == T.crc32c_python(data)
        # continuing a CRC over a split equals the CRC of the whole
        k = n // 3
        assert T.crc32c_python(data[k:], T.crc32c_python(data[:k])) == T.crc32c_python(data)


def test_masked_crc_is_tensorflows_rotation_plus_delta():
    c = 0xE3069283
    expected = (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    assert T.masked_crc(b"123456789") == expected


def test_frame_layout_by_hand(rng):
    data = rng.integers(0, 256, int(rng.integers(0, 300)), dtype=np.uint8).tobytes()
    framed = T.frame(data)
    n = len(data)
    assert framed[:8] == struct.pack("<Q", n)
    assert framed[8:12] == struct.pack("<I", T.masked_crc(struct.pack("<Q", n)))
    assert framed[12:12 + n] == data
    assert framed[12 + n:] == struct.pack("<I", T.masked_crc(data))
    assert len(framed) == n + 16


def test_example_bytes_by_hand():
    # Example{features{feature{key:"a" value{int64_list{value:[1]}}}}}, packed (proto3)
    expected = bytes([0x0A, 0x0C, 0x0A, 0x0A, 0x0A, 0x01, 0x61, 0x12, 0x05,
                      0x1A, 0x03, 0x0A, 0x01, 0x01])
    assert T.serialize_example({"a": T.int64_feature([1])}) == expected
    ex = T.parse_example(expected)
    assert ex.int64s("a").tolist() == [1] and ex.kind("a") == "int64_list"
    # a float 1.5 = 0x3FC00000, packed: FloatList 0a 04 00 00 c0 3f
    assert T.float_feature([1.5]) == bytes([0x12, 0x06, 0x0A, 0x04, 0, 0, 0xC0, 0x3F])
    # BytesList of b"hi" and b"": 0a 02 68 69 0a 00
    assert T.bytes_feature([b"hi", b""]) == bytes([0x0A, 0x06, 0x0A, 0x02, 0x68, 0x69, 0x0A, 0])


def test_negative_and_large_int64_are_ten_byte_varints():
    feat = T.int64_feature([-1])
    assert feat == bytes([0x1A, 0x0C, 0x0A, 0x0A]) + b"\xff" * 9 + b"\x01"
    values = [-(2**63), 2**63 - 1, -1, 0, 300]
    ex = T.parse_example(T.serialize_example({"v": T.int64_feature(values)}))
    assert ex.int64s("v").tolist() == values


def _entry(name, feature):
    key = T._len_field(1, name.encode())
    return T._len_field(1, T._len_field(1, key + T._len_field(2, feature)))


def test_unpacked_repeated_scalars_and_unknown_fields_are_read():
    # Int64List with two unpacked values (wire type 0), FloatList unpacked (wire type 5)
    ints = T._len_field(3, bytes([0x08, 0x05, 0x08, 0x07]))
    floats = T._len_field(2, bytes([0x0D]) + struct.pack("<f", 2.5) + bytes([0x0D])
                          + struct.pack("<f", -1.0))
    unknown = bytes([0x98, 0x01, 0x2A]) + T._len_field(7, b"zzz")  # field 19 varint, field 7
    buf = unknown + _entry("i", ints) + _entry("f", floats) + unknown
    ex = T.parse_example(buf)
    assert ex.int64s("i").tolist() == [5, 7]
    assert ex.floats("f").tolist() == [2.5, -1.0]


def test_repeated_message_merges_and_map_key_keeps_last():
    buf = _entry("a", T.bytes_feature([b"x"])) + _entry("b", T.int64_feature([1])) \
        + _entry("a", T.bytes_feature([b"y", b"z"]))
    ex = T.parse_example(buf)
    assert ex.bytes("a") == [b"y", b"z"] and ex.int64s("b").tolist() == [1]
    # one Feature whose BytesList is given twice: the values are concatenated
    twice = T._len_field(1, T._len_field(1, b"p")) + T._len_field(1, T._len_field(1, b"q"))
    assert T.parse_example(_entry("c", twice)).bytes("c") == [b"p", b"q"]


def test_random_examples_round_trip(rng):
    for _ in range(20):
        feats, want = {}, {}
        for k in range(int(rng.integers(0, 6))):
            name = f"f{k}/" + "x" * int(rng.integers(0, 5))
            n = int(rng.integers(0, 5))
            kind = int(rng.integers(0, 3))
            if kind == 0:
                vals = [rng.integers(0, 256, int(rng.integers(0, 40)), dtype=np.uint8).tobytes()
                        for _ in range(n)]
                feats[name] = T.bytes_feature(vals)
            elif kind == 1:
                vals = rng.normal(size=n).astype(np.float32).tolist()
                feats[name] = T.float_feature(vals)
            else:
                vals = rng.integers(-2**63, 2**63 - 1, n, dtype=np.int64, endpoint=True).tolist()
                feats[name] = T.int64_feature(vals)
            want[name] = (kind, vals)
        ex = T.parse_example(T.serialize_example(feats))
        for name, (kind, vals) in want.items():
            got = [ex.bytes, ex.floats, ex.int64s][kind](name)
            assert list(got) == vals, name


@pytest.mark.parametrize("buf,what", [
    (bytes([0x0A, 0x05, 0x0A]), "announced"),           # length past the end
    (bytes([0x0A]), "truncated varint"),
    (b"\x80" * 11, "longer than 10 bytes"),
    (bytes([0x0B]), "wire type 3"),                       # a group
    (bytes([0x00, 0x01]), "field number 0"),
    (bytes([0x08, 0x01]), "Example.features has wire type 0"),
    (_entry("f", T._len_field(2, T._len_field(1, b"abc"))), "not a multiple of 4"),
    (T._len_field(1, T._len_field(1, T._len_field(1, b"\xff\xfe"))), "not UTF-8"),
])
def test_malformed_examples_raise_with_position(buf, what):
    with pytest.raises(T.ProtoError, match=what):
        T.parse_example(buf)


def test_mismatched_kind_raises():
    ex = T.parse_example(T.serialize_example({"a": T.int64_feature([1])}))
    with pytest.raises(T.ProtoError, match="int64_list, not a float_list"):
        ex.floats("a")
    assert ex.floats("missing").size == 0 and ex.bytes("missing") == []


def _file(tmp_path, payloads, name="d.tfrecord"):
    path = tmp_path / name
    T.write_records(path, payloads)
    return str(path)


def test_iter_records_offsets_and_data(tmp_path, rng):
    payloads = [rng.integers(0, 256, int(rng.integers(0, 100)), dtype=np.uint8).tobytes()
                for _ in range(5)]
    path = _file(tmp_path, payloads)
    got = list(T.iter_records(path))
    assert [d for _, d in got] == payloads
    offsets = np.cumsum([0] + [len(p) + 16 for p in payloads[:-1]]).tolist()
    assert [o for o, _ in got] == offsets
    for (o, d) in got:
        assert T.read_record_at(path, o, len(d)) == d


def test_truncated_file_names_the_offset(tmp_path):
    path = _file(tmp_path, [b"a" * 10, b"b" * 20])
    data = open(path, "rb").read()
    for cut, what in ((len(data) - 3, "truncated record"), (26 + 5, "truncated record header"),
                      (26 + 14, "truncated record")):
        open(path, "wb").write(data[:cut])
        with pytest.raises(T.RecordFault, match="byte offset 26: " + what) as e:
            list(T.iter_records(path))
        assert e.value.file == path and e.value.offset == 26 and not e.value.resumable


def test_bad_crcs(tmp_path):
    path = _file(tmp_path, [b"a" * 10, b"b" * 20, b"c"])
    data = bytearray(open(path, "rb").read())
    data[26 + 12 + 3] ^= 1  # a data byte of record 2
    open(path, "wb").write(bytes(data))
    got = list(T.iter_records(path))
    assert got[0][1] == b"a" * 10 and got[2][1] == b"c"
    assert isinstance(got[1][1], T.RecordFault) and got[1][1].resumable
    assert "byte offset 26: data CRC mismatch" in str(got[1][1]) and path in str(got[1][1])
    with pytest.raises(T.RecordFault, match="data CRC mismatch"):
        T.read_record_at(path, 26, 20)
    data[26 + 12 + 3] ^= 1
    data[26 + 2] ^= 0x40  # the length field of record 2
    open(path, "wb").write(bytes(data))
    with pytest.raises(T.RecordFault, match="byte offset 26: length CRC mismatch"):
        list(T.iter_records(path))
    # unchecked, the flipped length (4194324) points past the end of the file
    with pytest.raises(T.RecordFault, match="4194324 data bytes announced"):
        list(T.iter_records(path, verify=False))


def test_huge_length_is_refused_before_allocating(tmp_path, monkeypatch):
    path = tmp_path / "h.tfrecord"
    head = struct.pack("<Q", 2**60)
    path.write_bytes(head + struct.pack("<I", T.masked_crc(head)) + b"x" * 8)
    with pytest.raises(T.RecordFault, match="1152921504606846976 data bytes announced"):
        list(T.iter_records(path))
    monkeypatch.setattr(T, "MAX_RECORD_BYTES", 4)
    ok = _file(tmp_path, [b"12345"], "ok.tfrecord")
    with pytest.raises(T.RecordFault, match="over the limit of 4"):
        list(T.iter_records(ok))


def test_gzip_missing_and_folder_are_named(tmp_path):
    import gzip

    from readers.errors import DatasetError

    gz = tmp_path / "z.tfrecord.gz"
    gz.write_bytes(gzip.compress(T.frame(b"abc")))
    with pytest.raises(DatasetError, match="GZIP-compressed"):
        list(T.iter_records(gz))
    with pytest.raises(DatasetError, match="not found"):
        list(T.iter_records(tmp_path / "none.tfrecord"))
    with pytest.raises(DatasetError, match="not a regular file"):
        list(T.iter_records(tmp_path))
