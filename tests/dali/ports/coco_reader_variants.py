# Variants of DALI's COCO reader tutorial (docs/examples/general/data_loading/coco_reader.ipynb)
# with the reader arguments DALI's operator reference documents: no argument but the files,
# xywh pixel boxes, ltrb, ratio, image_ids, skip_empty, size_threshold, sharding with
# pad_last_batch, and the older fn.coco_reader name, each a pipeline of its own run for two
# batches (the second goes on past the shard's end). Written here in DALI's API (not a copy of
# DALI's code); changed: the imports, the data (the repository's COCO sample), device "cpu".
from detaug.pipeline import Pipeline
import detaug.fn as fn

from _data import COCO_ANNOTATIONS, COCO_IMAGES

VARIANTS = {
    "bare": dict(),  # no DALI-only argument: detaug's own form (docs/dali.md)
    "xywh_pixels": dict(ltrb=False, ratio=False),
    "ltrb_ratio_ids": dict(ltrb=True, ratio=True, image_ids=True),
    "skip_empty_threshold": dict(skip_empty=True, size_threshold=40.0, ratio=True),
    "shard_1_of_3_padded": dict(shard_id=1, num_shards=3, pad_last_batch=True, ltrb=True),
}

results = {}
for name, args in VARIANTS.items():
    pipe = Pipeline(batch_size=8, num_threads=2, device_id=0)
    with pipe:
        encoded, *rest = fn.readers.coco(file_root=COCO_IMAGES, annotations_file=COCO_ANNOTATIONS,
                                         **args)
        pipe.set_outputs(fn.peek_image_shape(encoded), *rest)
    pipe.build()
    results[name] = [pipe.run() for _ in range(2)]

old = Pipeline(batch_size=4, num_threads=2, device_id=0)
with old:
    encoded, boxes, labels = fn.coco_reader(file_root=COCO_IMAGES,
                                            annotations_file=COCO_ANNOTATIONS, ratio=True)
    old.set_outputs(fn.decoders.image(encoded, device="cpu"), boxes, labels)
old.build()
results["coco_reader_name"] = old.run()
