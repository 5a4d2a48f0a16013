"""detaug-convert's command line: help text for every option, --version, and progress output
(plain lines in a log, a redrawn line on a terminal)."""
import argparse
import os
import re
import subprocess
import sys

import pytest

import detaug
from detaug.cli.convert import build_parser, parse_args
from detaug.cli.main import package_version
from detaug.cli.progress import Progress
from helpers.reader_files import REPO, VOC_MINI

# "reading: 12/40  30% | 512.3 items/s | ETA 0:01", at the end "... | 0:02" (the time taken)
LINE = re.compile(r"^(reading|writing): (\d+)/(\d+) +(\d+)% \| \d+\.\d items/s \| "
                  r"(ETA (\d+:)?\d+:\d\d|ETA \?|(\d+:)?\d+:\d\d)$")


def _convert(tmp_path, *extra, **kw):
    return subprocess.run([sys.executable, "-m", "detaug.cli.convert", VOC_MINI,
                           str(tmp_path / "o"), "--from", "voc", "--to", "coco", *extra],
                          cwd=REPO, timeout=180, **kw)


def test_every_option_has_help_text():
    parser = build_parser()
    actions = parser._actions
    names = {s for a in actions for s in a.option_strings} | {a.dest for a in actions
                                                             if not a.option_strings}
    # the parser really holds the options the issue named (so the loop below is not vacuous)
    assert {"--from", "--to", "--version", "--progress-interval", "src", "dst"} <= names
    missing = [a.option_strings or a.dest for a in actions
               if not (a.help and a.help.strip()) or a.help == argparse.SUPPRESS]
    assert not missing, f"options without help text: {missing}"
    text = parser.format_help()
    for a in actions:  # every help string shows in --help (first words; argparse wraps)
        assert " ".join(a.help.split()[:2]) in " ".join(text.split()), a.option_strings


def test_help_is_plain_text(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out and ":class:" not in out
    assert "detaug-convert: convert a detection dataset among COCO, Pascal VOC, YOLO" in out
    # the layouts and data-safety notes come along, refilled within 80 columns
    assert "Data safety: the source is never opened for writing" in " ".join(out.split())
    assert max(len(line) for line in out.splitlines()) <= 80


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"detaug-convert {detaug.__version__}\n"
    assert package_version() == detaug.__version__


def test_version_from_the_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "detaug.cli.convert", "--version"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == f"detaug-convert {detaug.__version__}\n"


def test_convert_uses_the_cli_progress_line():
    import detaug.cli.convert as convert

    assert convert.Progress is Progress
    args = parse_args(["a", "b", "--from", "voc", "--to", "coco", "--progress-interval", "2.5"])
    p = convert._progress("reading", args)
    assert (p.label, p.stream, p.every) == ("reading", sys.stderr, 2.5)  # pytest: not a tty
    assert parse_args(["a", "b", "--from", "voc", "--to", "coco"]).progress_interval == 10.0


def test_redirected_run_writes_plain_progress_lines(tmp_path):
    """stdout and stderr to files (a log): whole lines, no carriage return, counts that rise
    to the total, rate and ETA on each, the time taken on the last."""
    with open(tmp_path / "out.txt", "w") as out, open(tmp_path / "err.txt", "w") as err:
        proc = _convert(tmp_path, "--progress-interval", "0", stdout=out, stderr=err)
    stdout, stderr = (tmp_path / "out.txt").read_text(), (tmp_path / "err.txt").read_text()
    assert proc.returncode == 0, stderr
    assert "\r" not in stdout and "\r" not in stderr
    assert "wrote 40 images, 89 boxes, 20 classes as COCO" in stdout
    assert "items/s" not in stdout  # progress is on stderr only
    lines = stderr.splitlines()
    assert lines and all(LINE.match(line) for line in lines), lines
    for label in ("reading", "writing"):
        ours = [LINE.match(line) for line in lines if line.startswith(label + ":")]
        done = [int(m.group(2)) for m in ours]
        assert done == sorted(done) and done[-1] == 40 and len(done) >= 2, (label, done)
        assert {int(m.group(3)) for m in ours} == {40}
        assert all(int(m.group(4)) == 100 * int(m.group(2)) // 40 for m in ours)
        assert ours[-1].group(5).count("ETA") == 0  # the last line gives the time taken
        assert all("ETA" in m.group(5) for m in ours[:-1])
    assert lines.index(next(x for x in lines if x.startswith("writing"))) > \
        max(i for i, x in enumerate(lines) if x.startswith("reading"))


def test_redirected_short_run_at_the_default_interval_prints_no_progress(tmp_path):
    proc = _convert(tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # 40 images take well under the 10 s between lines in a log: no progress line at all
    assert proc.stderr == "" and "\r" not in proc.stdout


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_terminal_gets_one_redrawn_line_per_stage(tmp_path):
    master, slave = os.openpty()
    try:
        proc = _convert(tmp_path, stdout=subprocess.PIPE, stderr=slave)
    finally:
        os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.returncode == 0
    text = b"".join(chunks).decode().replace("\r\n", "\n")  # the tty turns \n into \r\n
    lines = text.split("\n")
    assert lines[-1] == "" and len(lines) == 3, text  # reading, writing, each ended once
    for label, line in zip(("reading", "writing"), lines):
        draws = line.split("\r")
        assert draws[0] == "" and all(LINE.match(d) for d in draws[1:]), line
        assert draws[-1].startswith(f"{label}: 40/40 100% |") and "ETA" not in draws[-1]
