"""Validation, samples, best-model tracking and early stopping: the evaluation half of the Trainer.

A mixin rather than a separate object because evaluation reads and writes the same loop state the
train loop owns (step, best validation loss, the model's train/eval mode); the Trainer provides the
attributes listed on the class.

Under DDP each rank evaluates its round-robin share of the validation batches and the sums are added over
ranks, so every rank sees the same validation loss and takes the same best-model and early-stopping
decisions; rank 0 alone writes samples.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from trainer_core.engine.distributed import reduce_sums
from trainer_core.models.base import batch_to

if TYPE_CHECKING:
    from trainer_core.contract.profile import Profile
    from trainer_core.engine.budget import TimeBudget
    from trainer_core.engine.events import EventHub
    from trainer_core.engine.loop_state import LoopState
    from trainer_core.engine.precision import PrecisionPolicy
    from trainer_core.models.base import Task
    from trainer_core.world import World

log = logging.getLogger("trainer_core")


class EvaluationMixin:
    """Needs: profile, task, model, module (the model without a DDP wrapper), world, device, precision, events,
    state, run_dir, last_val_loss, budget, flush_telemetry() and save_checkpoint(is_best=...)."""

    profile: Profile
    task: Task
    model: torch.nn.Module
    module: torch.nn.Module
    world: World
    device: torch.device
    precision: PrecisionPolicy
    events: EventHub
    state: LoopState
    run_dir: Path
    last_val_loss: float | None
    budget: TimeBudget | None
    _last_val_step: int

    def validate(self) -> float | None:
        """Mean validation losses, metrics, samples; saves a best checkpoint on improvement."""
        started = time.perf_counter()
        try:
            return self._validate()
        finally:
            if self.budget is not None:
                self.budget.note_end_cost("validate", time.perf_counter() - started)

    @torch.no_grad()
    def _validate(self) -> float | None:
        self.flush_telemetry()
        self._last_val_step = self.state.step
        means = self._mean_val_losses()
        if self.world.is_main:
            self.make_samples()
        if means is None:
            return None
        metrics = self.task.val_metrics(means)
        self.last_val_loss = means["total"]
        metric_name, metric_value = next(iter(metrics.items()), (None, None))
        self.events.emit(
            "validation",
            step=self.state.step,
            epoch=self.state.epoch,
            loss=means["total"],
            losses=means,
            metrics=metrics,
            metric_name=metric_name,
            metric_value=metric_value,
        )
        if self.state.step > 0:  # the untrained baseline is a reference point, not a model worth keeping
            self._track_best(means["total"])
        return means["total"]

    def _mean_val_losses(self) -> dict[str, float] | None:
        """Item-weighted mean of each loss over the validation set; None when nothing is held out."""
        model = self.module  # no DDP forward: evaluation needs no gradient sync
        model.eval()
        sums: dict[str, float] = {}
        items = 0
        try:
            for batch in self.task.val_batches(self.state.micro_batch):
                # Weight by batch size: the last validation batch may be smaller.
                n = next(iter(batch.values())).shape[0]
                batch = batch_to(batch, self.device, non_blocking=self.device.type == "cuda")
                with self.precision.autocast():
                    losses = self.task.compute_losses(model, batch)
                for name, value in losses.items():
                    sums[name] = sums.get(name, 0.0) + float(value) * n
                items += n
        finally:
            model.train()
        sums, items = reduce_sums(self.world, sums, items)
        return {k: v / items for k, v in sums.items()} if items else None

    def _track_best(self, val_loss: float) -> None:
        s = self.state
        if s.best_val is None or val_loss < s.best_val:
            s.best_val, s.evals_since_best = val_loss, 0
            saved = self.save_checkpoint(is_best=True)
            if saved is not None:
                self.events.emit("best_model", step=s.step, path=str(saved), val_loss=val_loss)
        else:
            s.evals_since_best += 1

    def early_stop_due(self) -> bool:
        patience = self.profile.train.early_stopping_patience
        return patience is not None and self.state.evals_since_best >= patience

    def make_samples(self) -> None:
        out_dir = self.run_dir / "samples"
        model = self.module
        model.eval()
        try:
            for sample in self.task.make_samples(model, out_dir, self.state.step):
                self.events.emit(
                    "sample", step=self.state.step, kind=sample.kind, path=str(sample.path), text=sample.text
                )
        finally:
            model.train()
