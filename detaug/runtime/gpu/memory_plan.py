"""A GPU pipeline's device memory, planned from one budget in bytes.

``Pipeline(device_memory_budget=...)`` (default :data:`DEFAULT_BUDGET`, or the environment
variable ``DETAUG_DEVICE_MEMORY_BUDGET``) is the device memory the pipeline may take on top of
what the calling process already holds: its decode processes (each a CUDA context, nvImageCodec's
decoders and a ring buffer of decoded images) and the output batches it keeps in flight. From it
follow, unless set explicitly:

* the decode side (:func:`plan_decode`): how many decode processes and decoder threads per
  process, and each process's ring (:data:`RING_SLOTS` slots of one launch of decoded images,
  sized from the images' annotated sizes where the reader knows them: :data:`RING_LAUNCHES`
  launches of the queue, in launch order, plus one for a batch made by random access); at most
  :data:`DECODE_SHARE` of the budget;
* ``batches_per_launch``: 1, or 4 from :data:`BIG_BUDGET` on where launches are not planned
  ahead (a launch's outputs are alive together until the last of its batches is consumed); for
  a pipeline whose batches share a partner pool's samples, the largest of
  :data:`SHARED_BATCHES` whose plan fits (a launch of k batches holds those samples once: its
  working memory and decoded images grow by k + the pools' k batches, not k times a batch's);
  the ring's launches of the queue are counted in batches (:func:`ring_launches`);
* the output slots (:func:`output_slots`): the number of launches whose outputs may exist at
  once (made and not yet handed out, or being made, each with its ops' working memory); the rest
  of the budget, less :data:`CALLER_LAUNCHES` launches for the batches the caller holds (the one
  in use, and in a for loop the one before it, still bound while ``next()`` makes the next
  batch) and :data:`FREEING_LAUNCHES` that the pool is taking back, each launch counted as the
  device threads' pool takes it (:func:`pool_bytes`: large ones in whole chunks). Sized at
  build from the
  outputs' bytes where the graph fixes them (detaug/runtime/gpu/output_sizes.py: an image
  resized to a fixed canvas, RetinaNet targets, whose anchor count follows from the canvas),
  and from what the first launch's outputs really take once it is made.

What consumes the outputs may take device memory of its own beside them (an adapter: its
framework's CUDA context, the masks it makes for each batch): declared to build as a
:class:`ConsumerShare` (``Pipeline.build(consumer=...)``), it is set aside first, and everything
here is planned within the rest of the budget (``BuildPlan.room``).

Where a launch's outputs are large, the decode side gets less (:func:`decode_cap`): one launch
being made and those the caller holds come first. Where even the least the pipeline runs
with (:func:`minimum_bytes`: one decode process of one decoder thread, one launch being made,
those the caller holds) exceeds the budget, build refuses with :class:`BudgetError`, naming
the figure it would need and the settings that change it (:func:`check_budget`).

While the decode processes come up, this process's own decoder decodes the first launches
(detaug/runtime/gpu/early_decode.py): one decoder and up to ``MAX_IN_FLIGHT`` launches of
decoded images, beside the processes' contexts and rings and the first launches' outputs; the
decode side is planned at the larger of that and its steady state (:func:`plan_decode`'s
``early``), which with partners drawn over the epoch (8 images a launch's sample) is the larger.

The per-process costs are measured constants (H100, CUDA 13,
nvImageCodec 0.7-0.9): a process's CUDA context 551 MB, 272 MB once its stack reservation is
dropped (decode_proc does); each decoder thread 52-54 MB once warm
with 2 nvImageCodec CPU threads, about 6 MB more with the 4 decode_proc now gives it, counted as 80
(its scratch buffers: it decodes straight into the ring, so it holds no images of
its own; it held 182 MB when it decoded into images of its own).
Measured on the benchmark's 640x480 JPEGs: nvJPEG's scratch buffers grow with the images, so a
data set of much larger images may take more than planned. Pure arithmetic: tested on
the CPU; the device figures that check it are in benchmarks/RESULTS.md.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

DEFAULT_BUDGET = 2_300_000_000        # bytes: the detection pipeline with 2 decode processes of 2 threads and
#                                       the caller's two batches (2,142 MB measured on an H200)
BIG_BUDGET = 6_000_000_000            # from here on, launches of 4 batches
# launches of a pipeline whose batches share a partner pool's images: the largest that fits
# (measured on the YOLO recipe, 'pool', H200: k = 1, 4, 8 ran 3,556, 8,807, 4,815 img/s)
SHARED_BATCHES = (4, 2, 1)
CONTEXT_BYTES = 280_000_000           # one decode process's CUDA context (stack limit 0)
DECODER_BYTES = 80_000_000            # one decoder thread, warm (it decodes into the ring)
DECODE_SHARE = 0.75                   # at most this part of the budget for the decode side
RING_LAUNCHES = 2                     # launches of decoded images a decode process holds at once
BIG_RING_LAUNCHES = 4                 # the same from BIG_BUDGET on
RING_SLOTS = RING_LAUNCHES + 1        # ring slots: one more, for batches made out of the queue
FALLBACK_IMAGE_BYTES = 1024 * 1024 * 3  # per image, where the reader does not know the sizes
MIN_RING = 64 << 20
MAX_DECODE_PROCESSES, MAX_DECODE_THREADS = 3, 2
# launches of outputs the caller holds while the next is made: the batch in use and, in the
# for-loop idiom (``for b in pipe`` / ``out = pipe.run()`` in a loop, DALI's iterator), the one
# before it, still bound during ``next()`` (measured: the benchmark pipeline's pool held 3
# launches of outputs, 944 MB of 315 MB launches, in that idiom: benchmarks/RESULTS.md)
CALLER_LAUNCHES = 2
# the device threads' stream-ordered pool (runtime/gpu/allocator.py) grows in chunks of 32 MiB
# (cupy's MemoryAsyncPool notes; it keeps them: cupy sets no release threshold), so a launch of
# 48 MiB outputs takes 64 MiB of it; and a batch the caller let go goes back to the pool behind
# a wait on the caller's streams (runtime/gpu/handout.py) while the next launch already takes
# its outputs: one launch more held for that (FREEING_LAUNCHES). Measured on the seg recipe's
# boxes through the torch adapter (48 MiB launches, 2.3 GB, H200): 10 output slots by bytes
# held 2,330 MB, 7 by chunks 2,174 (2,316 in another run), 6 with the launch freeing 2,082;
# the pool reserved up to 432 MB more than it had in use at once
POOL_CHUNK = 32 << 20
FREEING_LAUNCHES = 1
# decode in the device-stage threads (decode_processes=0): each thread's nvImageCodec decoder
# with the images it decodes into (182 MB measured with its own images, above), and the decoded
# images kept IN_THREAD_KEEP launches (detaug/ops/gpu_decode.py keep_queue) besides those in use
IN_THREAD_DECODER_BYTES = 182_000_000
IN_THREAD_KEEP = 8


@dataclasses.dataclass(frozen=True)
class ConsumerShare:
    """Device memory that what consumes a pipeline's outputs (an adapter) takes beside them,
    declared to build so that the pipeline plans within the rest of its budget. ``fixed``: held
    while it runs (a framework's CUDA context, scratch); ``box_planes``: it makes a mask plane of
    the canvas for each box that carries shapes (output_sizes ``LaunchBytes.planes``) and keeps
    them with each batch the caller holds (:data:`CALLER_LAUNCHES`); ``what``: who takes it,
    for messages."""
    fixed: int = 0
    box_planes: bool = False
    what: str = "the outputs' consumer"

    def bytes(self, batch_bytes=None) -> int:
        """The share in bytes, given one batch's bytes (``LaunchBytes``; None: not known at
        build, the planes then not counted)."""
        planes = batch_bytes.planes if self.box_planes and batch_bytes is not None else 0
        return int(self.fixed) + CALLER_LAUNCHES * int(planes)


class BudgetError(ValueError):
    """The pipeline cannot run within its device_memory_budget (raised by build). ``need``: the
    least it runs with, in bytes (a budget of that much builds it, with one output slot)."""

    def __init__(self, message: str, need: int):
        super().__init__(message)
        self.need = int(need)


@dataclasses.dataclass(frozen=True)
class DecodePlan:
    processes: int
    threads: int        # decoder threads per process
    ring_bytes: int     # per process
    bytes: int          # what the decode side is planned to take in all (its peak)
    launches: int = RING_LAUNCHES  # launches of the queue each process's ring holds at once
    early: int = 0      # this process's early decoder while the processes come up (0: none)

    @property
    def slots(self) -> int:
        """Ring slots per process: the launches of the queue, plus one for random access."""
        return self.launches + 1

    def describe(self) -> str:
        early = (f", the first launches' decoder here {self.early / 1e6:,.0f} MB while they "
                 "come up" if self.early else "")
        return (f"{self.processes} decode process(es) x {self.threads} decoder thread(s), "
                f"{self.ring_bytes / 2**20:.0f} MiB ring each{early}, ~{self.bytes / 1e6:,.0f} MB")


def budget_from(value) -> int:
    """The budget in bytes: ``value`` (bytes, or a string like '2GB', '1.5e9', '800MiB'), else
    DETAUG_DEVICE_MEMORY_BUDGET, else DEFAULT_BUDGET."""
    if value is None:
        value = os.environ.get("DETAUG_DEVICE_MEMORY_BUDGET") or DEFAULT_BUDGET
    if isinstance(value, str):
        s = value.strip().upper().replace(" ", "")
        units = {"GIB": 2**30, "MIB": 2**20, "KIB": 2**10, "GB": 10**9, "MB": 10**6, "KB": 10**3, "B": 1}
        mult = 1
        for u, m in units.items():
            if s.endswith(u):
                s, mult = s[: -len(u)], m
                break
        try:
            value = float(s) * mult
        except ValueError:
            raise ValueError(f"device_memory_budget: {value!r} is not a number of bytes "
                             "(e.g. 2e9, '2GB', '1536MiB')") from None
    value = int(value)
    if value <= 0:
        raise ValueError(f"device_memory_budget must be positive, not {value}")
    return value


def launch_image_bytes(sizes_hw, channels: int, images_per_launch: int) -> int:
    """Upper bound of one launch's decoded bytes: the ``images_per_launch`` largest images of
    ``sizes_hw`` ((N, 2) heights and widths; None where unknown), each 256-byte aligned."""
    if sizes_hw is None or len(sizes_hw) == 0:
        return images_per_launch * FALLBACK_IMAGE_BYTES
    per = np.asarray(sizes_hw, np.int64).reshape(-1, 2).prod(axis=1) * int(channels)
    per = -(-per // 256) * 256
    k = min(images_per_launch, len(per))
    top = np.partition(per, len(per) - k)[len(per) - k:]
    # a launch of more images than the dataset holds repeats them ('fill')
    return int(top.sum() * images_per_launch // k)


def ring_launches(budget: int, batches: int = 1) -> int:
    """Launches each decode process holds at once: more in flight keep the decoders busy
    (measured once launches were planned ahead, with launches of one batch), where the budget
    has room for them. Counted in batches, for launches of ``batches`` batches: as many
    launches as hold that many batches, at least :data:`RING_LAUNCHES` (one being decoded while
    the one before it is made)."""
    n = BIG_RING_LAUNCHES if budget >= BIG_BUDGET else RING_LAUNCHES
    return max(RING_LAUNCHES, -(-n // max(1, int(batches))))


def early_decoder_bytes(launch_bytes: int) -> int:
    """This process's early decoder (detaug/runtime/gpu/early_decode.py) at its most: one
    decoder and ``MAX_IN_FLIGHT`` launches of decoded images (``launch_bytes`` each)."""
    from .early_decode import MAX_IN_FLIGHT

    return DECODER_BYTES + MAX_IN_FLIGHT * int(launch_bytes)


def plan_decode(budget: int, launch_bytes: int, processes=None, threads=None,
                ring_bytes=None, cap=None, early=False, batches: int = 1) -> DecodePlan:
    """Decode processes, decoder threads and ring size from the budget. The largest
    processes x threads (processes first: they do not share a GIL) whose cost fits ``cap``
    (default DECODE_SHARE of the budget; :func:`decode_cap` where the outputs are known); at
    least one process with one thread, whatever the budget. Explicit ``processes`` /
    ``threads`` / ``ring_bytes`` are kept as given. A process costs its context, its decoder
    threads and its ring; with ``early`` (this process decodes the first launches while the
    processes come up), the decoders' part is at least :func:`early_decoder_bytes` (the
    processes' contexts and rings are up by then, their decoders not yet). ``batches``: a
    launch's batches (:func:`ring_launches`)."""
    launches = ring_launches(budget, batches)
    ring = int(ring_bytes) if ring_bytes else max(MIN_RING, (launches + 1) * int(launch_bytes))
    ring = -(-ring // (1 << 20)) << 20
    first = early_decoder_bytes(launch_bytes) if early else 0
    cost = lambda p, t: p * (CONTEXT_BYTES + ring) + max(p * t * DECODER_BYTES, first)
    cands = [(p, t) for p in range(MAX_DECODE_PROCESSES, 0, -1) for t in range(MAX_DECODE_THREADS, 0, -1)
             if (processes is None or p == processes) and (threads is None or t == threads)]
    if not cands:  # an explicit value beyond the table: as given
        cands = [(processes or 1, threads or 1)]
    cap = DECODE_SHARE * budget if cap is None else cap
    fits = [c for c in cands if cost(*c) <= cap]
    # the most decoders, then the most processes
    p, t = max(fits, key=lambda c: (c[0] * c[1], c[0])) if fits else min(cands, key=lambda c: cost(*c))
    return DecodePlan(p, t, ring, cost(p, t), launches, first)


def batches_per_launch(budget: int, planned: bool = False, batch_bytes: int | None = None,
                       batch_working: int = 0, fits=None) -> int:
    """1, or 4 from BIG_BUDGET on for a pipeline whose launches are not planned ahead (its
    per-launch host work runs in the pipeline's process: larger launches amortise it), fewer
    where the least a launch of k batches needs (:func:`minimum_outputs`: one being made, one
    held) would take more than half the budget (``batch_bytes``: one batch's outputs, where
    known at build). ``fits`` (k -> bool: the plan with launches of k batches fits the budget),
    given for a pipeline whose launches share work across batches (a partner pool reaching
    into the batches before a sample's own: a launch of k batches decodes and runs an image
    its batches' pools share once): the largest of :data:`SHARED_BATCHES` that fits, else 1."""
    if fits is not None:
        return next((k for k in SHARED_BATCHES if k == 1 or fits(k)), 1)
    k = 4 if budget >= BIG_BUDGET and not planned else 1
    while k > 1 and batch_bytes is not None and \
            minimum_outputs(k * batch_bytes, k * batch_working) > budget // 2:
        k -= 1
    return k


def minimum_outputs(launch_bytes: int, working: int = 0) -> int:
    """The outputs' part of the least a pipeline runs with: one launch being made (its outputs
    and its ops' working memory) and the :data:`CALLER_LAUNCHES` the caller holds."""
    return (1 + CALLER_LAUNCHES) * max(0, int(launch_bytes)) + max(0, int(working))


def decode_cap(budget: int, launch_bytes: int | None, working: int = 0) -> float:
    """What the decode side may take: DECODE_SHARE of the budget, and no more than the budget
    leaves besides :func:`minimum_outputs` (where a launch's outputs are known)."""
    share = DECODE_SHARE * budget
    if launch_bytes is None:
        return share
    return min(share, budget - minimum_outputs(launch_bytes, working))


def in_thread_decode_bytes(workers: int, launch_image_bytes: int) -> int:
    """Device memory of decoding in the device-stage threads: one decoder per thread, the
    launches of decoded images in use (one per thread) and those kept (IN_THREAD_KEEP)."""
    return int(workers) * IN_THREAD_DECODER_BYTES + (IN_THREAD_KEEP + int(workers)) * int(launch_image_bytes)


def minimum_bytes(decode_bytes: int, launch_bytes: int, working: int = 0) -> int:
    """The least the pipeline runs with: its decode side and :func:`minimum_outputs`."""
    return int(decode_bytes) + minimum_outputs(launch_bytes, working)


def _mb(n) -> str:
    return f"{n / 1e6:,.0f} MB"


def check_budget(budget: int, decode_bytes: int, decode_what: str, launch_bytes: int,
                 working: int = 0, parts=(), batches: int = 1, fixed_decode: bool = False,
                 reserved: int = 0, reserved_what: str = "") -> None:
    """Raise :class:`BudgetError` where :func:`minimum_bytes` and ``reserved`` (a
    :class:`ConsumerShare`'s bytes, ``reserved_what`` its description) exceed ``budget``: the
    message gives the figure needed, what it is made of, and which settings change it.
    ``decode_what`` describes the decode side (DecodePlan.describe()); ``parts``: (name, bytes)
    of one launch's outputs; ``batches``: batches per launch; ``fixed_decode``: the decode side
    was set explicitly (decode_processes / decode_buffer_mb) rather than planned."""
    need = minimum_bytes(decode_bytes, launch_bytes, working) + max(0, int(reserved))
    if need <= budget:
        return
    what = ", ".join(f"{n} {_mb(b)}" for n, b in parts) if parts else ""
    share = (f"what {reserved_what or 'the consumer'} takes beside the pipeline "
             f"({_mb(reserved)}), " if reserved > 0 else "")
    fixes = [f"device_memory_budget='{-(-need // 10**8) / 10:.1f}GB' or more "
             "(or DETAUG_DEVICE_MEMORY_BUDGET)",
             "a smaller batch_size (a launch's outputs grow with it)"]
    if batches > 1:
        fixes.append("batches_per_launch=1")
    if fixed_decode:
        fixes.append("fewer decode_processes or a smaller decode_buffer_mb")
    raise BudgetError(
        f"device_memory_budget {budget / 1e9:.2f} GB cannot hold this GPU pipeline: the least it "
        f"runs with is {_mb(need)}: {share}the decode side ({decode_what}), one launch being "
        f"made ({batches} batch(es) of outputs: {_mb(launch_bytes)}" + (f" = {what}" if what else "")
        + f"; its ops' working memory {_mb(working)}) and the {CALLER_LAUNCHES} launches the "
        f"caller holds (the batch in use and the one before it: {_mb(launch_bytes)} each). Set "
        + "; or ".join(fixes) + ".", need)


def pool_bytes(launch_output_bytes: int) -> int:
    """What a launch's outputs take of the device threads' pool: from :data:`POOL_CHUNK` on, its
    bytes rounded up to the pool's chunks (a large allocation gets chunks of its own, and the
    rest of its last chunk serves only smaller ones); below, its bytes."""
    n = max(0, int(launch_output_bytes))
    return n if n < POOL_CHUNK else -(-n // POOL_CHUNK) * POOL_CHUNK


def output_slots(budget: int, decode_bytes: int, launch_output_bytes: int, depth: int,
                 working: int = 0) -> int:
    """Launches whose outputs may exist at once: what the budget leaves after the decode side,
    less the :data:`CALLER_LAUNCHES` launches the caller holds and the :data:`FREEING_LAUNCHES`
    the pool has not taken back yet, in launches of outputs (as the pool takes them:
    :func:`pool_bytes`) and working memory (each launch being made holds both); at least 1, at
    most ``depth`` (the launches in flight)."""
    out = pool_bytes(launch_output_bytes)
    room = budget - decode_bytes - (CALLER_LAUNCHES + FREEING_LAUNCHES) * out
    n = room // max(1, out + max(0, working))
    return int(max(1, min(depth, n)))
