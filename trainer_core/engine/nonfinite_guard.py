"""What a skipped (non-finite) step leads to: a `nonfinite` event, and after
repeated ones a safer precision.

fp16 overflow with a healthy loss scale is routine dynamic scaling and does not count; a
loss that stays non-finite falls back bf16/fp16 -> fp32, and at fp32 ends the run with
advice instead of skipping forever.
"""

from __future__ import annotations

import math

from trainer_core.contract.errors import VegaError
from trainer_core.contract.notices import NONFINITE_STOP
from trainer_core.contract.protocol import NonfiniteEvent
from trainer_core.engine.events import EventHub
from trainer_core.engine.precision import NonfiniteTracker
from trainer_core.engine.step import StepOutcome, StepRunner

# Non-finite steps in a row, in multiples of train.nonfinite_patience, after which fp32 gives up.
HOPELESS_PATIENCES = 10


class NonfiniteStop(VegaError):
    """Non-finite steps ended the run; its `error` event carries this code
    (notifications name it)."""

    event_code = NONFINITE_STOP


class NonfiniteGuard:
    """Counts non-finite steps (`tracker`, saved in checkpoints) and changes
    `runner.precision` when due."""

    def __init__(self, tracker: NonfiniteTracker, runner: StepRunner, events: EventHub) -> None:
        self.tracker, self.runner, self.events = tracker, runner, events

    def observe(self, outcome: StepOutcome) -> None:
        if outcome.applied:
            self.tracker.record(True)
        else:
            self._skipped(outcome)

    def _skipped(self, o: StepOutcome) -> None:
        precision = self.runner.precision
        scaler = precision.scaler
        loss_bad = not math.isfinite(o.loss)
        # fp16 overflow with a healthy scale is routine dynamic scaling, not a precision problem.
        counts = loss_bad or not scaler.is_enabled() or scaler.get_scale() < 1.0
        fall_back = self.tracker.record(False) if counts else False
        action = "skipped step" + (
            f"; loss scale now {scaler.get_scale():g}" if scaler.is_enabled() else ""
        )
        # Reported in the precision the step ran in, before any fallback.
        ran_in, consecutive = precision.name, self.tracker.consecutive
        if fall_back:
            action += self._fall_back()
        self.events.emit(
            NonfiniteEvent(
                step=self.runner.state.step + 1,
                action=action,
                consecutive=consecutive,
                precision=ran_in,
            )
        )
        if (
            consecutive >= HOPELESS_PATIENCES * self.tracker.patience
            and self.runner.precision.fallback() is None
        ):
            # Without this a loss that is always NaN would skip steps, and consume data, forever.
            raise NonfiniteStop(
                f"the loss or gradients were non-finite in {consecutive} steps in a row at"
                f" {self.runner.precision.name}, with no safer precision left; lower train.lr,"
                " check the data, or resume from an earlier checkpoint"
            )

    def _fall_back(self) -> str:
        safer = self.runner.precision.fallback()
        if safer is None:
            return "; already fp32, nothing safer to fall back to"
        old, self.runner.precision = self.runner.precision.name, safer
        self.tracker.reset()
        self.events.warn(
            f"falling back from {old} to {safer.name} after repeated non-finite steps",
            code="precision_fallback",
        )
        return f"; falling back from {old} to {safer.name}"
