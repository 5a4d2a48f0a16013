"""keras-retinanet-style training targets from a detaug pipeline, through a Keras Sequence.

What it shows: ``fn.retinanet_encode`` computes RetinaNet's targets inside the pipeline (on the
GPU when the pipeline runs there), in keras-retinanet's layout:

    regression     (B, A, 5)      [dx0, dy0, dx1, dy1] / std, then the anchor state
    classification (B, A, C + 1)  one-hot class of positive anchors, then the anchor state
    anchor state: 1 object, 0 background, -1 ignored (IoU between the thresholds, or the anchor
    is centred in the letterbox padding)

after ``fn.letterbox(center=False)`` (content at the top-left, padding bottom/right, as
keras-retinanet pads its batches). ``DetaugSequence`` hands batch i to ``model.fit`` as
``(images, {"regression": ..., "classification": ...})``. The model is deliberately tiny (a few
strided convolutions give the P3-P7 feature maps, and per-anchor heads predict (B, A, 4) boxes
and (B, A, C) class logits in the anchors' order); the losses are keras-retinanet's, written with
``keras.ops`` from the state column: smooth L1 on positive anchors, focal loss on every
non-ignored anchor, both divided by the number of positives.

Run (any Keras backend; torch is what the tests use):
    KERAS_BACKEND=torch python examples/keras_retinanet_sequence.py            # GPU if there is one
    KERAS_BACKEND=torch python examples/keras_retinanet_sequence.py --device cpu --iters 3 \
        --epochs 1 --size 128
"""
from __future__ import annotations

import argparse
import math
import os
import time

os.environ.setdefault("KERAS_BACKEND", "torch")

HERE = os.path.dirname(os.path.abspath(__file__))
VOC = os.path.join(HERE, "data", "voc-mini")
STRIDES = (8, 16, 32, 64, 128)  # P3-P7, as the encoder's default AnchorConfig
ANCHORS_PER_CELL = 9            # 3 ratios x 3 scales


def build_pipeline(root, num_classes, size, device, batch_size, seed, num_threads):
    from detaug import fn, pipeline_def

    @pipeline_def
    def retinanet_pipe():
        jpegs, boxes = fn.readers.voc(root=root, random_shuffle=True)
        images = fn.decoders.image(jpegs, device="mixed" if device == "gpu" else "cpu")
        images, boxes = fn.random_iou_crop(images, boxes)
        images, boxes = fn.flip(images, boxes, horizontal=fn.random.coin_flip())
        images, boxes = fn.letterbox(images, boxes, size=(size, size), center=False, fill=0)
        boxes = fn.prune_boxes(boxes, min_size=2)
        regression, classification = fn.retinanet_encode(boxes, num_classes=num_classes)
        images = fn.normalize(images, mean=0, std=255)  # [0, 1] floats, HWC (channels_last)
        return images, regression, classification

    return retinanet_pipe(batch_size=batch_size, num_threads=num_threads, seed=seed,
                          device_id=0 if device == "gpu" else None)


def tiny_retinanet(size, num_classes, width=32):
    """Strided convolutions down to P3 (stride 8), then one stride-2 conv per level to P7;
    shared heads per level, reshaped so that rows follow the anchors' order (level, cell
    row-major, anchor of the cell)."""
    import keras
    from keras import layers

    x = inp = keras.Input((size, size, 3))
    for _ in range(3):
        x = layers.Conv2D(width, 3, strides=2, padding="same", activation="relu")(x)
    levels = [x]
    for _ in STRIDES[1:]:
        down = layers.Conv2D(width, 3, strides=2, padding="same", activation="relu")
        levels.append(down(levels[-1]))
    reg_head = layers.Conv2D(ANCHORS_PER_CELL * 4, 3, padding="same")
    prior = -math.log((1 - 0.01) / 0.01)  # keras-retinanet's prior: p(object) = 0.01 at start
    cls_head = layers.Conv2D(ANCHORS_PER_CELL * num_classes, 3, padding="same",
                             bias_initializer=keras.initializers.Constant(prior))
    regs, clss = [], []
    for f in levels:
        regs.append(layers.Reshape((-1, 4))(reg_head(f)))
        clss.append(layers.Reshape((-1, num_classes))(cls_head(f)))
    out = {"regression": layers.Concatenate(axis=1, name="regression")(regs),
           "classification": layers.Concatenate(axis=1, name="classification")(clss)}
    return keras.Model(inp, out)


def smooth_l1(sigma=3.0):
    """keras-retinanet's regression loss: smooth L1 over positive anchors / number of positives.
    y_true (B, A, 5) with the state last; y_pred (B, A, 4)."""
    from keras import ops

    s2 = sigma ** 2

    def loss(y_true, y_pred):
        positive = ops.cast(ops.equal(y_true[..., 4], 1), "float32")
        diff = ops.abs(y_true[..., :4] - y_pred)
        l1 = ops.where(diff < 1.0 / s2, 0.5 * s2 * diff ** 2, diff - 0.5 / s2)
        total = ops.sum(ops.sum(l1, axis=-1) * positive)
        return total / ops.maximum(1.0, ops.sum(positive))

    return loss


def focal(alpha=0.25, gamma=2.0):
    """keras-retinanet's focal loss over non-ignored anchors / number of positives.
    y_true (B, A, C + 1) with the state last; y_pred (B, A, C) logits."""
    from keras import ops

    def loss(y_true, y_pred):
        labels, state = y_true[..., :-1], y_true[..., -1]
        kept = ops.cast(ops.not_equal(state, -1), "float32")[..., None]
        p = ops.sigmoid(y_pred)
        bce = ops.binary_crossentropy(labels, y_pred, from_logits=True)
        p_t = labels * p + (1 - labels) * (1 - p)
        a_t = labels * alpha + (1 - labels) * (1 - alpha)
        total = ops.sum(a_t * (1 - p_t) ** gamma * bce * kept)
        positives = ops.sum(ops.cast(ops.equal(state, 1), "float32"))
        return total / ops.maximum(1.0, positives)

    return loss


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=VOC, help="a Pascal VOC folder (default: the sample)")
    ap.add_argument("--device", choices=("cpu", "gpu", "auto"), default="auto")
    ap.add_argument("--iters", type=int, default=None, help="batches per epoch (default: all)")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--workers", type=int, default=2, help="Keras thread workers")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import keras

    from detaug.adapters.keras import DetaugSequence
    from detaug.core.backend import pick_device
    from readers.voc import VOC_CLASSES

    device = pick_device(args.device)
    num_classes = len(VOC_CLASSES)  # fn.readers.voc's default classes
    pipe = build_pipeline(args.root, num_classes, args.size, device, args.batch_size, args.seed,
                          num_threads=min(4, os.cpu_count() or 1))
    seq = DetaugSequence(pipe, output_map=("images", "regression", "classification"),
                         targets_format="dict", max_batches=args.iters, workers=args.workers,
                         max_queue_size=4)
    x, y = seq[0]
    print(f"keras backend {keras.backend.backend()}, pipeline on {device}: images {x.shape} "
          f"{x.dtype}, regression {y['regression'].shape}, classification "
          f"{y['classification'].shape}; {int((y['regression'][..., 4] == 1).sum())} positive "
          f"anchors in batch 0")

    keras.utils.set_random_seed(args.seed)
    model = tiny_retinanet(args.size, num_classes)
    model.compile(optimizer=keras.optimizers.Adam(args.lr, clipnorm=1.0),
                  loss={"regression": smooth_l1(), "classification": focal()})
    steps = len(seq)

    class PrintLoss(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            dt = time.perf_counter() - self.t0
            print(f"epoch {epoch + 1}: loss {logs['loss']:.4f}  regression "
                  f"{logs['regression_loss']:.4f}  classification "
                  f"{logs['classification_loss']:.4f}  "
                  f"({steps * args.batch_size / dt:.1f} img/s)", flush=True)

    model.fit(seq, epochs=args.epochs, verbose=0, callbacks=[PrintLoss()])
    pipe.close()


if __name__ == "__main__":
    main()
