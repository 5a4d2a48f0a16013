"""The device paths of the multi-sample ops (ops/multi.py), planned on the host as their
declarations say (``plans=True``): the same code makes a launch now (on the GPU) or plans it
(images planned ahead: core/deferred.py), so a launch gives the same batches whether a host
worker planned it, a thread did, or nobody did (DETAUG_PLAN_AHEAD=0).

* mosaic: its tiles warped straight into their canvases, ONE warp launch for the batch's tiles
  after one fill (kernels/warp_canvas.py), instead of a warp into tile buffers then a compose;
  the same pixels to the bit, without the tile buffers.
* mixup (and any compose over planned images): the compose launch planned from the tiles'
  shapes (kernels/compose.py: :class:`~detaug.kernels.compose.ComposeLaunch`).
"""
from __future__ import annotations

import numpy as np

from ..core.batch import ImageBatch
from ..core.deferred import DeferredLaunch, is_planned, stand_in
from ..graph import materialize as M
from ..kernels.compose import ComposeLaunch
from ..kernels.warp_canvas import plan_canvas_warp, warp_canvas_cupy


def mosaic_on_device(ctx, images: ImageBatch, origins, groups, canvas, fill):
    """The canvases of a mosaic on the GPU, or planned: ``images`` with the chain to their tiles
    pending (its output sizes the tiles'), placed at ``origins`` of ``canvas`` filled with
    ``fill``. None on the host (ops/multi.py's CPU paths)."""
    if images.device != "gpu" and not is_planned(images.raw):
        return None
    g, kw = M.warp_arguments(images)
    fill = np.broadcast_to(np.asarray(fill, np.float64), (len(canvas), images.channels))
    args = (g.matrices, g.sizes, origins, groups, canvas, fill)
    kw = dict(tile_fill=kw["fill"], antialias=kw["antialias"], region=kw["region"])
    if is_planned(images.raw):
        cw = plan_canvas_warp(stand_in(images.raw), *args, **kw)
        return ImageBatch(DeferredLaunch((images.raw,), cw), images.device)
    return ImageBatch(warp_canvas_cupy(images.raw, *args, stream=getattr(ctx, "stream", None),
                                       **kw), images.device)


def compose_planned(images: ImageBatch, origins, groups, canvas, fill, weights, mode):
    """kernels/compose.py's compose of planned ``images`` (made images without a pending
    chain), planned: its launch runs once they are made."""
    src = stand_in(images.raw)
    cl = ComposeLaunch(src.shapes, src.pitches, origins, groups, canvas, fill, weights, mode)
    return ImageBatch(DeferredLaunch((images.raw,), cl), images.device)
