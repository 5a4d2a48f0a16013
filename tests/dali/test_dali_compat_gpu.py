"""Issue 16 on the device: the tutorial-style programs of test_dali_compat.py with DALI's
device="mixed" decoders and device="gpu" image ops, with the same value checks."""
import pytest

import test_dali_compat as T
from helpers import close_pipelines  # noqa: F401  (fixture)

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def on_the_gpu(monkeypatch):
    monkeypatch.setitem(T.DEVICE, "decoder", "mixed")
    monkeypatch.setitem(T.DEVICE, "ops", "gpu")


def test_getting_started_gpu(folder):
    T.test_getting_started_file_reader_decoder_shuffle_rotate(folder)


def test_external_source_gpu(folder):
    T.test_external_source_feed_input_bytes_and_ragged_labels(folder)


def test_hybrid_classification_gpu(folder):
    T.test_hybrid_classification_iterator_reader_name(folder)


def test_ssd_pipeline_gpu():
    T.test_ssd_pipeline_boxes_follow_crop_flip_paste_float64_reference()


folder = T.folder
