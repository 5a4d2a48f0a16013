"""A fractional crop size is truncated as DALI's CropAttr takes it (``static_cast<int>`` of its
float32 argument), for ``fn.crop`` and ``fn.crop_mirror_normalize``, given once or per sample;
the window's anchor is then DALI's ``round(pos * (in - crop))`` of the truncated size."""
from __future__ import annotations

import numpy as np

import detaug.fn as fn
import detaug.types as types
from helpers import fresh_seed, run_images
from helpers.dali_refs import dali_crop_anchor


def test_fractional_crop_truncates():
    """crop=(7.9, 9.6) is 7 x 9 (rounding would give 8 x 10); per sample 5.99 -> 5."""
    rng = np.random.default_rng(fresh_seed())
    imgs = [rng.integers(0, 256, (20, 24, 3), dtype=np.uint8) for _ in range(2)]
    a, b, c = run_images(imgs, lambda i: (
        fn.crop(i, crop=(7.9, 9.6), crop_pos_x=0.3, crop_pos_y=0.8),
        fn.crop(i, crop_h=fn.external_source(source=lambda: [np.float32(5.99), np.float32(6.5)]),
                crop_w=fn.external_source(source=lambda: [np.float32(3.7), np.float32(11.2)])),
        fn.crop_mirror_normalize(i, crop=(6.7, 4.2), output_layout="HWC", dtype=types.FLOAT)))
    for k, img in enumerate(imgs):
        y0, x0 = dali_crop_anchor(0.8, 20 - 7), dali_crop_anchor(0.3, 24 - 9)
        np.testing.assert_array_equal(np.asarray(a.at(k)), img[y0:y0 + 7, x0:x0 + 9])
        h, w = ((5, 3), (6, 11))[k]
        y0, x0 = dali_crop_anchor(0.5, 20 - h), dali_crop_anchor(0.5, 24 - w)
        np.testing.assert_array_equal(np.asarray(b.at(k)), img[y0:y0 + h, x0:x0 + w])
        y0, x0 = dali_crop_anchor(0.5, 20 - 6), dali_crop_anchor(0.5, 24 - 4)
        np.testing.assert_array_equal(np.asarray(c.at(k)), img[y0:y0 + 6, x0:x0 + 4])
