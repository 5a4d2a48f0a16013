"""The output slots of a GPU pipeline as it runs: a part the pipeline holds, constructed with the
build's record (detaug/runtime/build_plan.py: its budget, decode side, launch bytes and depth).

Build sets the slots where the graph fixes a launch's bytes (``BuildPlan.output_slots``). Once
launches are made, :meth:`OutputBudget.measured` keeps the most a launch's outputs took, and
:meth:`OutputBudget.after_launch_out` (a launch was handed out) sets the output slots from the
budget (less what the outputs' consumer declared it takes: ``BuildPlan.room``): what remains
after the decode side, less the launches for the batches the caller holds, in
launches of outputs and working memory (detaug/runtime/gpu/memory_plan.py ``output_slots``). A
pipeline whose outputs were not known at build is refused there (``BudgetError``) if they cannot
fit."""
from __future__ import annotations

from . import memory_plan


class OutputBudget:
    """``slots``: launches whose outputs may exist at once; ``peak``: the most that did (as seen
    when batches are handed out); ``launch_bytes``: the most a launch's outputs took (None: no
    launch made yet); all for the build record ``plan``."""

    def __init__(self, plan):
        self.plan = plan
        self.slots = plan.output_slots
        self.peak = 0
        self.launch_bytes = None
        self._checked = False  # outputs measured on the first launch checked against the budget

    def measured(self, nbytes: int) -> None:
        """A launch's outputs took ``nbytes`` of device memory."""
        if self.launch_bytes is None or nbytes > self.launch_bytes:
            self.launch_bytes = nbytes

    def after_launch_out(self, slots) -> None:
        """A launch was handed out (``slots``: the executor's OutputSlots, None without a device
        stage): once the first launch's outputs have been measured, set the output slots from
        the budget, resizing ``slots``; refuse a pipeline whose outputs, not known at build,
        cannot fit."""
        if self.launch_bytes is None or slots is None:
            return
        self.peak = max(self.peak, slots.peak)
        bp = self.plan
        decode = bp.decode_bytes
        static, work = bp.launch_bytes()
        if static is None and not self._checked:
            self._checked = True
            what = bp.decode.describe() if bp.decode is not None else "decode side"
            memory_plan.check_budget(bp.budget, decode, what,
                                     self.launch_bytes, work, (), bp.batches_per_launch,
                                     reserved=bp.reserved, reserved_what=bp.reserved_what)
        n = memory_plan.output_slots(bp.room, decode, self.launch_bytes,
                                     bp.prefetch_queue_depth, work)
        if n != self.slots:
            self.slots = n
            slots.resize(n)
