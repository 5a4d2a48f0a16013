"""Train torchvision's Keypoint R-CNN (ResNet-50 FPN, from scratch) from a detaug pipeline whose
boxes carry COCO keypoints, on a small generated COCO data set with known ground truth.

What it shows: keypoints travelling with the image and its boxes through box-aware
augmentations, a horizontal flip swapping left and right keypoints by the data set's
``flip_index``, and the targets ``[{"boxes", "labels", "keypoints"}]`` torchvision takes:

    fn.readers.coco(keypoints=True) -> fn.decoders.image -> fn.flip (coin flip)
    -> fn.resize(size x size) -> fn.prune_boxes -> fn.normalize(ImageNet mean/std, CHW)
    -> DetaugIterator(boxes_format="list") -> keypointrcnn_resnet50_fpn

Data, generated at run time into a temporary folder (``make_figures``; ``--root`` takes a COCO
person-keypoints folder instead): PNG images of 160 x 120 pixels with one to three stick figures
on a noisy background, and a COCO ``person_keypoints``-style ``annotations.json``: one category
``figure`` with 5 keypoints ``head, left_hand, right_hand, left_foot, right_foot`` and a skeleton.
Each keypoint is the integer pixel (COCO's convention: column, row) at which the figure's lines
meet: the drawing is made from the annotations, so the annotations are exact. A figure faces
the viewer, so its left hand is on the image's right, as in COCO. detaug pairs ``left_*`` with
``right_*`` by name (the flip swaps them); keypoints that leave the canvas become ``(0, 0, 0)``,
COCO's unlabelled point, which Keypoint R-CNN's loss ignores.

Nothing is done twice: detaug resizes to ``size x size`` and normalises; the model is built with
``min_size=max_size=size`` and ``image_mean=(0, 0, 0), image_std=(1, 1, 1)``. Labels: 0 is the
background, so the one class is 1 (``label_offset=1``, ``num_classes=2``).

Nothing is downloaded (``weights=None, weights_backbone=None``). It prints each step's loss and
its parts; a loss that is not finite stops it. ``--dry-run`` needs only detaug and torch.

Run:
    python examples/keypointrcnn_torchvision.py                           # 20 steps at 320 px
    python examples/keypointrcnn_torchvision.py --device cpu --iters 2 --size 128 \
        --batch-size 2 --proposals 64
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile

import numpy as np

IMAGENET_MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]  # pixel units: the images are uint8
IMAGENET_STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]
NAMES = ["head", "left_hand", "right_hand", "left_foot", "right_foot"]
SKELETON = [[1, 2], [1, 3], [1, 4], [1, 5]]  # COCO's: 1-based pairs of keypoints
# where each keypoint sits, in units of the figure's scale from its centre (image x right, y down)
LAYOUT = np.array([[0.0, -1.0], [0.8, -0.2], [-0.8, -0.2], [0.5, 1.0], [-0.5, 1.0]])


def make_figures(folder, n_images=12, height=120, width=160, seed=0):
    """Write ``images/*.png`` and ``annotations.json`` (COCO keypoints) under ``folder``; return
    the folder. Each figure's keypoints are drawn from the annotation (lines from the head to
    each hand and foot, and a disc at the head), so the ground truth is exact."""
    import cv2

    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(folder, "images"), exist_ok=True)
    images, anns = [], []
    for i in range(n_images):
        img = rng.integers(0, 60, (height, width, 3), dtype=np.uint8)
        for _ in range(int(rng.integers(1, 4))):
            scale = rng.uniform(12, 22)
            centre = rng.uniform([scale, scale], [width - scale, height - scale])
            jitter = rng.uniform(-0.15, 0.15, LAYOUT.shape)
            pts = np.rint(centre + scale * (LAYOUT + jitter)).astype(np.int64)
            pts = np.clip(pts, 0, [width - 1, height - 1])
            colour = tuple(int(c) for c in rng.integers(120, 256, 3))
            for a, b in SKELETON:
                cv2.line(img, tuple(map(int, pts[a - 1])), tuple(map(int, pts[b - 1])), colour, 2)
            cv2.circle(img, tuple(map(int, pts[0])), 4, colour, -1)
            x0, y0 = np.maximum(pts.min(0) - 4, 0)
            x1, y1 = np.minimum(pts.max(0) + 5, [width, height])
            kps = np.concatenate([pts, np.full((5, 1), 2)], 1).reshape(-1)
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": 1, "iscrowd": 0,
                         "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)],
                         "area": float((x1 - x0) * (y1 - y0)), "num_keypoints": 5,
                         "keypoints": [int(v) for v in kps]})
        name = f"{i + 1:06d}.png"
        cv2.imwrite(os.path.join(folder, "images", name), img[..., ::-1])
        images.append({"id": i + 1, "file_name": name, "height": height, "width": width})
    cats = [{"id": 1, "name": "figure", "supercategory": "figure", "keypoints": NAMES,
             "skeleton": SKELETON}]
    with open(os.path.join(folder, "annotations.json"), "w") as f:
        json.dump({"images": images, "annotations": anns, "categories": cats}, f)
    return folder


def build_pipeline(root, size, device, batch_size, seed, num_threads):
    from detaug import fn, pipeline_def

    @pipeline_def
    def keypoint_pipe():
        images, boxes = fn.readers.coco(file_root=os.path.join(root, "images"),
                                        annotations_file=os.path.join(root, "annotations.json"),
                                        keypoints=True, random_shuffle=True)
        images = fn.decoders.image(images, device="mixed" if device == "gpu" else "cpu")
        # a mirrored sample swaps left_* and right_* (the reader's flip_index, by name)
        images, boxes = fn.flip(images, boxes, horizontal=fn.random.coin_flip())
        images, boxes = fn.resize(images, boxes, size=(size, size))
        boxes = fn.prune_boxes(boxes, min_size=1)  # torchvision refuses empty boxes
        images = fn.normalize(images, mean=IMAGENET_MEAN, std=IMAGENET_STD, output_layout="CHW")
        return images, boxes

    return keypoint_pipe(batch_size=batch_size, num_threads=num_threads, seed=seed,
                         device_id=0 if device == "gpu" else None)


def batches(iterator):
    """Endless (images, targets): the iterator starts the next epoch by itself (auto_reset)."""
    while True:
        for batch in iterator:
            yield batch["images"], batch["targets"]


def to_model_inputs(images, targets, device):
    """torchvision takes (3, H, W) images and {"boxes", "labels", "keypoints" float (n, K, 3)}."""
    images = list(images.to(device).unbind(0))
    targets = [{"boxes": t["boxes"].to(device), "labels": t["labels"].to(device),
                "keypoints": t["keypoints"].float().to(device)} for t in targets]
    return images, targets


def dry_run(it, iters):
    gen = batches(it)
    for step in range(1, iters + 1):
        images, targets = next(gen)
        counts = [len(t["boxes"]) for t in targets]
        visible = sum(int((t["keypoints"][..., 2] > 0).sum()) for t in targets)
        total = sum(int(t["keypoints"][..., 0].numel()) for t in targets)
        inside = all(bool(((t["keypoints"][..., 2] == 0) | (
            (t["keypoints"][..., 0] >= t["boxes"][:, None, 0])
            & (t["keypoints"][..., 0] <= t["boxes"][:, None, 2]))).all()) for t in targets)
        print(f"batch {step}: images {tuple(images.shape)} {images.dtype}, boxes per image "
              f"{counts}, keypoints visible {visible}/{total}, within their boxes: {inside}",
              flush=True)
    print(f"dry run done: {iters} batches, no model (torchvision not needed)")


def train(it, args, num_keypoints, device):
    import torch

    from torchvision.models.detection import keypointrcnn_resnet50_fpn

    torch.manual_seed(args.seed)
    tdev = torch.device("cuda" if device == "gpu" else "cpu")
    model = keypointrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=2,
                                      num_keypoints=num_keypoints, min_size=args.size,
                                      max_size=args.size, image_mean=(0.0, 0.0, 0.0),
                                      image_std=(1.0, 1.0, 1.0),
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
    ap.add_argument("--root", default=None, help="a COCO keypoints folder with images/ and "
                    "annotations.json (default: a generated one, in a temporary folder)")
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
    with tempfile.TemporaryDirectory() as tmp:
        root = args.root or make_figures(tmp, seed=args.seed)
        pipe = build_pipeline(root, args.size, device, args.batch_size, args.seed, args.threads)
        it = DetaugIterator(pipe, output_map=("images", "targets"), boxes_format="list",
                            label_offset=1, auto_reset=True)
        with open(os.path.join(root, "annotations.json")) as f:
            num_keypoints = max(len(c.get("keypoints", [])) for c in json.load(f)["categories"])
        print(f"{pipe.epoch_size()} images, {num_keypoints} keypoints, {len(it)} batches of "
              f"{args.batch_size} per epoch, pipeline on {device}", flush=True)
        try:
            if args.dry_run:
                dry_run(it, args.iters)
            else:
                train(it, args, num_keypoints, device)
        finally:
            pipe.close()


if __name__ == "__main__":
    main()
