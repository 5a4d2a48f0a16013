"""Load a COCO JSON file at pycocotools' cost: one plain ``json.loads``, yet an object that
gives a key twice is refused, a lone UTF-16 surrogate escape is refused, and every error names
the file.

Duplicate keys without a Python hook per object: ``json`` keeps the last value of a repeated key
silently, so the parsed tree alone cannot show one, and an ``object_pairs_hook`` (one Python call
and one list of pairs per object) costs ~35 % of the parse. Instead the raw bytes say how many
key/value pairs the file holds (each pair's ``:`` follows the key's closing quote), and the
parsed dicts say how many survived (the sum of their lengths); the two agree exactly when no key
repeats. Only where they disagree (a repeated key, or a string that begins with ``:``) is the
text parsed again with the hook, to name the key or clear the file.
"""
from __future__ import annotations

import itertools
import json
import re

import numpy as np

from . import limits
from ._common import gc_paused
from .errors import DatasetError

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# Bytes scanned at a time: bounds the scan's temporary arrays. 4 MB chunks left 8 MB of freed
# heap resident through the parse (the load's peak); 1 MB chunks leave 2 MB, as fast.
_CHUNK = 1 << 20


class DuplicateKey(Exception):
    pass


def unique_keys(pairs):
    """A JSON object as a dict; a key given twice is refused (``json`` keeps the last value
    silently, other readers the first)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        raise DuplicateKey(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return out


def load_coco_json(file):
    """The parsed COCO file (a dict with ``images``, ``categories``, ``annotations`` lists),
    and whether it is ``plain``: UTF-8 without a ``true``, ``false`` or ``null`` anywhere, so
    that the tree holds no bool and no None.

    Raises:
        DatasetError naming the file: missing or unreadable, over
        ``readers.limits.MAX_ANNOTATION_BYTES``, malformed JSON, a key given twice in one object,
        a lone surrogate escape, or not a COCO instances file.
    """
    try:
        raw = limits.read_bytes(file, "MAX_ANNOTATION_BYTES", "COCO annotations file")
    except FileNotFoundError:
        raise DatasetError(file, "annotations file not found") from None
    except OSError as exc:  # a folder, no permission, ...
        raise DatasetError(file, f"cannot read the annotations file ({exc})") from None
    surrogate = b"\\" in raw and _SURROGATE_ESCAPE.search(raw) is not None
    encoding = json.detect_encoding(raw)
    # Pairs from the bytes: the scan reads UTF-8 bytes only (other encodings: the hook parse).
    utf8 = encoding in ("utf-8", "utf-8-sig")
    pairs, objects, literal = _text_pairs(raw) if utf8 else (None, None, True)
    plain = not literal
    try:
        text = raw.decode(encoding, "surrogatepass")  # as json.loads(bytes) decodes
    except UnicodeDecodeError as exc:
        raise DatasetError(file, f"malformed JSON ({exc})") from None
    del raw  # the bytes go before the tree is built: they would add to the peak
    data = _parse(text, file, hook=pairs is None)
    if pairs is not None and _tree_pairs(data, objects) != pairs:
        data = None  # a repeated key, or a string starting with ':': the exact parse decides
        data = _parse(text, file, hook=True)
    del text
    if surrogate:  # rare: checked in full only then
        _check_surrogates(data, file)
    if not isinstance(data, dict) or not isinstance(data.get("images"), list) \
            or not isinstance(data.get("categories"), list):
        raise DatasetError(file, "not a COCO instances file: needs 'images' and 'categories' lists")
    data.setdefault("annotations", [])
    if not isinstance(data["annotations"], list):
        raise DatasetError(file, "'annotations' is not a list")
    return data, plain


def _parse(text, file, hook):
    try:
        with gc_paused():
            return json.loads(text, object_pairs_hook=unique_keys if hook else None)
    except DuplicateKey as exc:
        raise DatasetError(file, f"an object gives the key {exc.args[0]!r} twice (JSON readers "
                                 "disagree on which value counts); refused") from None
    except (ValueError, UnicodeDecodeError) as exc:  # also ints over Python's digit limit
        raise DatasetError(file, f"malformed JSON ({exc})") from None
    except RecursionError:
        raise DatasetError(file, "malformed JSON (nested too deeply)") from None


def _text_pairs(raw):
    """``(pairs, objects, literal)`` of the JSON text, if it parses: ``pairs`` counts the ``:``
    whose nearest non-blank byte before it is a ``"`` (every key/value separator is one; a ``:``
    inside a string is one only where the string begins with it, since a ``"`` inside a string
    is escaped), ``objects`` the ``{`` bytes (at least the number of objects), ``literal``
    whether ``true``, ``false`` or ``null`` may be in the text (found anywhere, strings
    included: a word in a string only costs the fast path). Escapes are removed first (``\\\\`` then
    ``\\"``, left to right as JSON reads them), so that no escaped quote counts; no literal
    touches a backslash outside a string. NumPy over chunks: ~0.2 s for 130 MB, the literals
    looked for around the few ``u`` and ``f`` bytes of a COCO file (three ``bytes.find`` of
    the words took 0.4 s)."""
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    a = np.frombuffer(raw, np.uint8)
    pairs = objects = 0
    literal = False
    for start in range(0, len(a), _CHUNK):
        chunk = a[start:start + _CHUNK]
        objects += int(np.count_nonzero(chunk == 123))
        if not literal:
            literal = _has_literal(a, chunk, start)
        at = np.flatnonzero(chunk == 58) + (start - 1)  # the byte before each ':'
        while len(at):
            at = at[at >= 0]
            before = a[at]
            quote = before == 34
            pairs += int(np.count_nonzero(quote))
            at, before = at[~quote], before[~quote]  # few: ':' in strings, ' : ' pretty-printed
            blank = (before == 32) | (before == 9) | (before == 10) | (before == 13)
            at = at[blank] - 1  # step back over blanks
    return pairs, objects, literal


def _has_literal(a, chunk, start):
    """Whether ``true``, ``null`` (around each ``u`` of the chunk) or ``false`` (from each
    ``f``) is in the text ``a``; ``chunk = a[start:...]``. A word cut by the chunk's edge is
    read whole from ``a``."""
    def word_at(at, word):  # bool per position: ``a[at:at + len(word)] == word``
        ok = np.ones(len(at), bool)
        for k, byte in enumerate(word):
            ok &= a.take(at + k, mode="clip") == byte
        return ok

    u = np.flatnonzero(chunk == 117) + start
    if len(u) and (word_at(u[u >= 2] - 2, b"true").any() or word_at(u[u >= 1] - 1, b"null").any()):
        return True
    f = np.flatnonzero(chunk == 102) + start
    return bool(len(f)) and bool(word_at(f, b"false").any())


def _tree_pairs(data, objects):
    """The summed length of the parsed tree's dicts (its surviving key/value pairs), level by
    level from the top, stopping once ``objects`` dicts are counted (all of them: the walk need
    not enter a COCO file's long lists of numbers). A level is a list of blocks (the values of
    one list, or of a level's dicts); a block of dicts only is counted in C-speed passes."""
    found = pairs = 0
    blocks = [[data]]
    while blocks and found < objects:
        dicts, lists = [], []
        for block in blocks:
            if not block:
                continue
            try:  # a block of dicts only (a COCO list of images or annotations): one pass
                pairs += sum(map(dict.__len__, block))
            except TypeError:  # (dict.__len__ takes dicts only)
                pass
            else:
                dicts.append(block)
                found += len(block)
                continue
            kinds = set(map(type, block))
            if dict in kinds:
                block_dicts = [x for x in block if x.__class__ is dict]
                dicts.append(block_dicts)
                found += len(block_dicts)
                pairs += sum(map(len, block_dicts))
            if list in kinds:
                lists.extend(x for x in block if x.__class__ is list)
        blocks = lists + [list(itertools.chain.from_iterable(map(dict.values, block)))
                          for block in dicts] if found < objects else []
    return pairs


def _check_surrogates(data, file):
    """Refuse a string holding a lone UTF-16 surrogate (a ``\\ud800`` escape without its pair):
    JSON lets it through, but it is not text any file, XML or label file can hold (the writers
    raised UnicodeEncodeError)."""
    stack = [data]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise DatasetError(file, f"the string {v[:40]!r} holds a lone UTF-16 surrogate "
                                         "(a \\uD800-\\uDFFF escape without its pair): not "
                                         "valid text") from None
