"""The pipeline's parts get what they read as arguments (docs/design.md, runtime's `build_plan`):
no method mixed into Pipeline, and no module of the runtime, core, graph or ops, reads the seed
or the device memory budget back from the pipeline (they reach the parts through the build's
record and the schedule), and no mixin guards an attribute with ``getattr(self, "_...")`` (every
attribute the pipeline holds is set in its constructor)."""
import ast
import inspect
import pathlib
import re
import textwrap

from detaug import pipeline as P
from detaug.core import sharding
from detaug.runtime import run_state
from helpers import REPO

MIXINS = [c for c in P.Pipeline.__mro__[1:-1]]
READ_BACK = re.compile(r"\b(?:self|pipe|pipeline|self\.pipeline|ctx\.pipeline)\."
                       r"(?:seed|device_memory_budget)\b(?!\s*=[^=])")
PIPELINE_READ = re.compile(r"\b(?:pipe|pipeline|_pipe)\.\w")  # an attribute read off a pipeline
GUARD = re.compile(r"getattr\(self, \"_")


def test_no_mixin_reads_the_seed_or_the_budget_or_guards_an_attribute():
    assert MIXINS, "Pipeline has no bases left to check"
    for cls in MIXINS:
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


def test_the_parts_read_no_pipeline():
    # what they read is given to them (the schedule, the sources, the seed and the batch size at
    # construction), not read back off a pipeline
    for part in (run_state.RunState, sharding.Sharding):
        code = _code_of(part)
        assert not PIPELINE_READ.search(code), (part.__name__, PIPELINE_READ.search(code).group(0))
    assert "pipe" not in inspect.signature(run_state.check_state).parameters
    assert "pipe" not in inspect.signature(sharding.check_epoch_has_batches).parameters


def _code_of(cls) -> str:
    """The class's code without its docstrings and comments."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            body[0] = ast.Pass()
    return ast.unparse(tree)


def test_the_part_check_catches_a_pipeline_read():
    class Mixin:
        """Reads the pipe's schedule in words only."""

        def state(self):
            return self.pipeline.schedule  # a read back

    class Part:
        """Reads the pipe's schedule in words only."""

        def state(self, schedule):
            return schedule  # not pipe.schedule

    assert PIPELINE_READ.search(_code_of(Mixin))
    assert not PIPELINE_READ.search(_code_of(Part))
