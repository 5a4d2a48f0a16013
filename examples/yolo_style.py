"""Train a few steps with a YOLO-style recipe (Ultralytics' YOLODataset augmentations) fed by
detaug: mosaic -> random affine (rotate, translate, scale, shear; the centre s x s of the mosaic
canvas, as Ultralytics' RandomPerspective with border -s/2) -> mixup -> HSV -> flip -> letterbox
to the training size. On the GPU where there is one, else on the CPU.

    python examples/yolo_style.py                       # COCO sample, 640 x 640, auto device
    python examples/yolo_style.py --device cpu --size 128 --iters 3 --batch-size 4

The model is a tiny convolutional stand-in for a YOLO head (objectness and class per grid cell,
trained with binary cross-entropy): the point is the input pipeline, not the detector. Partners of
mosaic and mixup are drawn over the whole epoch (detaug/runtime/partners.py), so a mosaic of batch
``i`` is the same whether it comes from iteration, ``pipe.run_batch(i)`` or a resumed run.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
COCO = os.path.join(HERE, "data", "coco-mini")
STRIDE = 16  # the stand-in head's grid: one cell per 16 x 16 pixels


def build_pipeline(root, size, device, batch_size, seed, threads, mixup=0.5):
    """The recipe (Ultralytics 8.4 defaults: degrees 10, translate 0.1, scale 0.5, shear 2,
    mosaic 1.0, fliplr 0.5, HSV gains 0.015 / 0.7 / 0.4; mixup as given)."""
    from detaug import fn, pipeline_def

    @pipeline_def(batch_size=batch_size, num_threads=threads, seed=seed,
                  device_id=0 if device == "gpu" else None)
    def yolo():
        enc, boxes = fn.readers.coco(annotations_file=os.path.join(root, "annotations.json"),
                                     file_root=os.path.join(root, "images"), random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed" if device == "gpu" else "cpu")
        img, boxes = fn.mosaic(img, boxes, size=size, antialias=False)  # canvas 2 size
        u = fn.random.uniform
        img, boxes = fn.affine(img, boxes, rotate=u(range=(-10, 10)), scale=u(range=(0.5, 1.5)),
                               shear_x=u(range=(-2, 2)), shear_y=u(range=(-2, 2)),
                               translate_x=u(range=(-0.1 * size, 0.1 * size)),
                               translate_y=u(range=(-0.1 * size, 0.1 * size)), fill=114.0)
        img, boxes = fn.crop(img, boxes, crop=(size, size), fill=114.0)  # the centre, as border -s/2
        boxes = fn.prune_boxes(boxes, min_size=2.0, min_visibility=0.1)
        img, boxes = fn.mixup(img, boxes, probability=mixup)
        img = fn.hsv(img, hue=u(range=(-2.7, 2.7)), saturation=u(range=(0.3, 1.7)),
                     value=u(range=(0.6, 1.4)))
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        img, boxes = fn.letterbox(img, boxes, size=(size, size), fill=114.0)
        img = fn.normalize(img, mean=0.0, std=255.0, output_layout="CHW")
        return img, fn.prune_boxes(boxes, min_size=2.0)

    return yolo()


def tiny_head(num_classes):
    import torch.nn as nn

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, 2, 1), nn.BatchNorm2d(o), nn.SiLU())

    return nn.Sequential(block(3, 16), block(16, 32), block(32, 64), block(64, 64),
                         nn.Conv2d(64, 1 + num_classes, 1))


def targets_for(batch_boxes, size, num_classes, device):
    """(B, 1 + K, size / 16, size / 16): objectness 1 and the class one-hot at each box centre's
    cell (a stand-in for YOLO's assigner)."""
    import torch

    g = size // STRIDE
    t = torch.zeros(len(batch_boxes), 1 + num_classes, g, g, device=device)
    for b, d in enumerate(batch_boxes):
        boxes, labels = d["boxes"], d["labels"]
        if len(boxes) == 0:
            continue
        c = ((boxes[:, :2] + boxes[:, 2:]) / 2 / STRIDE).long().clamp(0, g - 1)
        t[b, 0, c[:, 1], c[:, 0]] = 1.0
        t[b, 1 + labels.long(), c[:, 1], c[:, 0]] = 1.0
    return t


def train(it, args, num_classes, device):
    import torch

    dev = torch.device("cuda" if device == "gpu" else "cpu")
    model = tiny_head(num_classes).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    t0, seen, step, epoch = time.perf_counter(), 0, 0, 0
    while step < args.iters:  # --iters steps, across as many epochs as they take
        ran = step
        for batch in it:  # one epoch (auto_reset: the next `for` starts the next one)
            images, boxes = batch["images"].to(dev), batch["boxes"]
            target = targets_for(boxes, args.size, num_classes, dev)
            loss = loss_fn(model(images), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(images)
            n_boxes = sum(len(d["boxes"]) for d in boxes)
            print(f"step {step}: images {tuple(images.shape)}  boxes {n_boxes}  "
                  f"loss {loss.item():.4f}  epoch {epoch}", flush=True)
            step += 1
            if step >= args.iters:
                break
        else:
            epoch += 1
        if step == ran:
            sys.exit("the pipeline gave no batch in an epoch: fewer images than --batch-size?")
    dt = time.perf_counter() - t0
    print(f"{seen} images in {dt:.2f} s ({seen / dt:.1f} img/s, pipeline and training together)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=COCO, help="a COCO folder with annotations.json and images/")
    ap.add_argument("--device", choices=("cpu", "gpu", "auto"), default="auto")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--size", type=int, default=640, help="training size (a multiple of 16)")
    ap.add_argument("--mixup", type=float, default=0.5, help="mixup probability")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.size % STRIDE:
        ap.error(f"--size must be a multiple of {STRIDE}")
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("this example needs torch (pip install torch)")
    from detaug.adapters.torch import DetaugIterator
    from detaug.core.backend import pick_device

    device = pick_device(args.device, torch_cuda=True)
    pipe = build_pipeline(args.root, args.size, device, args.batch_size, args.seed, args.threads,
                          args.mixup)
    num_classes = len(pipe.class_names)
    it = DetaugIterator(pipe, output_map=("images", "boxes"), boxes_format="list",
                        label_offset=0, auto_reset=True)
    print(f"{pipe.epoch_size()} images, {num_classes} classes, pipeline on {device} "
          f"({pipe.device_summary})", flush=True)
    try:
        train(it, args, num_classes, device)
    finally:
        pipe.close()


if __name__ == "__main__":
    main()
