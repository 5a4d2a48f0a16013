# DALI's augmentation gallery (docs/examples/image_processing/augmentation_gallery.ipynb): one
# pipeline per augmentation of one image. Changed: the imports, the image (a VOC JPEG), device
# "cpu". It does not run in detaug: fn.water and fn.sphere are not in detaug (each raises one
# line naming the op); the other entries run (tests/dali/test_dali_examples.py).
import os
import numpy as np
from detaug.pipeline import Pipeline
import detaug.fn as fn
import detaug.types as types

from _data import VOC_IMAGES

image_filename = os.path.join(VOC_IMAGES, sorted(os.listdir(VOC_IMAGES))[0])

augmentations = {}
augmentations["resize"] = lambda images: fn.resize(images, resize_x=300, resize_y=300)
augmentations["rotate"] = lambda images: fn.rotate(images, angle=-45.0, fill_value=0,
                                                   keep_size=True)
augmentations["flip"] = lambda images: fn.flip(images, horizontal=1, vertical=0)
augmentations["warp_affine"] = lambda images: fn.warp_affine(
    images, matrix=[1.0, 0.8, 0.0, 0.0, 1.2, 0.0], fill_value=0, inverse_map=False)
augmentations["hsv"] = lambda images: fn.hsv(images, hue=45., saturation=0.2)
augmentations["brightness_contrast"] = lambda images: fn.brightness_contrast(
    images, brightness=0.5, contrast=1.5)
augmentations["crop"] = lambda images: fn.crop(images, crop=(150, 150), crop_pos_x=0.5,
                                               crop_pos_y=0.5)
augmentations["water"] = lambda images: fn.water(images)
augmentations["sphere"] = lambda images: fn.sphere(images)

results = {}
for name, aug in augmentations.items():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=0)
    with pipe:
        data, _ = fn.readers.file(files=[image_filename], file_root="")
        images = fn.decoders.image(data, device="cpu")
        pipe.set_outputs(images, aug(images))
    pipe.build()
    results[name] = pipe.run()
