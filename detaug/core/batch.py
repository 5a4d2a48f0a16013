"""Batches that travel through the graph: ImageBatch (ragged images) and BoxBatch (packed boxes).

Geometry is lazy: a geometric op does not touch pixels or boxes, it composes a per-sample matrix
into the batch's pending :class:`Geometry`. The first consumer that needs pixels (a colour op,
normalize, the output) materialises the whole chain as ONE warp, with normalisation, layout and
dtype fused in when that consumer asks for them; the first consumer that needs boxes (clip/prune,
pad, the output) transforms them ONCE with the composed matrix (docs/design.md, "Data model").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import backend
from . import geometry as G
from .instances import same_widths, trim_polygons
from .tensor_list import Layout, TensorListMethods


@dataclass(frozen=True)
class Step:
    """One op of a pending chain.

    Attributes:
        matrix: (B, 3, 3) float64, maps the op's input coordinates to its output coordinates.
        composed: (B, 3, 3) float64, maps the chain's start frame to this op's output.
        sizes: (B, 2) int64 (H, W) of the op's output canvas.
        fill: (B, C) float64, what the op puts where its output lies outside its input.
        ellipse: the op's boxes take the box of their inscribed ellipse (else of the corners).
        roi: the op resamples a region of its input as DALI's resize of a region of interest
            does: its taps read beyond the region (clamped at its input's edges only), so its
            canvas does not clamp them (:func:`detaug.core.geometry.valid_region`).
    """

    matrix: np.ndarray
    composed: np.ndarray
    sizes: np.ndarray
    fill: np.ndarray
    ellipse: bool = False
    roi: bool = False


@dataclass(frozen=True)
class Geometry:
    """A pending chain of geometric ops.

    Fusion never changes results: the chain keeps every op (``steps``), so that the warp gives
    ``fill`` wherever an intermediate canvas cut the content away (:func:`geometry.valid_region`)
    and the boxes are clipped at every canvas in order (kernels/boxes.py), as if the ops ran one
    by one.

    Attributes:
        matrices: (B, 3, 3) float64, maps source coordinates to current coordinates.
        sizes: (B, 2) int64 (H, W) of the current canvas.
        fill: (B, C) float64 fill value of the latest op that has one.
        source_sizes: (B, 2) int64 (H, W) of the chain's start frame.
        steps: the ops of the chain, in order.
        antialias: False when an op of the chain asked for no antialiasing (``antialias=False``):
            the chain's one warp then samples each output pixel once.
        filter: 'box' (detaug's warp: the mean of bilinear samples where the chain shrinks) or
            'triangle' (an op of the chain asked for DALI's resampling filter: its samples whose
            map is axis-aligned take it, kernels/resample.py; the others the warp).
    """

    matrices: np.ndarray
    sizes: np.ndarray
    fill: np.ndarray
    source_sizes: np.ndarray
    steps: tuple = ()
    antialias: bool = True
    filter: str = "box"

    def then(self, m_op, sizes, fill=None, box_mode=None, antialias=True,
             filter=None, roi=False) -> "Geometry":
        fill = self.fill if fill is None else np.broadcast_to(
            np.asarray(fill, np.float64).reshape(len(sizes), -1), self.fill.shape).copy()
        sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
        m_op = np.broadcast_to(np.asarray(m_op, np.float64), self.matrices.shape)
        composed = np.matmul(m_op, self.matrices)
        step = Step(m_op, composed, sizes, fill, box_mode == "ellipse", bool(roi))
        return Geometry(composed, sizes, fill, self.source_sizes, self.steps + (step,),
                        self.antialias and bool(antialias),
                        "triangle" if "triangle" in (filter, self.filter) else "box")

    def valid_region(self):
        """The part of the output that holds source content: see :func:`geometry.valid_region`."""
        return G.valid_region(self.source_sizes, [s.matrix for s in self.steps],
                              [s.composed for s in self.steps], [s.sizes for s in self.steps],
                              [s.fill for s in self.steps], self.fill,
                              roi=[s.roi for s in self.steps])

    def box_stages(self):
        """(matrices (K, B, 3, 3), clip rectangles (K, B, 4), modes) of the chain for the box
        kernels: one stage per op, each clipping to its canvas (a perspective's stage maps the
        corners with the divide). A chain of axis-aligned ops
        (crop, flip, resize, pad, letterbox, zoom-out) is one stage: its composed matrix and the
        intersection of every canvas mapped to the output (clipping commutes with such maps, so
        the boxes are the same, with one map instead of K). The identity on the current canvas
        when the chain is empty."""
        if not self.steps:
            return self.matrices[None], G.canvas_rects(self.sizes)[None], ["corners"]
        ops = np.stack([s.matrix for s in self.steps])
        if not (ops[:, :, 0, 1].any() or ops[:, :, 1, 0].any() or G.is_projective(ops).any()
                or any(s.ellipse for s in self.steps)):
            rect = G.axis_canvases_in_output(np.stack([s.composed for s in self.steps]),
                                             np.stack([s.sizes for s in self.steps]))
            return self.matrices[None], rect[None], ["corners"]
        return (ops, G.canvas_rects(np.stack([s.sizes for s in self.steps])),
                ["ellipse" if s.ellipse else "corners" for s in self.steps])


def _identity_geometry(sizes, channels) -> Geometry:
    b = len(sizes)
    sizes = np.asarray(sizes, np.int64).reshape(b, 2)
    return Geometry(np.tile(np.eye(3), (b, 1, 1)), sizes, np.zeros((b, channels)), sizes)


class DeviceImages:
    """B uint8 HWC images in device memory, described by host arrays instead of one array object
    per image: data pointers (B,), shapes (B, 3) (H, W, C) and row pitches in bytes (B,). The GPU
    decode produces it and the warp reads the pointers straight from it, so the per-image Python
    work of a batch is only reading what the decoder returns. ``owners`` keeps the memory alive.
    Indexing gives a cupy view (made on demand); slicing gives a DeviceImages."""

    __slots__ = ("ptrs", "shapes", "pitches", "owners", "device_id", "_list")
    dtype = np.dtype(np.uint8)

    def __init__(self, ptrs, shapes, pitches, owners, device_id=0):
        self.ptrs = np.asarray(ptrs, np.uint64).reshape(-1)
        self.shapes = np.asarray(shapes, np.int64).reshape(-1, 3)
        self.pitches = np.asarray(pitches, np.int64).reshape(-1)
        self.owners, self.device_id, self._list = owners, int(device_id), None

    @classmethod
    def from_arrays(cls, arrays, device_id=0):
        """From cupy HWC uint8 arrays (made C-contiguous where they are not)."""
        import cupy as cp

        arrays = [cp.ascontiguousarray(a if a.ndim == 3 else a[:, :, None]) for a in arrays]
        return cls([a.data.ptr for a in arrays], [a.shape for a in arrays],
                   [a.strides[0] for a in arrays], arrays, device_id)

    def __len__(self) -> int:
        return len(self.ptrs)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return DeviceImages(self.ptrs[i], self.shapes[i], self.pitches[i], self.owners,
                                self.device_id)
        import cupy as cp

        h, w, c = (int(v) for v in self.shapes[i])
        pitch = int(self.pitches[i])
        mem = cp.cuda.UnownedMemory(int(self.ptrs[i]), (h - 1) * pitch + w * c, self.owners,
                                    self.device_id)
        return cp.ndarray((h, w, c), np.uint8, cp.cuda.MemoryPointer(mem, 0), strides=(pitch, c, 1))

    def __iter__(self):
        return iter(self.as_list())

    def as_list(self) -> list:
        """The images as a list of cupy views (made once)."""
        if self._list is None:
            self._list = [self[i] for i in range(len(self))]
        return self._list


class PlannedImages(DeviceImages):
    """The images a GPU decode WILL make, while a launch is planned ahead on the host
    (detaug/runtime/gpu/plan_ahead.py): their shapes (B, 3), from the sizes the reader's annotations declare
    (the decode checks that it makes exactly these), no pixels and no pointers yet. Geometric
    ops plan on it as on decoded images; the warp that ends their chain is planned
    (:class:`DeferredWarp`); anything that reads its pixels raises NotPlannable.

    Attributes (beyond DeviceImages'): ``enc`` the EncodedBatch to decode (paths, and the bytes
    where this process reads them), ``output_type`` 'RGB' or 'GRAY', ``chunk`` the decode
    call's size, ``cpu_decode`` the host decoder for files the GPU must not take."""

    __slots__ = ("enc", "output_type", "chunk", "cpu_decode")

    def __init__(self, shapes, enc, output_type, chunk, cpu_decode):
        shapes = np.asarray(shapes, np.int64).reshape(-1, 3)
        super().__init__(np.zeros(len(shapes), np.uint64), shapes, shapes[:, 1] * shapes[:, 2],
                         None, 0)
        self.enc, self.output_type, self.chunk = enc, output_type, int(chunk)
        self.cpu_decode = cpu_decode

    def __getitem__(self, i):
        from .errors import NotPlannable

        raise NotPlannable("an op reads the pixels of images not decoded yet")

    def as_list(self):
        return self[0]


class DeferredWarp:
    """The warp that ends a planned chain (:func:`detaug.kernels.warp.plan_warp`), waiting for
    its source images: ``source`` (a :class:`PlannedImages`) and ``launch`` (a WarpLaunch, or
    kernels/resample.py's launches: ``run``, ``B``, ``shapes``, ``out_dtype``). The raw data of
    an ImageBatch while a launch is planned ahead; made into pixels by ``PlanAhead._realize``."""

    __slots__ = ("source", "launch")

    def __init__(self, source, launch):
        self.source, self.launch = source, launch

    def __len__(self) -> int:
        return self.launch.B

    @property
    def dtype(self):
        return self.launch.out_dtype

    def __getitem__(self, i):
        from .errors import NotPlannable

        raise NotPlannable("an op reads the pixels of a warp not run yet")

    def as_list(self):
        return self[0]


class ImageBatch(TensorListMethods):
    """B images on one device, HWC uint8 until normalised.

    ``data`` is a dense (B, H, W, C) array (or (B, C, H, W) for layout 'CHW') or a list of B arrays
    of their own sizes. ``geometry`` is the pending chain, if any. DALI's TensorList methods
    (``at``, ``as_tensor``, ``shape()``, ``layout()``, ...) come from
    :class:`~detaug.core.tensor_list.TensorListMethods`.
    """

    def __init__(self, data, device: str, layout: str = "HWC", geometry: Geometry | None = None):
        self.raw, self.device, self.geometry = data, device, geometry
        self.layout = Layout(layout)

    # ---- DALI's TensorList methods (core/tensor_list.py) ------------------------------------
    def _samples(self) -> list:
        return list(self.data)

    def _layout_str(self) -> str:
        return str(self.layout)

    def as_cpu(self) -> "ImageBatch":
        """The images on the host (DALI's TensorListGPU.as_cpu)."""
        if self.device == "cpu":
            return self
        data = self.data
        return ImageBatch(data.get() if self.is_dense else [a.get() for a in data], "cpu", self.layout)

    @property
    def data(self):
        """The images: a dense array, or a list of per-image arrays (cupy views of a
        :class:`DeviceImages`, made on first use). ``raw`` is what the batch holds."""
        return self.raw.as_list() if isinstance(self.raw, (DeviceImages, DeferredWarp)) else self.raw

    @property
    def batch_size(self) -> int:
        return len(self.raw)

    def __len__(self) -> int:
        return self.batch_size

    @property
    def is_dense(self) -> bool:
        return not isinstance(self.raw, (list, DeviceImages, DeferredWarp))

    @property
    def channels(self) -> int:
        if self.batch_size == 0:
            return 3
        if isinstance(self.raw, DeviceImages):
            return int(self.raw.shapes[0, 2])
        s = self.raw.launch.shapes[0] if isinstance(self.raw, DeferredWarp) else self.raw[0].shape
        return s[0] if self.layout == "CHW" else s[-1]

    def source_sizes(self) -> np.ndarray:
        """(B, 2) int64 (H, W) of the stored pixels."""
        if isinstance(self.raw, DeviceImages):
            return self.raw.shapes[:, :2].copy()
        axes = (1, 2) if self.layout == "CHW" else (0, 1)
        shapes = self.raw.launch.shapes if isinstance(self.raw, DeferredWarp) else [a.shape for a in self.raw]
        return np.array([[s[axes[0]], s[axes[1]]] for s in shapes],
                        np.int64).reshape(-1, 2)

    def sizes(self) -> np.ndarray:
        """(B, 2) int64 (H, W) of the images as the graph sees them now (pending chain applied)."""
        return self.geometry.sizes if self.geometry is not None else self.source_sizes()

    def pending(self) -> Geometry:
        """The pending chain, or the identity on the stored pixels."""
        if self.geometry is not None:
            return self.geometry
        return _identity_geometry(self.source_sizes(), self.channels)

    @property
    def pixel_type(self) -> np.dtype:
        """The images' element type, read without their pixels (planned images too): uint8
        for an empty batch."""
        return np.dtype(_images_dtype(self.raw)) if self.batch_size else np.dtype(np.uint8)

    @property
    def is_float(self) -> bool:
        """Whether the stored pixels are float32 (host images only: device images are uint8)."""
        return (self.batch_size > 0 and not isinstance(self.raw, DeviceImages)
                and _images_dtype(self.raw) == np.float32)

    def with_geometry(self, geometry: Geometry) -> "ImageBatch":
        dtype = _images_dtype(self.raw) if self.batch_size else np.dtype(np.uint8)
        if self.layout != "HWC" or dtype not in (np.uint8, np.float32):
            raise ValueError("geometric ops take uint8 (or, on the CPU, float32) HWC images; put "
                             "normalize/crop_mirror_normalize with output_layout='HWC' before "
                             f"them or after them (got {self.layout} {dtype})")
        if dtype == np.float32 and self.device != "cpu":
            raise ValueError("geometric ops on float32 images run on the CPU only; on the GPU "
                             "they take uint8 images: resize, crop, flip... first, then "
                             "normalize (or run this part of the pipeline with device='cpu')")
        return ImageBatch(self.raw, self.device, self.layout, geometry)

    def materialize(self, ctx, **epilogue) -> "ImageBatch":
        """This batch with its pending chain run as one warp (and ``epilogue``: mean, std,
        dtype, layout; see :func:`detaug.graph.materialize.images`). The execution context ``ctx``
        does the work (``ctx.materialize``): batch types hold data only."""
        return ctx.materialize(self, **epilogue)


def host_offsets(offsets) -> np.ndarray:
    """Validated host offsets ``(B + 1,)`` int64 (a cupy array is refused: no device reads)."""
    if type(offsets).__module__.startswith("cupy"):
        raise TypeError("offsets must be a host (numpy) array; they are batch metadata")
    o = np.asarray(offsets, dtype=np.int64)
    if o.ndim != 1 or o.size < 1 or o[0] != 0 or np.any(np.diff(o) < 0):
        raise ValueError(f"offsets must be (B + 1,) non-decreasing from 0, got {o!r}")
    return o


def sample_index_from_offsets(offsets) -> np.ndarray:
    """``(N,)`` int32: the sample of each box, from host ``offsets (B + 1,)``."""
    o = host_offsets(offsets)
    return np.repeat(np.arange(o.size - 1, dtype=np.int32), np.diff(o))


class BoxBatch:
    """The boxes of B images packed in one (N, 4) array, with per-box fields beside them.

    Attributes:
        boxes: (N, 4) float32 xyxy, in the coordinates of the source canvas when ``geometry`` is
            pending, else of ``canvas``.
        labels: (N,) int64, contiguous 0-based.
        fields: name -> (N,) array (iscrowd, difficult, annotation_id, ...).
        offsets: (B + 1,) int64 on the host: boxes of sample b are rows offsets[b]:offsets[b+1].
        valid: (N,) bool or None (all valid). Dropping a box clears its flag, so that boxes, labels
            and fields can never drift apart and no op needs sizes from the device mid-graph.
        canvas: (B, 2) int64 (H, W) of the image the boxes refer to (after the pending chain).
        geometry: pending chain shared with the ImageBatch it travels with.
        host: on the GPU, the host copy of the same boxes, which host-side planning (random crops)
            reads; it is never copied back from the device.
    """

    def __init__(self, boxes, labels, offsets, canvas, device="cpu", fields=None, valid=None,
                 geometry=None, host=None, fmt="xyxy", region=None):
        self.boxes, self.labels, self.device = boxes, labels, device
        self.offsets = np.asarray(offsets, np.int64)
        self.canvas = np.asarray(canvas, np.int64).reshape(-1, 2)
        self.fields = dict(fields or {})
        self.valid, self.geometry, self._host, self.fmt = valid, geometry, host, fmt
        self.region = region  # (B, 4) host: where the image content lies on the canvas

    @property
    def host(self):
        """The host copy (GPU batches only), brought up to date on first use: every op records
        what it does to the host copy and the work is done only if planning reads it."""
        if isinstance(self._host, _Deferred):
            self._host = self._host.resolve()
        return self._host

    def _host_later(self, step):
        """The host copy after ``step(host copy)``, deferred until someone reads it."""
        return None if self._host is None else _Deferred(self._host, step)

    @property
    def batch_size(self) -> int:
        return len(self.offsets) - 1

    def __len__(self) -> int:
        return self.batch_size

    @property
    def num_boxes(self) -> int:
        return int(self.offsets[-1])

    def sample_index(self):
        """(N,) int32 sample of each box, on the host (kernels upload it with their metadata)."""
        return sample_index_from_offsets(self.offsets)

    def replace(self, **kw) -> "BoxBatch":
        attrs = dict(boxes=self.boxes, labels=self.labels, offsets=self.offsets, canvas=self.canvas,
                     device=self.device, fields=self.fields, valid=self.valid,
                     geometry=self.geometry, host=self._host, fmt=self.fmt, region=self.region)
        attrs.update(kw)
        return BoxBatch(**attrs)

    def content_region(self) -> np.ndarray:
        """(B, 4) float64 [x0, y0, x1, y1]: the part of the canvas that holds image content (the
        source canvas mapped through the ops so far, clipped); the rest is padding or fill."""
        if self.region is not None:
            return self.region
        c = self.canvas.astype(np.float64)
        return np.stack([np.zeros(len(c)), np.zeros(len(c)), c[:, 1], c[:, 0]], -1)

    def pending(self) -> Geometry:
        """The pending chain, or the identity on the current canvas."""
        return self.geometry if self.geometry is not None else _identity_geometry(self.canvas, 1)

    def with_geometry(self, geometry: Geometry) -> "BoxBatch":
        """Attach a chain that starts at this batch's current frame (see :meth:`pending`)."""
        self.require_xyxy()
        host = self._host_later(lambda h: h.with_geometry(geometry))
        return self.replace(geometry=geometry, canvas=geometry.sizes, host=host)

    def require_xyxy(self):
        if self.fmt != "xyxy":
            raise ValueError(f"boxes were converted to {self.fmt!r}; geometric and box ops take "
                             "xyxy boxes: convert formats last")

    def materialize(self, ctx) -> "BoxBatch":
        """The boxes transformed once through the pending chain (see
        :func:`detaug.graph.materialize.boxes`), by the execution context ``ctx``."""
        return ctx.materialize(self)

    def host_view(self) -> "BoxBatch":
        """The host copy (the batch itself on the CPU)."""
        return self if self.device == "cpu" else self.host

    def drop(self, keep_host: np.ndarray) -> "BoxBatch":
        """Clear the valid flag where ``keep_host`` (a host bool mask from planning) is False,
        uploading the mask on the GPU (host-to-device only)."""
        keep = (backend.upload(np.asarray(keep_host, bool)) if self.device == "gpu"
                else np.asarray(keep_host, bool))
        valid = keep if self.valid is None else (self.valid & keep)
        host = self._host_later(lambda h: h.drop(keep_host))
        return self.replace(valid=valid, host=host)

    def to_device(self, ctx) -> "BoxBatch":
        """Upload once (the mixed stage): boxes, labels, fields and mask; keep the host copy."""
        if self.device == "gpu":
            return self
        return self.on_device(backend.upload_many(self.device_arrays(), ctx.stream))

    def device_arrays(self) -> list:
        """The host arrays an upload takes: boxes, labels, the fields in order, the mask if any."""
        host = [self.boxes, self.labels] + [self.fields[k] for k in self.fields]
        return host + ([] if self.valid is None else [self.valid])

    def on_device(self, dev) -> "BoxBatch":
        """This host batch on the GPU, from the upload of :meth:`device_arrays` (in its order);
        this batch stays its host copy."""
        names = list(self.fields)
        valid = dev[-1] if self.valid is not None else None
        return BoxBatch(dev[0], dev[1], self.offsets, self.canvas, "gpu",
                        dict(zip(names, dev[2:2 + len(names)])), valid, self.geometry, self,
                        self.fmt, self.region)

    def per_sample(self) -> list:
        """Host list of dicts {'boxes', 'labels', <fields>} of the valid boxes of each sample
        (``masks`` and ``bitmasks`` (n, H, W) on the sample's own canvas). On the GPU this copies to the host:
        output stage only (a pipeline's outputs are materialised; a batch with a pending chain
        is refused)."""
        if self.geometry is not None:
            raise ValueError("per_sample takes materialised boxes (a pipeline output); these "
                             "have a pending geometric chain")
        b = self
        boxes, labels = backend.to_host(b.boxes), backend.to_host(b.labels)
        fields = {k: backend.to_host(v) for k, v in b.fields.items()}
        if b.device == "gpu" and "polygons" in fields:  # the GPU leaves NaN rows past the CPU's P
            fields["polygons"] = trim_polygons(fields["polygons"])
        valid = np.ones(len(boxes), bool) if b.valid is None else backend.to_host(b.valid)
        out = []
        for s in range(b.batch_size):
            lo, hi = b.offsets[s], b.offsets[s + 1]
            keep = valid[lo:hi]
            d = {"boxes": boxes[lo:hi][keep], "labels": labels[lo:hi][keep]}
            d.update({k: v[lo:hi][keep] for k, v in fields.items()})
            h, w = (int(v) for v in b.canvas[s])  # masks: planes of the batch's largest canvas
            d.update({k: d[k][:, :h, :w] for k in ("masks", "bitmasks") if k in d})
            out.append(d)
        return out


class PaddedBoxes(dict):
    """Dense boxes: 'boxes' (B, M, 4) float32, 'labels' (B, M) and every field (B, M), padded
    with ``fill`` / -1, plus 'counts' (B,) int32 of real boxes per sample. On the device where
    the pipeline runs on the GPU. ``widths``: where several batches were made together and M is
    their most boxes, each batch's own M (:func:`split_batches` cuts each to it); else None."""

    widths = None

    def per_sample(self) -> list:
        """Host list of dicts {'boxes', 'labels', <fields>} of each sample's real boxes (its
        first ``counts[b]`` rows), as :meth:`BoxBatch.per_sample` gives; copies from the GPU."""
        counts = backend.to_host(self["counts"])
        rows = {k: backend.to_host(v) for k, v in self.items() if k != "counts"}
        return [{k: v[b, :int(n)] for k, v in rows.items()} for b, n in enumerate(counts)]


class EncodedBatch:
    """File bytes of B samples, with their paths and the sizes their annotations declare."""

    def __init__(self, data, paths, sizes=None, streams=None):
        self.data, self.paths = data, paths
        self.sizes = sizes  # (B, 2) (H, W) from the annotations, 0 where unknown
        # nvImageCodec CodeStreams made in the host stage when the pipeline decodes on the GPU
        # (None for a file the GPU must not or cannot take): see gpu_decode.code_streams
        self.streams = streams

    def __len__(self):
        return len(self.paths)


def _images_dtype(raw):
    """The element type of a non-empty batch's images: an array, a DeviceImages (uint8) or a list."""
    return raw.dtype if hasattr(raw, "dtype") else raw[0].dtype


class _Deferred:
    """A host-copy BoxBatch not computed yet: ``step`` applied to ``base`` (itself possibly
    deferred) on the first :meth:`resolve`, which keeps the result (the batches split off one
    launch share their parent's deferred copy: it is computed once)."""

    __slots__ = ("base", "step", "value")

    def __init__(self, base, step):
        self.base, self.step, self.value = base, step, None

    def resolve(self):
        if self.step is not None:
            base = self.base.resolve() if isinstance(self.base, _Deferred) else self.base
            self.value, self.base, self.step = self.step(base), None, None
        return self.value


def concat_boxes(records_boxes, records_labels, records_fields, canvas) -> BoxBatch:
    """Pack per-sample host arrays into one BoxBatch (host)."""
    counts = [len(b) for b in records_boxes]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    boxes = (np.concatenate(records_boxes).astype(np.float32) if counts
             else np.zeros((0, 4), np.float32)).reshape(-1, 4)
    labels = (np.concatenate(records_labels).astype(np.int64) if counts
              else np.zeros((0,), np.int64))
    names = set().union(*[f.keys() for f in records_fields]) if records_fields else set()
    fields = {}
    for name in sorted(names):
        parts = [np.asarray(f[name]) if name in f else np.zeros(n, np.int64)
                 for f, n in zip(records_fields, counts)]
        parts = same_widths(name, parts)
        fields[name] = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    return BoxBatch(boxes, labels, offsets, canvas, "cpu", fields)


def _split_boxes(b: BoxBatch, bounds) -> list:
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        o0, o1 = int(b.offsets[lo]), int(b.offsets[hi])
        sl = slice(o0, o1)
        host = b._host_later(lambda h, lo=lo, hi=hi: _split_boxes(h, [lo, hi])[0])
        out.append(b.replace(boxes=b.boxes[sl], labels=b.labels[sl], offsets=b.offsets[lo:hi + 1] - o0,
                             canvas=b.canvas[lo:hi], fields={k: v[sl] for k, v in b.fields.items()},
                             valid=None if b.valid is None else b.valid[sl], host=host,
                             region=None if b.region is None else b.region[lo:hi]))
    return out


def split_batches(outs: tuple, sizes) -> list:
    """Cut the outputs of several batches run together (``sizes`` samples each) into one tuple
    per batch: views, no copies (ImageBatch, BoxBatch, padded boxes, arrays, encoded bytes)."""
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    cuts = list(zip(bounds[:-1], bounds[1:]))
    per = []
    for v in outs:
        if isinstance(v, ImageBatch):
            if v.geometry is not None:
                raise ValueError("split_batches takes materialised images")
            per.append([ImageBatch(v.raw[lo:hi], v.device, v.layout) for lo, hi in cuts])
        elif isinstance(v, BoxBatch):
            per.append(_split_boxes(v, bounds))
        elif isinstance(v, PaddedBoxes):
            ws = v.widths or [None] * len(cuts)  # each batch as wide as when made alone
            per.append([PaddedBoxes({k: a[lo:hi] if k == "counts" else a[lo:hi, :w]
                                     for k, a in v.items()}) for (lo, hi), w in zip(cuts, ws)])
        elif isinstance(v, EncodedBatch):
            per.append([EncodedBatch(None if v.data is None else v.data[lo:hi], v.paths[lo:hi],
                                     None if v.sizes is None else v.sizes[lo:hi],
                                     None if v.streams is None else v.streams[lo:hi])
                        for lo, hi in cuts])
        elif (hasattr(v, "shape") and len(v.shape) and v.shape[0] == bounds[-1]) or (
                isinstance(v, list) and len(v) == bounds[-1]):
            per.append([v[lo:hi] for lo, hi in cuts])  # an array, or a list of per-sample ones
        else:
            raise TypeError(f"cannot split an output of type {type(v).__name__} into batches")
    return [tuple(p[k] for p in per) for k in range(len(cuts))]
