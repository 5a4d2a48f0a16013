"""readers.read_voc_classes: the one reader of a VOC class list (``classes.txt``), and the
callers that read one through it (read_voc(classes=<path>), the readers.voc op, detaug-convert,
the demo), on hand-written files and a copy of the VOC sample."""
import json
import os
import shutil

import numpy as np
import pytest
from lxml import etree

import readers
from readers import VOC_CLASSES, DatasetError, read_voc, read_voc_classes
from helpers.reader_files import VOC_MINI

# the 20 classes in an order of their own, so that the file, not the default, sets the labels
NAMES = list(reversed(VOC_CLASSES))


def _write(path, data):
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


@pytest.mark.parametrize("text", [
    "dog\ncat\nbird\n",
    "dog\ncat\nbird",                             # no final line break
    "dog\r\ncat\r\nbird\r\n",                     # Windows line ends
    "dog\rcat\rbird\r",                           # old Mac line ends
    "\ufeffdog\ncat\nbird\n",                     # a UTF-8 byte-order mark
    "  dog \n\tcat\t\n bird\n",                   # surrounding whitespace (a <name> is stripped)
    "\n\ndog\n \n\t\ncat\n\n\nbird\n\n",          # blank lines anywhere
])
def test_good_files(tmp_path, text):
    assert read_voc_classes(_write(tmp_path / "classes.txt", text)) == ["dog", "cat", "bird"]


def test_names_keep_inner_spaces_and_other_characters(tmp_path):
    # only \n, \r\n and \r end a line; U+2028 or a form feed inside a name is the name's
    text = "potted plant\nstop\u2028sign\nx\x0cy\nçà\n"
    assert read_voc_classes(_write(tmp_path / "c.txt", text)) == [
        "potted plant", "stop\u2028sign", "x\x0cy", "çà"]


@pytest.mark.parametrize("text, name, line, first", [
    ("dog\ncat\ndog\n", "dog", 3, 1),
    ("dog\ncat\n\n  cat \n", "cat", 4, 2),        # equal once stripped, blank line counted
    ("dog\r\ncat\r\ndog", "dog", 3, 1),
])
def test_duplicate_names_name_the_file_and_lines(tmp_path, text, name, line, first):
    path = _write(tmp_path / "classes.txt", text)
    with pytest.raises(DatasetError) as err:
        read_voc_classes(path)
    assert err.value.file == str(path)
    assert f"line {line}: class {name!r} is listed twice (first on line {first})" in str(err.value)


@pytest.mark.parametrize("data", [b"", b"\n", b"  \n\t\r\n\r\n", "\ufeff".encode("utf-8")])
def test_empty_files(tmp_path, data):
    path = _write(tmp_path / "classes.txt", data)
    with pytest.raises(DatasetError, match="no class name") as err:
        read_voc_classes(path)
    assert err.value.file == str(path)


@pytest.mark.parametrize("data", [b"dog\n\xff\xfecat\n", "dog\ncat\n".encode("utf-16"),
                                  "chien\nchât\n".encode("latin-1")])
def test_non_utf8_files(tmp_path, data):
    path = _write(tmp_path / "classes.txt", data)
    with pytest.raises(DatasetError, match="not UTF-8 text") as err:
        read_voc_classes(path)
    assert err.value.file == str(path)


def test_missing_folder_and_too_large(tmp_path, monkeypatch):
    with pytest.raises(DatasetError, match="class list not found") as err:
        read_voc_classes(tmp_path / "nope.txt")
    assert err.value.file == str(tmp_path / "nope.txt")
    with pytest.raises(DatasetError, match="not a regular file"):
        read_voc_classes(tmp_path)
    path = _write(tmp_path / "classes.txt", "dog\ncat\n")
    monkeypatch.setattr(readers.limits, "MAX_LABEL_FILE_BYTES", 4)
    with pytest.raises(DatasetError, match="over the limit of 4"):
        read_voc_classes(path)


# ---- the callers, on a copy of the VOC sample with a class list -----------------------------

@pytest.fixture
def voc_tree(tmp_path):
    """The VOC sample with a classes.txt of NAMES, hand-written with every quirk the readers
    accept (CRLF, blank lines, surrounding whitespace, no final line break)."""
    root = tmp_path / "voc"
    shutil.copytree(VOC_MINI, root)
    lines = ["  " + NAMES[0] + " ", ""] + NAMES[1:5] + ["   ", "\t"] + NAMES[5:]
    _write(root / "classes.txt", "\r\n".join(lines))
    return root


def _xml_names(root, image_id):
    """The <object><name>s of an annotation file, read apart from readers.voc."""
    tree = etree.parse(os.path.join(root, "Annotations", image_id + ".xml"))
    return [o.findtext("name").strip() for o in tree.iter("object")]


def _check_labels(ds, root):
    assert ds.class_names == NAMES and len(ds) == 40
    for r in ds.records:  # each label names the class its XML object names
        assert [NAMES[i] for i in r.labels] == _xml_names(root, r.image_id)


def test_read_voc_takes_a_class_list_path(voc_tree):
    by_list = read_voc(voc_tree, classes=NAMES)
    _check_labels(by_list, voc_tree)
    for classes in (voc_tree / "classes.txt", str(voc_tree / "classes.txt")):
        ds = read_voc(voc_tree, classes=classes)
        assert ds.class_names == by_list.class_names
        for a, b in zip(ds.records, by_list.records):
            np.testing.assert_array_equal(a.labels, b.labels)
            np.testing.assert_array_equal(a.boxes, b.boxes)
    # a string that is not "discover" is a path, never a list of its letters
    with pytest.raises(DatasetError, match="class list not found"):
        read_voc(voc_tree, classes="person")


def test_demo_reads_the_class_list(voc_tree):
    from detaug.cli import main as cli

    assert cli.voc_classes(str(voc_tree)) == NAMES
    _check_labels(cli.load_dataset("voc", str(voc_tree)), voc_tree)
    # without a class list: the 20 standard classes, as before
    assert cli.voc_classes(VOC_MINI) is None
    assert cli.load_dataset("voc", VOC_MINI).class_names == list(VOC_CLASSES)
    # a bad list is an error naming it (it was a ValueError of read_voc without the file)
    _write(voc_tree / "classes.txt", "dog\ncat\ndog\n")
    with pytest.raises(DatasetError, match="line 3: class 'dog' is listed twice") as err:
        cli.load_dataset("voc", str(voc_tree))
    assert err.value.file == str(voc_tree / "classes.txt")


def test_readers_voc_op_takes_a_class_list_path(voc_tree):
    from detaug import Pipeline, fn

    labels = {}
    for key, classes in (("list", NAMES), ("path", str(voc_tree / "classes.txt"))):
        pipe = Pipeline(batch_size=8, num_threads=1, seed=0)
        with pipe:
            _, boxes = fn.readers.voc(root=str(voc_tree), classes=classes)
            pipe.set_outputs(boxes)
        pipe.build()
        labels[key] = [np.asarray(pipe.run_batch(i)[0].labels) for i in range(2)]
    ds = read_voc(voc_tree, classes=NAMES)
    expect = np.concatenate([r.labels for r in ds.records[:16]])
    np.testing.assert_array_equal(np.concatenate(labels["list"]), expect)
    np.testing.assert_array_equal(np.concatenate(labels["path"]), expect)


def test_convert_reads_the_class_list(voc_tree, tmp_path, capsys):
    from detaug.cli.convert import main, parse_args, read

    out = str(tmp_path / "o")
    _check_labels(read(parse_args([str(voc_tree), out, "--from", "voc", "--to", "coco"])),
                  voc_tree)
    listed = _write(tmp_path / "mine.txt", "\n".join(NAMES))
    _check_labels(read(parse_args([str(voc_tree), out, "--from", "voc", "--to", "coco",
                                   "--classes", str(listed)])), voc_tree)
    # names on the command line, and the sample without a class list, as before
    ds = read(parse_args([str(voc_tree), out, "--from", "voc", "--to", "coco",
                          "--classes", ",".join(NAMES)]))
    _check_labels(ds, voc_tree)
    assert read(parse_args([VOC_MINI, out, "--from", "voc", "--to", "coco"])).class_names == \
        list(VOC_CLASSES)
    # a faulty class list: exit status 2, one line naming the file and the fault
    for data, fault in ((b"dog\ncat\ndog\n", "line 3: class 'dog' is listed twice"),
                        (b"dog\n\xffcat\n", "class list is not UTF-8 text"),
                        (b"\n \n", "no class name")):
        for argv in ([], ["--classes", str(listed)]):
            path = listed if argv else voc_tree / "classes.txt"
            _write(path, data)
            assert main([str(voc_tree), out, "--from", "voc", "--to", "coco"] + argv) == 2
            err = capsys.readouterr().err.strip()
            assert err.startswith(f"detaug-convert: error: {path}: ") and fault in err
            assert "\n" not in err and not os.path.exists(out)
        _write(voc_tree / "classes.txt", "\n".join(NAMES))


def test_a_voc_target_needs_a_class(tmp_path, capsys):
    """write_voc would leave an empty classes.txt, which reads back as a faulty file: a dataset
    of no class is refused for VOC (YOLO holds it), by the writer and by detaug-convert."""
    from detaug.cli.convert import main
    from helpers.reader_files import image, write_coco

    with pytest.raises(DatasetError, match="no class: a VOC class list") as err:
        readers.write_voc(readers.Dataset([], []), tmp_path / "v")
    assert err.value.file == str(tmp_path / "v" / "classes.txt")
    assert not (tmp_path / "v").exists()
    path, _ = write_coco(tmp_path / "c", [image(1)], [])
    _write(tmp_path / "c" / "annotations.json",  # (write_coco's default categories: none here)
           json.dumps({"images": [image(1)], "annotations": [], "categories": []}))
    assert main([path, str(tmp_path / "o"), "--from", "coco", "--to", "voc"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"detaug-convert: error: {path}: no class") and "YOLO" in err
    assert main([path, str(tmp_path / "y"), "--from", "coco", "--to", "yolo"]) == 0
    assert readers.read_yolo(tmp_path / "y").class_names == []
