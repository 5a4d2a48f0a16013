"""Image classification input in the manner of DALI's tutorial, feeding a small PyTorch model.

What it shows: the DALI classification pipeline written with detaug's DALI-style API,

    fn.readers.file (class folders) -> fn.decoders.image (device="mixed" on the GPU, "cpu" else)
    -> fn.random_resized_crop(size=(224, 224))
    -> fn.crop_mirror_normalize(mirror=fn.random.coin_flip(), ImageNet mean/std in pixel units, CHW)

handed to torch through ``DetaugIterator`` (zero copy: DLPack on the GPU, ``from_numpy`` on the
CPU) and used to train a few conv layers for a few iterations, printing the loss.

Without ``--root`` it builds class folders from the repository's VOC sample (each image filed
under its first object's class) in a temporary directory.

Run:
    python examples/classification.py                          # GPU if there is one, 30 iterations
    python examples/classification.py --device cpu --iters 5 --batch-size 4
    python examples/classification.py --root /data/imagenet/train --iters 200
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VOC = os.path.join(HERE, "data", "voc-mini")
IMAGENET_MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]  # pixel units: the images are uint8
IMAGENET_STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def make_class_folders(voc_root: str, out: str) -> str:
    """``out/<class>/<image>.jpg``: each VOC image under the class of its first object."""
    from readers.voc import read_voc

    ds = read_voc(voc_root)
    for rec in ds.records:
        if not len(rec.labels):
            continue
        folder = os.path.join(out, ds.class_names[int(rec.labels[0])])
        os.makedirs(folder, exist_ok=True)
        shutil.copy(rec.path, folder)
    return out


def build_pipeline(root: str, device: str, batch_size: int, seed: int, num_threads: int):
    from detaug import fn, pipeline_def

    @pipeline_def
    def classification_pipe(file_root):
        jpegs, labels = fn.readers.file(file_root=file_root, random_shuffle=True)
        images = fn.decoders.image(jpegs, device="mixed" if device == "gpu" else "cpu")
        images = fn.random_resized_crop(images, size=(224, 224))
        images = fn.crop_mirror_normalize(images, mirror=fn.random.coin_flip(),
                                          mean=IMAGENET_MEAN, std=IMAGENET_STD,
                                          output_layout="CHW")
        return images, labels

    return classification_pipe(root, batch_size=batch_size, num_threads=num_threads, seed=seed,
                               device_id=0 if device == "gpu" else None)


def small_net(num_classes: int):
    import torch.nn as nn

    def block(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    return nn.Sequential(block(3, 16), block(16, 32), block(32, 64), block(64, 64),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, num_classes))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", help="class folders (default: built from examples/data/voc-mini)")
    ap.add_argument("--device", choices=("cpu", "gpu", "auto"), default="auto")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch

    from detaug.adapters.torch import DetaugIterator
    from detaug.core.backend import pick_device

    device = pick_device(args.device, torch_cuda=True)
    tmp = None
    root = args.root
    if root is None:
        tmp = tempfile.mkdtemp(prefix="detaug-classes-")
        root = make_class_folders(VOC, tmp)
    try:
        pipe = build_pipeline(root, device, args.batch_size, args.seed, args.threads)
        classes = pipe.class_names
        print(f"{pipe.epoch_size()} images in {len(classes)} classes, device {device}")
        it = DetaugIterator(pipe, output_map=("images", "labels"), auto_reset=True)
        torch.manual_seed(args.seed)
        tdev = torch.device("cuda" if device == "gpu" else "cpu")
        model = small_net(len(classes)).to(tdev)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
        seen, start = 0, time.perf_counter()
        for step in range(1, args.iters + 1):
            try:
                batch = next(it)
            except StopIteration:  # auto_reset: the next epoch starts on the next call
                batch = next(it)
            images = batch["images"].to(tdev)  # (B, 3, 224, 224) float32, already on the GPU
            labels = batch["labels"].to(tdev)
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += images.shape[0]
            print(f"iter {step:4d}  loss {loss.item():.4f}  "
                  f"{seen / (time.perf_counter() - start):.1f} img/s", flush=True)
        pipe.close()
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
