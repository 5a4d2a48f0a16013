"""Reader faults that passed without a word, or ended the process ("other silent
faults"), each against the case that showed it:

- ``readers.limits.FOLLOW_SYMLINKS_OUTSIDE_ROOT = False`` was ignored by the YOLO readers
  (VOC and COCO honour it): an image or label file linked from outside the root was read;
- COCO -> YOLO wrote ``images/a.jpg `` (a trailing space), which read_yolo then does not list:
  its label file was refused as an orphan;
- a RecordTable pickled (or deep-copied) with records handed out: ``packed()`` no longer saw
  the records' in-place edits (their arrays came back as copies, not views of the columns);
- a valid ``data.yaml`` with a merge key (``<<: *base``) was refused as invalid YAML;
- an entity reference inside a VOC name or coordinate (``person&e;``, legal under a DOCTYPE)
  was dropped: the name read as ``person``, a coordinate ``1&e;2`` as 1;
- a TFRecord shard truncated while it was scanned ended the process with SIGBUS (the scan
  mapped the file).
"""
import copy
import os
import pickle
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from helpers import COCO, REPO
from helpers.bounded import run_bounded
from helpers.reader_files import voc_xml, write_coco, write_detection_shard, write_image, write_voc
from readers import DatasetError, limits, read_coco, read_voc, read_yolo
from readers import tfrecord as T
from readers import tfrecord_scan as S
from readers.record_table import RecordTable
from readers.writers import write_yolo
from readers.yolo import MAX_YAML_VALUES, yaml_names
from readers.yolo_tasks import read_yolo_task


# ---- FOLLOW_SYMLINKS_OUTSIDE_ROOT ------------------------------------------------------------
@pytest.fixture
def untrusted(monkeypatch):
    monkeypatch.setattr(limits, "FOLLOW_SYMLINKS_OUTSIDE_ROOT", False)


def yolo_tree(tmp_path, link_image=True, link_label=False):
    root, outside = tmp_path / "ds", tmp_path / "outside"
    for d in ("images", "labels"):
        (root / d).mkdir(parents=True)
    outside.mkdir()
    (root / "classes.txt").write_text("cat\n")
    write_image(str(root / "images" / "a.jpg"), 40, 30)
    (root / "labels" / "a.txt").write_text("0 0.5 0.5 0.5 0.5\n")
    write_image(str(outside / "secret.jpg"), 40, 30)
    (outside / "secret.txt").write_text("0 0.25 0.25 0.1 0.1\n")
    if link_image:
        os.symlink(outside / "secret.jpg", root / "images" / "b.jpg")
    else:
        write_image(str(root / "images" / "b.jpg"), 40, 30)
    if link_label:
        os.symlink(outside / "secret.txt", root / "labels" / "b.txt")
    return str(root)


@pytest.mark.parametrize("link_image,link_label,bad", [(True, False, "images/b.jpg"),
                                                       (False, True, "labels/b.txt")])
def test_yolo_refuses_a_file_linked_from_outside_the_root(tmp_path, untrusted, link_image,
                                                          link_label, bad):
    root = yolo_tree(tmp_path, link_image, link_label)
    with pytest.raises(DatasetError) as e:
        read_yolo(root)
    assert e.value.file == os.path.join(root, bad) and "outside the dataset root" in e.value.reason
    with pytest.warns(UserWarning, match="skipped 1 bad item"):
        ds = read_yolo(root, on_error="skip")
    assert [r.image_id for r in ds.records] == ["a"]
    assert ds.skipped == [(os.path.join(root, bad), e.value.reason)]
    np.testing.assert_allclose(ds.records[0].boxes, [[10, 7.5, 30, 22.5]])


def test_yolo_task_reader_refuses_it_too(tmp_path, untrusted):
    root = yolo_tree(tmp_path)
    with pytest.raises(DatasetError, match="outside the dataset root"):
        read_yolo_task(root, "segment")


def test_links_are_followed_when_the_owner_allows_it(tmp_path):
    """The default (a dataset the user owns): the link is the owner's choice and is read."""
    assert limits.FOLLOW_SYMLINKS_OUTSIDE_ROOT
    ds = read_yolo(yolo_tree(tmp_path, True, True))
    assert [r.image_id for r in ds.records] == ["a", "b"]
    np.testing.assert_allclose(ds.records[1].boxes, [[8, 6, 12, 9]])


def test_a_link_inside_the_root_is_fine_when_untrusted(tmp_path, untrusted):
    root = yolo_tree(tmp_path, link_image=False)
    os.symlink(os.path.join(root, "images", "a.jpg"), os.path.join(root, "images", "c.jpg"))
    assert [r.image_id for r in read_yolo(root).records] == ["a", "b", "c"]


# ---- COCO -> YOLO names read_yolo would not list --------------------------------------------
def coco_with_names(tmp_path, names):
    images = [{"id": i + 1, "file_name": n, "width": 40, "height": 30} for i, n in enumerate(names)]
    anns = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [4, 3, 10, 8], "area": 80,
             "iscrowd": 0}]
    return write_coco(tmp_path / "coco", images, anns, [{"id": 1, "name": "cat"}])


def test_write_yolo_refuses_a_name_it_could_not_read_back(tmp_path):
    js, images = coco_with_names(tmp_path, ["a.jpg ", "b.jpg"])
    ds = read_coco(js, images)
    with pytest.raises(DatasetError) as e:
        write_yolo(ds, str(tmp_path / "out"))
    assert e.value.file == os.path.join(images, "a.jpg ")
    assert "'a.jpg '" in e.value.reason and "would not be read back" in e.value.reason
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_the_converter_refuses_it_in_one_line(tmp_path):
    js, images = coco_with_names(tmp_path, ["b.jpg", "a.jpg "])
    dst = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "detaug.cli.convert", js, str(dst), "--to",
                           "yolo", "--image-root", images], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 2, proc.stderr
    assert "a.jpg :" in proc.stderr and "would not be read back" in proc.stderr
    assert not dst.exists()


def test_names_with_spaces_that_read_back_are_written_and_read_back(tmp_path):
    """A space inside the stem or before it is a name read_yolo lists: the round trip holds."""
    js, images = coco_with_names(tmp_path, ["b .jpg", " c.jpg", "d e.png"])
    write_yolo(read_coco(js, images), str(tmp_path / "out"))
    back = read_yolo(str(tmp_path / "out"))
    assert sorted(r.image_id for r in back.records) == [" c", "b ", "d e"]
    box = next(r for r in back.records if r.image_id == "b ").boxes
    np.testing.assert_allclose(box, [[4, 3, 14, 11]], atol=1e-4)


# ---- RecordTable after pickling ---------------------------------------------------------------
def random_table(rng):
    n = int(rng.integers(2, 7))
    counts = rng.integers(0, 4, n)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    m = int(offsets[-1])
    xy = rng.uniform(0, 20, (m, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(1, 10, (m, 2)).astype(np.float32)], axis=1)
    return RecordTable([f"{i}.jpg" for i in range(n)], [40] * n, [30] * n, list(range(n)), None,
                       offsets, boxes, rng.integers(0, 5, m).astype(np.int64),
                       {"iscrowd": rng.integers(0, 2, m).astype(np.int64)}, {})


@pytest.mark.parametrize("clone", [lambda t: pickle.loads(pickle.dumps(t)), copy.deepcopy],
                         ids=["pickle", "deepcopy"])
def test_packed_sees_in_place_edits_after_pickling(rng, clone):
    for _ in range(5):
        table = random_table(rng)
        k = int(rng.integers(0, len(table)))
        _ = table[k], table[0]  # records handed out before the copy
        copied = clone(table)
        want_boxes = copied.packed().boxes.copy()
        r = copied[k]
        if len(r.boxes):
            r.boxes[0, 0] = 123.0
            r.labels[-1] = 77
            r.fields["iscrowd"][0] = 1 - r.fields["iscrowd"][0]
            s = int(copied._cols.offsets[k])
            want_boxes[s, 0] = 123.0
        packed = copied.packed()
        assert packed is not None
        np.testing.assert_array_equal(packed.boxes, want_boxes)
        np.testing.assert_array_equal(packed.boxes, np.concatenate([x.boxes for x in copied]))
        np.testing.assert_array_equal(packed.labels, np.concatenate([x.labels for x in copied]))
        np.testing.assert_array_equal(packed.fields["iscrowd"],
                                      np.concatenate([x.fields["iscrowd"] for x in copied]))
        # the original is untouched by the copy's edits
        np.testing.assert_array_equal(table.packed().boxes,
                                      np.concatenate([x.boxes for x in table]))


def test_a_real_coco_table_after_pickling():
    ds = read_coco(os.path.join(COCO, "annotations.json"), os.path.join(COCO, "images"))
    assert isinstance(ds.records, RecordTable)
    r = ds.records[3]
    assert len(r.boxes)
    copied = pickle.loads(pickle.dumps(ds.records))
    copied[3].boxes[:] += 1.0
    assert np.array_equal(copied.packed().boxes, np.concatenate([x.boxes for x in copied]))
    assert not np.array_equal(copied.packed().boxes, ds.records.packed().boxes)
    copied[3].boxes = copied[3].boxes.copy()  # a new array: packed defers to the records
    assert copied.packed() is None


# ---- data.yaml merge keys ----------------------------------------------------------------------
def test_a_merge_key_is_read_as_yaml_says():
    text = "base: &b\n  names: [cat, dog]\n  nc: 2\ntrain:\n  <<: *b\n  nc: 3\n<<: *b\n"
    assert yaml_names(text) == ["cat", "dog"]
    # a key of the mapping itself overrides a merged one
    assert yaml_names("b: &b {names: [x]}\n<<: *b\nnames: [cat]\n") == ["cat"]
    assert yaml_names("b: &b {names: [x]}\nc: {<<: *b, names: [y]}\nnames: [cat]\n") == ["cat"]


def test_a_key_given_twice_is_still_refused_with_merges_around():
    with pytest.raises(DatasetError, match="the key 'y' is given twice"):
        yaml_names("b: &b {x: 1}\nc: {<<: *b, y: 1, y: 2}\nnames: [a]\n")


def test_merges_of_merges_stay_bounded():
    """Each level merges the one before twice: without the bound, PyYAML releases before 6.0.2
    doubled the entries a level (2**40 here)."""
    lines = ["l0: &l0 {k0: 0}"] + [f"l{i}: &l{i} {{<<: [*l{i - 1}, *l{i - 1}], k{i}: 0}}"
                                   for i in range(1, 40)]
    t = time.perf_counter()
    assert yaml_names("\n".join(lines) + "\nnames: [a]\n") == ["a"]
    assert time.perf_counter() - t < 5


def test_a_merge_past_the_bound_is_refused(monkeypatch):
    import readers.yolo as Y

    monkeypatch.setattr(Y, "MAX_YAML_VALUES", 5)
    keys = ", ".join(f"k{i}: {i}" for i in range(8))
    with pytest.raises(DatasetError, match="merge keys .* expand to more than 5"):
        yaml_names(f"b: &b {{{keys}}}\nc: {{<<: *b}}\nnames: [a]\n")
    assert MAX_YAML_VALUES == 1_000_000


# ---- VOC entity references -----------------------------------------------------------------------
@pytest.mark.parametrize("doctype,obj,entity,element", [
    ('<!DOCTYPE annotation SYSTEM "voc.dtd">', ("person&e;", 1, 2, 30, 40), "&e;", "name"),
    ('<!DOCTYPE annotation [<!ENTITY e "5">]>', ("person", "1&e;0", 2, 30, 40), "&e;", "xmin"),
    ('<!DOCTYPE annotation [<!ENTITY w "100">]>', ("person", 1, 2, 30, "4&w;"), "&w;", "ymax"),
])
def test_an_entity_in_a_voc_file_is_a_fault_naming_it(tmp_path, doctype, obj, entity, element):
    root = write_voc(tmp_path / "voc", {
        "a": voc_xml("a.jpg", (100, 80), [obj], doctype=doctype),
        "b": voc_xml("b.jpg", (100, 80), [("cat", 1, 2, 3, 4)])})
    xml = os.path.join(root, "Annotations", "a.xml")
    with pytest.raises(DatasetError) as e:
        read_voc(root)
    assert e.value.file == xml and f"entity reference {entity} in <{element}>" in e.value.reason
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = read_voc(root, on_error="skip")
    assert [r.image_id for r in ds.records] == ["b"] and ds.skipped == [(xml, e.value.reason)]


def test_escaped_text_is_still_read(tmp_path):
    root = write_voc(tmp_path / "voc", {"a": voc_xml("a.jpg", (100, 80), [("cat&amp;dog", 1, 2, 30, 40)])})
    ds = read_voc(root, classes=["cat&dog"])
    assert ds.class_names == ["cat&dog"] and len(ds.records[0].boxes) == 1


# ---- a shard truncated while it is scanned ----------------------------------------------------
def shard(tmp_path, n=2000):
    return write_detection_shard(str(tmp_path / "train.tfrecord"), n, payload=4000)


def test_a_shard_truncated_during_the_scan_does_not_end_the_process(tmp_path):
    """Another process cuts the shard to a page while it is scanned (here: as the scan starts,
    after the file was opened). The scan mapped the file, and reading past the new end raised
    SIGBUS; now it reads the bytes first, so the scan sees the file as it was read."""
    path = shard(tmp_path)
    proc = run_bounded(f"""
        import os
        from readers import tfrecord_scan as S
        scan = S._scan
        def cut_then_scan(p, buf):
            os.truncate(p, 4096)
            return scan(p, buf)
        S._scan = cut_then_scan
        index = S.index_shard({path!r})
        print(len(index["offset"]), index["terminal"])
    """, mem_mb=None, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # SIGBUS: -7
    assert proc.stdout.split() == ["2000", "None"]  # the file as it was read: whole


def test_a_shard_truncated_while_it_is_read_is_an_error_naming_it(tmp_path, monkeypatch):
    path = shard(tmp_path)
    size = os.path.getsize(path)
    opened = T.open_record_file

    class Cut:
        """The file, cut to ``size // 3`` just before its bytes are read."""

        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def fileno(self):
            return self.f.fileno()

        def seek(self, off):
            return self.f.seek(off)

        def read(self, n=-1):
            if n > T.WINDOW:  # the whole read, after the headers were walked
                os.truncate(path, size // 3)
            return self.f.read(n)

    monkeypatch.setattr(T, "open_record_file", lambda p: Cut(opened(p)))
    with pytest.raises(DatasetError) as e:
        S.index_shard(path)
    assert e.value.file == path
    assert f"had {size:,} bytes" in e.value.reason and f"after {size // 3:,}" in e.value.reason
    assert "truncated" in e.value.reason


def test_the_read_shard_indexes_as_the_mapped_one_did(tmp_path):
    """Reading instead of mapping changes no index: a whole shard, and one with a zero-filled
    tail (read up to the first bad header only), against frame_shard over the whole file."""
    path = shard(tmp_path, 300)
    with open(path, "rb") as f:
        whole = f.read()
    for tail in (b"", bytes(5000), b"\x07" * 30):
        with open(path, "wb") as f:
            f.write(whole + tail)
        offs, lens, ok, terminal = S.frame_shard(path, whole + tail)
        index = S.index_shard(path)
        np.testing.assert_array_equal(index["offset"], offs)
        np.testing.assert_array_equal(index["length"], lens)
        assert len(offs) == 300 and ok.all()
        assert (terminal is None) == (tail == b"")
        assert (None if index["terminal"] is None else tuple(index["terminal"])) == terminal
