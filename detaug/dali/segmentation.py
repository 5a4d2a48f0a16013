"""DALI's ``segmentation.select_masks``: the polygons (and their vertices) of the selected masks,
in the form ``readers.coco(polygon_masks=True)`` gives them. Host only ('cpu').

DALI's rule (dali/operators/segmentation/select_masks.cc): one output polygon row
``[mask_id, start, end]`` per selected mask, in the order of ``mask_ids``, its vertices copied
contiguously in that order (starts from 0); ``reindex_masks`` replaces each mask id with its
position in ``mask_ids``. A mask with several polygons (a COCO annotation in parts) keeps all
of them here, in their input order, one row each (DALI's operator keeps the mask's last polygon
only; the two agree wherever a mask has one polygon, and DALI's own detection test expects all).
"""
from __future__ import annotations

import numpy as np

from ..ops.registry import register
from .tensors import batch_of, samples_of


def select_masks_one(mask_ids, polygons, vertices, reindex: bool, name="segmentation.select_masks"):
    """(polygons (k, 3) int32, vertices (m, D)) of one sample; see the module's docstring."""
    ids = np.asarray(mask_ids).reshape(-1)
    polygons = np.asarray(polygons)
    vertices = np.asarray(vertices)
    if polygons.ndim != 2 or polygons.shape[1] != 3:
        raise ValueError(f"{name}: polygons must be (P, 3) rows [mask_id, start, end], got shape "
                         f"{polygons.shape}")
    if vertices.ndim != 2:
        raise ValueError(f"{name}: vertices must be (V, D), got shape {vertices.shape}")
    if len(np.unique(ids)) != len(ids):
        raise ValueError(f"{name}: mask_ids has duplicated values: {ids.tolist()}")
    rows, parts, start = [], [], 0
    for k, mid in enumerate(ids.tolist()):
        mine = polygons[polygons[:, 0] == mid]
        if not len(mine):
            raise ValueError(f"{name}: selected mask_id {mid} is not present in the polygons")
        for _, s, e in mine.tolist():
            if not 0 <= s <= e <= len(vertices):
                raise ValueError(f"{name}: vertex range [{s}, {e}) of mask {mid} is out of "
                                 f"bounds (the sample has {len(vertices)} vertices)")
            rows.append((k if reindex else mid, start, start + e - s))
            parts.append(vertices[s:e])
            start += e - s
    out_p = np.asarray(rows, np.int32).reshape(-1, 3)
    out_v = np.concatenate(parts) if parts else vertices[:0]
    return out_p, out_v


@register("segmentation.select_masks", devices=("cpu",), kind="other", inputs=(3, 3),
          input_names=("mask_ids", "polygons", "vertices"), outputs=2,
          args={"reindex_masks": False}, aliases=("select_masks",),
          arg_docs={"reindex_masks": "DALI's: replace each mask id with its position in mask_ids"},
          output_spec="per sample (k, 3) int32 polygons and (m, D) vertices",
          doc="DALI's segmentation.select_masks: the polygons and vertices of the masks in "
              "mask_ids (e.g. random_bbox_crop's bbox indices), in mask_ids' order")
def select_masks(ctx, op, inputs, args):
    ids, polys, verts = (samples_of(op, v, w) for v, w in
                         zip(inputs, ("mask_ids", "polygons", "vertices")))
    if not len(ids) == len(polys) == len(verts):
        raise ValueError(f"{op.name}: the inputs have {len(ids)}, {len(polys)} and {len(verts)} "
                         "samples")
    outs = [select_masks_one(i, p, v, bool(args["reindex_masks"]), op.name)
            for i, p, v in zip(ids, polys, verts)]
    return [o[0] for o in outs], [o[1] for o in outs]
