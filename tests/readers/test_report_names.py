"""The converter's summary names each format as its documentation writes it."""
from readers.writers import FORMAT_NAMES, WriteReport


def test_summary_names_the_format_as_written():
    report = WriteReport("tfrecord", "/tmp/out", classes=3)
    report.images, report.boxes = 2, 5
    report.count("info", 1)
    lines = report.summary_lines()
    assert lines[0] == "wrote 2 images, 5 boxes, 3 classes as TFRecord to /tmp/out"
    assert lines[2] == "info: 1 not written as such: TFRecord cannot hold it"
    yolo = WriteReport("yolo-obb", "/d", classes=1).summary_lines()[0]
    assert yolo.endswith("as YOLO-OBB to /d")
    # every format the converter offers has its name
    from detaug.cli.convert import FORMATS
    assert set(FORMATS) <= set(FORMAT_NAMES)
