"""Resource limits: a PNG decompression bomb and oversized annotation files are refused with a
named error (file + limit), never handed to the decoder or the JSON/XML parser."""
import json
import os
import shutil

import pytest
from PIL import Image

import readers
from detaug import Pipeline, fn
from detaug.core.errors import SampleError
from detaug.ops import decode as decode_mod
from readers import DatasetError, limits
from helpers.reader_files import COCO_MINI, VOC_MINI
from helpers.reader_files import bomb_png


def _decode_pipe(tmp_path, files, on_error="raise", batch_size=None):
    pipe = Pipeline(batch_size=batch_size or len(files), seed=0, on_error=on_error)
    with pipe:
        enc, _ = fn.readers.file(files=files, file_root=str(tmp_path))
        pipe.set_outputs(fn.decoders.image(enc))
    return pipe


def test_png_bomb_refused_by_the_cpu_decoder(tmp_path):
    (tmp_path / "bomb.png").write_bytes(bomb_png())
    assert (tmp_path / "bomb.png").stat().st_size < 200
    pipe = _decode_pipe(tmp_path, ["bomb.png"])
    with pytest.raises(SampleError, match=r"bomb\.png.*(MAX_PIXELS|MAX_IMAGE_PIXELS)"):
        pipe.run()
    pipe.close()


def test_max_pixels_is_settable_and_checked_on_the_header(tmp_path, monkeypatch):
    Image.new("RGB", (20, 20)).save(tmp_path / "a.png")
    Image.new("RGB", (5, 5)).save(tmp_path / "b.png")
    monkeypatch.setattr(decode_mod, "MAX_PIXELS", 100)
    pipe = _decode_pipe(tmp_path, ["a.png"])
    with pytest.raises(SampleError, match=r"a\.png: header declares 20 x 20 = 400 pixels, over "
                                          r"the limit of 100 \(detaug.ops.decode.MAX_PIXELS\)"):
        pipe.run()
    pipe.close()
    # under skip: counted, and the batch keeps its size
    pipe = _decode_pipe(tmp_path, ["a.png", "b.png"], on_error="skip", batch_size=2)
    with pytest.warns(UserWarning, match="MAX_PIXELS"):
        (out,) = pipe.run()
    assert out.batch_size == 2 and pipe.stats["skipped"] == 1
    pipe.close()


def test_png_bomb_refused_by_the_readers_header_check(tmp_path, monkeypatch):
    """Readers read image headers (sizes): a bomb is a named fault there too."""
    root = tmp_path / "yolo"
    (root / "images").mkdir(parents=True)
    (root / "images" / "bomb.png").write_bytes(bomb_png())
    (root / "classes.txt").write_text("a\n")
    with pytest.raises(DatasetError, match=r"bomb\.png.*too many pixels"):
        readers.read_yolo(root)
    Image.new("RGB", (20, 20)).save(root / "images" / "bomb.png")
    monkeypatch.setattr(limits, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(DatasetError, match=r"bomb\.png.*400 pixels, over the limit of 100 "
                                           r"\(readers.limits.MAX_IMAGE_PIXELS\)"):
        readers.read_yolo(root)
    with pytest.warns(UserWarning, match="skipped 1"):
        assert len(readers.read_yolo(root, on_error="skip")) == 0


def test_coco_file_over_the_limit_is_refused(monkeypatch):
    ann = os.path.join(COCO_MINI, "annotations.json")
    size = os.path.getsize(ann)
    monkeypatch.setattr(limits, "MAX_ANNOTATION_BYTES", size - 1)
    with pytest.raises(DatasetError, match=rf"annotations\.json: COCO annotations file is "
                                           rf"{size:,} bytes, over the limit of {size - 1:,} "
                                           r"\(readers.limits.MAX_ANNOTATION_BYTES\)"):
        readers.read_coco(ann, os.path.join(COCO_MINI, "images"))
    monkeypatch.setattr(limits, "MAX_ANNOTATION_BYTES", size)
    assert len(readers.read_coco(ann, os.path.join(COCO_MINI, "images"))) > 0


def test_default_limits_are_documented_values():
    assert limits.MAX_ANNOTATION_BYTES == 1 << 30
    assert limits.MAX_LABEL_FILE_BYTES == 16 << 20
    assert "MAX_ANNOTATION_BYTES" in limits.__doc__ and "MAX_PIXELS" in decode_mod.__doc__


def test_voc_xml_and_split_file_over_the_limit(tmp_path, monkeypatch):
    root = tmp_path / "voc"
    shutil.copytree(VOC_MINI, root)
    xml = sorted((root / "Annotations").iterdir())[0]
    monkeypatch.setattr(limits, "MAX_LABEL_FILE_BYTES", 200)
    (root / "ImageSets" / "Main" / "trainval.txt").write_text(xml.stem + "\n")
    with pytest.raises(DatasetError, match=rf"{xml.name}: annotation file is [\d,]+ bytes, "
                                           r"over the limit of 200"):
        readers.read_voc(root)
    with pytest.warns(UserWarning, match="skipped 1"):
        assert len(readers.read_voc(root, on_error="skip")) == 0
    (root / "ImageSets" / "Main" / "trainval.txt").write_text("x" * 300)
    with pytest.raises(DatasetError, match=r"trainval\.txt: split file is 300 bytes"):
        readers.read_voc(root)


def test_yolo_label_file_over_the_limit(tmp_path, monkeypatch):
    root = tmp_path / "yolo"
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    Image.new("RGB", (20, 20)).save(root / "images" / "a.jpg")
    (root / "classes.txt").write_text("a\n")
    (root / "labels" / "a.txt").write_text("0 0.5 0.5 0.2 0.2\n" * 20)
    monkeypatch.setattr(limits, "MAX_LABEL_FILE_BYTES", 100)
    with pytest.raises(DatasetError, match=r"a\.txt: text file is 360 bytes, over the limit"):
        readers.read_yolo(root)


def test_fifo_annotation_is_refused_without_blocking(tmp_path):
    ann = tmp_path / "annotations.json"
    os.mkfifo(ann)
    with pytest.raises(DatasetError, match="not a regular file"):
        readers.read_coco(ann, tmp_path)
    (tmp_path / "images").mkdir()
    with open(tmp_path / "real.json", "w") as f:
        json.dump({"images": [], "categories": []}, f)
    assert len(readers.read_coco(tmp_path / "real.json", tmp_path / "images")) == 0


def test_symlink_outside_the_root_followed_by_default_refused_when_untrusted(tmp_path, monkeypatch):
    """A file name inside the dataset root that is a symbolic link to a file outside it is read
    by default, and refused (a named error, or a counted skip) with
    readers.limits.FOLLOW_SYMLINKS_OUTSIDE_ROOT = False."""
    from readers.coco import read_coco

    outside = tmp_path / "elsewhere.jpg"
    Image.new("RGB", (8, 6)).save(outside)
    root = tmp_path / "ds"
    (root / "images").mkdir(parents=True)
    os.symlink(outside, root / "images" / "a.jpg")
    ann = root / "annotations.json"
    ann.write_text(json.dumps({
        "images": [{"id": 1, "file_name": "a.jpg", "width": 8, "height": 6}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 3, 3],
                         "iscrowd": 0, "area": 9}],
        "categories": [{"id": 1, "name": "x"}]}))
    assert len(read_coco(str(ann), str(root / "images")).records) == 1
    monkeypatch.setattr(limits, "FOLLOW_SYMLINKS_OUTSIDE_ROOT", False)
    with pytest.raises(DatasetError, match="outside the dataset root"):
        read_coco(str(ann), str(root / "images"))
    with pytest.warns(UserWarning):
        ds = read_coco(str(ann), str(root / "images"), on_error="skip")
    assert len(ds.records) == 0 and len(ds.skipped) >= 1


def _alarm(seconds):
    import signal

    def boom(*_):
        raise TimeoutError(f"over {seconds} s: blocked on a FIFO?")
    signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)


def test_fifo_named_like_a_jpg_is_refused_without_blocking(tmp_path):
    """A FIFO named like an image (no writer at the other end: a plain open() blocks forever)
    is a SampleError naming it, or a counted skip that keeps the batch size."""
    import signal
    import warnings

    for k in range(3):
        Image.new("RGB", (8, 6), 40 * k).save(tmp_path / f"g{k}.jpg")
    os.mkfifo(tmp_path / "f.jpg")
    files = ["g0.jpg", "f.jpg", "g1.jpg", "g2.jpg"]
    try:
        _alarm(20)
        pipe = _decode_pipe(tmp_path, files, batch_size=2)
        with pytest.raises(SampleError, match=r"f\.jpg: not a regular file \(a FIFO"):
            pipe.run()
        pipe.close()
        pipe = _decode_pipe(tmp_path, files, on_error="skip", batch_size=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sizes = [out.batch_size for (out,) in pipe]
        pipe.close()
    finally:
        signal.alarm(0)
    assert sizes == [2, 2] and pipe.stats["skipped"] == 1
    assert pipe.stats["skipped_files"][0][0] == str(tmp_path / "f.jpg")


def test_fifo_image_in_a_dataset_is_refused_by_reader_and_converter(tmp_path, capsys):
    """A YOLO dataset whose images/ holds a FIFO named x.jpg: read_yolo names it (its header is
    read for the size), and detaug-convert stops with one line instead of blocking in a copy."""
    import signal

    from detaug.cli.convert import main

    root = tmp_path / "yolo"
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    (root / "classes.txt").write_text("a\n")
    Image.new("RGB", (8, 6)).save(root / "images" / "a.jpg")
    os.mkfifo(root / "images" / "x.jpg")
    try:
        _alarm(20)
        with pytest.raises(DatasetError, match=r"x\.jpg: image file is not a regular file"):
            readers.read_yolo(root)
        assert main([str(root), str(tmp_path / "out"), "--from", "yolo", "--to", "coco"]) == 2
        assert "x.jpg: image file is not a regular file" in capsys.readouterr().err
        assert main([str(root), str(tmp_path / "out"), "--from", "yolo", "--to", "coco",
                     "--skip-bad"]) == 0
    finally:
        signal.alarm(0)
    assert "skipped 1 bad items" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path / "out" / "images")) == ["a.jpg"]


def test_a_file_that_shrinks_while_read_is_a_named_error(tmp_path, monkeypatch):
    """readv returning 0 before the size fstat gave (the file was cut meanwhile) is a
    SampleError naming the file, not an endless loop; a short read that goes on is read whole."""
    from detaug.ops import sources

    data = bytes(range(256)) * 40
    path = tmp_path / "x.jpg"
    path.write_bytes(data)
    real = os.readv
    calls = []

    def short(fd, bufs):  # 100 bytes a call, then (second run) the end of the file at 300
        calls.append(1)
        if cut and sum(len(b) for b in bufs) <= len(data) - 300:
            return 0
        view = memoryview(bufs[0])[:100]
        return real(fd, [view])

    monkeypatch.setattr(sources.os, "readv", short)
    cut = False
    got = sources._read_bytes(str(path), 4)
    assert bytes(got) == data and len(calls) == -(-len(data) // 100)
    cut = True
    with pytest.raises(SampleError, match=r"x\.jpg: the file shrank while it was read \(300 of 10240"):
        sources._read_bytes(str(path), 4)
