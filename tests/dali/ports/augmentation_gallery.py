# Follows DALI's augmentation gallery (docs/examples/image_processing/augmentation_gallery.ipynb):
# a table of augmentations, each run on one decoded image in a pipeline of its own (the gallery's
# entries: resize, rotate, flip, warp_affine, hsv, brightness_contrast, crop, water, sphere).
# Written here in DALI's API (not a copy of DALI's code); every entry runs (water and sphere on
# the CPU, as the gallery's pipeline here is a CPU one).
import os

from detaug.pipeline import Pipeline
import detaug.fn as fn
import detaug.types as types

from _data import VOC_IMAGES

IMAGE = sorted(os.listdir(VOC_IMAGES))[0]

GALLERY = {
    "resize": lambda im: fn.resize(im, resize_x=300, resize_y=300),
    "rotate": lambda im: fn.rotate(im, angle=-45.0, fill_value=0, keep_size=True),
    "flip": lambda im: fn.flip(im, horizontal=1, vertical=0),
    "warp_affine": lambda im: fn.warp_affine(im, matrix=[1.0, 0.8, 0.0, 0.0, 1.2, 0.0],
                                             fill_value=0, inverse_map=False),
    "hsv": lambda im: fn.hsv(im, hue=45.0, saturation=0.2),
    "brightness_contrast": lambda im: fn.brightness_contrast(im, brightness=0.5, contrast=1.5),
    "crop": lambda im: fn.crop(im, crop=(150, 150), crop_pos_x=0.5, crop_pos_y=0.5),
    "water": lambda im: fn.water(im),
    "sphere": lambda im: fn.sphere(im),
}

results = {}
for name, augment in GALLERY.items():
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=0)
    with pipe:
        encoded, _ = fn.readers.file(file_root=VOC_IMAGES, files=[IMAGE])
        image = fn.decoders.image(encoded, device="cpu", output_type=types.RGB)
        pipe.set_outputs(image, augment(image))
    pipe.build()
    results[name] = pipe.run()
