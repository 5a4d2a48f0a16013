"""detaug.runtime.retries (on_error='skip'): the retry policy given a stand-in epoch order:
a failing sample is replaced by the next record of the order (wrapping), the batch is run again,
a walk that comes back to where it began raises naming the batch, epoch and file, 'raise' (or a
fault with no position) re-raises the sample's error, a replacement takes its record's place in
the order, and each bad file is counted and warned about once per epoch. Then a real pipeline
over files with one corrupt image."""
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from detaug.core.errors import SampleError
from detaug.runtime.retries import RetryPolicy, SkipCount

from helpers import images_of

ORDER = np.array([3, 1, 4, 0, 2])


class Stand:
    """The retry policy with what a pipeline hands it: a schedule (the epoch order), a way to
    make a batch context, and one to give back what a failed attempt held."""

    def __init__(self, on_error="skip", order=ORDER, first=(1, 4)):
        self.policy = RetryPolicy(on_error)
        self.schedule = SimpleNamespace(shard_order=lambda epoch: np.asarray(order))
        self.first = np.asarray(first)
        self.made, self.retired = [], 0

    def make_ctx(self, indices):
        idx = self.first if indices is None else np.asarray(indices)
        self.made.append(idx.tolist())
        return SimpleNamespace(sample_index=idx.copy(), positions=np.arange(len(idx)), stream=None)

    def retire(self, ctx):
        self.retired += 1

    def run(self, key, stage):
        return self.policy.run(key, self.make_ctx, stage, self.retire, self.schedule)


def failing_on(*bad):
    def stage(ctx):
        for k, i in enumerate(ctx.sample_index.tolist()):
            if i in bad:
                raise SampleError(f"corrupt {i}", k, f"f{i}.jpg")
    return stage


def test_a_failing_sample_is_replaced_by_the_next_record_of_the_order():
    p = Stand()
    ctx = p.run((0, 5), failing_on(1))
    assert p.made == [[1, 4], [4, 4]] and p.retired == 1
    assert ctx.sample_index.tolist() == [4, 4] and ctx.skips == [("f1.jpg", "corrupt 1")]
    p = Stand(first=(0, 2))  # 2 is last in the order: its walk wraps to 3, then 1
    ctx = p.run((0, 5), failing_on(2, 3))
    assert p.made == [[0, 2], [0, 3], [0, 1]] and ctx.walks == {1: 2}
    assert [s[0] for s in ctx.skips] == ["f2.jpg", "f3.jpg"]


def test_a_walk_back_to_its_start_raises_naming_batch_epoch_and_file():
    p = Stand()
    with pytest.raises(RuntimeError, match=r"batch 5 of epoch 2: every record of the epoch order "
                                           r"failed to load, nothing is left to replace f\d.jpg"):
        p.run((2, 5), failing_on(0, 1, 2, 3, 4))


@pytest.mark.parametrize("on_error,position", [("raise", 0), ("skip", None)])
def test_raise_or_no_position_re_raises_the_sample_error(on_error, position):
    p = Stand(on_error)

    def stage(ctx):
        raise SampleError("bad bytes", position, "x.jpg")
    with pytest.raises(SampleError, match="bad bytes"):
        p.run((0, 0), stage)


def test_a_replacement_takes_its_records_place_in_the_order():
    p = Stand()
    got = RetryPolicy.replaced_positions(p.schedule, 0, [1, 4], [1, 2], [0, 4])
    assert got.tolist() == [3, 2]  # record 0 is 4th (position 3) of ORDER; 4 keeps its place
    assert RetryPolicy.replaced_positions(p.schedule, 0, [1, 4], None, [0, 4]) is None


def test_skips_are_counted_and_warned_once_per_epoch():
    p = SkipCount({"skipped": 0, "skipped_files": [], "batches": 0})
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        p.count([("a.jpg", "bad"), ("b.jpg", "worse"), ("a.jpg", "bad")], 0)
        p.count([("a.jpg", "bad")], 0)
        p.count([("a.jpg", "bad")], 1)
    assert [str(x.message) for x in w] == ["skipping a.jpg: bad", "skipping b.jpg: worse",
                                           "skipping a.jpg: bad"]
    assert p.stats["skipped"] == 3
    assert p.stats["skipped_files"] == [("a.jpg", "bad"), ("b.jpg", "worse"), ("a.jpg", "bad")]


def test_a_pipeline_skips_a_corrupt_image(tmp_path):
    from detaug import Pipeline, fn
    import cv2

    rng = np.random.default_rng(0)
    rgb = [rng.integers(0, 255, (5, 6, 3), np.uint8) for _ in range(4)]
    for k in range(4):
        cv2.imwrite(str(tmp_path / f"{k}.png"), rgb[k][..., ::-1])
    (tmp_path / "1.png").write_bytes(b"not an image")
    pipe = Pipeline(batch_size=4, num_threads=1, seed=0, on_error="skip")
    with pipe:
        enc, _ = fn.readers.file(file_root=str(tmp_path), files=[f"{k}.png" for k in range(4)],
                                 random_shuffle=False)
        pipe.set_outputs(fn.decoders.image(enc))
    with pytest.warns(UserWarning, match="skipping .*1.png"):
        (imgs,) = pipe.run()
    pipe.close()
    assert pipe.stats["skipped"] == 1
    got = images_of(imgs)  # record 1 replaced by the next of the (unshuffled) order, record 2
    for g, k in zip(got, [0, 2, 2, 3], strict=True):
        np.testing.assert_array_equal(g, rgb[k])
