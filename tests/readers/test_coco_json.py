"""readers.coco_json.load_coco_json against json.loads as the reference: the same tree for files
that pass, ``plain`` exactly when no true/false/null is in the UTF-8 text, and each refusal (a key
given twice at any depth, also beside a string starting with ':', a lone surrogate escape,
malformed JSON, no COCO lists, a missing file) naming the file; unique_keys by itself."""
import json

import pytest

from readers.coco_json import DuplicateKey, load_coco_json, unique_keys
from readers.errors import DatasetError


def coco(**more):
    return {"images": [{"id": 1, "file_name": "a.jpg", "width": 4, "height": 3}],
            "categories": [{"id": 1, "name": "cat"}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2]}], **more}


def write(tmp_path, text, name="ann.json"):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return str(p)


def test_unique_keys():
    assert unique_keys([("a", 1), ("b", 2)]) == {"a": 1, "b": 2}
    with pytest.raises(DuplicateKey) as e:
        unique_keys([("a", 1), ("b", 2), ("b", 3)])
    assert e.value.args == ("b",)


@pytest.mark.parametrize("more,plain", [({}, True), ({"info": {"note": "a: b", ":k": ":v"}}, True),
                                        ({"info": {"flag": True}}, False),
                                        ({"info": None}, False), ({"x": [1, 2.5, {"y": []}]}, True)])
@pytest.mark.parametrize("indent", [None, 2])
def test_same_tree_as_json_and_plain_flag(tmp_path, more, plain, indent):
    data = coco(**more)
    got, got_plain = load_coco_json(write(tmp_path, json.dumps(data, indent=indent)))
    assert got == json.loads(json.dumps(data)) and got_plain is plain


def test_a_word_in_a_string_only_costs_plain_and_annotations_default(tmp_path):
    data = coco(info={"text": "null and true"})
    del data["annotations"]
    got, plain = load_coco_json(write(tmp_path, json.dumps(data)))
    assert got["annotations"] == [] and got["info"] == {"text": "null and true"} and not plain


def test_fresh_random_trees_match_json(tmp_path, rng):
    for k in range(5):
        anns = [{"id": int(i), "image_id": 1, "category_id": int(rng.integers(1, 4)),
                 "bbox": rng.uniform(0, 50, 4).round(2).tolist(),
                 "name": "".join(rng.choice(list('ab:"\\ {}'), int(rng.integers(0, 6))))}
                for i in range(int(rng.integers(0, 20)))]
        data = coco(annotations=anns)
        got, plain = load_coco_json(write(tmp_path, json.dumps(data), f"r{k}.json"))
        assert got == data and plain


@pytest.mark.parametrize("text,fault", [
    ('{"images": [], "categories": [], "images": []}', "gives the key 'images' twice"),
    ('{"images": [{"id": 1, "id": 2}], "categories": []}', "gives the key 'id' twice"),
    ('{"images": [], "categories": [{"n": ":x", "n": 1}]}', "gives the key 'n' twice"),
    ('{"images": [], "categories": [{"n": "\\ud800"}]}', "lone UTF-16 surrogate"),
    ('{"images": [], "categories": [}', "malformed JSON"),
    ('{"images": [], "annotations": []}', "not a COCO instances file"),
    ('[1, 2]', "not a COCO instances file"),
    ('{"images": [], "categories": [], "annotations": {}}', "'annotations' is not a list"),
    (b'{"images": [], "categories": ["\xff"]}', "malformed JSON"),
])
def test_refusals_name_the_file_and_fault(tmp_path, text, fault):
    path = write(tmp_path, text)
    with pytest.raises(DatasetError) as e:
        load_coco_json(path)
    assert path in str(e.value) and fault in str(e.value)


def test_a_surrogate_pair_is_text_and_a_missing_file_is_named(tmp_path):
    got, _ = load_coco_json(write(tmp_path, '{"images": [], "categories": [{"n": "\\ud83d\\ude00"}]}'))
    assert got["categories"][0]["n"] == "\U0001F600"
    missing = str(tmp_path / "none.json")
    with pytest.raises(DatasetError, match="annotations file not found") as e:
        load_coco_json(missing)
    assert missing in str(e.value)
    with pytest.raises(DatasetError, match="annotations file is not a regular file"):
        load_coco_json(str(tmp_path))


def test_utf16_files_parse_through_the_hook(tmp_path):
    data = coco(info={"t": "é"})
    got, plain = load_coco_json(write(tmp_path, json.dumps(data).encode("utf-16")))
    assert got == data and not plain  # not UTF-8: plain is not claimed
    with pytest.raises(DatasetError, match="twice"):
        load_coco_json(write(tmp_path, '{"images": [], "images": [], "categories": []}'
                             .encode("utf-16"), "b.json"))
