"""The pipeline's parts get what they read as arguments (docs/design.md, runtime's `build_plan`):
Pipeline mixes nothing in (its only base is object: the run state, the sharding, the batch making,
the device stage, planning ahead and the launch queue are parts it holds), no part and no module of the runtime,
core, graph or ops reads the seed or the device memory budget back from the pipeline (they reach
the parts through the build's record and the schedule), no part reads an attribute off a
pipeline, and no part guards an attribute with ``getattr(self, "_...")`` (every attribute a part
holds is set in its constructor)."""
import ast
import inspect
import pathlib
import re
import textwrap

import numpy as np

from detaug import fn
from detaug import pipeline as P
from detaug.core import sharding
from detaug.runtime import batch_making, launch_queue, run_state
from detaug.runtime.gpu import device_stage, plan_ahead
from helpers import REPO

PARTS = [run_state.RunState, sharding.Sharding, batch_making.BatchMaking,
         device_stage.DeviceStage, plan_ahead.PlanAhead, launch_queue.LaunchQueue]
READ_BACK = re.compile(r"\b(?:self|pipe|pipeline|self\.pipeline|ctx\.pipeline)\."
                       r"(?:seed|device_memory_budget)\b(?!\s*=[^=])")
PIPELINE_READ = re.compile(r"\b(?:pipe|pipeline|_pipe)\.\w")  # an attribute read off a pipeline
GUARD = re.compile(r"getattr\(self, \"_")


def test_pipeline_mixes_nothing_in():
    # a part made a base again (a mixin's methods over the pipeline's state) fails here
    assert P.Pipeline.__bases__ == (object,), P.Pipeline.__bases__
    for part in PARTS:
        assert not issubclass(P.Pipeline, part), part.__name__


def test_no_part_reads_the_seed_or_the_budget_or_guards_an_attribute():
    for cls in PARTS:
        src = inspect.getsource(cls)
        assert not READ_BACK.search(src), (cls.__name__, READ_BACK.search(src).group(0))
        assert not GUARD.search(src), cls.__name__


def test_no_lower_layer_module_reads_them_off_a_pipeline():
    root = pathlib.Path(REPO) / "detaug"
    found = []
    for folder in ("core", "graph", "ops", "runtime"):
        for path in sorted((root / folder).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"\b(?:pipe|pipeline|ctx\.pipeline|self\.pipeline)\."
                             r"(?:seed|device_memory_budget)\b", line):
                    found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    assert found == []


def test_the_checks_catch_a_read_back():
    assert READ_BACK.search("order = epoch_permutation(self.seed, epoch, n)")
    assert READ_BACK.search("memory_plan.check_budget(self.device_memory_budget, d)")
    assert not READ_BACK.search("self.seed = int(seed)")
    assert GUARD.search('keep = getattr(self, "_decoded_keep", None)')


def test_run_state_and_sharding_are_parts_held_not_bases():
    # the cursor (epoch, batch, the run's identity) and the sharding (the default shard, the
    # shard policy, the schedule) are parts the pipeline holds and hands over to, not mixins
    bases = {c.__name__ for c in P.Pipeline.__mro__}
    assert not bases & {"RunState", "Sharding"}, bases
    for part in (run_state.RunState, sharding.Sharding):
        assert not issubclass(P.Pipeline, part), part.__name__
    pipe = P.Pipeline(batch_size=2, seed=3, shard_id=1, num_shards=4, shard_policy="drop")
    assert isinstance(pipe._run_state, run_state.RunState)
    assert isinstance(pipe._sharding, sharding.Sharding)
    assert (pipe.shard_id, pipe.num_shards, pipe.shard_policy) == (1, 4, "drop")
    assert (pipe._sharding.shard_id, pipe._sharding.num_shards) == (1, 4)


def test_the_launch_parts_are_held():
    # made at build with the record (the batch making, planning ahead) or at construction (the
    # device stage), each the one the others were given
    pipe = P.Pipeline(batch_size=2, seed=3, host_processes=0)
    with pipe:
        pipe.set_outputs(fn.external_source(source=lambda info: np.zeros((2, 2, 3), np.uint8),
                                            batch=False, size=4))
    assert isinstance(pipe._device, device_stage.DeviceStage) and pipe._batches is None
    assert isinstance(pipe._queue, launch_queue.LaunchQueue) and pipe._executor is None
    pipe.build()
    try:
        assert isinstance(pipe._batches, batch_making.BatchMaking)
        assert isinstance(pipe._planner, plan_ahead.PlanAhead)
        assert pipe._batches.plan is pipe._planner.plan is pipe._device.plan is pipe.build_plan
        assert pipe._planner.batches is pipe._batches and pipe._batches.schedule is pipe.schedule
        assert pipe._decode_service is None and pipe._stream is None and pipe._streams == []
        images = pipe.run()[0]  # the parts wired: a batch made through them
        assert [np.asarray(a).shape for a in images.data] == [(2, 2, 3)] * 2
        assert pipe._executor is pipe._queue.executor is not None
    finally:
        pipe.close()


def test_the_parts_read_no_pipeline():
    # what they read is given to them (the schedule, the sources, the seed and the batch size at
    # construction; the build's record, the graph and the other parts at build), not read back
    # off a pipeline
    for part in PARTS:
        code = _code_of(part)
        assert not PIPELINE_READ.search(code), (part.__name__, PIPELINE_READ.search(code).group(0))
    assert "pipe" not in inspect.signature(run_state.check_state).parameters
    assert "pipe" not in inspect.signature(sharding.check_epoch_has_batches).parameters


class _NoStrings(ast.NodeTransformer):
    def visit_Constant(self, node):  # a message may say what to call: "call pipe.feed_input()"
        return ast.Constant("") if isinstance(node.value, str) else node


def _code_of(cls) -> str:
    """The class's code without its docstrings, comments and the words of its strings."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            body[0] = ast.Pass()
    return ast.unparse(_NoStrings().visit(tree))


def test_the_part_check_catches_a_pipeline_read():
    class Mixin:
        """Reads the pipe's schedule in words only."""

        def state(self):
            return self.pipeline.schedule  # a read back

    class Part:
        """Reads the pipe's schedule in words only."""

        def state(self, schedule):
            if schedule is None:
                raise ValueError("call pipe.build() first")
            return schedule  # not pipe.schedule

    assert PIPELINE_READ.search(_code_of(Mixin))
    assert not PIPELINE_READ.search(_code_of(Part))
