"""Label maps of the TensorFlow Object Detection API (``label_map.pbtxt``): read with a small
protobuf text-format tokenizer (no protobuf package), and the quoting write_tfrecord uses, so
that every name written reads back as it was."""
from __future__ import annotations

import os
import re

from .errors import DatasetError


def read_label_map(spec) -> dict:
    """``{id: name}`` from a dict, or a ``label_map.pbtxt`` in the Object Detection API's text
    format (``item { id: 1 name: 'cat' }``; ``display_name`` is used where ``name`` is absent)."""
    if isinstance(spec, dict):
        return _checked_dict(spec)
    path = os.fspath(spec)
    from . import limits

    try:
        text = limits.read_bytes(path, "MAX_LABEL_FILE_BYTES", "label map").decode("utf-8-sig")
    except FileNotFoundError:
        raise DatasetError(path, "label map file not found") from None
    except UnicodeDecodeError:
        raise DatasetError(path, "label map is not UTF-8 text") from None
    items = _pbtxt_fields(text, path).get("item", [])
    if not items and not _PBTXT_BLANK.fullmatch(text):
        raise DatasetError(path, "label map has no 'item { id: ... name: ... }' entries")
    out = {}  # an empty (or comments-only) file is a map of no classes, as write_tfrecord writes
    for k, item in enumerate(items):
        ids = item.get("id", []) if isinstance(item, dict) else []
        given = {key: item.get(key, []) if isinstance(item, dict) else []
                 for key in ("name", "display_name")}
        names = [v for key in ("name", "display_name") for v in given[key] if isinstance(v, str)]
        if len(ids) != 1 or not isinstance(ids[0], int) or not names:
            raise DatasetError(path, f"label map item #{k} needs one 'id' and a 'name'")
        twice = next((key for key, v in given.items() if len(v) > 1), None)
        if twice or len(names) < sum(map(len, given.values())):
            raise DatasetError(path, f"label map item #{k} (id {ids[0]}): "
                                     + (f"'{twice}' is given twice" if twice else
                                        "a name that is not a quoted string"))
        if not 0 <= ids[0] < 2**63:
            raise DatasetError(path, f"label map item #{k}: id {ids[0]} is not a non-negative "
                                     "int64")
        if ids[0] in out:
            raise DatasetError(path, f"label map id {ids[0]} is defined twice")
        out[ids[0]] = names[0]
    return out


def _checked_dict(spec):
    """``{id: name}`` given directly: ids ints (or their decimal strings) in int64, names
    strings; anything else is a ValueError naming the entry (never read as something else)."""
    out = {}
    for key, name in spec.items():
        ok = type(key) is int or (isinstance(key, str) and re.fullmatch(r"[0-9]+", key))
        if not ok or not 0 <= int(key) < 2**63 or not isinstance(name, str):
            raise ValueError(f"label map entry {key!r}: {name!r}: needs a non-negative int "
                             "id and a str name")
        if int(key) in out:
            raise ValueError(f"label map id {int(key)} is given twice")
        out[int(key)] = name
    return out


_PBTXT_BLANK = re.compile(r"(?:\s+|#[^\n]*)*")
_PBTXT_TOKEN = re.compile(r"""\s+|#[^\n]*|(?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')"""
                          r"|(?P<word>[-+]?[\w.]+)|(?P<punct>[{}:,;])")
_PBTXT_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|.)", re.S)
_PBTXT_CHAR = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"a": b"\a", b"b": b"\b", b"f": b"\f",
               b"v": b"\v"}


def _pbtxt_unquote(token, path):
    """A quoted protobuf text-format string, its escapes (``\\n``, ``\\"``, octal, hex bytes)
    undone, as UTF-8 text."""
    def unescape(m):
        e = m.group(1)
        if e[:1] == b"x":
            return bytes([int(e[1:], 16)])
        if e[:1].isdigit() and e[:1] not in b"89":
            return bytes([int(e, 8) & 0xFF])
        return _PBTXT_CHAR.get(e, e)
    try:
        return _PBTXT_ESCAPE.sub(unescape, token[1:-1].encode("utf-8")).decode("utf-8")
    except UnicodeDecodeError:
        raise DatasetError(path, f"label map string {token} is not UTF-8 once unescaped") from None


def _pbtxt_fields(text, path):
    """The label map's fields: ``{key: [value, ...]}``, a value being an int, a str or a nested
    ``{...}`` as such a dict (protobuf text format: ``key: value``, ``key { ... }``, comments)."""
    tokens, pos = [], 0
    while pos < len(text):
        m = _PBTXT_TOKEN.match(text, pos)
        if m is None:
            raise DatasetError(path, f"label map: cannot read {text[pos:pos + 20]!r} at "
                                     f"character {pos}")
        pos = m.end()
        if m.lastgroup:
            tokens.append((m.lastgroup, m.group(m.lastgroup)))

    def value(kind, tok):
        if kind == "str":
            return _pbtxt_unquote(tok, path)
        try:
            return int(tok)
        except ValueError:
            return tok  # a float or an enum name: kept as its text

    def block(i, closed, depth=0):
        if depth > 32:
            raise DatasetError(path, "label map: nested deeper than 32 blocks")
        fields = {}
        while i < len(tokens):
            kind, tok = tokens[i]
            if tok in (",", ";"):
                i += 1
                continue
            if (kind, tok) == ("punct", "}"):
                if not closed:
                    raise DatasetError(path, "label map: a '}' closes nothing")
                return fields, i + 1
            if kind != "word" or i + 1 >= len(tokens):
                raise DatasetError(path, f"label map: expected a field name, found {tok!r}")
            i += 1 + (tokens[i + 1] == ("punct", ":"))
            if i < len(tokens) and tokens[i] == ("punct", "{"):
                sub, i = block(i + 1, True, depth + 1)
                fields.setdefault(tok, []).append(sub)
            elif i < len(tokens) and tokens[i][0] in ("str", "word"):
                fields.setdefault(tok, []).append(value(*tokens[i]))
                i += 1
            else:
                raise DatasetError(path, f"label map: field {tok!r} has no value")
        if closed:
            raise DatasetError(path, "label map: a '{' is not closed")
        return fields, i

    return block(0, False)[0]


def pbtxt_quote(text):
    """``text`` as a protobuf text-format string literal (what :func:`read_label_map` undoes)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
