"""The readers' strict fields: a field of an unexpected type, count or
encoding is a DatasetError naming the file and the entry (or a counted skip), never read
silently as something else. Each case once gave a wrong value without a word (noted per test).
"""
import io
import json
import os
import warnings

import numpy as np
import pytest
from PIL import Image

import readers
from readers import DatasetError, read_coco, read_voc, read_yolo
from readers import tfrecord as T
from readers.folder import read_file_list
from readers.label_map import read_label_map
from readers.tfrecord_od import read_tfrecord
from helpers.reader_files import voc_xml, write_voc


def _yolo(tmp_path, labels="1 0.5 0.5 0.2 0.4\n", classes_txt=None, data_yaml=None):
    root = tmp_path / "y"
    os.makedirs(root / "images")
    os.makedirs(root / "labels")
    Image.new("RGB", (40, 30), 7).save(root / "images" / "a.jpg")
    (root / "labels" / "a.txt").write_text(labels)
    if classes_txt is not None:
        (root / "classes.txt").write_bytes(classes_txt)
    if data_yaml is not None:
        (root / "data.yaml").write_text(data_yaml)
    return root


# ---------------------------------------------------------------- item 7: data.yaml

def test_data_yaml_quoted_name_with_a_comma_is_one_class(tmp_path):
    # (was three classes, "'traffic", "light'" and "car": label 1 read as "light")
    root = _yolo(tmp_path, data_yaml="names: ['traffic, light', car]\n")
    ds = read_yolo(root)
    assert ds.class_names == ["traffic, light", "car"]
    assert [ds.class_names[i] for i in ds.records[0].labels] == ["car"]


def test_data_yaml_comment_is_not_part_of_the_name(tmp_path):
    # (was the class name "person  # a human")
    root = _yolo(tmp_path, data_yaml="names:\n  - person  # a human\n  - car # a car\n")
    assert read_yolo(root).class_names == ["person", "car"]


@pytest.mark.parametrize("text,names", [
    ("names: {0: 'a: b', 1: \"c # d\"}\n", ["a: b", "c # d"]),
    ("names: [\"x\", 'y']\nnc: 2\n", ["x", "y"]),
    ("# top\npath: ../data  # where\nnames:\n  0: cat\n  1: dog\n", ["cat", "dog"]),
    ("names: ['yes', 'null']\n", ["yes", "null"]),
])
def test_data_yaml_read_as_yaml(tmp_path, text, names):
    assert read_yolo(_yolo(tmp_path, labels="", data_yaml=text)).class_names == names


@pytest.mark.parametrize("text,fault", [
    ("names: [no, yes]\n", r"names\[0\] is False \(bool\).*quote it"),
    ("names: [cat, 1.5]\n", r"names\[1\] is 1.5 \(float\)"),
    ("names:\n  0: a\n  0: b\n", "the key 0 is given twice"),
    ("names: [a]\nnames: [b, c]\n", "the key 'names' is given twice"),
    ("names:\n  0: a\n  2: b\n", r"keys are \[0, 2\]"),
    ("names: [a, b]\nnc: 3\n", "'nc' is 3 but 'names' holds 2"),
    ("names: [a, b\n", "not valid YAML"),
    ("- a\n- b\n", "the top level is a list"),
    ("names: cat\n", "not a list or a mapping"),
    ("names: ['', b]\n", "blank"),
])
def test_data_yaml_faults_name_the_file(tmp_path, text, fault):
    root = _yolo(tmp_path, labels="", data_yaml=text)
    with pytest.raises(DatasetError, match=fault) as err:
        read_yolo(root)
    assert err.value.file == os.path.join(str(root), "data.yaml")


def test_data_yaml_given_as_classes_file(tmp_path):
    root = _yolo(tmp_path, data_yaml="names: ['traffic, light', car]\n")
    ds = read_yolo(root, classes_file=str(root / "data.yaml"))
    assert ds.class_names == ["traffic, light", "car"]


# ---------------------------------------------------------------- YOLO text

@pytest.mark.parametrize("value", ["1_0", "0x1", "\u0661", "nan", "inf", "0.5.1"])
def test_yolo_numbers_are_ascii_decimals(tmp_path, value):
    # (int/float took "1_0" as 10 and "\u0661" as 1)
    root = _yolo(tmp_path, labels=f"0 0.5 0.5 {value} 0.2\n{value} 0.5 0.5 0.1 0.1\n",
                 classes_txt=b"a\nb\n")
    with pytest.raises(DatasetError, match="line 1: .* is not a decimal number") as err:
        read_yolo(root)
    assert err.value.file.endswith(os.path.join("labels", "a.txt"))
    with pytest.warns(UserWarning, match="skipped 2"):
        assert read_yolo(root, on_error="skip").records[0].num_boxes == 0


def test_yolo_class_list_with_bom_and_form_feed(tmp_path):
    # (the BOM became part of the first name; a form feed split one name into two)
    root = _yolo(tmp_path, classes_txt="\ufeffcat\r\ndog\x0cfish\rbird\n".encode())
    assert read_yolo(root).class_names == ["cat", "dog\x0cfish", "bird"]


# ---------------------------------------------------------------- VOC

@pytest.mark.parametrize("obj,twice", [
    ("<name>dog</name><name>cat</name>", "name"),
    ("<name>dog</name><difficult>0</difficult><difficult>1</difficult>", "difficult"),
])
def test_voc_object_element_given_twice_is_a_fault(tmp_path, obj, twice):
    # (the last one counted, silently)
    xml = (f"<annotation><filename>a.jpg</filename><object>{obj}<bndbox><xmin>1</xmin>"
           "<ymin>1</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object></annotation>")
    root = write_voc(tmp_path / "voc", {"a": xml})
    with pytest.raises(DatasetError, match=f"<{twice}> is given twice") as err:
        read_voc(root, classes=["dog", "cat"])
    assert err.value.file.endswith("a.xml")
    with pytest.warns(UserWarning, match="skipped 1"):
        assert read_voc(root, classes=["dog", "cat"], on_error="skip")[0].num_boxes == 0


def test_voc_bndbox_coordinate_given_twice_is_a_fault(tmp_path):
    xml = ("<annotation><filename>a.jpg</filename><object><name>dog</name><bndbox>"
           "<xmin>1</xmin><ymin>1</ymin><xmax>9</xmax><ymax>9</ymax><xmin>5</xmin>"
           "</bndbox></object></annotation>")
    root = write_voc(tmp_path / "voc", {"a": xml})
    with pytest.raises(DatasetError, match="<bndbox/xmin> is given twice"):
        read_voc(root, classes=["dog"])


def test_voc_size_given_twice_is_a_fault(tmp_path):
    xml = voc_xml("a.jpg", (100, 80), [("dog", 1, 1, 9, 9)]).replace(
        "<depth>3</depth>", "<depth>3</depth><width>50</width>")
    root = write_voc(tmp_path / "voc", {"a": xml})
    with pytest.raises(DatasetError, match="<size/width> is given twice"):
        read_voc(root, classes=["dog"])


# ---------------------------------------------------------------- COCO

def _coco(tmp_path, image=None, annotation=None, text=None):
    os.makedirs(tmp_path / "images", exist_ok=True)
    Image.new("RGB", (100, 80), 3).save(tmp_path / "images" / "a.jpg")
    doc = {"images": [{"id": 1, "file_name": "a.jpg", "width": 100, "height": 80, **(image or {})}],
           "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4],
                            "iscrowd": 0, **(annotation or {})}],
           "categories": [{"id": 1, "name": "cat"}]}
    path = tmp_path / "annotations.json"
    path.write_text(text if text is not None else json.dumps(doc))
    return str(path), str(tmp_path / "images")


@pytest.mark.parametrize("value", [1.5, True, "1", -1, 2])
def test_coco_flag_that_is_not_the_int_0_or_1_is_a_fault(tmp_path, value):
    # (numpy read 1.5 and True as 1)
    path, images = _coco(tmp_path, annotation={"iscrowd": value})
    with pytest.raises(DatasetError, match="'iscrowd' is .* not 0 or 1") as err:
        read_coco(path, images)
    assert err.value.file == path and "annotation #0 (id 1)" in err.value.reason


@pytest.mark.parametrize("value", [100.5, "100", [100], False])
def test_coco_image_width_that_is_not_a_whole_number_is_a_fault(tmp_path, value):
    # (100.5 was truncated to 100; "" / False / [] read as "unknown")
    path, images = _coco(tmp_path, image={"width": value})
    with pytest.raises(DatasetError, match="image id 1: 'width' is") as err:
        read_coco(path, images)
    assert err.value.file == path


def test_coco_json_key_given_twice_is_a_fault(tmp_path):
    # (json kept the last "bbox", other readers keep the first)
    text = ('{"images": [{"id": 1, "file_name": "a.jpg", "width": 100, "height": 80}], '
            '"annotations": [{"id": 1, "image_id": 1, "category_id": 1, '
            '"bbox": [1, 2, 3, 4], "bbox": [50, 50, 3, 4]}], '
            '"categories": [{"id": 1, "name": "cat"}]}')
    path, images = _coco(tmp_path, text=text)
    with pytest.raises(DatasetError, match="the key 'bbox' twice") as err:
        read_coco(path, images)
    assert err.value.file == path


# ---------------------------------------------------------------- TFRecord, label map

JPEG = io.BytesIO()
Image.new("RGB", (20, 10), 5).save(JPEG, "JPEG")
JPEG = JPEG.getvalue()


def _record(tmp_path, **over):
    feats = {"image/encoded": T.bytes_feature([JPEG]), "image/width": T.int64_feature([20]),
             "image/height": T.int64_feature([10]),
             "image/object/bbox/xmin": T.float_feature([0.1]),
             "image/object/bbox/ymin": T.float_feature([0.1]),
             "image/object/bbox/xmax": T.float_feature([0.5]),
             "image/object/bbox/ymax": T.float_feature([0.5]),
             "image/object/class/label": T.int64_feature([1])}
    feats.update(over)
    path = tmp_path / "one.tfrecord"
    T.write_records(path, [T.serialize_example(feats)])
    return str(path)


@pytest.mark.parametrize("source_id,image_id", [("007", "007"), ("\u0667", "\u0667"),
                                                 ("7", 7), ("0", 0)])
def test_tfrecord_source_id_is_an_int_only_in_canonical_form(tmp_path, source_id, image_id):
    # ("007" became 7, and was written back as "7")
    path = _record(tmp_path, **{"image/source_id": T.bytes_feature([source_id])})
    assert read_tfrecord(path).records[0].image_id == image_id


def test_tfrecord_negative_label_id_is_a_fault(tmp_path):
    path = _record(tmp_path, **{"image/object/class/label": T.int64_feature([-3])})
    with pytest.raises(DatasetError, match="negative id -3") as err:
        read_tfrecord(path)
    assert err.value.file == os.path.abspath(path) and "byte offset 0" in err.value.reason


@pytest.mark.parametrize("text,fault", [
    ("item { id: 1 name: 'a' name: 'b' }", "'name' is given twice"),
    ("item { id: 1 display_name: 'a' display_name: 'b' }", "'display_name' is given twice"),
    ("item { id: 1 name: 5 display_name: 'x' }", "not a quoted string"),
    ("item { id: -1 name: 'a' }", "id -1 is not a non-negative int64"),
    ("item { id: 9223372036854775808 name: 'a' }", "not a non-negative int64"),
])
def test_label_map_field_faults_name_the_file(tmp_path, text, fault):
    # (the first name counted, the number fell back to display_name, silently)
    path = tmp_path / "label_map.pbtxt"
    path.write_text(text)
    with pytest.raises(DatasetError, match=fault) as err:
        read_label_map(path)
    assert err.value.file == str(path)


@pytest.mark.parametrize("spec", [{True: "a"}, {"1.5": "a"}, {1: 2}, {-1: "a"}])
def test_label_map_dict_is_checked(spec):
    with pytest.raises(ValueError, match="label map entry"):
        read_label_map(spec)


# ---------------------------------------------------------------- file list

@pytest.mark.parametrize("label", ["\u00b2", "\u0661", "99999999999999999999999"])
def test_file_list_label_is_an_ascii_int_in_range(tmp_path, label):
    # ("\u00b2".isdigit() is True and int() raised a bare ValueError; a huge label overflowed)
    Image.new("RGB", (4, 4)).save(tmp_path / "a.jpg")
    (tmp_path / "list.txt").write_text(f"a.jpg 0\na.jpg {label}\n")
    with pytest.raises(DatasetError) as err:
        read_file_list(tmp_path / "list.txt")
    assert "list.txt:2" in err.value.file
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = read_file_list(tmp_path / "list.txt", on_error="skip")
    assert len(ds) == 1 and ds.class_names == ["0"]


def test_coco_category_name_given_to_two_ids_is_not_selected_silently(tmp_path):
    # (categories=["cat"] took whichever "cat" came last)
    path, images = _coco(tmp_path)
    doc = json.loads(open(path).read())
    doc["categories"].append({"id": 5, "name": "cat"})
    open(path, "w").write(json.dumps(doc))
    with pytest.raises(DatasetError, match=r"category name 'cat' names the ids \[1, 5\]"):
        read_coco(path, images, categories=["cat"])
    assert read_coco(path, images, categories=[5]).category_ids == [5]


def test_split_file_and_label_map_with_a_bom(tmp_path):
    # (the BOM became part of the first id: its annotation file was "not found")
    root = write_voc(tmp_path / "voc", {"a": voc_xml("a.jpg", (100, 80), [("dog", 1, 1, 9, 9)])})
    split = os.path.join(root, "ImageSets", "Main", "trainval.txt")
    open(split, "wb").write("\ufeffa\n".encode())
    assert [r.image_id for r in read_voc(root).records] == ["a"]
    path = tmp_path / "label_map.pbtxt"
    path.write_bytes("\ufeffitem { id: 1 name: 'cat' }".encode())
    assert read_label_map(path) == {1: "cat"}
