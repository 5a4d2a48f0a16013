"""Train torchvision's RetinaNet (ResNet-50 FPN, from scratch) from a detaug GPU pipeline.

What it shows: a detection pipeline on the GPU feeding a torchvision detection model with the
per-image ``[{"boxes", "labels"}]`` targets it takes, without copies (DLPack):

    fn.readers.voc -> fn.decoders.image(device="mixed") -> fn.random_iou_crop -> fn.flip
    -> fn.resize(640 x 640) -> fn.prune_boxes -> fn.normalize(ImageNet mean/std, CHW)
    -> DetaugIterator(boxes_format="list") -> retinanet_resnet50_fpn

Nothing is done twice. detaug resizes to 640 x 640 and normalises with ImageNet's mean and std
(in pixel units, the statistics torchvision's own transform would apply); the model is built with
``min_size=max_size=640`` (its resize is then an identity: scale 1, and 640 is a multiple of its
size divisor 32) and ``image_mean=(0, 0, 0), image_std=(1, 1, 1)`` (its normalisation is an
identity). Boxes are absolute xyxy pixels of the 640 x 640 image, as torchvision expects.

Labels: torchvision's RetinaNet has no background class. Its classification head has one sigmoid
logit per class and its loss indexes the one-hot target by the label itself, so labels are
``0 .. num_classes - 1``. detaug's labels are already contiguous and 0-based, so this script uses
``num_classes = 20`` (VOC) and ``label_offset=0`` (the Faster R-CNN family, which does reserve 0
for the background, would take ``num_classes=21`` and ``label_offset=1``).

Training: SGD (lr 0.01, momentum 0.9, weight decay 1e-4), batch 8, with a linear warm-up over
the first 50 iterations and gradient-norm clipping at 10 (as torchvision's detection references
warm up; a from-scratch ResNet-50 at lr 0.01 otherwise may diverge in the first steps). It
prints loss and img/s every 20 iterations, and at the end the mean loss of iterations 1-20 and of
the last 20: on a GPU, with the defaults, the second should be well below the first.

Nothing is downloaded (``weights=None, weights_backbone=None``). torchvision is imported in
main(); without it the script exits with a message (``--dry-run`` needs only detaug and torch:
it runs the pipeline and the iterator and prints what the model would receive).

Run:
    python examples/retinanet_torchvision.py                         # GPU, 200 iterations
    python examples/retinanet_torchvision.py --dry-run --device cpu --iters 3 --size 320
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VOC = os.path.join(HERE, "data", "voc-mini")
IMAGENET_MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]  # pixel units: the images are uint8
IMAGENET_STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
REPORT_EVERY = 20


def build_pipeline(root, size, device, batch_size, seed, num_threads):
    from detaug import fn, pipeline_def

    @pipeline_def
    def detection_pipe():
        jpegs, boxes = fn.readers.voc(root=root, random_shuffle=True)
        images = fn.decoders.image(jpegs, device="mixed" if device == "gpu" else "cpu")
        images, boxes = fn.random_iou_crop(images, boxes)
        images, boxes = fn.flip(images, boxes, horizontal=fn.random.coin_flip())
        images, boxes = fn.resize(images, boxes, size=(size, size))
        # torchvision refuses boxes without positive width and height: clip and drop tiny ones
        boxes = fn.prune_boxes(boxes, min_size=1)
        images = fn.normalize(images, mean=IMAGENET_MEAN, std=IMAGENET_STD, output_layout="CHW")
        return images, boxes

    return detection_pipe(batch_size=batch_size, num_threads=num_threads, seed=seed,
                          device_id=0 if device == "gpu" else None)


def batches(iterator):
    """Endless (images, targets): the iterator starts the next epoch by itself (auto_reset)."""
    while True:
        for batch in iterator:
            yield batch["images"], batch["boxes"]


def to_model_inputs(images, targets, device):
    """torchvision takes a list of (3, H, W) images and a list of {"boxes", "labels"}."""
    images = list(images.to(device, non_blocking=True).unbind(0))
    targets = [{"boxes": t["boxes"].to(device, non_blocking=True),
                "labels": t["labels"].to(device, non_blocking=True)} for t in targets]
    return images, targets


def dry_run(it, iters, device):
    gen = batches(it)
    for step in range(1, iters + 1):
        images, targets = next(gen)
        counts = [len(t["boxes"]) for t in targets]
        labels = sorted({int(v) for t in targets for v in t["labels"]})
        boxes = [t["boxes"] for t in targets if len(t["boxes"])]
        ok = all(bool(((b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])).all()) for b in boxes)
        print(f"batch {step}: images {tuple(images.shape)} {images.dtype} on {images.device}, "
              f"boxes per image {counts}, labels {labels}, all boxes positive: {ok}", flush=True)
    print(f"dry run done: {iters} batches on {device}, no model (torchvision not needed)")


def train(it, args, num_classes, device):
    import torch

    from torchvision.models.detection import retinanet_resnet50_fpn

    torch.manual_seed(args.seed)
    tdev = torch.device("cuda" if device == "gpu" else "cpu")
    model = retinanet_resnet50_fpn(weights=None, weights_backbone=None, num_classes=num_classes,
                                   min_size=args.size, max_size=args.size,
                                   image_mean=(0.0, 0.0, 0.0), image_std=(1.0, 1.0, 1.0)).to(tdev)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    warmup = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, 0.001 + (1 - 0.001) * i / args.warmup) if args.warmup else 1.0)
    losses, gen = [], batches(it)
    t0, seen = time.perf_counter(), 0
    for step in range(1, args.iters + 1):
        images, targets = to_model_inputs(*next(gen), tdev)
        parts = model(images, targets)
        loss = sum(parts.values())
        if not torch.isfinite(loss):
            sys.exit(f"iteration {step}: loss is {loss.item()}; lower --lr")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 10.0)
        opt.step()
        warmup.step()
        losses.append(loss.item())
        seen += len(images)
        if step % REPORT_EVERY == 0 or step == args.iters:
            if device == "gpu":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            recent = losses[-REPORT_EVERY:]
            print(f"iter {step:4d}/{args.iters}  loss {sum(recent) / len(recent):.4f}  "
                  f"(classification {parts['classification'].item():.4f}, box "
                  f"{parts['bbox_regression'].item():.4f})  {seen / dt:.1f} img/s", flush=True)
            t0, seen = time.perf_counter(), 0
    print(loss_trend(losses, REPORT_EVERY))


MIN_WINDOW = 5  # iterations: one step's loss swings more than a short run's trend


def loss_trend(losses, window):
    """The last line: the mean loss of the first and of the last ``window`` iterations, two
    windows that never overlap (at most half of a short run each), each of at least
    :data:`MIN_WINDOW` iterations; a shorter run says it is too short to tell."""
    n = min(window, len(losses) // 2)
    if n < MIN_WINDOW:
        return (f"{len(losses)} iteration(s): too few to compare the loss (windows of at least "
                f"{MIN_WINDOW} iterations need --iters {2 * MIN_WINDOW} or more)")
    first, last = sum(losses[:n]) / n, sum(losses[-n:]) / n
    return (f"mean loss of iterations 1-{n}: {first:.4f}; of iterations "
            f"{len(losses) - n + 1}-{len(losses)}: {last:.4f}; "
            f"{'decreased' if last < first else 'did NOT decrease'}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=VOC, help="a Pascal VOC folder (default: the sample)")
    ap.add_argument("--device", choices=("cpu", "gpu", "auto"), default="auto")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--size", type=int, default=640, help="square input size (multiple of 32)")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--warmup", type=int, default=50, help="linear warm-up iterations (0: none)")
    ap.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true",
                    help="run the pipeline and the iterator only (no torchvision, no model)")
    args = ap.parse_args(argv)
    if args.size % 32:
        ap.error("--size must be a multiple of 32 (torchvision pads to multiples of 32)")

    if not args.dry_run:
        try:
            import torchvision  # noqa: F401
        except (ImportError, RuntimeError):  # RuntimeError: installed, its C++ ops do not load
            sys.exit("this example needs torchvision (pip install 'detaug[torchvision]'; with a CPU "
                     "torch, docs/install.md's two steps); "
                     "--dry-run runs the data part without it")
    from detaug.adapters.torch import DetaugIterator
    from detaug.core.backend import pick_device

    device = pick_device(args.device, torch_cuda=True)
    pipe = build_pipeline(args.root, args.size, device, args.batch_size, args.seed, args.threads)
    num_classes = len(pipe.class_names)
    it = DetaugIterator(pipe, output_map=("images", "boxes"), boxes_format="list",
                        label_offset=0, auto_reset=True)
    print(f"{pipe.epoch_size()} images, {num_classes} classes, {len(it)} batches of "
          f"{args.batch_size} per epoch, pipeline on {device}", flush=True)
    try:
        if args.dry_run:
            dry_run(it, args.iters, device)
        else:
            train(it, args, num_classes, device)
    finally:
        pipe.close()


if __name__ == "__main__":
    main()
