"""What the fuzzers of readers, decoding and conversion share (tests/readers/test_fuzz_readers.py,
tests/ops/test_fuzz_decode.py, tests/frontends/test_fuzz_convert.py, and the property tests of
tests/readers/test_property_parsers.py): the budget, the corpus of inputs that once escaped, a
per-example wall-clock bound, and the mutation strategies with their valid seeds (a VOC XML file
and a COCO JSON document cut from the samples, YOLO label lines)."""
import contextlib
import json
import os
import signal

from hypothesis import HealthCheck, settings, strategies as st

from helpers import COCO as COCO_MINI, TESTS, VOC as VOC_MINI


# the budget of each fuzz test here (examples per test, derandomized: the same every run; the
# corpus holds what they once found); FUZZ_EXAMPLES / FUZZ_RANDOM fuzz longer and afresh
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "100"))
CORPUS = os.path.join(TESTS, "fuzz_corpus")
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("FUZZ_RANDOM"),
                suppress_health_check=list(HealthCheck), database=None)
TIME_BOUND_S = 5  # per example; generous for a 2-core CI machine


@contextlib.contextmanager
def time_bound(seconds=TIME_BOUND_S):
    def boom(*_):
        raise TimeoutError(f"example ran over {seconds} s (a hang?)")
    old = signal.signal(signal.SIGALRM, boom)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# ---------------------------------------------------------------- byte-level mutations

NASTY_NUMBERS = ["-1", "-99999999999", "1e400", "-1e400", "nan", "inf", "9" * 5000, "0",
                 "18446744073709551616", "0x10", "1_0", "", " ", "1.5", "-0"]


@st.composite
def byte_mutation(draw, data: bytes):
    """Truncate, flip, insert, delete or duplicate byte ranges; non-UTF-8 bytes come free."""
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["truncate", "flip", "insert", "delete", "dup", "nonutf8"]))
        n = len(data)
        i = draw(st.integers(0, max(n - 1, 0)))
        if kind == "truncate":
            data = data[:i]
        elif kind == "flip" and n:
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[i:i + draw(st.integers(1, 64))]
        elif kind == "dup":
            j = draw(st.integers(i, min(n, i + 200)))
            data[j:j] = data[i:j]
        else:
            data[i:i] = draw(st.sampled_from([b"\xff\xfe", b"\xc3\x28", b"\x80", b"\xed\xa0\x80",
                                              b"\x00"]))
    return bytes(data)


def _voc_seed():
    ann = sorted(os.listdir(os.path.join(VOC_MINI, "Annotations")))[0]
    with open(os.path.join(VOC_MINI, "Annotations", ann), "rb") as f:
        return ann[:-4], f.read()


VOC_ID, VOC_XML = _voc_seed()


@st.composite
def voc_mutation(draw):
    from lxml import etree

    kind = draw(st.sampled_from(["bytes", "tree", "tree", "nest", "entity"]))
    if kind == "bytes":
        return draw(byte_mutation(VOC_XML))
    root = etree.fromstring(VOC_XML)
    if kind == "nest":
        depth = draw(st.sampled_from([50, 300, 3000]))
        return b"<annotation>" + b"<a>" * depth + b"x" + b"</a>" * depth + b"</annotation>"
    if kind == "entity":
        decl = draw(st.sampled_from([
            b'<!DOCTYPE a [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
            b'<!DOCTYPE a [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
            b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;">]>',
            b'<!DOCTYPE a [<!ENTITY x "dog">]>',
            b'<!DOCTYPE a SYSTEM "http://example.invalid/a.dtd">']))
        body = etree.tostring(root).replace(b"<name>", b"<name>&x;&d;", 1)
        return decl + body
    elements = list(root.iter())
    for _ in range(draw(st.integers(1, 5))):
        el = draw(st.sampled_from(elements))
        op = draw(st.sampled_from(["delete", "dup", "text", "tag", "child"]))
        parent = el.getparent()
        if op == "delete" and parent is not None:
            parent.remove(el)
            elements = list(root.iter())
        elif op == "dup" and parent is not None:
            parent.append(etree.fromstring(etree.tostring(el)))
            elements = list(root.iter())
        elif op == "text":
            el.text = draw(st.sampled_from(NASTY_NUMBERS) | st.text(st.characters(codec="utf-8", exclude_categories=["Cc", "Cs"]), max_size=20))
        elif op == "tag":
            el.tag = draw(st.sampled_from(["object", "bndbox", "size", "name", "xmin",
                                           "filename", "width", "difficult", "part"]))
        else:
            el.append(etree.fromstring(b"<object><name>dog</name><bndbox><xmin>1</xmin>"
                                       b"</bndbox></object>"))
    return etree.tostring(root)


with open(os.path.join(COCO_MINI, "annotations.json"), "rb") as _f:
    COCO_DOC = json.load(_f)
_anns = [a for a in COCO_DOC["annotations"]
         if a["image_id"] in {im["id"] for im in COCO_DOC["images"][:3]}][:8]
# a valid seed (every category its annotations use), so that a failure is the mutation's
COCO_DOC = {"images": COCO_DOC["images"][:3], "annotations": _anns,
            "categories": [c for c in COCO_DOC["categories"]
                           if c["id"] in {a["category_id"] for a in _anns}]}
for _a in COCO_DOC["annotations"]:  # short examples in failure reports
    _a.pop("segmentation", None)
for _im in COCO_DOC["images"]:
    for _k in ("coco_url", "flickr_url", "date_captured"):
        _im.pop(_k, None)
COCO_BYTES = json.dumps(COCO_DOC).encode()

json_leaf = st.sampled_from([None, True, False, 0, -1, 2**63, -2**63 - 1, 10**400, 1.5, -0.0,
                             1e308, "1", "", "\ud800", "x" * 100, [], {}, [1, 2, 3, 4]])
json_value = st.recursive(json_leaf, lambda kids: st.lists(kids, max_size=4)
                          | st.dictionaries(st.sampled_from(["id", "bbox", "image_id",
                                                             "category_id", "name", "x"]),
                                            kids, max_size=4), max_leaves=8)


def _paths(doc, path=()):
    yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, path + (i,))


NASTY_STRINGS = ["", " ", " dog ", "a\nb", "a\rb", "a\x00b", "a\u2028b", "\ud800", "x" * 300,
                 "../../etc/passwd", "/etc/passwd", "a/b.jpg", "dog", "cat", "\U0001F436",
                 "caf\u00e9", "a\"b", "c}d", "e\\f", "g'h", "<x>&amp;", "  "]


def _at(doc, path):
    for key in path:
        doc = doc[key]
    return doc


@st.composite
def coco_mutation(draw):
    kind = draw(st.sampled_from(["bytes", "tree", "tree", "tree", "nest"]))
    if kind == "bytes":
        return draw(byte_mutation(COCO_BYTES))
    if kind == "nest":
        depth = draw(st.sampled_from([100, 5000, 200000]))
        return b'{"images": ' + b"[" * depth + b"]" * depth + b', "categories": []}'
    doc = json.loads(COCO_BYTES)
    for _ in range(draw(st.integers(1, 5))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        op = draw(st.sampled_from(["delete", "dup", "replace", "replace", "string"]))
        strings = [p for p in paths if isinstance(_at(doc, p), str)]
        if op == "string" and strings:  # names, file names: text the writers must hold
            path = draw(st.sampled_from(strings))
            parent = _at(doc, path[:-1])
            parent[path[-1]] = draw(st.sampled_from(NASTY_STRINGS))
        elif op == "delete":
            del parent[path[-1]]
        elif op == "dup" and isinstance(parent, list):
            parent.append(json.loads(json.dumps(parent[path[-1]])))
        else:
            parent[path[-1]] = json.loads(json.dumps(draw(json_value)))  # no shared leaves
    try:
        return json.dumps(doc).encode("utf-8", "surrogatepass")
    except ValueError:
        return json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")


YOLO_LABELS = b"0 0.5 0.5 0.2 0.3\n1 0.25 0.75 0.1 0.1\n\n2 0.9 0.1 0.05 0.05\n"
yolo_token = st.sampled_from(NASTY_NUMBERS + ["0", "1", "2", "0.5", "-0.5", "2.0", "a", "\t"])


@st.composite
def yolo_mutation(draw):
    if draw(st.booleans()):
        return draw(byte_mutation(YOLO_LABELS))
    lines = [draw(st.lists(yolo_token, min_size=0, max_size=7)) for _ in range(draw(
        st.integers(0, 5)))]
    return "\n".join(" ".join(line) for line in lines).encode()
