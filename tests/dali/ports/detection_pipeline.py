# Follows DALI's detection pipeline tutorial, "COCO Reader with Augmentations"
# (docs/examples/use_cases/detection_pipeline.ipynb): first the pipeline that only loads the data
# (readers.coco with polygon_masks=True and ltrb=True, the decoder), then the augmented one: a
# random_bbox_crop that also gives the indices of the kept boxes, the image cropped by
# decoders.image_slice, segmentation.select_masks keeping the polygons of those boxes, the
# vertices moved into the crop with transforms.crop + coord_transform, and relative coordinates
# made absolute with peek_image_shape, slices, DataNode arithmetic, transforms.scale and
# math.clamp (the steps and arguments of DALI's pipeline, as NVIDIA/DALI's own detection-pipeline
# test also runs them). Written here in DALI's API (not a
# copy of DALI's code); what differs from a DALI program is the import lines, the data paths
# (the repository's COCO sample), device="cpu" and the smaller batch.
from detaug.pipeline import Pipeline
import detaug.fn as fn
import detaug.math as math
import detaug.types as types

from _data import COCO_ANNOTATIONS, COCO_IMAGES

file_root, annotations_file = COCO_IMAGES, COCO_ANNOTATIONS
device_id = 0
batch_size = 4
num_threads = 2

# ---- the pipeline that loads the data
pipe = Pipeline(batch_size=batch_size, num_threads=num_threads, device_id=device_id)
with pipe:
    inputs, bboxes, labels, polygons, vertices = fn.readers.coco(
        file_root=file_root,
        annotations_file=annotations_file,
        polygon_masks=True,  # segmentation masks as polygons
        ltrb=True,           # boxes as left, top, right, bottom
    )
    images = fn.decoders.image(inputs, device="cpu")
    pipe.set_outputs(images, bboxes, labels, polygons, vertices)
pipe.build()
loaded = pipe.run()

# ---- the augmented pipeline
pipe2 = Pipeline(batch_size=batch_size, num_threads=num_threads, device_id=device_id, seed=1234)
with pipe2:
    # ratio=True: boxes and mask vertices relative to the image's size ([0, 1])
    inputs, in_bboxes, labels, in_polygons, in_vertices = fn.readers.coco(
        file_root=file_root,
        annotations_file=annotations_file,
        shard_id=0,
        num_shards=1,
        ratio=True,
        ltrb=True,
        polygon_masks=True,
    )

    # a random crop; out_bboxes are moved into the crop window
    slice_anchor, slice_shape, out_bboxes, labels, bbox_indices = fn.random_bbox_crop(
        in_bboxes,
        labels,
        aspect_ratio=[0.5, 2.0],
        thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9],
        scaling=[0.3, 1.0],
        bbox_layout="xyXY",
        output_bbox_indices=True,
    )
    # crop the image
    cropped = fn.decoders.image_slice(inputs, slice_anchor, slice_shape, device="cpu",
                                      axis_names="WH")

    # the polygons of the kept boxes
    sel_polygons, sel_vertices = fn.segmentation.select_masks(bbox_indices, in_polygons,
                                                              in_vertices)

    # the vertices into the crop's coordinates
    MT = fn.transforms.crop(from_start=slice_anchor, from_end=(slice_anchor + slice_shape))
    out_vertices = fn.coord_transform(sel_vertices, MT=MT)

    # absolute coordinates (for drawing)
    image_shape = fn.peek_image_shape(inputs, dtype=types.FLOAT)
    h = fn.slice(image_shape, 0, 1, axes=[0])
    w = fn.slice(image_shape, 1, 1, axes=[0])

    bbox_x = fn.slice(out_bboxes, 0, 1, axes=[1])
    bbox_y = fn.slice(out_bboxes, 1, 1, axes=[1])
    bbox_X = fn.slice(out_bboxes, 2, 1, axes=[1])
    bbox_Y = fn.slice(out_bboxes, 3, 1, axes=[1])
    out_bboxes_abs = fn.cat(bbox_x * w, bbox_y * h, bbox_X * w, bbox_Y * h, axis=1)

    scale_rel_to_abs = fn.transforms.scale(scale=fn.cat(w, h))
    out_vertices_abs = fn.coord_transform(out_vertices, MT=scale_rel_to_abs)

    # vertices outside the crop clamped to its edges
    out_vertices_clamped = math.clamp(out_vertices, 0.0, 1.0)

    pipe2.set_outputs(cropped, in_bboxes, in_polygons, in_vertices, sel_polygons, sel_vertices,
                      out_vertices, out_vertices_abs, out_vertices_clamped, out_bboxes,
                      out_bboxes_abs, image_shape, slice_anchor, slice_shape, bbox_indices)
pipe2.build()

outputs = [pipe2.run() for _ in range(2)]
(cropped, in_bboxes, in_polygons, in_vertices, sel_polygons, sel_vertices, out_vertices,
 out_vertices_abs, out_vertices_clamped, out_bboxes, out_bboxes_abs, image_shape, slice_anchor,
 slice_shape, bbox_indices) = outputs[0]
for j in range(batch_size):
    n = len(bbox_indices.at(j))
    print(f"sample {j}: {n} of {len(in_bboxes.at(j))} boxes kept, "
          f"{len(sel_polygons.at(j))} polygons, crop {cropped.at(j).shape}")
