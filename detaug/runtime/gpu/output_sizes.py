"""A launch's device bytes, read off the graph at build: what its outputs take and what its ops
hold while they run (the memory plan's inputs: detaug/runtime/gpu/memory_plan.py).

Each value of the graph is followed symbolically (detaug/core/shapes.py) from the reader's
annotated image sizes, through the output rule each op declares (``OpSchema.rule``, beside the
op): images as their canvas or an upper bound of it, boxes with the canvas of their images,
arrays by their bytes per sample. Where an op's output size cannot be known before it runs (a
resize to a per-sample size, an op whose rule says unknown) the estimate is None and the plan
measures the first launch instead.

Working memory: what a launch holds besides its outputs while its ops run. On the GPU a chain of
geometric ops, and the ops fused into its warp after it (role 'warp_epilogue'), is one warp that
writes the output directly, so a geometric op's image is held only where another op reads it
(a colour op, a multi-sample op, a pixel op), and any other op's image is held where another op
reads it; all of them count, since a launch keeps every value of its graph until its outputs
are collected (runtime/context.py: ``BatchContext.values``). An op's rule adds what it holds
while it runs (a mosaic's tiles), per output sample; ops under a multi-sample op count once per
member (a mixup's partners upstream of it). Decoded images are the decode side's (the ring of a
decode process). Boxes and small arrays are counted at ``BOX_BYTES`` a sample; boxes whose rule
says each carries more (``Boxes.bytes_per_box``: an instance mask) add that for each box the reader
gives a sample on average (``boxes_per_sample``; :data:`BOXES_UNKNOWN` where the reader does not
say), since such a field has a row for every box of the batch, dropped or not; boxes whose
masks move with them (``Boxes.masks``: a reader's bitmap masks) count them too where another
op reads them (held as an image is held: not inside a fused chain)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ...core.shapes import Array, Boxes, Encoded, Img, Out  # noqa: F401 (their home was here)

BOX_BYTES = 100 * 32   # per sample and box output: 100 boxes of 32 bytes (coordinates, label, ...)
BOXES_UNKNOWN = 8      # boxes a sample where the reader does not say (COCO's mean is 7.3)


@dataclasses.dataclass(frozen=True)
class LaunchBytes:
    """One batch's device bytes; a launch of k batches takes :meth:`launch` (k times these,
    less where its batches share a partner pool's samples)."""
    outputs: int                 # the batch's outputs
    working: int                 # held besides them while its ops run
    parts: tuple = ()            # (name, bytes) of each output, for messages
    # the working memory by level: ((level shape: partners.level_shape), bytes a batch holds
    # per sample of that level a batch's sample has); and the pool's slack (pool_slack)
    levels: tuple = ()
    slack: int = 0
    # a mask plane of its canvas (1 byte a pixel) for each box of the boxes outputs whose boxes
    # carry shapes no mask was made of yet (core/shapes.py ``Boxes.shapes_to_rasterise``): what
    # a consumer that makes the masks takes for each batch it holds (memory_plan.ConsumerShare);
    # not counted where such an output's canvas is not known
    planes: int = 0

    def launch(self, batches: int = 1) -> tuple:
        """(outputs, working) of a launch of ``batches`` consecutive batches: the outputs
        ``batches`` times a batch's; the working memory of each level by the samples it holds in
        such a launch (partners.samples_in_launch: a pool's samples shared by the batches of
        the launch are held once), the slack ``batches`` times."""
        k = max(1, int(batches))
        if not self.levels:
            return self.outputs * k, self.working * k
        return self.outputs * k, _working(self.levels, self.slack, k)


def _working(levels, slack, batches) -> int:
    """The working memory of a launch of ``batches`` batches from a batch's ``levels`` and
    ``slack`` (:class:`LaunchBytes`)."""
    from ..partners import samples_in_launch

    return sum(b * samples_in_launch(shape, batches) for shape, b in levels) + slack * batches


def _outputs_of(op, ins, top) -> Out:
    """``op``'s outputs by its declared rule (detaug/core/shapes.py); a source's encoded
    images are bounded by the reader's annotated sizes, its other outputs are boxes (a source
    that declares a rule is given that bound as its one input)."""
    if op.schema.kind == "source":
        if op.schema.rule is not None:
            return op.schema.rule((Encoded(top),), {**op.schema.args, **op.args})
        return Out((Encoded(top),) + (Boxes(None),) * (len(op.outputs) - 1))
    if op.schema.kind == "random" or op.schema.rule is None:
        return Out(())
    out = op.schema.rule(ins, {**op.schema.args, **op.args})
    return out if isinstance(out, Out) else Out(tuple(out))


def batch_bytes(ops, outputs, sizes_hw, batch_size, levels=None, boxes_per_sample=None):
    """:class:`LaunchBytes` of one batch of ``batch_size`` (None where some output's size is not
    known before the graph runs). ``ops``: the needed ops, inputs first; ``outputs``: the
    pipeline's output DataNodes; ``sizes_hw``: the reader's (N, 2) annotated sizes (None:
    unknown); ``levels``: multi-sample levels (detaug/runtime/partners.py);
    ``boxes_per_sample``: the reader's mean boxes a sample (None: unknown). Decoded images are
    the decode side's (memory_plan counts them), not the launch's."""
    from ..partners import level_shape

    levels, by_id = levels or {}, {op.id: op for op in ops}
    per_sample = BOXES_UNKNOWN if boxes_per_sample is None else boxes_per_sample
    top = None
    if sizes_hw is not None and len(sizes_hw):
        hw = np.asarray(sizes_hw, np.int64).reshape(-1, 2)
        top = (int(hw[:, 0].max()), int(hw[:, 1].max()))
    vals, by_shape = {}, {}  # level shape -> bytes held per sample of that level
    consumers = {}
    for op in ops:
        for i in op.inputs:
            consumers.setdefault((i.op.id, i.index), []).append(op)
    for op in ops:
        ins = [vals.get((i.op.id, i.index)) for i in op.inputs]
        shape = level_shape(levels.get(op.id, ()), by_id)  # (ops under a mosaic: 4 samples)
        out = _outputs_of(op, ins, top)
        held = []
        by_shape[shape] = by_shape.get(shape, 0) + out.working
        for k, v in enumerate(out.values):
            if v is None:
                continue
            vals[(op.id, k)] = v
            users = consumers.get((op.id, k), [])
            # a geometric op's image read only by geometric ops (and the ops fused into
            # the warp) is never made: the chain is one warp; so are its boxes' masks
            fused = op.schema.kind == "geometric" and all(
                u.schema.kind == "geometric" or u.schema.has("warp_epilogue") for u in users)
            if isinstance(v, Img) and not op.schema.has("decoder"):
                if users and not fused and v.sample_bytes() is not None:
                    held.append(v.sample_bytes())
            elif isinstance(v, Boxes) and v.masks and users and not fused and \
                    op.outputs[k].device != "cpu":
                each = v.bytes_per_box()  # (a mask per box that another op reads)
                if each is not None:
                    held.append(int(np.ceil(per_sample * each)))
        by_shape[shape] += sum(held)
    parts, total, planes = [], 0, 0
    for node in outputs:
        v = vals.get((node.op.id, node.index))
        if node.device == "cpu":
            continue
        planes += _planes(v, per_sample) * batch_size
        if isinstance(v, Img):
            nb = v.sample_bytes()
        elif isinstance(v, Array):
            nb = v.sample_bytes
        elif isinstance(v, Boxes):
            each = v.bytes_per_box()
            nb = None if each is None else BOX_BYTES + int(np.ceil(per_sample * each))
        else:
            nb = None
        if nb is None:
            return None
        parts.append((node.name, nb * batch_size))
        total += nb * batch_size
    per_level = tuple((shape, b * batch_size) for shape, b in sorted(by_shape.items(), key=str) if b)
    slack = pool_slack(parts)
    return LaunchBytes(total, _working(per_level, slack, 1), tuple(parts), per_level, slack, planes)


def _planes(v, per_sample) -> int:
    """A sample's mask planes of the boxes value ``v`` where a consumer would make them (see
    ``LaunchBytes.planes``); 0 for anything else or where the canvas is not known."""
    if not isinstance(v, Boxes) or not v.shapes_to_rasterise() or v.canvas is None:
        return 0
    hw = v.canvas.hw or v.canvas.bound
    return 0 if hw is None else int(np.ceil(per_sample * int(hw[0]) * int(hw[1])))


SLACK_MIN = 16 * 2**20  # outputs from this size on count for the pool's fragmentation


def pool_slack(parts) -> int:
    """What the pool holds besides the live outputs where a batch has several large outputs of
    different sizes: cupy's default pool serves a request from a larger freed block by splitting
    it, so the blocks freed by one launch do not all fit the next one's requests and the pool
    grows by one block of the largest output. Measured with cupy's default pool, before the
    device threads allocated from the stream-ordered pool (runtime/gpu/allocator.py), and kept
    for both (H100, tests/runtime/test_memory_plan.py): the RetinaNet input at batch 16 (outputs
    of 79, 25 and 398 MB a batch) pooled 1,401 MB for two launches of 501 MB. One large output
    (the benchmark pipeline's image batch) splits nothing: no slack."""
    large = sorted(b for _, b in parts if b >= SLACK_MIN)
    return large[-1] if len(large) >= 2 else 0
