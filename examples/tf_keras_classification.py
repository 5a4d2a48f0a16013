"""DALI's TensorFlow tutorial case with detaug: class folders -> TFRecords -> detaug -> Keras.

What it shows:

1. a classification folder (``<root>/<class>/<image>``) written to sharded TFRecords in the
   layout of TensorFlow's ImageNet files (``image/encoded``, ``image/class/label``,
   ``image/class/text``, ``image/filename``) with ``readers.tfrecord`` (no TensorFlow needed);
2. read back by ``fn.readers.tfrecord(image_label="image/class/label")``, no index files,
   decoded, randomly cropped and flipped, normalised;
3. handed to TensorFlow as a ``tf.data.Dataset`` (``detaug.adapters.tf.to_tf_dataset``, from
   host memory) and fitted with Keras on the TensorFlow backend for a few steps.

Without ``--root`` it builds class folders from the repository's VOC sample (each image filed
under its first object's class) in a temporary directory.

Run:
    python examples/tf_keras_classification.py                     # 2 epochs of 4 batches
    python examples/tf_keras_classification.py --root /data/flowers --epochs 5 --batches 50
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from classification import VOC, make_class_folders  # noqa: E402  (examples/classification.py)


def folder_to_tfrecords(root: str, out: str, num_shards: int = 2) -> list:
    """Write ``root``'s class folders as ``train-0000k-of-0000N.tfrecord`` shards (images
    unchanged, dealt to the shards in turn); return the class names (label = index)."""
    from readers import read_folder
    from readers import tfrecord as T

    fd = read_folder(root)
    os.makedirs(out, exist_ok=True)
    shards = [[] for _ in range(num_shards)]
    for k, (path, label) in enumerate(zip(fd.paths, fd.labels.tolist())):
        with open(path, "rb") as f:
            encoded = f.read()
        shards[k % num_shards].append(T.serialize_example({
            "image/encoded": T.bytes_feature([encoded]),
            "image/filename": T.bytes_feature([os.path.relpath(path, root)]),
            "image/class/label": T.int64_feature([label]),
            "image/class/text": T.bytes_feature([fd.class_names[label]]),
        }))
    for k, examples in enumerate(shards):
        T.write_records(os.path.join(out, f"train-{k:05d}-of-{num_shards:05d}.tfrecord"),
                        examples)
    return list(fd.class_names)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", help="class folders (default: built from the VOC sample)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batches", type=int, default=4, help="batches per epoch")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--size", type=int, default=64)
    args = ap.parse_args(argv)
    try:  # keras on its TensorFlow backend: without TensorFlow, one line instead of keras' trace
        import tensorflow  # noqa: F401
    except ImportError:
        sys.exit("this example needs TensorFlow: pip install 'detaug[tf]' (in a source checkout: "
                 "pip install '.[tf]')")

    import keras

    from detaug import fn, pipeline_def
    from detaug.adapters.tf import to_tf_dataset

    work = tempfile.mkdtemp(prefix="detaug-tf-example-")
    root = args.root or make_class_folders(VOC, os.path.join(work, "folders"))
    records = os.path.join(work, "tfrecords")
    classes = folder_to_tfrecords(root, records)
    print(f"wrote {len(classes)} classes to {sorted(os.listdir(records))}")

    @pipeline_def
    def pipe():
        jpegs, labels = fn.readers.tfrecord(path=records, image_label="image/class/label",
                                            random_shuffle=True)
        images = fn.decoders.image(jpegs)
        images = fn.random_resized_crop(images, size=(args.size, args.size))
        images = fn.flip(images, horizontal=fn.random.coin_flip())
        images = fn.normalize(images, mean=0, std=255)  # [0, 1], HWC (channels_last)
        return images, labels

    p = pipe(batch_size=args.batch_size, num_threads=2, seed=0)
    data = to_tf_dataset(p, output_map=("images", "labels"), max_batches=args.batches)
    print("element_spec:", data.element_spec)
    model = keras.Sequential([
        keras.Input((args.size, args.size, 3)),
        keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(len(classes)),
    ])
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(data.prefetch(2), epochs=args.epochs, verbose=2)
    print(f"backend {keras.backend.backend()}: loss per epoch "
          + " ".join(f"{v:.4f}" for v in history.history["loss"]))
    return history


if __name__ == "__main__":
    main()
