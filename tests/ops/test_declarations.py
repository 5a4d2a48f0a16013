"""Every op that runs on the device declares what the engine needs (OpSchema: its output rule,
whether it plans on the host, its roles), and the engine reads those declarations: a registry
entry with one of them dropped fails here, and the memory plan and planning ahead follow the
declaration, not the op's name."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core import shapes as S
from detaug.graph import trace
from detaug.graph.trace import REGISTRY, ROLES, Draw
from detaug.runtime.gpu import output_sizes
from detaug.runtime.gpu.plan_ahead import _static_plannable


def undeclared(registry) -> list:
    """(op, what) for each device op without an output rule or a planning declaration."""
    out = []
    for name, s in sorted(registry.items()):
        if not set(s.devices) & {"gpu", "mixed"}:
            continue
        if not callable(s.rule):
            out.append((name, "output rule"))
        if s.plans is None or not (isinstance(s.plans, bool) or callable(s.plans)):
            out.append((name, "planning"))
    return out


def test_every_device_op_declares_its_rule_and_its_planning():
    assert not undeclared(REGISTRY), undeclared(REGISTRY)


@pytest.mark.parametrize("dropped", ["rule", "plans"])
def test_a_dropped_declaration_fails(monkeypatch, dropped):
    entry = dataclasses.replace(REGISTRY["hsv"], **{dropped: None})
    monkeypatch.setitem(REGISTRY, "hsv", entry)
    assert undeclared(REGISTRY) == [("hsv", {"rule": "output rule", "plans": "planning"}[dropped])]


def test_roles_are_from_the_vocabulary():
    for name, s in REGISTRY.items():
        assert set(s.roles) <= set(ROLES), name
    with pytest.raises(ValueError, match="unknown roles"):
        trace.register("_no_such_op", roles={"teleporter"})(lambda *a: None)
    assert "_no_such_op" not in REGISTRY
    with pytest.raises(KeyError):
        REGISTRY["hsv"].has("teleporter")


def _graph():
    pipe = Pipeline(batch_size=2)
    with pipe:
        enc, boxes = fn.readers.coco(file_root="x", annotations_file="x.json")
        img = fn.decoders.image(enc, device="mixed")
        img, boxes = fn.flip(img, boxes)
        img = fn.hsv(img, hue=10.0)
        pipe.set_outputs(img, fn.pad_boxes(boxes, max_boxes=10))
    ops = list(pipe.graph.ops)
    return pipe, ops


def test_planning_follows_the_declaration(monkeypatch):
    pipe, ops = _graph()
    hsv = next(op for op in ops if op.schema.name == "hsv")
    assert _static_plannable(hsv)  # (it gives uint8: its launch is deferred)
    monkeypatch.setattr(hsv, "schema", dataclasses.replace(hsv.schema, plans=lambda a, d: a["hue"] > 50))
    assert not _static_plannable(hsv)
    monkeypatch.setattr(hsv, "schema", dataclasses.replace(hsv.schema, plans=lambda a, d: a["hue"] > 5))
    assert _static_plannable(hsv)


def test_the_memory_plan_follows_the_rule(monkeypatch):
    """The bytes of a launch are what the ops' rules say: an op declaring a larger output, or
    working memory, changes them by exactly that."""
    pipe, ops = _graph()
    outputs = pipe._outputs
    base = output_sizes.batch_bytes(ops, outputs, [[100, 120]], 4)
    # flip keeps the canvas (100 x 120, 3 channels); hsv's image is held (read by the flip? no:
    # it is an output); boxes padded to 10 rows of 32 bytes
    assert base.outputs == 4 * (100 * 120 * 3 + 10 * 32)
    hsv = next(op for op in ops if op.schema.name == "hsv")

    def doubled(ins, a):
        img = S.first_image(ins)
        return S.Out((S.Img(None, (2 * img.bound[0], img.bound[1]), 3, 1),), working=1000)

    monkeypatch.setattr(hsv, "schema", dataclasses.replace(hsv.schema, rule=doubled))
    b = output_sizes.batch_bytes(ops, outputs, [[100, 120]], 4)
    assert b.outputs == 4 * (200 * 120 * 3 + 10 * 32)
    assert b.working == base.working + 4 * 1000


def test_draws_are_declared_in_order_and_replay():
    """A declared draw list takes the same numbers the stream gives in that order."""
    from detaug.core.rng import SampleRNG

    schema = REGISTRY["photometric_distort"]
    assert [d.name for d in schema.draws][:2] == ["apply_brightness", "brightness"]
    idx = np.arange(5)
    drawn = schema.draw(SampleRNG(3, 1, 0, idx), dict(schema.args))
    whole = SampleRNG(3, 1, 0, idx).uniform(sum(int(d.count) for d in schema.draws))
    flat = np.concatenate([drawn[d.name] for d in schema.draws], 1)
    assert np.array_equal(flat, whole)
    assert Draw("k", 2, "bits").take(SampleRNG(3, 1, 0, idx), {}).dtype == np.uint64


def test_decoders_declare_the_decoder_role():
    """The engine knows decoders by their role (their images are the decode side's); exactly
    one, the image decoder, runs in the decode processes."""
    decoders = [n for n in REGISTRY if n.startswith("decoders.")]
    assert len(decoders) >= 3 and all(REGISTRY[n].has("decoder") for n in decoders)
    assert [n for n, s in REGISTRY.items() if s.has("decode_service")] == ["decoders.image"]
    assert [n for n, s in REGISTRY.items() if s.has("upload")] == ["_upload"]


def test_every_declared_host_plan_is_handed_its_parameters():
    """An op with a host plan takes (ctx, op, inputs, args, params); one with draws only takes
    (ctx, op, inputs, args, draws): the engine hands it one of them (runtime/batch_making.py)."""
    import inspect

    for name, s in REGISTRY.items():
        if s.host_plan is not None or s.draws:
            params = list(inspect.signature(s.impl).parameters)
            assert len(params) == 5, (name, params)
            assert params[4] == ("params" if s.host_plan is not None else "draws"), name
