"""Train torchvision's Mask R-CNN (ResNet-50 FPN, from scratch) from a detaug pipeline whose boxes
carry COCO's polygons.

What it shows: instance masks travelling with the image and its boxes through box-aware
augmentations, handed to torchvision as Mask R-CNN's targets ``[{"boxes", "labels", "masks"}]``:

    fn.readers.coco(polygons=True) -> fn.decoders.image -> fn.flip (coin flip)
    -> fn.resize(size x size) -> fn.prune_boxes -> fn.normalize(ImageNet mean/std, CHW)
    -> DetaugIterator(boxes_format="list") -> maskrcnn_resnet50_fpn

The polygons are mirrored and scaled by the same matrix as the pixels and boxes, clipped to the
canvas as polygons, and dropped with their box; the iterator rasterises each box's polygons on
the output canvas as COCO does (pycocotools: the masks COCO's evaluation compares with), so
``masks`` is uint8 (n, size, size), one per box.

Data: the COCO sample in examples/data/coco-mini (68 train2017 images with their polygon
annotations, verbatim; examples/data/SOURCES.md gives the provenance and licences).

Nothing is done twice: detaug resizes to ``size x size`` and normalises; the model is built with
``min_size=max_size=size`` (its resize is an identity) and ``image_mean=(0, 0, 0),
image_std=(1, 1, 1)``. Labels: the Faster R-CNN family reserves 0 for the background, so the
80 COCO classes (detaug's labels 0..79) become 1..80 (``label_offset=1``, ``num_classes=81``).

Nothing is downloaded (``weights=None, weights_backbone=None``). It prints each step's loss and
its parts; a loss that is not finite stops it. torchvision is imported in main(); without it the
script exits with a message (``--dry-run`` needs only detaug and torch: it runs the pipeline and
the iterator and prints what the model would receive).

Run:
    python examples/maskrcnn_torchvision.py                               # 20 steps at 320 px
    python examples/maskrcnn_torchvision.py --device cpu --iters 2 --size 128 \
        --batch-size 2 --proposals 64
"""
from __future__ import annotations

import argparse
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
COCO = os.path.join(HERE, "data", "coco-mini")
IMAGENET_MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]  # pixel units: the images are uint8
IMAGENET_STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def build_pipeline(root, size, device, batch_size, seed, num_threads):
    from detaug import fn, pipeline_def

    @pipeline_def
    def mask_pipe():
        jpegs, boxes = fn.readers.coco(file_root=os.path.join(root, "images"),
                                       annotations_file=os.path.join(root, "annotations.json"),
                                       polygons=True, random_shuffle=True)
        images = fn.decoders.image(jpegs, device="mixed" if device == "gpu" else "cpu")
        images, boxes = fn.flip(images, boxes, horizontal=fn.random.coin_flip())
        images, boxes = fn.resize(images, boxes, size=(size, size))
        # torchvision refuses boxes without positive width and height: drop tiny ones (their
        # polygons go with them)
        boxes = fn.prune_boxes(boxes, min_size=1)
        images = fn.normalize(images, mean=IMAGENET_MEAN, std=IMAGENET_STD, output_layout="CHW")
        return images, boxes

    return mask_pipe(batch_size=batch_size, num_threads=num_threads, seed=seed,
                     device_id=0 if device == "gpu" else None)


def batches(iterator):
    """Endless (images, targets): the iterator starts the next epoch by itself (auto_reset)."""
    while True:
        for batch in iterator:
            yield batch["images"], batch["targets"]


def to_model_inputs(images, targets, device):
    """torchvision takes a list of (3, H, W) images and a list of {"boxes", "labels", "masks"}."""
    images = list(images.to(device).unbind(0))
    targets = [{k: t[k].to(device) for k in ("boxes", "labels", "masks")} for t in targets]
    return images, targets


def dry_run(it, iters):
    gen = batches(it)
    for step in range(1, iters + 1):
        images, targets = next(gen)
        counts = [len(t["boxes"]) for t in targets]
        shapes = {tuple(t["masks"].shape[1:]) for t in targets}
        ok = all(len(t["masks"]) == len(t["boxes"]) for t in targets)
        print(f"batch {step}: images {tuple(images.shape)} {images.dtype}, boxes per image "
              f"{counts}, mask canvas {sorted(shapes)}, one mask per box: {ok}", flush=True)
    print(f"dry run done: {iters} batches, no model (torchvision not needed)")


def train(it, args, num_classes, device):
    import torch

    from torchvision.models.detection import maskrcnn_resnet50_fpn

    torch.manual_seed(args.seed)
    tdev = torch.device("cuda" if device == "gpu" else "cpu")
    model = maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=num_classes,
                                  min_size=args.size, max_size=args.size,
                                  image_mean=(0.0, 0.0, 0.0), image_std=(1.0, 1.0, 1.0),
                                  rpn_post_nms_top_n_train=args.proposals,
                                  box_batch_size_per_image=min(512, args.proposals)).to(tdev)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    gen = batches(it)
    for step in range(1, args.iters + 1):
        images, targets = to_model_inputs(*next(gen), tdev)
        parts = model(images, targets)
        loss = sum(parts.values())
        if not math.isfinite(loss.item()):
            sys.exit(f"step {step}: loss is {loss.item()}; lower --lr")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 10.0)
        opt.step()
        detail = ", ".join(f"{k.removeprefix('loss_')} {v.item():.4f}" for k, v in parts.items())
        print(f"step {step}/{args.iters}  loss {loss.item():.4f}  ({detail})", flush=True)
    print("done")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=COCO,
                    help="a COCO folder with images/ and annotations.json (default: the sample)")
    ap.add_argument("--device", choices=("cpu", "gpu", "auto"), default="auto")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--size", type=int, default=320, help="square input size (multiple of 32)")
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--proposals", type=int, default=2000,
                    help="RPN proposals kept per image in training (torchvision's default 2000); "
                         "the box head samples min(512, this) of them")
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
        except (ImportError, RuntimeError) as e:  # RuntimeError: its C++ ops do not load
            sys.exit(f"this example needs a torchvision that imports ({type(e).__name__}: {e}); "
                     "docs/install.md says how; --dry-run runs the data part without it")
    from detaug.adapters.torch import DetaugIterator
    from detaug.core.backend import pick_device

    device = pick_device(args.device, torch_cuda=True)
    pipe = build_pipeline(args.root, args.size, device, args.batch_size, args.seed, args.threads)
    num_classes = len(pipe.class_names) + 1  # + the background, label 0
    it = DetaugIterator(pipe, output_map=("images", "targets"), boxes_format="list",
                        label_offset=1, auto_reset=True)
    print(f"{pipe.epoch_size()} images, {num_classes - 1} classes, {len(it)} batches of "
          f"{args.batch_size} per epoch, pipeline on {device}", flush=True)
    try:
        if args.dry_run:
            dry_run(it, args.iters)
        else:
            train(it, args, num_classes, device)
    finally:
        pipe.close()


if __name__ == "__main__":
    main()
