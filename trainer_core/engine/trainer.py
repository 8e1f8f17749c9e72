"""The Trainer: components with one job each, composed by a short `fit` loop.

- `StepRunner` (engine.step): one optimizer step, OOM retry;
  `GroupedStepRunner` (engine.group_step) when the
  task declares several optimizer groups (a discriminator, then a generator);
- `NonfiniteGuard` (engine.nonfinite_guard): skipped steps and precision fallback;
- `RunLength` (engine.run_length): the schedule's length and warmup, the time budget;
- `Telemetry` (engine.telemetry): step and profile events, the ETA;
- `MemoryGuard` (engine.memory_guard): memory against its budget; releases,
  shrinks the micro-batch, pauses;
- `Checkpointer` (engine.checkpointer): save and exact restore;
- `Evaluator` (engine.evaluation): validation, samples, best model, early stopping;
- `Controller` (engine.control_state): pause, resume, save, evaluate, stop (agreed over ranks under
  DDP). Set-up (device, task, precision) happens in `engine.setup`. Under torchrun every rank runs
  this same loop on its slice of each global batch; rank 0 alone writes events and checkpoints.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from trainer_core.contract.profile import Profile
from trainer_core.contract.protocol import EpochEndEvent, EpochStartEvent, FinishedStatus
from trainer_core.engine.checkpoint_manager import CheckpointManager, read_best
from trainer_core.engine.checkpointer import Checkpointer, plain_config
from trainer_core.engine.control_state import Controller, ControlState
from trainer_core.engine.distributed import share_initial_weights, wrap_model
from trainer_core.engine.evaluation import Evaluator
from trainer_core.engine.events import EventHub
from trainer_core.engine.faults import FaultInjector
from trainer_core.engine.group_step import GroupedStepRunner
from trainer_core.engine.loop_state import LoopState
from trainer_core.engine.memory_guard import MemoryGuard
from trainer_core.engine.memory_manager import MemoryManager
from trainer_core.engine.nonfinite_guard import NonfiniteGuard
from trainer_core.engine.optimizers import task_groups
from trainer_core.engine.precision import NonfiniteTracker, PrecisionPolicy
from trainer_core.engine.profiler import StepProfiler
from trainer_core.engine.run_length import RunLength
from trainer_core.engine.step import StepOutcome, StepRunner
from trainer_core.engine.task_contract import TaskCall
from trainer_core.engine.telemetry import StepRecord, Telemetry
from trainer_core.models.base import Task, unwrap_model
from trainer_core.world import SINGLE, World

log = logging.getLogger("trainer_core")


class Trainer:
    def __init__(
        self,
        profile: Profile,
        task: Task,
        device: torch.device,
        precision: PrecisionPolicy,
        events: EventHub,
        run_dir: Path,
        profile_toml: str,
        control: ControlState,
        world: World = SINGLE,
    ) -> None:
        self.profile, self.task, self.events, self.world = profile, task, events, world
        self.run_dir, self.profile_toml = run_dir, profile_toml
        t = profile.train
        self.state = LoopState(micro_batch=t.batch_size, grad_accum=t.grad_accum)
        self.run_length = RunLength(profile, self.state, self.steps_per_epoch, world, events)
        model = self._place_model(task, device, world)
        groups = task_groups(
            task, model, profile, device, self.run_length.warmup_steps(), self.state.total_steps
        )
        self.run_length.attach(groups)
        self.memory = MemoryManager(device, profile.memory)
        self.profiler = StepProfiler(device, profile.logging.profile_interval_s)
        faults = FaultInjector(profile.debug)
        # A task that declares groups trains through its group losses even
        # when freezing leaves one group.
        runner = GroupedStepRunner if task.optimizer_groups() else StepRunner
        self.runner = runner(
            task,
            model,
            groups,
            precision,
            self.state,
            device,
            world,
            events,
            self.profiler,
            self.memory,
            faults,
            on_resize=self.run_length.remeasure,
        )
        nonfinite = NonfiniteTracker(t.nonfinite_patience)
        self.guard = NonfiniteGuard(nonfinite, self.runner, events)
        self.memory_guard = MemoryGuard(self.memory, self.runner, control, world, events)
        self.telemetry = Telemetry(
            profile, self.state, world, events, self.memory, self.profiler, self.run_length
        )
        # Rank 0 alone owns the checkpoint folder (the manager also clears
        # half-written files on start).
        manager = CheckpointManager(run_dir, t.keep_last, t.keep_disk_gb) if world.is_main else None
        self.checkpointer = Checkpointer(
            profile,
            profile_toml,
            self.runner,
            self.state,
            nonfinite,
            self.run_length,
            manager,
            world,
            faults,
            events,
        )
        with TaskCall(task, "model_config"):
            self.checkpointer.model_config = plain_config(task.model_config())
        # fit() ended on train.early_stopping_patience (the summary says so)
        self.early_stopped = False
        self.evaluator = Evaluator(
            profile,
            task,
            self.runner,
            self.state,
            world,
            events,
            run_dir,
            self.checkpointer,
            self.telemetry,
            self.run_length,
        )
        self.controller = Controller(
            control,
            self.state,
            world,
            events,
            self.runner,
            self.run_length,
            self.telemetry,
            self.checkpointer,
            self.evaluator,
        )

    @staticmethod
    def _place_model(task: Task, device: torch.device, world: World) -> torch.nn.Module:
        """The model on its device; under torchrun DDP hands rank 0's initial weights to every
        rank. Several optimizer groups skip the DDP wrapper (their runner averages each
        group's gradients) but start alike."""
        module = task.model.to(device)
        if task.optimizer_groups():
            return share_initial_weights(module, world)
        return wrap_model(module, device, world)

    @property
    def module(self) -> torch.nn.Module:
        """The model without its DDP wrapper: what checkpoints, validation,
        samples and exports use."""
        return unwrap_model(self.runner.model)

    def global_batch(self) -> int:
        """Items one optimizer step consumes over all ranks."""
        return self.state.effective_batch * self.world.world_size

    def steps_per_epoch(self) -> int:
        return max(1, self.task.train_items() // self.global_batch())

    def fit(self) -> FinishedStatus:
        """Train until done, stopped or early-stopped; returns the `finished` status."""
        self.runner.model.train()
        self.run_length.announce_warmup()
        if self.profile.train.validate_at_start and self.state.step == 0:
            # the untrained model's validation loss: where the curve starts
            self.evaluator.validate()
        self.telemetry.start()
        while True:
            # Checked before each step too: a stop asked for during set-up
            # ends the run before any work.
            request = self.controller.next_request()
            if request == "finished":
                break
            if request == "stop":
                return self.stop()
            if self.state.item and self._epoch_spent():
                # resumed from a checkpoint saved after an epoch's last full batch, before its end
                self.end_epoch()
            if self.state.item == 0:
                self.events.emit(
                    EpochStartEvent(epoch=self.state.epoch, steps_in_epoch=self.steps_per_epoch())
                )
            self.after_step(self.runner.run())
            if self._epoch_spent():
                self.end_epoch()
            if self.evaluator.early_stop_due():
                self.early_stopped = True
                log.info(
                    "early stopping at step %d: validation loss has not improved for %d evaluations"
                    " (train.early_stopping_patience); the best checkpoint is step %s",
                    self.state.step,
                    self.state.evals_since_best,
                    self.best_step(),
                )
                break
        return self.complete()

    def _epoch_spent(self) -> bool:
        """Fewer items left in the epoch than one global batch: the rest
        waits for the next epoch's order."""
        return self.task.train_items() - self.state.item < self.global_batch()

    def after_step(self, outcome: StepOutcome) -> None:
        """Telemetry, the time budget and periodic validation/checkpoints after one step."""
        self.guard.observe(outcome)
        if outcome.applied:
            self.telemetry.record(self._record(outcome))
        self.memory_guard.observe()
        self.run_length.observe(outcome.items)
        self.telemetry.report_due()
        if outcome.applied:
            self._periodic_eval_and_checkpoint(self.state.step)

    def end_epoch(self) -> None:
        s, t = self.state, self.profile.train
        self.telemetry.flush()
        seconds = time.monotonic() - self.telemetry.started
        self.events.emit(
            EpochEndEvent(epoch=s.epoch, loss=self.telemetry.last_loss, seconds=seconds)
        )
        if t.eval_every_steps is None:  # evaluate once per epoch
            self.evaluator.validate()
        due = (s.epoch + 1) % t.checkpoint_every_epochs == 0
        # not again when validate() just saved a new best
        if due and self.checkpointer.last_save_step != s.step:
            self.checkpointer.save()
        s.epoch, s.item = s.epoch + 1, 0

    def stop(self) -> FinishedStatus:
        """Stop asked for (control socket or signal): report the last steps, save, and end."""
        self.telemetry.flush()
        if self.state.step and not self.checkpointer.saved_at(self.state.step):
            self.checkpointer.save()
        return "stopped"

    def complete(self) -> FinishedStatus:
        """The end of a finished run: a last validation and checkpoint at the final step."""
        self.telemetry.flush()
        if self.state.step and self.evaluator.last_val_step != self.state.step:
            self.evaluator.validate(final=True)
        else:
            self.evaluator.finish()
        if self.state.step and not self.checkpointer.saved_at(self.state.step):
            self.checkpointer.save()
        return "completed"

    def restore(self, checkpoint: dict[str, Any]) -> dict[str, Any]:
        """Resume from a loaded checkpoint: the next step is the one after it was saved."""
        return self.checkpointer.restore(checkpoint)

    def _record(self, o: StepOutcome) -> StepRecord:
        s, scaler = self.state, self.runner.precision.scaler
        return StepRecord(
            step=s.step,
            epoch=s.epoch,
            loss=o.loss,
            losses=o.losses,
            lr=o.lr,
            grad_norm=o.grad_norm,
            loss_scale=scaler.get_scale() if scaler.is_enabled() else None,
            items=o.items,
            seconds=self.runner.step_s,
            data_seconds=self.runner.data_s,
            micro_batch=s.micro_batch,
            grad_accum=s.grad_accum,
            lrs=o.lrs,
        )

    def _periodic_eval_and_checkpoint(self, step: int) -> None:
        t = self.profile.train
        if t.eval_every_steps and step % t.eval_every_steps == 0:
            self.evaluator.validate()
        # A new best at this step was saved by validate(): the same file twice would be wasted I/O.
        if (
            t.checkpoint_every_steps
            and step % t.checkpoint_every_steps == 0
            and self.checkpointer.last_save_step != step
        ):
            self.checkpointer.save()

    def best_step(self) -> int | None:
        """The step of the best checkpoint (best.json), None before there is
        one or on ranks other than 0."""
        manager = self.checkpointer.manager
        record = read_best(manager.folder) if manager is not None else None
        return int(record["step"]) if record and isinstance(record.get("step"), int) else None

    def summary(self) -> dict[str, Any]:
        """Final figures for the `finished` event and session.json
        (`early_stopped`: the patience ended the run)."""
        best = self.checkpointer.manager.best() if self.checkpointer.manager is not None else None
        return {
            "steps": self.state.step,
            "epochs": self.state.epoch,
            "final_loss": self.telemetry.last_loss,
            "val_loss": self.checkpointer.val_loss,
            "best_val_loss": self.state.best_val,
            "best_checkpoint": str(best) if best else None,
            "best_step": self.best_step(),
            "early_stopped": self.early_stopped,
            "micro_batch": self.state.micro_batch,
            "grad_accum": self.state.grad_accum,
            "precision": self.runner.precision.name,
            "world_size": self.world.world_size,
        }
