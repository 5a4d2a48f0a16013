"""Bad inputs that the readers once answered wrongly: each now a DatasetError naming the
file and the fault, or a counted skip under on_error="skip"."""
import json
import os

import pytest

from readers import DatasetError, read_coco, read_voc, read_yolo
from readers.writers import write_voc as write_voc_tree
from helpers.reader_files import ann, image, voc_xml, write_coco, write_image, write_voc

NOT_UTF8 = b"\xff\xfe\x80 bad bytes\n"


def _coco(tmp_path, images, anns, cats=None, make_files=True):
    return write_coco(tmp_path, images, anns, cats, make_files=make_files)


# --- COCO ---------------------------------------------------------------------------------------

def test_coco_category_id_defined_twice_raises(tmp_path):
    cats = [{"id": 1, "name": "dog"}, {"id": 1, "name": "horse"}]
    path, root = _coco(tmp_path, [image(1)], [ann(1, 1, [1, 1, 5, 5], 1)], cats)
    for policy in ("raise", "skip"):  # ambiguous: never a guess
        with pytest.raises(DatasetError) as err:
            read_coco(path, root, on_error=policy)
        assert err.value.file == path and "annotations.json" in str(err.value)
        assert "category id 1 is defined twice" in str(err.value)
        assert "'dog'" in str(err.value) and "'horse'" in str(err.value)


@pytest.mark.parametrize("bad_id", [2**63, "1", -1, 1.5, True])
def test_coco_bad_category_id_raises_or_is_skipped(tmp_path, bad_id):
    cats = [{"id": bad_id, "name": "dog"}, {"id": 3, "name": "cat"}]
    anns = [ann(1, 1, [1, 1, 5, 5], 3)]
    path, root = _coco(tmp_path, [image(1)], anns, cats)
    with pytest.raises(DatasetError) as err:
        read_coco(path, root)
    assert err.value.file == path
    assert "categories entry #0" in str(err.value) and "not a non-negative int64" in str(err.value)
    with pytest.warns(UserWarning, match="skipped 1"):
        ds = read_coco(path, root, on_error="skip")
    assert len(ds.skipped) == 1 and ds.class_names == ["cat"] and ds[0].num_boxes == 1


def test_coco_category_entry_not_an_object(tmp_path):
    path, root = _coco(tmp_path, [image(1)], [], [["dog"], {"id": 3, "name": "cat"}])
    with pytest.raises(DatasetError, match=r"categories entry #0 is not an object") as err:
        read_coco(path, root)
    assert err.value.file == path
    with pytest.warns(UserWarning):
        assert len(read_coco(path, root, on_error="skip").skipped) == 1


@pytest.mark.parametrize("key", ["image_id", "category_id", "id"])
def test_coco_annotation_ids_at_2_63_or_strings_are_faults(tmp_path, key):
    for value in (2**63, "1"):
        good = ann(1, 1, [1, 1, 5, 5], 1)
        bad = ann(2, 1, [1, 1, 5, 5], 1) | {key: value}
        path, root = _coco(tmp_path, [image(1)], [good, bad])
        with pytest.raises(DatasetError) as err:
            read_coco(path, root)
        assert err.value.file == path and f"'{key}'" in str(err.value)
        assert "annotation #1" in str(err.value)
        with pytest.warns(UserWarning):
            ds = read_coco(path, root, on_error="skip")
        assert len(ds.skipped) == 1 and ds[0].num_boxes == 1


@pytest.mark.parametrize("bad_id", [2**63, "7", None])
def test_coco_image_id_at_2_63_or_string_is_a_fault(tmp_path, bad_id):
    images = [image(1), image(2) | {"id": bad_id}]
    path, root = _coco(tmp_path, images, [ann(1, 1, [1, 1, 5, 5])])
    with pytest.raises(DatasetError, match="non-negative int64 'id'") as err:
        read_coco(path, root)
    assert err.value.file == path
    with pytest.warns(UserWarning):
        ds = read_coco(path, root, on_error="skip")
    assert len(ds) == 1 and len(ds.skipped) == 1


@pytest.mark.parametrize("key, value", [("width", "wide"), ("height", "80px"), ("width", -5),
                                        ("width", [100]), ("height", float("inf"))])
def test_coco_non_numeric_image_size_is_a_fault(tmp_path, key, value):
    images = [image(1), image(2) | {key: value}]
    anns = [ann(1, 1, [1, 1, 5, 5]), ann(2, 2, [1, 1, 5, 5])]
    path, root = _coco(tmp_path, images, anns, make_files=False)
    for im in images:
        write_image(os.path.join(root, im["file_name"]), 100, 80)
    with open(path) as f:  # strict JSON spells inf as a huge number
        data = f.read()
    with open(path, "w") as f:
        f.write(data.replace("Infinity", "1e999"))
    with pytest.raises(DatasetError) as err:
        read_coco(path, root)
    assert err.value.file == path
    assert f"image id 2: '{key}'" in str(err.value) and "not a non-negative number" in str(err.value)
    with pytest.warns(UserWarning):
        ds = read_coco(path, root, on_error="skip")
    # the image, then its box (its image was skipped): both listed
    assert [r.image_id for r in ds] == [1] and len(ds.skipped) == 2


@pytest.mark.parametrize("entry", ["0001.jpg", 5, None, ["x"]])
def test_coco_images_entry_not_an_object(tmp_path, entry):
    path, root = _coco(tmp_path, [image(1)], [ann(1, 1, [1, 1, 5, 5])])
    with open(path) as f:
        data = json.load(f)
    data["images"].append(entry)
    with open(path, "w") as f:
        json.dump(data, f)
    with pytest.raises(DatasetError, match=r"images entry #1 is not an object") as err:
        read_coco(path, root)
    assert err.value.file == path
    with pytest.warns(UserWarning):
        ds = read_coco(path, root, on_error="skip")
    assert len(ds) == 1 and len(ds.skipped) == 1 and ds[0].num_boxes == 1


def test_coco_file_name_with_space_round_trips_through_voc(tmp_path):
    images = [image(1, name="my dog.jpg"), image(2, name="b.jpg")]
    anns = [ann(1, 1, [1, 1, 5, 5], 1), ann(2, 2, [2, 2, 6, 6], 3)]
    path, root = _coco(tmp_path / "coco", images, anns)
    src = read_coco(path, root)
    write_voc_tree(src, str(tmp_path / "voc"))
    with open(tmp_path / "voc" / "ImageSets" / "Main" / "trainval.txt", encoding="utf-8") as f:
        assert f.read().splitlines() == ["my dog", "b"]
    back = read_voc(tmp_path / "voc", classes=src.class_names)
    assert [r.image_id for r in back] == ["my dog", "b"]
    assert [r.num_boxes for r in back] == [1, 1] and back[0].labels.tolist() == [0]
    assert os.path.basename(back[0].path) == "my dog.jpg"


@pytest.mark.parametrize("name", [" lead.jpg", "trail .jpg", "line\nbreak.jpg"])
def test_voc_writer_refuses_ids_a_split_file_cannot_hold(tmp_path, name):
    path, root = _coco(tmp_path / "coco", [image(1, name=name)], [ann(1, 1, [1, 1, 5, 5])])
    src = read_coco(path, root)
    with pytest.raises(DatasetError, match="a split file line cannot hold it") as err:
        write_voc_tree(src, str(tmp_path / "voc"))
    assert err.value.file == src[0].path


# --- VOC ----------------------------------------------------------------------------------------

def _voc(tmp_path, ids=("a", "b")):
    docs = {i: voc_xml(f"{i}.jpg", (100, 80), [("dog", 1, 1, 10, 10)]) for i in ids}
    return write_voc(tmp_path / "voc", docs)


def _split(root, data: bytes):
    path = os.path.join(root, "ImageSets", "Main", "trainval.txt")
    with open(path, "wb") as f:
        f.write(data)
    return path


def test_voc_id_listed_twice_in_split_file(tmp_path):
    root = _voc(tmp_path)
    split = _split(root, b"a\nb\na\n")
    with pytest.raises(DatasetError) as err:
        read_voc(root)
    assert err.value.file == split
    assert "line 3: id 'a' is listed twice (first on line 1)" in str(err.value)
    with pytest.warns(UserWarning, match="skipped 1"):
        ds = read_voc(root, on_error="skip")
    assert [r.image_id for r in ds] == ["a", "b"] and len(ds.skipped) == 1


def test_voc_per_class_split_lines_still_read(tmp_path):
    root = _voc(tmp_path)
    _split(root, b"a  1\r\nb -1\r\n")
    assert [r.image_id for r in read_voc(root)] == ["a", "b"]


def test_voc_split_file_not_utf8(tmp_path):
    root = _voc(tmp_path)
    split = _split(root, b"a\n" + NOT_UTF8)
    for policy in ("raise", "skip"):  # the id list itself is unknown: always raises
        with pytest.raises(DatasetError, match="split file is not UTF-8 text") as err:
            read_voc(root, on_error=policy)
        assert err.value.file == split


@pytest.mark.parametrize("width", ["inf", "1e400", "nan", "wide", "-100", "100.5", "1_00"])
def test_voc_unreadable_size_is_a_named_fault(tmp_path, width):
    # (it was once read as "unknown" and replaced by the header's, silently)
    root = write_voc(tmp_path / "voc", {"a": voc_xml("a.jpg", (width, 80), [("dog", 1, 1, 9, 9)])})
    with pytest.raises(DatasetError, match=r"<size><width> is .* not a whole number") as err:
        read_voc(root)
    assert err.value.file.endswith(os.path.join("Annotations", "a.xml"))
    with pytest.warns(UserWarning, match="skipped 1"):
        assert len(read_voc(root, on_error="skip")) == 0


@pytest.mark.parametrize("width", ["", "100", "100.0", " 100 "])
def test_voc_empty_or_whole_size_is_read(tmp_path, width):
    root = write_voc(tmp_path / "voc", {"a": voc_xml("a.jpg", (width, 80), [("dog", 1, 1, 9, 9)])})
    ds = read_voc(root)
    assert (ds[0].width, ds[0].height) == (100, 80) and ds[0].num_boxes == 1


def test_voc_annotation_not_utf8_is_named(tmp_path):
    root = _voc(tmp_path)
    xml = os.path.join(root, "Annotations", "b.xml")
    with open(xml, "wb") as f:
        f.write(b"<annotation><filename>b.jpg</filename><folder>\xff\xfe</folder></annotation>")
    with pytest.raises(DatasetError, match="malformed XML") as err:
        read_voc(root)
    assert err.value.file == os.path.realpath(xml)
    with pytest.warns(UserWarning, match="skipped 1"):
        assert [r.image_id for r in read_voc(root, on_error="skip")] == ["a"]


# --- YOLO ---------------------------------------------------------------------------------------

def _yolo(tmp_path, labels):
    root = tmp_path / "yolo"
    (root / "labels").mkdir(parents=True)
    (root / "classes.txt").write_text("dog\ncat\n")
    for name, data in labels.items():
        write_image(str(root / "images" / name), 40, 30)
        if data is not None:
            (root / "labels" / (os.path.splitext(name)[0] + ".txt")).write_bytes(data)
    return root


def test_yolo_two_images_with_one_stem(tmp_path):
    root = _yolo(tmp_path, {"a.jpg": b"0 0.5 0.5 0.2 0.2\n", "b.jpg": b"1 0.5 0.5 0.2 0.2\n",
                            "b.png": None})
    real = os.path.realpath(root)
    with pytest.raises(DatasetError) as err:
        read_yolo(root)
    msg = str(err.value)
    assert err.value.file == os.path.join(real, "images", "b.jpg")
    assert os.path.join(real, "images", "b.png") in msg and "shares the stem 'b'" in msg
    assert os.path.join(real, "labels", "b.txt") in msg
    with pytest.warns(UserWarning, match="skipped 2"):
        ds = read_yolo(root, on_error="skip")
    assert [r.image_id for r in ds] == ["a"] and len(ds.skipped) == 2  # no orphan fault for b.txt


def test_yolo_label_file_not_utf8(tmp_path):
    root = _yolo(tmp_path, {"a.jpg": b"0 0.5 0.5 0.2 0.2\n", "b.jpg": b"0 0.5 0.5 0.2 0.2\n" + NOT_UTF8})
    label = os.path.join(os.path.realpath(root), "labels", "b.txt")
    with pytest.raises(DatasetError, match="not UTF-8 text") as err:
        read_yolo(root)
    assert err.value.file == label
    with pytest.warns(UserWarning, match="skipped 1"):
        ds = read_yolo(root, on_error="skip")
    assert [r.image_id for r in ds] == ["a"] and len(ds.skipped) == 1


@pytest.mark.parametrize("file", ["classes.txt", "data.yaml"])
def test_yolo_class_list_not_utf8(tmp_path, file):
    root = _yolo(tmp_path, {"a.jpg": b"0 0.5 0.5 0.2 0.2\n"})
    os.remove(root / "classes.txt")
    (root / file).write_bytes(b"names:\n  - dog\n" + NOT_UTF8 if file == "data.yaml" else NOT_UTF8)
    for policy in ("raise", "skip"):
        with pytest.raises(DatasetError, match="not UTF-8 text") as err:
            read_yolo(root, on_error=policy)
        assert err.value.file == str(root / file)


@pytest.mark.parametrize("where", ["before", "after"])
def test_voc_stray_coordinate_beside_the_bndbox_is_an_extra_element(tmp_path, where):
    """A <xmin> directly under <object> (found by the converter fuzzer) is not a coordinate:
    the box is the bndbox's wherever the stray element stands, and the element is carried as a
    per-box key that write_voc writes back, so VOC -> VOC -> VOC keeps both."""
    stray = "<xmin>Left</xmin>"
    box = "<bndbox><xmin>11</xmin><ymin>21</ymin><xmax>40</xmax><ymax>50</ymax></bndbox>"
    obj = f"<object><name>dog</name>{stray + box if where == 'before' else box + stray}</object>"
    root = write_voc(tmp_path / "v", {"a": f"<annotation><filename>a.jpg</filename>{obj}"
                                           "</annotation>"})
    ds = read_voc(root, classes=["dog"])
    assert ds.records[0].boxes.tolist() == [[10, 20, 40, 50]]
    assert ds.records[0].extra["box_keys"] == [{"xmin": "Left"}]
    write_voc_tree(ds, tmp_path / "w")
    again = read_voc(tmp_path / "w", classes=["dog"])
    assert again.records[0].boxes.tolist() == [[10, 20, 40, 50]]
    assert again.records[0].extra["box_keys"][0]["xmin"] == "Left"


# --- TFRecord label maps ------------------------------------------------------------------------

def test_tfrecord_label_map_round_trips_names_with_quotes_braces_and_escapes(tmp_path):
    """write_tfrecord escapes class names in label_map.pbtxt; read_label_map must undo it. A
    name with '}' was refused ('needs one id and a name') and one with '"' or '\\' read back
    changed, silently."""
    from readers.tfrecord_od import read_label_map, read_tfrecord, write_tfrecord

    names = ['a"b', "c}d", "e\\f", "g'h", "new\nline", "caf\u00e9 #1"]
    cats = [{"id": k + 1, "name": n} for k, n in enumerate(names)]
    path, images = _coco(tmp_path / "c", [image(1)],
                         [ann(k + 1, 1, [10 * k, 5, 8, 8], k + 1) for k in range(len(names))],
                         cats)
    ds = read_coco(path, images)
    write_tfrecord(ds, tmp_path / "tf")
    assert read_label_map(tmp_path / "tf" / "label_map.pbtxt") == {
        k + 1: n for k, n in enumerate(names)}
    back = read_tfrecord(tmp_path / "tf", label_map=tmp_path / "tf" / "label_map.pbtxt")
    assert back.class_names == names
    assert [names[i] for i in back.records[0].labels] == names


def test_tfrecord_label_map_text_format(tmp_path):
    from readers.tfrecord_od import read_label_map

    pb = tmp_path / "label_map.pbtxt"
    pb.write_text("# comment { id: 9 }\nitem: { id: 1, display_name: \"\\303\\251t\\xc3\\xa9\" }\n"
                  "item { name: 'b' id: 2 keypoints { id: 0 label: 'nose' } }\n")
    assert read_label_map(pb) == {1: "\u00e9t\u00e9", 2: "b"}
    pb.write_text("# no classes\n\n")  # what write_tfrecord writes for a dataset of none
    assert read_label_map(pb) == {}
    for bad, why in [("item { id: 1 name: 'a'", "not closed"), ("item { id: 1 } }", "closes nothing"),
                     ("item { id: 1 name: 'a }", "cannot read"), ("item { id: }", "no value"),
                     ("item {" * 40 + "}" * 40, "deeper than 32"), ("{}", "field name"),
                     ("hello", "field name"), ("item { id: 'x' name: 'a' }", "needs one 'id'"),
                     ("not_an_item { id: 1 }", "no 'item")]:
        pb.write_text(bad)
        with pytest.raises(DatasetError, match=why):
            read_label_map(pb)


@pytest.mark.parametrize("where", ["category", "file_name", "extra"])
def test_coco_lone_surrogate_escape_is_a_named_fault(tmp_path, where):
    """JSON's "\\ud800" escape (found by the converter fuzzer) gives a str that no file can hold:
    write_yolo / write_voc / write_tfrecord raised UnicodeEncodeError from the converter."""
    cats = [{"id": 1, "name": "\ud800dog" if where == "category" else "dog"}]
    img = image(1, name="\udfffa.jpg" if where == "file_name" else None)
    if where == "extra":
        img["coco_url"] = "x\udc00"
    path, images = _coco(tmp_path, [img], [ann(1, 1, [1, 1, 4, 4])], cats, make_files=False)
    write_image(os.path.join(images, "0001.jpg"), 100, 80)
    with pytest.raises(DatasetError, match=r"annotations.json: the string .* holds a lone UTF-16 "
                                           r"surrogate"):
        read_coco(path, images)
    # a surrogate pair is one character, and fine
    cats[0]["name"] = "\U0001F436"
    with open(path, "w") as f:
        json.dump({"images": [image(1)], "annotations": [ann(1, 1, [1, 1, 4, 4])],
                   "categories": cats}, f)
    assert "\\ud83d\\udc36" in open(path).read()
    assert read_coco(path, images).class_names == ["\U0001F436"]
