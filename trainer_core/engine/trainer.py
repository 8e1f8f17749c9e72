"""The train loop: one optimizer step at a time, with OOM retry, non-finite skipping and control.

Set-up (device, task, precision) happens in `engine.run`; this class owns the loop state and the
objects a checkpoint holds (model, optimizer, scheduler, scaler, RNG, data position).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer_core.engine.budget import TimeBudget
from trainer_core.engine.checkpoint import CheckpointManager, check_model_compatible, new_checkpoint_state
from trainer_core.engine.control_state import ControlState
from trainer_core.engine.events import EventHub
from trainer_core.engine.faults import FaultInjector
from trainer_core.engine.loop_state import LoopState, halve_micro_batch
from trainer_core.engine.memory import MemoryManager
from trainer_core.engine.precision import NonfiniteTracker, PrecisionPolicy
from trainer_core.engine.profiler import StepProfiler
from trainer_core.engine.rng import capture_rng_state, restore_rng_state
from trainer_core.engine.schedule import build_lr_scheduler, set_total_steps
from trainer_core.engine.telemetry import StepRecord, StepWindow
from trainer_core.errors import VegaError
from trainer_core.models.base import Task, batch_to
from trainer_core.profile import Profile


@dataclass
class StepOutcome:
    """One optimizer step after its single sync point: plain floats, ready for telemetry."""

    applied: bool
    loss: float
    losses: dict[str, float]
    grad_norm: float
    items: int


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
    ) -> None:
        self.profile, self.task, self.device, self.precision = profile, task, device, precision
        self.events, self.run_dir, self.profile_toml, self.control = events, run_dir, profile_toml, control
        t = profile.train
        self.model = task.model.to(device)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=t.lr, betas=t.betas, weight_decay=t.weight_decay,
            fused=device.type == "cuda",
        )
        self.state = LoopState(micro_batch=t.batch_size, grad_accum=t.grad_accum)
        self.state.total_steps = self._planned_total_steps()
        self.scheduler = build_lr_scheduler(
            self.optimizer, t.schedule, t.warmup_steps, self.state.total_steps, t.restart_period, t.restart_mult
        )
        self.checkpoints = CheckpointManager(run_dir, keep_last=t.keep_last)
        self.memory = MemoryManager(device)
        self.profiler = StepProfiler(device, profile.logging.profile_interval_s)
        self.window = StepWindow(profile.logging.step_interval_s)
        self.nonfinite = NonfiniteTracker(t.nonfinite_patience)
        self.faults = FaultInjector(profile.debug)
        self.budget = TimeBudget(t.target_hours, self.steps_per_epoch()) if t.target_hours else None
        self.last_val_loss: float | None = None
        self._last_val_step = -1
        self._last_loss: float | None = None
        self._data_s = self._step_s = 0.0
        self.started = time.monotonic()

    # ------------------------------------------------------------------ planning

    def steps_per_epoch(self) -> int:
        return max(1, self.task.train_items() // self.state.effective_batch)

    def _planned_total_steps(self) -> int:
        t = self.profile.train
        if t.max_steps is not None:
            return t.max_steps
        return max(t.warmup_steps + 1, t.epochs * self.steps_per_epoch())

    def finished(self) -> bool:
        if self.budget is not None:
            return self.budget.out_of_time() and self.state.step > 0
        return self.state.step >= self.state.total_steps

    # ------------------------------------------------------------------ the loop

    def fit(self) -> str:
        """Train until done, stopped or early-stopped; returns the `finished` status."""
        self.model.train()
        while not self.finished():
            if self.state.item == 0:
                self.events.emit("epoch_start", epoch=self.state.epoch, steps_in_epoch=self.steps_per_epoch())
            outcome = self.train_step()
            self.after_step(outcome)
            if self.remaining_items() < self.state.effective_batch:
                self.end_epoch()
            if self.handle_requests() == "stop":
                self.save_checkpoint()
                return "stopped"
            if self.early_stop_due():
                self.events.emit("log", level="info", message="early stopping: validation loss stopped improving")
                break
        self.flush_telemetry()
        if self.state.step and self._last_val_step != self.state.step:
            self.validate()
        if self.state.step and not self.checkpoints.path_for(self.state.step).exists():
            self.save_checkpoint()
        return "completed"

    def remaining_items(self) -> int:
        return self.task.train_items() - self.state.item

    def end_epoch(self) -> None:
        s = self.state
        self.flush_telemetry()
        self.events.emit("epoch_end", epoch=s.epoch, loss=self._last_loss, seconds=time.monotonic() - self.started)
        eval_each_epoch = self.profile.train.eval_every_steps is None
        if eval_each_epoch:
            self.validate()
        if (s.epoch + 1) % self.profile.train.checkpoint_every_epochs == 0:
            self.save_checkpoint()
        s.epoch, s.item = s.epoch + 1, 0

    # ------------------------------------------------------------------ one step

    def train_step(self) -> StepOutcome:
        """One optimizer step; on out-of-memory, halve the micro-batch and retry the same items."""
        while True:
            try:
                return self._attempt_step()
            except torch.OutOfMemoryError as exc:
                message = str(exc).splitlines()[0] if str(exc) else "out of memory"
            # Recover outside the except block: the traceback pins the failed step's tensors.
            self._recover_from_oom(message)

    def _attempt_step(self) -> StepOutcome:
        s, t0 = self.state, time.perf_counter()
        step_no = s.step + 1
        self.optimizer.zero_grad(set_to_none=True)
        batches = iter(self.task.train_batches(s.epoch, s.micro_batch, start_item=s.item))
        total = torch.zeros((), device=self.device)
        parts: dict[str, torch.Tensor] = {}
        items = data_s = 0
        for _ in range(s.grad_accum):
            d0 = time.perf_counter()
            with self.profiler.phase("data"):
                batch, n = next(batches)
            data_s += time.perf_counter() - d0
            with self.profiler.phase("transfer"):
                batch = batch_to(batch, self.device, non_blocking=self.device.type == "cuda")
            with self.profiler.phase("forward"), self.precision.autocast():
                self.faults.before_forward(step_no)
                losses = self.task.compute_losses(self.model, batch)
                loss = self.faults.poison_loss(step_no, losses["total"]) / s.grad_accum
            with self.profiler.phase("backward"):
                self.precision.scaler.scale(loss).backward()
            total += loss.detach().float()
            for name, value in losses.items():
                parts[name] = parts.get(name, 0.0) + value.detach().float() / s.grad_accum
            items += n
        outcome = self._optimizer_step(total, parts, items)
        s.item += items
        self._data_s, self._step_s = data_s, time.perf_counter() - t0
        return outcome

    def _optimizer_step(self, total: torch.Tensor, parts: dict, items: int) -> StepOutcome:
        scaler = self.precision.scaler
        with self.profiler.phase("optimizer"):
            scaler.unscale_(self.optimizer)
            clip = self.profile.train.grad_clip or float("inf")
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            # The one sync point per step: loss and grad norm come to the host together.
            values = torch.stack([total, grad_norm.float(), *[p.float() for p in parts.values()]]).tolist()
            loss, norm = values[0], values[1]
            finite = math.isfinite(loss) and math.isfinite(norm)
            if finite or scaler.is_enabled():
                scaler.step(self.optimizer)  # a scaler skips the step itself on inf/NaN gradients
            scaler.update()
            if finite:
                self.scheduler.step()
                self.state.step += 1
        self.profiler.step_done()
        return StepOutcome(finite, loss, dict(zip(parts, values[2:])), norm, items)

    def _recover_from_oom(self, message: str) -> None:
        s = self.state
        self.optimizer.zero_grad(set_to_none=True)
        action = self.memory.release()
        smaller = halve_micro_batch(s.micro_batch, s.grad_accum)
        if smaller is None:
            raise VegaError(
                f"out of memory at step {s.step + 1} even with micro-batch 1 ({message}); "
                "use a smaller model (model.hidden, model.*_layers) or a GPU with more free memory"
            )
        s.micro_batch, s.grad_accum = smaller
        if self.budget is not None:
            self.budget.remeasure()
        self.events.emit(
            "oom_recovered", step=s.step + 1, micro_batch=s.micro_batch, grad_accum=s.grad_accum,
            message=f"{message}; freed memory ({action}), retrying the step",
        )

    # ------------------------------------------------------------------ after each step

    def after_step(self, outcome: StepOutcome) -> None:
        s = self.state
        if not outcome.applied:
            self._handle_nonfinite(outcome)
        else:
            self.nonfinite.record(True)
            self._last_loss = outcome.loss
            self.window.add(self._record(outcome))
        change = self.memory.observe()
        if change is not None:
            self.events.emit("memory", level=change.level, used_frac=change.used_frac, action=change.action)
        self._observe_budget(outcome.items)
        if self.window.due():
            self.flush_telemetry()
        if self.profiler.due():
            self.events.emit("profile_breakdown", **self.profiler.flush())
        if outcome.applied:
            self._periodic_eval_and_checkpoint(s.step)

    def _record(self, o: StepOutcome) -> StepRecord:
        s = self.state
        scale = self.precision.scaler.get_scale() if self.precision.scaler.is_enabled() else None
        return StepRecord(
            step=s.step, epoch=s.epoch, loss=o.loss, losses=o.losses, lr=self.optimizer.param_groups[0]["lr"],
            grad_norm=o.grad_norm, loss_scale=scale, items=o.items, seconds=self._step_s,
            data_seconds=self._data_s, micro_batch=s.micro_batch, grad_accum=s.grad_accum,
        )

    def flush_telemetry(self) -> None:
        fields = self.window.flush()
        if fields is None:
            return
        fields["mem_device_bytes"] = self.memory.device_bytes()
        fields["eta_s"] = self.eta_s()
        self.events.emit("step", **fields)

    def eta_s(self) -> float | None:
        if self.budget is not None:
            return self.budget.eta_s(self.state.step)
        done = self.state.step
        if done == 0:
            return None
        rate = done / max(1e-9, time.monotonic() - self.started)
        return (self.state.total_steps - done) / rate

    def _handle_nonfinite(self, o: StepOutcome) -> None:
        scaler = self.precision.scaler
        loss_bad = not math.isfinite(o.loss)
        # fp16 overflow with a healthy scale is routine dynamic scaling, not a precision problem.
        counts = loss_bad or not scaler.is_enabled() or scaler.get_scale() < 1.0
        fall_back = self.nonfinite.record(False) if counts else False
        action = "skipped step" + (f"; loss scale now {scaler.get_scale():g}" if scaler.is_enabled() else "")
        if fall_back:
            action += self._fall_back_precision()
        self.events.emit(
            "nonfinite", step=self.state.step + 1, action=action,
            consecutive=self.nonfinite.consecutive, precision=self.precision.name,
        )

    def _fall_back_precision(self) -> str:
        safer = self.precision.fallback()
        if safer is None:
            return "; already fp32, nothing safer to fall back to"
        old, self.precision = self.precision.name, safer
        self.nonfinite.reset()
        self.events.emit("warning", code="precision_fallback", message=f"falling back from {old} to {safer.name}")
        return f"; falling back from {old} to {safer.name}"

    def _observe_budget(self, items: int) -> None:
        if self.budget is None:
            return
        plan = self.budget.observe(self.state.step, items)
        if plan is None:
            return
        self.state.total_steps = plan.total_steps
        set_total_steps(self.scheduler, plan.total_steps)
        self.events.emit(
            "calibration", samples_per_s=plan.samples_per_s, planned_epochs=plan.planned_epochs,
            planned_steps=plan.total_steps, target_hours=self.profile.train.target_hours,
        )

    def _periodic_eval_and_checkpoint(self, step: int) -> None:
        t = self.profile.train
        if t.eval_every_steps and step % t.eval_every_steps == 0:
            self.validate()
        if t.checkpoint_every_steps and step % t.checkpoint_every_steps == 0:
            self.save_checkpoint()

    # ------------------------------------------------------------------ evaluation

    @torch.no_grad()
    def validate(self) -> float | None:
        """Mean validation losses, metrics, samples; saves a best checkpoint on improvement."""
        self.flush_telemetry()
        self._last_val_step = self.state.step
        self.model.eval()
        sums: dict[str, float] = {}
        items = 0
        for batch in self.task.val_batches(self.state.micro_batch):
            # Weight by batch size: the last validation batch may be smaller.
            n = next(iter(batch.values())).shape[0]
            batch = batch_to(batch, self.device, non_blocking=self.device.type == "cuda")
            with self.precision.autocast():
                losses = self.task.compute_losses(self.model, batch)
            for name, value in losses.items():
                sums[name] = sums.get(name, 0.0) + float(value) * n
            items += n
        self.model.train()
        self.make_samples()
        if items == 0:
            return None
        means = {k: v / items for k, v in sums.items()}
        metrics = self.task.val_metrics(means)
        self.last_val_loss = means["total"]
        metric_name, metric_value = next(iter(metrics.items()), (None, None))
        self.events.emit(
            "validation", step=self.state.step, epoch=self.state.epoch, loss=means["total"], losses=means,
            metrics=metrics, metric_name=metric_name, metric_value=metric_value,
        )
        self._track_best(means["total"])
        return means["total"]

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
        self.model.eval()
        for sample in self.task.make_samples(self.model, out_dir, self.state.step):
            self.events.emit("sample", step=self.state.step, kind=sample.kind, path=str(sample.path), text=sample.text)
        self.model.train()

    # ------------------------------------------------------------------ control

    def handle_requests(self) -> str | None:
        """Act on commands queued by the socket or signals; returns "stop" when the run must end."""
        for cmd in self.control.drain():
            if cmd == "stop":
                return "stop"
            if cmd == "pause" and not self.control.paused:
                self.control.paused = True
                self.flush_telemetry()
                self.events.emit("paused", step=self.state.step)
                return self._wait_while_paused()
            self._run_command(cmd)
        return None

    def _run_command(self, cmd: str) -> None:
        if cmd == "save":
            self.save_checkpoint()
        elif cmd == "evaluate":
            self.validate()
        elif cmd == "resume" and self.control.paused:
            self.control.paused = False
            self.events.emit("resumed", step=self.state.step)

    def _wait_while_paused(self) -> str | None:
        paused_at = time.monotonic()
        while self.control.paused:
            for cmd in self.control.drain():
                if cmd == "stop":
                    return "stop"
                self._run_command(cmd)
            time.sleep(0.05)
        # Time spent paused is not training time: keep ETA and the time budget honest.
        pause = time.monotonic() - paused_at
        self.started += pause
        if self.budget is not None:
            self.budget.started += pause
        return None

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_state(self) -> dict:
        s = self.state
        scaler = self.precision.scaler
        return new_checkpoint_state(
            model=self.model.state_dict(), step=s.step, epoch=s.epoch, rng=capture_rng_state(),
            optimizer=self.optimizer.state_dict(), scheduler=self.scheduler.state_dict(),
            scaler=scaler.state_dict() if scaler.is_enabled() else None,
            data_position={"epoch": s.epoch, "item": s.item}, profile_toml=self.profile_toml,
            precision=self.precision.name, micro_batch=s.micro_batch, grad_accum=s.grad_accum,
            val_loss=self.last_val_loss,
            extra={"loop": s.state_dict(), "nonfinite": self.nonfinite.state_dict()},
        )

    def save_checkpoint(self, is_best: bool = False) -> Path | None:
        """Save now; a failed write is reported and training goes on (the previous file is intact)."""
        if self.state.step == 0:
            return None
        from trainer_core.engine.checkpoint import CheckpointError

        try:
            saved = self.checkpoints.save(
                self.checkpoint_state(), self.state.step, val_loss=self.last_val_loss, is_best=is_best,
                hold_s=self.profile.debug.hold_checkpoint_write_s,
            )
        except CheckpointError as exc:
            self.events.emit("error", message=str(exc))
            return None
        self.events.emit(
            "checkpoint_saved", step=self.state.step, epoch=self.state.epoch, path=str(saved.path),
            bytes=saved.bytes, val_loss=self.last_val_loss, seconds=saved.seconds,
        )
        for warning in saved.warnings:
            self.events.emit("warning", message=warning)
        return saved.path

    def restore(self, state: dict) -> dict:
        """Load a checkpoint's states so the next step is exactly the one after it was saved."""
        check_model_compatible(self.model, state["model"])
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if state.get("scaler") and self.precision.scaler.is_enabled():
            self.precision.scaler.load_state_dict(state["scaler"])
        self.state.load_state_dict(state["extra"]["loop"])
        self.nonfinite.load_state_dict(state["extra"].get("nonfinite", {}))
        set_total_steps(self.scheduler, self.state.total_steps)
        self.last_val_loss = state.get("val_loss")
        for note in restore_rng_state(state["rng"]):
            self.events.emit("warning", code="rng_not_restored", message=note)
        return {
            "step": self.state.step, "epoch": self.state.epoch, "item": self.state.item,
            "lr": self.optimizer.param_groups[0]["lr"],
            "loss_scale": self.precision.scaler.get_scale() if self.precision.scaler.is_enabled() else None,
        }

    def summary(self) -> dict:
        """Final figures for the `finished` event and session.json."""
        best = self.checkpoints.best()
        return {
            "steps": self.state.step,
            "epochs": self.state.epoch,
            "final_loss": self._last_loss,
            "val_loss": self.last_val_loss,
            "best_val_loss": self.state.best_val,
            "best_checkpoint": str(best) if best else None,
            "micro_batch": self.state.micro_batch,
            "grad_accum": self.state.grad_accum,
            "precision": self.precision.name,
        }
