"""The pipeline's parts get what they read as arguments (docs/design.md, runtime's `build_plan`):
no method mixed into Pipeline, and no module of the runtime, core, graph or ops, reads the seed
or the device memory budget back from the pipeline (they reach the parts through the build's
record and the schedule), and no mixin guards an attribute with ``getattr(self, "_...")`` (every
attribute the pipeline holds is set in its constructor)."""
import inspect
import pathlib
import re

from detaug import pipeline as P
from helpers import REPO

MIXINS = [c for c in P.Pipeline.__mro__[1:-1]]
READ_BACK = re.compile(r"\b(?:self|pipe|pipeline|self\.pipeline|ctx\.pipeline)\."
                       r"(?:seed|device_memory_budget)\b(?!\s*=[^=])")
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
