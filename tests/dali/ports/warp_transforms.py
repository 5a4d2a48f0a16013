# DALI's geometric transforms with warp_affine (docs/examples/math/geometric_transforms.ipynb and
# image_processing/warp.ipynb): a per-sample matrix from fn.transforms.* (a rotation by a random
# angle about the image centre, then a scale and a translation, combined), applied to the image
# by warp_affine (inverse_map=False: the matrix maps source to destination) and to points by
# coord_transform. Changed: the imports, the images (the repository's VOC JPEGs), device "cpu".
import os
import numpy as np
from detaug import pipeline_def
import detaug.fn as fn
import detaug.types as types

from _data import VOC_IMAGES


@pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=7)
def warp_pipe():
    jpegs, _ = fn.readers.file(file_root=VOC_IMAGES, files=sorted(os.listdir(VOC_IMAGES))[:4])
    images = fn.decoders.image(jpegs, device="cpu")
    size = fn.peek_image_shape(jpegs)
    angle = fn.random.uniform(range=(-30, 30))
    center = fn.constant(fdata=[100.0, 80.0])
    mt = fn.transforms.rotation(angle=angle, center=[100.0, 80.0])
    mt = fn.transforms.scale(mt, scale=[0.8, 0.8])
    mt = fn.transforms.translation(mt, offset=[20, 10])
    both = fn.transforms.combine(fn.transforms.shear(shear=[0.1, 0.0]), mt)
    warped = fn.warp_affine(images, matrix=mt, fill_value=0, inverse_map=False)
    corners = fn.stack(fn.constant(fdata=[0.0, 0.0]), fn.constant(fdata=[50.0, 20.0]))
    moved = fn.coord_transform(corners, MT=mt)
    return images, warped, mt, both, angle, moved, size, fn.shapes(images), center


pipe = warp_pipe()
pipe.build()
images, warped, mt, both, angle, moved, size, shapes, center = pipe.run()
