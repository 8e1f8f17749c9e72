"""Overtraining: the validation loss rises several evaluations in a row
while the training loss falls.

The model is then learning its training clips by heart; the checkpoint to keep is the best one
already saved. `OvertrainingWatch` decides on a sequence of (validation loss, mean training loss of
the interval before it); `OvertrainingDetector` listens to the trainer's own events and, once per
episode (an episode ends when the validation loss reaches a new best), emits an `overtraining` event
naming the best checkpoint (best.json).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from trainer_core.contract.protocol import Event, OvertrainingEvent, StepEvent, ValidationEvent
from trainer_core.contract.units import format_number
from trainer_core.engine.checkpoint_manager import read_best
from trainer_core.engine.events import NO_EVENT, EventHub

log = logging.getLogger("trainer_core")


@dataclass(frozen=True)
class Rise:
    """The evidence: validation losses from before the rise to now, and the
    training means beside them."""

    val_losses: list[float]
    train_losses: list[float]


class OvertrainingWatch:
    """Fed each validation in order; `add` returns a Rise the first time `evals` rises in a row meet
    a falling training loss, then nothing until the validation loss beats its best again."""

    def __init__(self, evals: int) -> None:
        self.evals = evals
        self._vals: list[float] = []
        self._trains: list[float | None] = []
        self._best = math.inf
        self._fired = False

    def add(self, val_loss: float | None, train_mean: float | None) -> Rise | None:
        if val_loss is None or not math.isfinite(val_loss):
            return None  # a validation without a finite loss says nothing either way
        if val_loss < self._best:
            self._best, self._fired = val_loss, False  # a new best ends the episode
        self._vals = [*self._vals, val_loss][-(self.evals + 1) :]
        self._trains = [*self._trains, train_mean][-(self.evals + 1) :]
        if self._fired or self.evals < 1 or len(self._vals) <= self.evals:
            return None
        if not all(later > earlier for earlier, later in pairwise(self._vals)):
            return None
        trains = [t for t in self._trains if t is not None and math.isfinite(t)]
        if len(trains) < 2 or trains[-1] >= trains[0]:
            return None  # both rising is divergence, not overtraining
        self._fired = True
        return Rise(list(self._vals), trains)


class OvertrainingDetector:
    """An EventHub listener: training losses summed per interval, each
    validation through the watch."""

    def __init__(self, evals: int, hub: EventHub, checkpoints: Path) -> None:
        self.watch, self.hub, self.checkpoints = OvertrainingWatch(evals), hub, checkpoints
        self._sum, self._count = 0.0, 0

    def on_event(self, event: Event) -> None:
        if isinstance(event, StepEvent):
            losses = event.loss_series if event.step_series else [event.loss]
            for loss in losses:
                if loss is not None and math.isfinite(loss):
                    self._sum, self._count = self._sum + loss, self._count + 1
        elif isinstance(event, ValidationEvent):
            mean = self._sum / self._count if self._count else None
            self._sum, self._count = 0.0, 0
            rise = self.watch.add(event.loss, mean)
            if rise is not None:
                self.hub.emit(self._event(event.step, rise))

    def _event(self, step: int, rise: Rise) -> OvertrainingEvent:
        best = read_best(self.checkpoints)
        best_step = best.get("step") if best and isinstance(best.get("step"), int) else None
        best_path = str(self.checkpoints / best["path"]) if best_step is not None and best else None
        vals, trains = rise.val_losses, rise.train_losses
        keep = (
            f"the best checkpoint is step {best_step}: {best_path}"
            if best_path
            else "no best checkpoint yet"
        )
        message = (
            f"validation loss rose {len(vals) - 1} evaluations in a row ({format_number(vals[0])}"
            f" -> {format_number(vals[-1])}) while the training loss fell"
            f" ({format_number(trains[0])} -> {format_number(trains[-1])}): the model is learning"
            f" its training clips by heart; {keep} (train.early_stopping_patience ends such runs by"
            " itself)"
        )
        log.warning("%s", message, extra={NO_EVENT: True})
        return OvertrainingEvent(
            step=step,
            evaluations=len(vals) - 1,
            val_losses=vals,
            train_losses=trains,
            best_step=best_step,
            best_path=best_path,
            message=message,
        )
