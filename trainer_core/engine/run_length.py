"""How long the run trains: the schedule's length and warmup, from
train.max_steps, epochs or a time budget.

With `train.target_hours` the length is planned from measured throughput (`engine.budget`)
and re-planned as it changes; the warmup is fitted to the first plan
(`trainer_core.warmup`). Under DDP rank 0 alone measures and plans, and the step-boundary
exchange hands its plan to the other ranks (`adopt`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import psutil

from trainer_core.contract.profile import Profile
from trainer_core.contract.protocol import CalibrationEvent
from trainer_core.engine.budget import TimeBudget
from trainer_core.engine.events import EventHub
from trainer_core.engine.loop_state import LoopState
from trainer_core.engine.optimizers import OptimizerGroups
from trainer_core.warmup import fitted_warmup, warmup_note
from trainer_core.world import World

log = logging.getLogger("trainer_core")


class RunLength:
    """Plans `state.total_steps` and `state.warmup_steps` and keeps the
    optimizer groups' schedules on them."""

    def __init__(
        self,
        profile: Profile,
        state: LoopState,
        steps_per_epoch: Callable[[], int],
        world: World,
        events: EventHub,
    ) -> None:
        self.profile, self.state, self.world, self.events = profile, state, world, events
        self.steps_per_epoch = steps_per_epoch
        self.budget = self._new_budget()
        # attached once the optimizers exist (they need the plan)
        self.groups: OptimizerGroups | None = None
        state.warmup_steps = self._initial_warmup()
        state.total_steps = self.planned_total_steps()

    def attach(self, groups: OptimizerGroups) -> None:
        self.groups = groups

    def planned_total_steps(self) -> int:
        """The schedule's length: train.max_steps, else epochs x steps per epoch
        (never shorter than the warmup)."""
        t = self.profile.train
        if t.max_steps is not None:
            return t.max_steps
        return max(self.warmup_steps() + 1, t.epochs * self.steps_per_epoch())

    def warmup_steps(self) -> int:
        """The warmup in use: fitted to the plan (trainer_core.warmup), or
        train.warmup_steps until a budget's plan."""
        fitted = self.state.warmup_steps
        return self.profile.train.warmup_steps if fitted is None else fitted

    def finished(self) -> bool:
        cap = self.profile.train.max_steps
        # with a time budget too: whichever comes first
        if cap is not None and self.state.step >= cap:
            return True
        if self.budget is not None:
            return self.budget.out_of_time() and self.state.step > 0
        return self.state.step >= self.state.total_steps

    def announce_warmup(self, planned_steps: int | None = None) -> None:
        """A `warning` event (code warmup_fitted) when the warmup in use is
        not train.warmup_steps."""
        if self.state.warmup_steps is None:  # a budget's warmup is announced when it is fitted
            return
        asked, used = self.profile.train.warmup_steps, self.warmup_steps()
        if used == asked or not self.world.is_main:
            return
        source = (
            "the time budget plans"
            if self.budget is not None
            else "planned (train.epochs x steps per epoch)"
        )
        planned = self.state.total_steps if planned_steps is None else planned_steps
        self.events.warn(warmup_note(asked, used, planned, source), code="warmup_fitted")

    def observe(self, items: int) -> None:
        """Rank 0 with a time budget: measure the step, and re-plan the
        schedule when the budget says so."""
        if self.budget is None or not self.world.is_main:
            return
        plan = self.budget.observe(self.state.step, items)
        if plan is None:
            return
        first_plan = self.state.warmup_steps is None
        if first_plan:
            self._fit_warmup_to(plan.total_steps)
        self._set_total(self._schedulable_length(plan.total_steps))
        self.events.emit(
            CalibrationEvent(
                samples_per_s=plan.samples_per_s,
                planned_epochs=plan.planned_epochs,
                planned_steps=plan.total_steps,
                target_hours=self.profile.train.target_hours,
            )
        )
        if first_plan:
            self.announce_warmup(plan.total_steps)

    def adopt(self, total_steps: int) -> None:
        """DDP ranks other than 0: take rank 0's plan (fitting the warmup to
        its first one, as rank 0 did)."""
        if total_steps == self.state.total_steps:
            return
        if self.state.warmup_steps is None:
            self._fit_warmup_to(total_steps)
        self._set_total(total_steps)

    def restored(self, budget_elapsed_s: float | None) -> None:
        """After a resume: the current profile decides how long to train (a
        resumed run may be extended)."""
        s = self.state
        if self.budget is not None:
            # The time budget covers the whole run: time already trained counts against it.
            self.budget.started -= budget_elapsed_s or 0.0
        else:
            s.total_steps = self.planned_total_steps()
        if s.step >= s.total_steps:
            log.warning(
                "the checkpoint is at step %d, already at or past the planned %d steps",
                s.step,
                s.total_steps,
            )
        elif self.groups is not None:
            self.groups.set_total_steps(s.total_steps)

    def pause(self, seconds: float) -> None:
        """Paused time is not training time: the budget's clock moves on by it."""
        if self.budget is not None:
            self.budget.started += seconds

    def note_end_cost(self, name: str, seconds: float) -> None:
        """What a validation or a checkpoint costs: the budget keeps that
        much for the end of the run."""
        if self.budget is not None:
            self.budget.note_end_cost(name, seconds)

    def note_recurring(self, name: str, seconds: float, evaluations: int = 1) -> None:
        """What a validation (or a pass every `evaluations` validations) costs, spread over the
        steps between them; the time it took is kept out of the step-rate measurement."""
        if self.budget is None:
            return
        every = self.profile.train.eval_every_steps or self.budget.steps_per_epoch
        self.budget.note_recurring(name, seconds, every * max(1, evaluations))

    def exclude(self, seconds: float) -> None:
        """Seconds spent between steps (validation): not step time."""
        if self.budget is not None:
            self.budget.exclude(seconds)

    def remeasure(self) -> None:
        """The micro-batch changed (OOM recovery): throughput must be measured again."""
        if self.budget is not None:
            self.budget.remeasure()

    def eta_s(self) -> float | None:
        return self.budget.eta_s(self.state.step) if self.budget is not None else None

    def _set_total(self, total_steps: int) -> None:
        self.state.total_steps = total_steps
        if self.groups is not None:
            self.groups.set_total_steps(total_steps)

    def _initial_warmup(self) -> int | None:
        """Fitted to epochs x steps per epoch now; a time budget's plan fits it
        after calibration (None until)."""
        t = self.profile.train
        if t.max_steps is not None:
            return t.warmup_steps
        if t.target_hours:
            return None
        return fitted_warmup(t.warmup_steps, t.epochs * self.steps_per_epoch())

    def _fit_warmup_to(self, planned_steps: int) -> None:
        """Fit the warmup to a time budget's first plan (once per run; every
        rank computes the same)."""
        self.state.warmup_steps = fitted_warmup(self.profile.train.warmup_steps, planned_steps)
        if self.groups is not None and self.state.warmup_steps != self.groups.warmup_steps():
            self.groups.set_warmup_steps(self.state.warmup_steps)

    def _new_budget(self) -> TimeBudget | None:
        hours = self.profile.train.target_hours
        if not hours:
            return None
        # The budget is for the whole job: interpreter start-up and data loading count against it.
        already = max(0.0, time.time() - psutil.Process().create_time())
        return TimeBudget(hours, self.steps_per_epoch(), elapsed_s=already)

    def _schedulable_length(self, planned: int) -> int:
        """The schedule needs more steps than its warmup: a re-plan far below
        the first keeps warmup + 1 steps.

        The first plan fitted the warmup to at most half its steps (trainer_core.warmup), so
        this only acts when a later re-plan (a slowdown, an OOM) shrinks the run below the
        warmup; the budget still ends it on time.
        """
        shortest = self.warmup_steps() + 1
        if planned < shortest:
            log.info(
                "the time budget now fits about %d steps, fewer than the %d-step warmup: the LR"
                " schedule keeps %d steps (the budget still ends the run on time)",
                planned,
                self.warmup_steps(),
                shortest,
            )
        return max(planned, shortest)
