"""Train torchvision's RetinaNet with DistributedDataParallel, each rank fed by its own detaug
pipeline.

One process per GPU (torchrun starts them). Each process builds its own pipeline; nothing is
passed between ranks but the gradients:

- the pipeline's ``device_id`` is left unset: it defaults to ``LOCAL_RANK``, so rank r's
  pipeline decodes and augments on the GPU that rank r trains on (on the CPU without CUDA);
- the pipeline is unsharded and every rank gives it the same ``seed``: the iterator shards it by
  global rank and world size (``DetaugIterator``), every rank shuffles each epoch with the same
  permutation (keyed by seed and epoch) and reads its own part of it;
- the pipeline's ``shard_policy='pad'`` (the default) makes every shard equally long, so every
  rank takes the same number of steps per epoch whatever the dataset size and world size, and
  no all-reduce waits for a rank that has run out;
- ``--save`` writes the checkpoint (model, optimiser, the iterator's state) from the first
  process of each machine (``LOCAL_RANK`` 0), so that every machine has its own copy without a
  shared file system: every rank holds the same state (DDP keeps the replicas equal, and the
  iterator's state is (epoch, batch), the same on every rank). ``--resume`` loads the copy on
  each rank's machine, checks that every rank resumed at the same step and batch, and resumes
  each rank at exactly its next batch. Ranks are not tied to machines: torchrun's c10d
  rendezvous gives global ranks in its own order (``--node_rank`` is ignored by it), so a
  machine need not hold the same ranks when it resumes.

The model and its inputs are as in ``retinanet_torchvision.py``: 640 x 640 images normalised by
detaug, ``min_size=max_size=640`` and identity mean/std in the model, labels 0-based
(``num_classes=20`` for VOC), SGD with warm-up and gradient clipping. Nothing is downloaded.

It prints, per rank, its node, local rank and device, the shard and the steps per epoch; every
``--report`` steps the loss (mean over the ranks) and img/s (all ranks together); at the end
each rank's steps per epoch, images and img/s.

Backends: NCCL when CUDA is present (GPU pipeline, ``decoders.image(device='mixed')``), gloo
otherwise (CPU pipeline). torchvision is imported lazily: ``--dry-run`` trains a stand-in model
(a linear layer on 8 x 8-pooled images, regressing each image's number of boxes) with the same
data, DDP and step accounting, and needs only detaug and torch. ``--trace FILE`` writes, per
rank, the records (VOC image ids) of every batch it trained on, read from the reader's own
boxes (an extra pipeline output), and prints the first records of the rank's shard.

Run:
    # one machine, 2 GPUs
    torchrun --nproc_per_node=2 examples/retinanet_ddp.py
    # 2 machines with 8 GPUs each: the same line on both, --node_rank 0 and 1
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=8 --rdzv_backend=c10d \\
        --rdzv_endpoint=HOST0:29400 examples/retinanet_ddp.py --root /data/VOC2012
    # CPU, without torchvision
    torchrun --nproc_per_node=2 examples/retinanet_ddp.py --dry-run --iters 6 --size 128
    # two machines simulated on one (tests/frontends/test_multinode.py; on GPUs: device.sh multinode)
    torchrun --nnodes=2 --node_rank=0 --nproc_per_node=1 --rdzv_backend=c10d \\
        --rdzv_endpoint=localhost:29400 examples/retinanet_ddp.py --dry-run --cpu   # and rank 1
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VOC = os.path.join(HERE, "data", "voc-mini")
IMAGENET_MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]  # pixel units: the images are uint8
IMAGENET_STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def build_pipeline(root, size, gpu, batch_size, seed, num_threads, trace=False):
    """The rank's pipeline: unsharded (the iterator shards it), device_id left to LOCAL_RANK.
    ``trace``: a third output, the reader's boxes as read (they name the record)."""
    from detaug import fn, pipeline_def

    @pipeline_def
    def detection_pipe():
        jpegs, boxes = fn.readers.voc(root=root, random_shuffle=True)
        read = boxes
        images = fn.decoders.image(jpegs, device="mixed" if gpu else "cpu")
        images, boxes = fn.random_iou_crop(images, boxes)
        images, boxes = fn.flip(images, boxes, horizontal=fn.random.coin_flip())
        images, boxes = fn.resize(images, boxes, size=(size, size))
        boxes = fn.prune_boxes(boxes, min_size=1)  # torchvision refuses empty boxes
        images = fn.normalize(images, mean=IMAGENET_MEAN, std=IMAGENET_STD, output_layout="CHW")
        return (images, boxes, read) if trace else (images, boxes)

    return detection_pipe(batch_size=batch_size, num_threads=num_threads, seed=seed)


def make_model(args, num_classes, tdev):
    import torch

    if args.dry_run:
        class BoxCounter(torch.nn.Module):
            """Stand-in for RetinaNet: predicts each image's number of boxes."""

            def __init__(self):
                super().__init__()
                self.head = torch.nn.Linear(3 * 8 * 8, 1)

            def forward(self, images, targets):
                x = torch.stack(images)
                x = torch.nn.functional.adaptive_avg_pool2d(x, 8).flatten(1)
                want = torch.tensor([float(len(t["boxes"])) for t in targets], device=x.device)
                return {"count": torch.nn.functional.mse_loss(self.head(x)[:, 0], want)}

        return BoxCounter().to(tdev)
    from torchvision.models.detection import retinanet_resnet50_fpn

    return retinanet_resnet50_fpn(weights=None, weights_backbone=None, num_classes=num_classes,
                                  min_size=args.size, max_size=args.size,
                                  image_mean=(0.0, 0.0, 0.0), image_std=(1.0, 1.0, 1.0)).to(tdev)


def to_model_inputs(batch, tdev):
    images = list(batch["images"].to(tdev, non_blocking=True).unbind(0))
    targets = [{"boxes": t["boxes"].to(tdev, non_blocking=True),
                "labels": t["labels"].to(tdev, non_blocking=True)} for t in batch["boxes"]]
    return images, targets


class RecordNames:
    """The VOC image id of a sample, from its boxes and labels as the reader gives them (no two
    records of the data set have the same ones; checked)."""

    def __init__(self, root):
        from readers.voc import read_voc

        recs = read_voc(root).records
        self.table = {self.key(r.boxes, r.labels): r.image_id for r in recs}
        if len(self.table) != len(recs):
            raise ValueError(f"{root}: records share their boxes and labels; --trace cannot "
                             "tell them apart")

    @staticmethod
    def key(boxes, labels):
        return (tuple(int(v) for v in labels), tuple(float(v) for v in boxes.ravel()))

    def __call__(self, target):
        return self.table[self.key(target["boxes"].cpu().numpy(), target["labels"].cpu().numpy())]


def save_checkpoint(path, state):
    """Write ``state`` to ``path`` whole or not at all (a temporary file renamed over it), as
    several machines' first processes may write the same file on a shared file system."""
    import torch

    tmp = f"{path}.{socket.gethostname()}.{os.getpid()}.tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def agree(dist, what, value, rank):
    """Every rank's ``value`` (one all_gather); exits on every rank naming the ranks that differ."""
    got = [None] * dist.get_world_size()
    dist.all_gather_object(got, value)
    if any(g != got[0] for g in got):
        sys.exit(f"rank {rank}: the ranks disagree on {what}: "
                 + "; ".join(f"rank {r}: {g}" for r, g in enumerate(got)))
    return got


def train(args):
    import torch
    import torch.distributed as dist

    from detaug.adapters.torch import DetaugIterator

    cuda = torch.cuda.is_available() and not args.cpu
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tdev = torch.device("cuda", local_rank) if cuda else torch.device("cpu")

    node = os.environ.get("GROUP_RANK", "?")  # the rendezvous's node order, not --node_rank's
    where = "cpu"
    if cuda:  # the physical GPU (its UUID): LOCAL_RANK indexes the GPUs this process sees
        uuid = str(getattr(torch.cuda.get_device_properties(local_rank), "uuid", "?"))
        where = f"cuda:{local_rank} (GPU-{uuid[:8]})"
    say(f"rank {rank}/{world}: node {node} ({socket.gethostname()}), local rank {local_rank}, "
          f"device {where} (CUDA_VISIBLE_DEVICES="
          f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})")

    pipe = build_pipeline(args.root, args.size, cuda, args.batch_size, args.seed, args.threads,
                          trace=bool(args.trace))
    outputs = ("images", "boxes", "read") if args.trace else ("images", "boxes")
    it = DetaugIterator(pipe, output_map=outputs, boxes_format="list")
    names = RecordNames(args.root) if args.trace else None
    trace = []
    num_classes = len(pipe.class_names)
    info = pipe.shard_info
    say(f"rank {rank}/{world}: pipeline on {'cuda:' + str(pipe.device_id) if cuda else 'cpu'}, "
          f"shard {info['shard_id']} of {info['num_shards']}, {pipe.shard_size()} of "
          f"{pipe.epoch_size()} images a shard (shard_policy {pipe.shard_policy!r}), "
          f"{len(it)} steps per epoch")

    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP also broadcasts)
    model = make_model(args, num_classes, tdev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    params = [p for p in ddp.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=args.lr, momentum=0.9, weight_decay=1e-4)
    warmup = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, 0.001 + 0.999 * i / args.warmup) if args.warmup else 1.0)
    step = 0
    if args.resume:
        try:
            ckpt = torch.load(args.resume, map_location=tdev, weights_only=False)
        except FileNotFoundError:
            ckpt = None  # said on every rank below, rather than leaving the others waiting
        if ckpt is not None:
            model.load_state_dict(ckpt["model"])
            opt.load_state_dict(ckpt["opt"])
            warmup.load_state_dict(ckpt["sched"])
            it.load_state_dict(ckpt["data"])  # any rank's state resumes every rank
            step = ckpt["step"]
        # each machine reads its own copy: a missing or stale one would put its ranks elsewhere
        where = ((step, pipe.epoch, ckpt["data"]["batch"]) if ckpt is not None else
                 f"no {args.resume} on {socket.gethostname()}")
        agree(dist, "the (step, epoch, batch) they resume at (--resume)", where, rank)
        if ckpt is None:
            sys.exit(f"rank {rank}: {where}")
        say(f"rank {rank}: resumed at step {step} (epoch {pipe.epoch}, batch "
              f"{ckpt['data']['batch']})")

    steps_per_epoch, images, losses = {}, 0, []
    t0 = t_report = time.perf_counter()
    seen_report = 0
    while step < args.iters:
        epoch = pipe.epoch
        for b, batch in enumerate(it, start=it.state_dict()["batch"]):
            if names is not None:
                trace.append({"step": step + 1, "epoch": epoch, "batch": b,
                              "records": [names(t) for t in batch["read"]]})
            images_t, targets = to_model_inputs(batch, tdev)
            parts = ddp(images_t, targets)
            loss = sum(parts.values())
            opt.zero_grad(set_to_none=True)
            loss.backward()  # DDP's gradient all-reduce: every rank must take this step
            torch.nn.utils.clip_grad_norm_(params, 10.0)
            opt.step()
            warmup.step()
            step += 1
            steps_per_epoch[epoch] = steps_per_epoch.get(epoch, 0) + 1
            images += len(images_t)
            seen_report += len(images_t)
            mean_loss = loss.detach().clone()
            dist.all_reduce(mean_loss)
            losses.append(mean_loss.item() / world)
            if not torch.isfinite(mean_loss):
                sys.exit(f"rank {rank}, step {step}: loss is {losses[-1]}; lower --lr")
            if step % args.report == 0 or step == args.iters:
                if cuda:
                    torch.cuda.synchronize()
                seen = torch.tensor([float(seen_report)], device=tdev)
                dist.all_reduce(seen)
                dt = time.perf_counter() - t_report
                if rank == 0:
                    recent = losses[-args.report:]
                    say(f"rank 0: step {step:5d}/{args.iters}  epoch {epoch}  loss "
                          f"{sum(recent) / len(recent):.4f}  {seen.item() / dt:.1f} img/s "
                          f"({world} ranks)")
                t_report, seen_report = time.perf_counter(), 0
            if args.save and args.save_every and step % args.save_every == 0 and step < args.iters:
                checkpoint(args, local_rank, step, model, opt, warmup, it)
            if step >= args.iters:
                break
        else:
            it.reset()  # the epoch ran out on every rank at the same step: the next one
    if cuda:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    counts = ", ".join(f"epoch {e}: {n}" for e, n in sorted(steps_per_epoch.items()))
    say(f"rank {rank}: steps per epoch {{{counts}}}; {images} images in {dt:.1f} s, "
          f"{images / dt:.1f} img/s")
    if args.save:
        checkpoint(args, local_rank, step, model, opt, warmup, it)
    if args.trace:
        path = args.trace.format(rank=rank)
        with open(path, "w") as f:
            json.dump({"rank": rank, "world": world, "local_rank": local_rank, "node": node,
                       "host": socket.gethostname(), "shard": info, "steps_per_epoch":
                       len(it), "trace": trace}, f)
        first = [r for t in trace[:2] for r in t["records"]][:4]
        say(f"rank {rank}: first records {' '.join(first)}; trace of {len(trace)} steps in "
              f"{path}")
    dist.barrier()
    pipe.close()
    del ddp  # its reducer holds the process group: released here, not in the interpreter's teardown
    dist.destroy_process_group()
    say(f"rank {rank}: done")


def say(line: str) -> None:
    """``line`` and its newline in one write: every rank writes to torchrun's one output, and
    print() writes a line and its newline apart, so two ranks' lines ran into each other (a write
    of up to 4 KiB to a pipe is never split)."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def checkpoint(args, local_rank, step, model, opt, sched, it):
    """The first process of each machine writes the checkpoint of ``step`` (``{step}`` in
    ``--save`` is replaced by it)."""
    if local_rank != 0:
        return
    path = args.save.format(step=step)
    save_checkpoint(path, {"model": model.state_dict(), "opt": opt.state_dict(),
                           "sched": sched.state_dict(), "data": it.state_dict(), "step": step})
    say(f"rank {int(os.environ.get('RANK', 0))}: saved step {step} to {path}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=VOC, help="a Pascal VOC folder (default: the sample)")
    ap.add_argument("--iters", type=int, default=300, help="steps in all (every rank)")
    ap.add_argument("--batch-size", type=int, default=8, help="per rank")
    ap.add_argument("--size", type=int, default=640, help="square input size (multiple of 32)")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--warmup", type=int, default=50, help="linear warm-up steps (0: none)")
    ap.add_argument("--threads", type=int, default=2, help="host threads per rank's pipeline")
    ap.add_argument("--seed", type=int, default=0, help="the same on every rank")
    ap.add_argument("--report", type=int, default=20, help="print every this many steps")
    ap.add_argument("--cpu", action="store_true", help="CPU pipeline and gloo even with CUDA")
    ap.add_argument("--save", help="the first process of each machine writes a checkpoint here "
                    "at the end ({step} in it: the step)")
    ap.add_argument("--save-every", type=int, default=0,
                    help="also write --save every this many steps (0: only at the end)")
    ap.add_argument("--resume", help="every rank resumes from this checkpoint (on its machine)")
    ap.add_argument("--trace", help="each rank writes the records of its batches here as JSON "
                    "({rank} in it: the global rank)")
    ap.add_argument("--dry-run", action="store_true",
                    help="a stand-in model instead of RetinaNet (no torchvision needed)")
    args = ap.parse_args(argv)
    if args.size % 32:
        ap.error("--size must be a multiple of 32 (torchvision pads to multiples of 32)")
    if "LOCAL_RANK" not in os.environ:
        sys.exit("start this example with torchrun, e.g. torchrun --nproc_per_node=2 "
                 "examples/retinanet_ddp.py (see its docstring)")
    if not args.dry_run:
        try:
            import torchvision  # noqa: F401
        except ImportError:
            sys.exit("this example needs torchvision (pip install 'detaug[torchvision]'; with a CPU "
                     "torch, docs/install.md's two steps); "
                     "--dry-run trains a stand-in model without it")
    train(args)


if __name__ == "__main__":
    main()
