"""bench_gpu's peers: the same detection pipeline in torchvision.transforms.v2 (on the GPU, and in
a CPU DataLoader) and in kornia, on the same bytes."""
from __future__ import annotations

import collections
import contextlib
import gc
import time

import numpy as np

from gpu_common import (MEAN, SIZE, STD, _version, decode_params, import_nvimgcodec, index_stream,
    timed)


def make_tv_transform(size=None):
    """torchvision v2's twin of make_det_pipe's augmentation (``size`` x ``size``, default SIZE)."""
    import torch
    from torchvision.transforms import v2

    size = SIZE if size is None else int(size)
    return v2.Compose([
        v2.RandomIoUCrop(),
        v2.RandomHorizontalFlip(p=0.5),
        v2.Resize((size, size), antialias=True),
        v2.SanitizeBoundingBoxes(min_size=1),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[m / 255 for m in MEAN], std=[s / 255 for s in STD]),
    ])


def bench_tv_gpu(args, recs, blobs):
    import torch
    import torchvision  # noqa: F401
    from torchvision import tv_tensors
    from torchvision.io import ImageReadMode, decode_jpeg

    dev = torch.device("cuda", 0)
    datas = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    boxes = [torch.from_numpy(r[1]) for r in recs]
    labels = [torch.from_numpy(r[2]) for r in recs]
    tf = make_tv_transform()
    idx = index_stream(len(datas), args.batch_size, seed=2)

    def step():
        ids = next(idx)
        imgs = decode_jpeg([datas[i] for i in ids], mode=ImageReadMode.RGB, device=dev)
        outs = []
        for img, i in zip(imgs, ids):
            h, w = img.shape[-2:]
            target = {"boxes": tv_tensors.BoundingBoxes(boxes[i].to(dev), format="XYXY",
                                                        canvas_size=(h, w)),
                      "labels": labels[i].to(dev)}
            o, _t = tf(tv_tensors.Image(img), target)
            outs.append(o)
        batch = torch.stack(outs)
        assert batch.shape == (len(ids), 3, SIZE, SIZE)
        return len(ids)

    n, secs, k = timed(step, warmup=1, min_s=args.peer_seconds, max_s=args.peer_seconds * 1.5,
                       sync=torch.cuda.synchronize)
    return {"name": "torchvision v2 on GPU", "img_s": n / secs, "images": n,
            "seconds": round(secs, 2),
            "notes": f"decode_jpeg(list, device='cuda') batched, per-sample v2 on cuda tensors; "
                     f"bytes preloaded; {k} batches"}


class TVFileDataset:
    """torchvision v2 per sample, CPU: read the file, decode (``decode_jpeg``, or Pillow with
    ``decode="pil"``), transforms (make_tv_transform(size)). ``recs[i]`` starts with (path,
    boxes, labels)."""

    def __init__(self, recs, decode="tensor", size=None):
        self.recs, self.decode, self.size = recs, decode, size
        self.tf = None

    def __len__(self):
        return len(self.recs)

    def __getitem__(self, i):
        import torch
        from torchvision import io, tv_tensors

        if self.tf is None:
            self.tf = make_tv_transform(self.size)
        path, boxes, labels = self.recs[i][:3]
        if self.decode == "pil":
            from PIL import Image

            with Image.open(path) as im:
                img = torch.from_numpy(np.asarray(im.convert("RGB"))).permute(2, 0, 1)
        else:
            img = io.decode_jpeg(io.read_file(path), mode=io.ImageReadMode.RGB)
        h, w = img.shape[-2:]
        target = {"boxes": tv_tensors.BoundingBoxes(torch.from_numpy(boxes), format="XYXY",
                                                    canvas_size=(h, w)),
                  "labels": torch.from_numpy(labels)}
        return self.tf(tv_tensors.Image(img), target)


def _tv_collate(batch):
    import torch

    return torch.stack([b[0] for b in batch]), [b[1] for b in batch]


def _tv_worker_init(_):
    import torch

    torch.set_num_threads(1)
    with contextlib.suppress(ImportError):
        import cv2

        cv2.setNumThreads(1)


def bench_tv_cpu(args, recs):
    import torch
    import torchvision  # noqa: F401
    from torch.utils.data import DataLoader, RandomSampler

    workers = args.tv_workers
    ds = TVFileDataset(recs)
    # one long stream of successive permutations: no epoch-end bubbles for the peer
    sampler = RandomSampler(ds, replacement=False, num_samples=len(ds) * 10_000,
                            generator=torch.Generator().manual_seed(0))
    pf = 2
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=workers,
                        collate_fn=_tv_collate, worker_init_fn=_tv_worker_init,
                        prefetch_factor=pf if workers else None, drop_last=True)
    it = iter(loader)
    try:
        # warm-up: every worker started and past its first batches, prefetch queue drained
        t0 = time.perf_counter()
        warm = 0
        while warm < max(2, workers * (pf + 1)) and time.perf_counter() - t0 < args.peer_seconds:
            next(it)
            warm += 1
        n, k, t0 = 0, 0, time.perf_counter()
        while True:
            img, _t = next(it)
            n += img.shape[0]
            k += 1
            el = time.perf_counter() - t0
            if el >= args.peer_seconds and k >= 3:
                break
            if el >= args.peer_seconds * 2:
                break
        secs = time.perf_counter() - t0
    finally:
        del it
        del loader
        gc.collect()
    return {"name": f"torchvision v2 DataLoader CPU ({workers} workers)", "img_s": n / secs,
            "images": n, "seconds": round(secs, 2),
            "notes": f"decode_jpeg on CPU, batch {args.batch_size} collate, {warm} warm-up "
                     "batches; batches stay on the host (no H2D counted)"}


# ---------------------------------------------------------------------------- 3d. kornia
def bench_kornia(args, recs, blobs, gpu):
    import torch
    import torch.nn.functional as F
    import kornia
    import kornia.augmentation as K

    dev = torch.device("cuda", 0) if gpu else torch.device("cpu")
    aug = K.AugmentationSequential(
        K.RandomResizedCrop((SIZE, SIZE), scale=(0.09, 1.0), ratio=(0.5, 2.0)),
        K.RandomHorizontalFlip(p=0.5),
        K.Normalize(mean=torch.tensor(MEAN) / 255, std=torch.tensor(STD) / 255),
        data_keys=["input", "bbox_xyxy"]).to(dev)
    mode = args.kornia_decode if gpu else "pillow"
    if mode == "nvimgcodec" and _version("nvidia.nvimgcodec") is None:
        mode = "torchvision"
    decode_note = mode
    if mode == "nvimgcodec":
        nvimgcodec = import_nvimgcodec()
        dec = nvimgcodec.Decoder(device_id=0)
        params = decode_params("RGB")
        arrays = [np.frombuffer(b, np.uint8) for b in blobs]
        keep = collections.deque(maxlen=8)

        def decode(ids):
            res = dec.decode([arrays[i] for i in ids], params=params,
                             cuda_stream=torch.cuda.current_stream().cuda_stream)
            keep.append(res)
            out = []
            for r in res:
                try:
                    t = torch.from_dlpack(r)
                except Exception:  # noqa: BLE001 -- older bindings: CUDA array interface
                    t = torch.as_tensor(r, device=dev)
                out.append(t.permute(2, 0, 1))
            return out
    elif mode == "torchvision":
        from torchvision.io import ImageReadMode, decode_jpeg

        datas = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]

        def decode(ids):
            return decode_jpeg([datas[i] for i in ids], mode=ImageReadMode.RGB, device=dev)
    else:  # CPU smoke: Pillow
        import io as _io

        from PIL import Image

        def decode(ids):
            out = []
            for i in ids:
                with Image.open(_io.BytesIO(blobs[i])) as im:
                    out.append(torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1))
            return out

    mb = max(len(r[1]) for r in recs)
    idx = index_stream(len(blobs), args.batch_size, seed=3)

    def step():
        ids = next(idx)
        imgs = decode(ids)
        x = torch.cat([F.interpolate(im[None].float(), size=(SIZE, SIZE), mode="bilinear",
                                     align_corners=False) for im in imgs]).div_(255)
        pb = np.zeros((len(ids), mb, 4), np.float32)
        for k, i in enumerate(ids):
            b = recs[i][1]
            pb[k, :len(b)] = b * np.float32([SIZE / recs[i][3], SIZE / recs[i][4]] * 2)
        bx = torch.from_numpy(pb).to(dev)
        out, obx = aug(x, bx)
        assert out.shape == (len(ids), 3, SIZE, SIZE)
        return len(ids)

    sync = torch.cuda.synchronize if gpu else (lambda: None)
    n, secs, k = timed(step, warmup=2, min_s=args.peer_seconds, max_s=args.peer_seconds * 1.5,
                       sync=sync)
    return {"name": f"kornia {kornia.__version__}" + ("" if gpu else " (CPU, smoke)"),
            "img_s": n / secs, "images": n, "seconds": round(secs, 2),
            "notes": f"decode {decode_note} (batched), per-sample interpolate to {SIZE}x{SIZE}, "
                     "AugmentationSequential(RandomResizedCrop, HFlip, Normalize) on the batch, "
                     "boxes padded (not pruned); bytes preloaded"}


# ---------------------------------------------------------------------------- 4. warp alone
