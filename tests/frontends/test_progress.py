"""detaug.cli.progress: a redrawn line on a terminal, plain lines with rate and ETA elsewhere."""
import io

from detaug.cli.progress import Progress, format_seconds


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_format_seconds():
    assert [format_seconds(s) for s in (0, 4.4, 59.6, 61, 3599, 3600, 3725)] == \
        ["0:00", "0:04", "1:00", "1:01", "59:59", "1:00:00", "1:02:05"]


def test_plain_lines_in_a_log_every_interval_with_rate_and_eta():
    out, clock = io.StringIO(), Clock()
    p = Progress("writing", out, interval=10, clock=clock)
    for done in range(1, 10001):  # 1000 items a second for 10 s
        clock.t = 100.0 + done / 1000
        p(done, 10000)
    # the first line falls due at 10 s, which is the end: one line, with the total time
    assert out.getvalue() == "writing: 10000/10000 100% | 1000.0 items/s | 0:10\n"


def test_long_log_gets_progress_lines_then_a_last_one():
    out, clock = io.StringIO(), Clock()
    p = Progress("reading", out, interval=10, clock=clock)
    for done in range(1, 2501):  # 100 items a second for 25 s
        clock.t = 100.0 + done / 100
        p(done, 2500)
    assert "\r" not in out.getvalue()
    assert out.getvalue().splitlines() == [
        "reading: 1000/2500  40% | 100.0 items/s | ETA 0:15",
        "reading: 2000/2500  80% | 100.0 items/s | ETA 0:05",
        "reading: 2500/2500 100% | 100.0 items/s | 0:25",
    ]


def test_a_short_run_in_a_log_writes_nothing():
    out, clock = io.StringIO(), Clock()
    p = Progress("reading", out, clock=clock)
    for done in range(1, 41):
        clock.t += 0.01
        p(done, 40)
    assert out.getvalue() == "" and not p.shown


def test_terminal_redraws_in_place_and_ends_the_line():
    out, clock = Tty(), Clock()
    p = Progress("writing", out, refresh=0.1, clock=clock)
    p.every = 0.125  # binary fractions: the times below are exact
    for done in range(1, 11):  # 16 items a second: a redraw every other item
        clock.t = 100.0 + done * 0.0625
        p(done, 10)
    text = out.getvalue()
    assert text.endswith("\rwriting: 10/10 100% | 16.0 items/s | 0:01\n")
    frames = text.split("\r")[1:]
    assert frames[0] == "writing: 1/10  10% | 16.0 items/s | ETA 0:01"  # the first call shows
    assert [f.split("/")[0] for f in frames] == ["writing: 1", "writing: 3", "writing: 5",
                                                 "writing: 7", "writing: 9", "writing: 10"]
    assert text.count("\n") == 1


def test_unknown_rate_and_empty_total():
    out, clock = io.StringIO(), Clock()
    p = Progress("x", out, clock=clock)
    assert p.line(0, 5, clock.t) == "x: 0/5   0% | 0.0 items/s | ETA ?"
    assert p.line(0, 0, clock.t) == "x: 0/0 100% | 0.0 items/s | 0:00"
