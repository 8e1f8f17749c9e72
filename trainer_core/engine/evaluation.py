"""Validation, samples, best-model tracking and early stopping: the Trainer's evaluation component.

Under DDP each rank evaluates its round-robin share of the validation batches and the sums are added
over ranks, so every rank sees the same validation loss and takes the same best-model and
early-stopping decisions; rank 0 alone writes samples.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import torch

from trainer_core.contract.profile import Profile
from trainer_core.contract.protocol import (
    BestModelEvent,
    FreeRunningEvent,
    FreeRunningItem,
    Phase,
    PhaseEvent,
    SampleEvent,
    ValidationEvent,
)
from trainer_core.engine.budget import PASS_SHARE, PassAllowance
from trainer_core.engine.checkpoint_manager import remove_temp_leftovers
from trainer_core.engine.checkpointer import Checkpointer
from trainer_core.engine.distributed import reduce_sums
from trainer_core.engine.events import NO_EVENT, EventHub
from trainer_core.engine.faults import eval_sleep_s, eval_unbudgeted, hold_at
from trainer_core.engine.loop_state import LoopState
from trainer_core.engine.run_length import RunLength
from trainer_core.engine.step import StepRunner
from trainer_core.engine.task_contract import (
    END,
    TaskCall,
    TaskError,
    as_iterator,
    check_losses,
    check_metrics,
    check_samples,
    check_val_batch,
    next_item,
)
from trainer_core.engine.telemetry import Telemetry
from trainer_core.models.base import Batch, Task, batch_to, unwrap_model
from trainer_core.models.free_running import FreeRunningResult
from trainer_core.world import World

log = logging.getLogger("trainer_core")


class Evaluator:
    """Validates the model the step runner trains; a new best is
    checkpointed through `checkpointer`."""

    def __init__(
        self,
        profile: Profile,
        task: Task,
        runner: StepRunner,
        state: LoopState,
        world: World,
        events: EventHub,
        run_dir: Path,
        checkpointer: Checkpointer,
        telemetry: Telemetry,
        run_length: RunLength,
    ) -> None:
        self.profile, self.task, self.runner, self.state, self.world = (
            profile,
            task,
            runner,
            state,
            world,
        )
        self.events, self.run_dir, self.checkpointer = events, run_dir, checkpointer
        self.telemetry, self.run_length = telemetry, run_length
        self.last_val_step = -1
        self.last_free_step = -1
        self.validations = 0  # after training started: what free_running_every counts
        self._reference_scores: dict[str, float] | None = None
        self._passed_reference = False
        self._swept_samples = False  # a killed writer's temp files in samples/: removed once
        # Seconds of this validation's one-off work (the reference, the
        # floor) and free-running pass.
        self._once_s = self._free_s = 0.0
        self._free_cost_known = False
        budget = run_length.budget
        self._allowance = PassAllowance(budget.target_s if budget is not None else None)
        self._share_said = False

    @property
    def module(self) -> torch.nn.Module:
        return unwrap_model(self.runner.model)

    def validate(self, final: bool = False) -> float | None:
        """Mean validation losses, metrics, samples, the free-running score when due (always when
        `final`); saves a best checkpoint on improvement."""
        started = time.perf_counter()
        self._once_s = self._free_s = 0.0
        try:
            return self._validate(final)
        finally:
            # The budget keeps room for the last validation and free-running pass, as last measured;
            # one-off work (the reference, the floor) is not what the next one costs.
            spent = time.perf_counter() - started - self._once_s
            self.run_length.exclude(spent + self._once_s)
            if not eval_unbudgeted():
                self._budget_for(spent - self._free_s, self._free_s)
            self._phase("finishing" if final else "training")

    def _budget_for(self, validate_s: float, free_s: float) -> None:
        """Keep room for the last validation and pass, and plan the ones to come between steps."""
        self.run_length.note_end_cost("validate", validate_s)
        self.run_length.note_recurring("validate", validate_s)
        if free_s:
            self.run_length.note_end_cost("free_running", free_s)
            self.run_length.note_recurring(
                "free_running", free_s, self.profile.train.free_running_every
            )

    def finish(self) -> None:
        """At the end of a run whose last validation was at this step: its
        free-running score, if it had none."""
        if (
            self.state.step > 0
            and self.last_free_step != self.state.step
            and self._free_running_on()
        ):
            distance = self._free_running()
            if distance is not None and self.profile.train.select_best_by == "free_running":
                self._track_best(distance, self.checkpointer.val_loss)
        if self.state.step > 0:
            self._phase("finishing")

    @torch.no_grad()
    def _validate(self, final: bool) -> float | None:
        self.telemetry.flush()
        self.last_val_step = self.state.step
        if self.state.step > 0:
            self.validations += 1
        hold_at("validation")
        self._phase("validating")
        time.sleep(eval_sleep_s())  # 0 unless a drill makes evaluation slow
        self._estimate_free_running()
        means = self._mean_val_losses()
        if self.world.is_main:
            self._phase("sampling")
            self.make_samples()
        distance = self._free_running() if self._free_running_due(final) else None
        if means is None:
            return None
        with TaskCall(self.task, "val_metrics"):
            metrics = self.task.val_metrics(means)
        metrics = check_metrics(self.task, metrics)
        self.checkpointer.val_loss = means["total"]
        self.events.emit(self._validation_event(means, metrics))
        # the untrained baseline is a reference point, not a model worth keeping
        if self.state.step > 0:
            if self.profile.train.select_best_by == "val_loss":
                self._track_best(means["total"], means["total"])
            elif distance is not None:
                self._track_best(distance, means["total"])
        return means["total"]

    def _validation_event(
        self, means: dict[str, float], metrics: dict[str, float]
    ) -> ValidationEvent:
        metric_name, metric_value = next(iter(metrics.items()), (None, None))
        reference = self._reference()
        line = reference.get(metric_name) if metric_name is not None else None
        passes = line is not None and metric_value is not None and metric_value < line
        if passes and self.state.step > 0 and not self._passed_reference:
            self._passed_reference = True
            log.info(
                "step %d: %s %.4g passes %s's %.4g",
                self.state.step,
                metric_name,
                metric_value,
                self.task.reference_name(),
                line,
            )
        return ValidationEvent(
            step=self.state.step,
            epoch=self.state.epoch,
            loss=means["total"],
            losses=means,
            metrics=metrics,
            metric_name=metric_name,
            metric_value=metric_value,
            reference=reference,
            reference_name=self.task.reference_name() if reference else None,
        )

    def _reference(self) -> dict[str, float]:
        """The task's reference scores (rank 0 computes them once), logged the first time."""
        if self._reference_scores is None:
            started = time.perf_counter()
            self._reference_scores = (
                self.task.reference_scores() if self.world.is_main else None
            ) or {}
            self._once_s += time.perf_counter() - started
            if self._reference_scores:
                figures = ", ".join(
                    f"{name} {value:.4g}" for name, value in self._reference_scores.items()
                )
                log.info(
                    "%s on the held-out clips (the line to beat): %s",
                    self.task.reference_name(),
                    figures,
                )
        return self._reference_scores

    def _free_running_on(self) -> bool:
        return self.profile.train.free_running_every > 0 and self.task.speaks()

    def _free_running_due(self, final: bool) -> bool:
        every = self.profile.train.free_running_every
        due = final or (self.validations > 0 and self.validations % max(every, 1) == 0)
        if not (self.state.step > 0 and due and self._free_running_on()):
            return False
        return final or self._within_share()

    def _within_share(self) -> bool:
        """With a time budget, passes before the last stay within their
        share of it (rank 0 decides)."""
        room = self._allowance.room()
        shared, _ = reduce_sums(
            self.world, {"skip": float(not room)} if self.world.is_main else {}, 0
        )
        if not shared.get("skip"):
            return True
        if not self._share_said and self.world.is_main:
            self._share_said = True
            log.info(
                "step %d: free-running passes before the last are kept within %g %% of the time"
                " budget (train.target_hours); the last pass still runs",
                self.state.step,
                PASS_SHARE * 100,
            )
        return False

    def _phase(self, phase: Phase, done: int | None = None, total: int | None = None) -> None:
        """Tell viewers what happens between steps (the status line shows it instead of an ETA)."""
        if self.world.is_main:
            self.events.emit(PhaseEvent(step=self.state.step, phase=phase, done=done, total=total))

    def _estimate_free_running(self) -> None:
        """Before the first pass: what one will cost (the floor's time), for
        the budget's reserve."""
        if self._free_cost_known or not self._free_running_on() or not self.world.is_main:
            return
        self._free_cost_known = True
        started = time.perf_counter()
        estimate = self.task.free_running_estimate()
        self._once_s += time.perf_counter() - started
        if estimate is not None:
            self._allowance.note_estimate(estimate)
        if estimate is not None and not eval_unbudgeted():
            self.run_length.note_end_cost("free_running", estimate)
            every = self.profile.train.free_running_every
            self.run_length.note_recurring("free_running", estimate, every)

    def _free_running(self) -> float | None:
        """Score the held-out sentences on rank 0 and share the distance, so
        every rank picks the same best."""
        self.last_free_step = self.state.step
        self.task.report_progress = lambda done, total: self._phase("free_running", done, total)
        result = self.task.free_running(self.module) if self.world.is_main else None
        if result is not None:
            self._free_cost_known = True
            self._free_s += result.seconds - result.floor_seconds
            self._allowance.note_pass(result.seconds - result.floor_seconds)
            self._once_s += result.floor_seconds
            self.events.emit(free_running_event(self.state.step, result))
        mine = {"distance": result.scores.summary().distance} if result is not None else {}
        shared, count = reduce_sums(self.world, mine, 1 if result is not None else 0)
        return shared["distance"] / count if count else None

    def _mean_val_losses(self) -> dict[str, float] | None:
        """Item-weighted mean of each loss over the validation set; None
        when nothing is held out."""
        model = self.module  # no DDP forward: evaluation needs no gradient sync
        device = self.runner.device
        model.eval()
        sums: dict[str, float] = {}
        items = 0
        try:
            for batch in self._val_batches():
                # Weight by batch size: the last validation batch may be smaller.
                n = next(iter(batch.values())).shape[0]
                batch = batch_to(batch, device, non_blocking=device.type == "cuda")
                with self.runner.precision.autocast(), TaskCall(self.task, "compute_losses"):
                    losses = self.task.compute_losses(model, batch)
                losses = check_losses(self.task, "compute_losses", losses, training=False)
                for name, value in losses.items():
                    sums[name] = sums.get(name, 0.0) + float(value) * n
                items += n
        finally:
            model.train()
        sums, items = reduce_sums(self.world, sums, items)
        return {k: v / items for k, v in sums.items()} if items else None

    def _val_batches(self) -> Iterator[Batch]:
        """The task's validation batches, each fetched inside the task boundary and checked."""
        with TaskCall(self.task, "val_batches"):
            made = self.task.val_batches(self.state.micro_batch)
        source = as_iterator(self.task, "val_batches", made)
        while (batch := next_item(self.task, "val_batches", source)) is not END:
            yield check_val_batch(self.task, batch, source)

    def _track_best(self, score: float, val_loss: float | None) -> None:
        """`score` is what train.select_best_by names; lower is better."""
        s = self.state
        if s.best_val is None or score < s.best_val:
            s.best_val, s.evals_since_best = score, 0
            saved = self.checkpointer.save(is_best=True)
            if saved is not None:
                by = self.profile.train.select_best_by
                event = BestModelEvent(
                    step=s.step, path=str(saved), val_loss=val_loss, selected_by=by, score=score
                )
                self.events.emit(event)
        else:
            s.evals_since_best += 1

    def early_stop_due(self) -> bool:
        patience = self.profile.train.early_stopping_patience
        return patience is not None and self.state.evals_since_best >= patience

    def make_samples(self) -> None:
        """Samples, then pictures; a failure in either is a warning and
        training goes on (the model is fine)."""
        hold_at("sampling")
        out_dir = self.run_dir / "samples"
        if not self._swept_samples:
            self._swept_samples = True
            for folder in (out_dir, *out_dir.glob("step-*")):
                remove_temp_leftovers(folder)
        model = self.module
        model.eval()
        try:
            # the sounds are announced before pictures
            for method in ("make_samples", "make_views"):
                try:
                    with TaskCall(self.task, method):
                        made = getattr(self.task, method)(model, out_dir, self.state.step)
                    samples = check_samples(self.task, method, made)
                except TaskError as exc:
                    self._samples_failed(exc)
                    continue
                for sample in samples:
                    self.events.emit(
                        SampleEvent(
                            step=self.state.step,
                            kind=sample.kind,
                            path=str(sample.path),
                            text=sample.text,
                        )
                    )
        finally:
            model.train()

    def _samples_failed(self, exc: TaskError) -> None:
        """A warning event naming the task's line; the traceback goes to trainer.log only."""
        what = "samples" if exc.method == "make_samples" else "pictures"
        cause = exc.__cause__ or exc
        log.warning(
            "%s", "".join(traceback.format_exception(cause)).rstrip(), extra={NO_EVENT: True}
        )
        self.events.warn(
            f"{exc}; no {what} at step {self.state.step}, training goes on",
            code=f"{exc.method}_failed",
        )


def free_running_event(step: int, result: FreeRunningResult) -> FreeRunningEvent:
    summary, floor = result.scores.summary(), result.floor.summary()
    return FreeRunningEvent(
        step=step,
        items=len(result.scores.items),
        distance=summary.distance,
        duration_ratio=summary.duration_ratio,
        vuv_agreement=summary.vuv_agreement,
        acoustic_distance=summary.acoustic_distance,
        f0_error_cents=summary.f0_error_cents,
        floor_distance=floor.distance,
        floor_vuv_agreement=floor.vuv_agreement,
        floor_f0_error_cents=floor.f0_error_cents,
        vocoder=result.vocoder,
        seconds=result.seconds,
        per_item=[FreeRunningItem(**vars(item)) for item in result.scores.items],
    )
