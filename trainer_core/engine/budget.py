"""Time budget: measure real throughput early in the run and plan the step count to fit it.

The first optimizer steps double as the benchmark (nothing is thrown away); after an OOM
changes the micro-batch the throughput is measured again and the plan redone.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

# Steps skipped before measuring: the first ones pay for allocator warm-up and lazy init.
WARMUP_STEPS = 2
# A measurement needs this many steps and this much time (capped at a share of the budget).
MIN_STEPS, MIN_SECONDS, MAX_BUDGET_SHARE = 5, 3.0, 0.05
# Export, report and session.json after the last step: small, but not free.
END_MARGIN_S = 2.0
# After the first plan, re-measure over windows of this share of the budget to follow drift.
REPLAN_SHARE = 0.1
# Free-running passes before the last take at most this share of a budget
# (the bench's target is 5 %).
PASS_SHARE = 0.04


@dataclass
class BudgetPlan:
    steps_per_s: float
    samples_per_s: float
    total_steps: int
    planned_epochs: int
    # A step's wall time with the evaluations and checkpoints between steps spread over it.
    seconds_per_step: float = 0.0


class TimeBudget:
    """Plans total steps so that training, plus a reserve for the final save, ends on time."""

    def __init__(
        self,
        target_hours: float,
        steps_per_epoch: int,
        clock: Callable[[], float] = time.monotonic,
        elapsed_s: float = 0.0,
    ) -> None:
        """`elapsed_s`: time the job has already used (start-up, data loading)
        that counts against the budget."""
        self.target_s = target_hours * 3600.0
        self.steps_per_epoch = max(1, steps_per_epoch)
        self.clock = clock
        self.started = clock() - elapsed_s
        self.reserve_s = END_MARGIN_S
        self._end_costs: dict[str, float] = {}
        self._recurring: dict[str, float] = {}  # seconds a step of work that recurs between steps
        self.plan: BudgetPlan | None = None
        # (step, time, items) where measuring began
        self._mark: tuple[int, float, int] | None = None
        self._items = 0

    def note_end_cost(self, name: str, seconds: float) -> None:
        """Remember what the final validation or checkpoint costs, so the
        run stops early enough for it."""
        self._end_costs[name] = seconds
        self.reserve_s = END_MARGIN_S + sum(self._end_costs.values())

    def note_recurring(self, name: str, seconds: float, every_steps: int) -> None:
        """Work that comes back every `every_steps` steps (validation, a
        free-running pass): planned for."""
        self._recurring[name] = seconds / max(1, every_steps)

    def exclude(self, seconds: float) -> None:
        """Time spent between steps: kept out of the step-rate measurement
        (it is planned separately)."""
        if self._mark is not None:
            m_step, m_time, m_items = self._mark
            self._mark = (m_step, m_time + seconds, m_items)

    def elapsed(self) -> float:
        return self.clock() - self.started

    def remeasure(self) -> None:
        """Forget the current measurement (after an OOM changed the batch)."""
        self._mark = None

    def observe(self, step: int, items: int) -> BudgetPlan | None:
        """Called after each step; returns a new plan when a measurement window completes."""
        self._items += items
        now = self.clock()
        if self._mark is None:
            if step >= WARMUP_STEPS:
                self._mark = (step, now, self._items)
            return None
        m_step, m_time, m_items = self._mark
        seconds, steps = now - m_time, step - m_step
        share = MAX_BUDGET_SHARE if self.plan is None else REPLAN_SHARE
        needed = min(MIN_SECONDS if self.plan is None else float("inf"), self.target_s * share)
        if seconds < needed or steps < 1 or (steps < MIN_STEPS and seconds < 4 * needed):
            return None
        return self._replan(step, steps / seconds, (self._items - m_items) / seconds)

    def _replan(self, step: int, steps_per_s: float, samples_per_s: float) -> BudgetPlan:
        remaining = max(0.0, self.target_s - self.elapsed() - self.reserve_s)
        per_step = 1.0 / steps_per_s + sum(self._recurring.values())
        total = step + max(1, int(remaining / per_step))
        epochs = math.ceil(total / self.steps_per_epoch)
        self.plan = BudgetPlan(steps_per_s, samples_per_s, total, epochs, per_step)
        self._mark = None
        return self.plan

    def out_of_time(self) -> bool:
        return self.elapsed() >= self.target_s - self.reserve_s

    def eta_s(self, step: int) -> float | None:
        if self.plan is None:
            return None
        return max(0.0, (self.plan.total_steps - step) * self.plan.seconds_per_step)


class PassAllowance:
    """How much of a time budget the free-running passes before the last may take: a pass starts
    only when it and the last one still fit in PASS_SHARE of it (no budget: every pass)."""

    def __init__(self, target_s: float | None, share: float = PASS_SHARE) -> None:
        self.limit_s = None if target_s is None else share * target_s
        self.spent_s = 0.0
        self.last_s: float | None = None  # the last pass, or the floor's estimate before the first

    def note_estimate(self, seconds: float) -> None:
        if self.last_s is None:
            self.last_s = seconds

    def note_pass(self, seconds: float) -> None:
        self.spent_s += seconds
        self.last_s = seconds

    def room(self) -> bool:
        return self.limit_s is None or self.spent_s + 2 * (self.last_s or 0.0) <= self.limit_s
