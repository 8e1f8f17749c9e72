"""The train loop: one optimizer step at a time, with OOM retry, non-finite skipping and control.

Set-up (device, task, precision) happens in `engine.setup`; this class owns the loop state and the
objects a checkpoint holds (model, optimizer, scheduler, scaler, RNG, data position). Control commands,
evaluation and checkpointing are its mixins (`engine.control_state`, `engine.evaluation`,
`engine.checkpointing`).

Under torchrun (`engine.distributed`) the model is wrapped in DistributedDataParallel and every rank runs this
same loop on its slice of each global batch; one exchange per step boundary keeps their decisions (stop,
commands, finished, schedule length) identical, and rank 0 alone writes events and checkpoints.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

from trainer_core.contract.errors import VegaError
from trainer_core.contract.profile import Profile
from trainer_core.engine.budget import TimeBudget
from trainer_core.engine.checkpoint import CheckpointManager
from trainer_core.engine.checkpointing import CheckpointMixin
from trainer_core.engine.control_state import PAUSE_POLL_S, CommandsMixin, ControlState
from trainer_core.engine.distributed import MAX_COMMANDS, Agreement, RankRates, StepSync, mean_over_ranks, wrap_model
from trainer_core.engine.evaluation import EvaluationMixin
from trainer_core.engine.events import EventHub
from trainer_core.engine.faults import FaultInjector
from trainer_core.engine.loop_state import LoopState, halve_micro_batch
from trainer_core.engine.memory import MemoryManager
from trainer_core.engine.precision import NonfiniteTracker, PrecisionPolicy
from trainer_core.engine.profiler import StepProfiler
from trainer_core.engine.schedule import build_lr_scheduler, set_total_steps, set_warmup_steps
from trainer_core.engine.telemetry import StepRecord, StepWindow
from trainer_core.models.base import Batch, Task, batch_to, unwrap_model
from trainer_core.warmup import fitted_warmup, warmup_note
from trainer_core.world import SINGLE, World

log = logging.getLogger("trainer_core")
# Non-finite steps in a row, in multiples of train.nonfinite_patience, after which fp32 gives up.
HOPELESS_PATIENCES = 10
# The gradient-sync context of a step that averages over ranks as usual (or has no ranks): shared, stateless.
SYNC_AS_USUAL = nullcontext()


@dataclass
class StepOutcome:
    """One optimizer step after its single sync point: plain floats, ready for telemetry."""

    applied: bool
    loss: float
    losses: dict[str, float]
    grad_norm: float
    items: int
    lr: float
    """The learning rate this step was taken with (the scheduler has moved on since)."""


class Trainer(CommandsMixin, EvaluationMixin, CheckpointMixin):
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
        self.profile, self.task, self.device, self.precision = profile, task, device, precision
        self.events, self.run_dir, self.profile_toml, self.control = events, run_dir, profile_toml, control
        self.world = world
        t = profile.train
        # Under torchrun, DDP: its constructor hands rank 0's initial weights to every rank.
        self.model = wrap_model(task.model.to(device), device, world)
        # Listed once for clipping: load_state_dict copies into these same Parameter objects, never replaces them.
        self._params = list(self.model.parameters())
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(),
            lr=t.lr,
            betas=t.betas,
            weight_decay=t.weight_decay,
            fused=device.type == "cuda",
        )
        self.state = LoopState(micro_batch=t.batch_size, grad_accum=t.grad_accum)
        self.state.warmup_steps = self._initial_warmup()
        self.state.total_steps = self.planned_total_steps()
        self.scheduler = build_lr_scheduler(
            self.optimizer, t.schedule, self.warmup_steps(), self.state.total_steps, t.restart_period, t.restart_mult
        )
        # Rank 0 alone owns the checkpoint folder (the manager also clears half-written files on start).
        self.checkpoints = CheckpointManager(run_dir, keep_last=t.keep_last) if world.is_main else None
        self.memory = MemoryManager(device)
        self.profiler = StepProfiler(device, profile.logging.profile_interval_s)
        self.window = StepWindow(profile.logging.step_interval_s)
        self.nonfinite = NonfiniteTracker(t.nonfinite_patience)
        self.faults = FaultInjector(profile.debug)
        self.budget = self._new_budget()
        self.last_val_loss: float | None = None
        self._last_val_step = -1
        self._last_loss: float | None = None
        self._data_s = self._step_s = 0.0
        self._saves = 0
        self._last_save_step = -1
        self.sync = StepSync(world)
        self.rank_rates = RankRates(world.world_size)
        self._pending_commands: list[str] = []
        self.started = time.monotonic()
        self._first_step = 0  # where this process started counting (a resumed run starts late)
        self._batches: Iterator[tuple[Batch, int]] | None = None
        self._batches_at: tuple[int, int, int] | None = None  # (epoch, micro_batch, item) _batches is at

    # ------------------------------------------------------------------ planning

    @property
    def module(self) -> torch.nn.Module:
        """The model without its DDP wrapper: what checkpoints, validation, samples and exports use."""
        return unwrap_model(self.model)

    def global_batch(self) -> int:
        """Items one optimizer step consumes over all ranks."""
        return self.state.effective_batch * self.world.world_size

    def steps_per_epoch(self) -> int:
        return max(1, self.task.train_items() // self.global_batch())

    def planned_total_steps(self) -> int:
        """The schedule's length: train.max_steps, else epochs x steps per epoch (never shorter than the warmup)."""
        t = self.profile.train
        if t.max_steps is not None:
            return t.max_steps
        return max(self.warmup_steps() + 1, t.epochs * self.steps_per_epoch())

    def warmup_steps(self) -> int:
        """The warmup in use: fitted to the plan (trainer_core.warmup), or train.warmup_steps until a budget's plan."""
        fitted = self.state.warmup_steps
        return self.profile.train.warmup_steps if fitted is None else fitted

    def _initial_warmup(self) -> int | None:
        """Fitted to epochs x steps per epoch now; a time budget's plan fits it after calibration (None until)."""
        t = self.profile.train
        if t.max_steps is not None:
            return t.warmup_steps
        if t.target_hours:
            return None
        return fitted_warmup(t.warmup_steps, t.epochs * self.steps_per_epoch())

    def _fit_warmup_to(self, planned_steps: int) -> None:
        """Fit the warmup to a time budget's first plan (once per run; every rank computes the same)."""
        self.state.warmup_steps = fitted_warmup(self.profile.train.warmup_steps, planned_steps)
        if self.state.warmup_steps != self.scheduler.lr_lambdas[0].warmup_steps:
            set_warmup_steps(self.scheduler, self.state.warmup_steps)

    def _announce_warmup(self, planned_steps: int) -> None:
        """A `warning` event (code warmup_fitted) when the warmup in use is not train.warmup_steps."""
        asked, used = self.profile.train.warmup_steps, self.warmup_steps()
        if used == asked or not self.world.is_main:
            return
        source = "the time budget plans" if self.budget is not None else "planned (train.epochs x steps per epoch)"
        self.events.warn(warmup_note(asked, used, planned_steps, source), code="warmup_fitted")

    def _new_budget(self) -> TimeBudget | None:
        hours = self.profile.train.target_hours
        if not hours:
            return None
        # The budget is for the whole job: interpreter start-up and data loading count against it.
        already = max(0.0, time.time() - psutil.Process().create_time())
        return TimeBudget(hours, self.steps_per_epoch(), elapsed_s=already)

    def finished(self) -> bool:
        if self.budget is not None:
            return self.budget.out_of_time() and self.state.step > 0
        return self.state.step >= self.state.total_steps

    # ------------------------------------------------------------------ the loop

    def fit(self) -> str:
        """Train until done, stopped or early-stopped; returns the `finished` status."""
        self.model.train()
        if self.state.warmup_steps is not None:  # a budget's warmup is announced when it is fitted
            self._announce_warmup(self.state.total_steps)
        if self.profile.train.validate_at_start and self.state.step == 0:
            self.validate()  # the untrained model's validation loss: where the curve starts
        self.started, self._first_step = time.monotonic(), self.state.step
        while True:
            # Checked before each step too: a stop asked for during set-up ends the run before any work.
            request = self.next_request()
            if request == "finished":
                break
            if request == "stop":
                return self.stop()
            if self.state.item == 0:
                self.events.emit("epoch_start", epoch=self.state.epoch, steps_in_epoch=self.steps_per_epoch())
            outcome = self.train_step()
            self.after_step(outcome)
            if self.remaining_items() < self.global_batch():
                self.end_epoch()
            if self.early_stop_due():
                log.info(
                    "early stopping at step %d: validation loss has not improved for %d evaluations "
                    "(train.early_stopping_patience)",
                    self.state.step,
                    self.state.evals_since_best,
                )
                break
        return self.complete()

    def next_request(self) -> str | None:
        """ "finished", "stop" or None (train on), after acting on queued commands; all ranks get the same answer."""
        if self.world.active:
            return self._agree_on_requests()
        if self.finished():
            return "finished"
        return self.handle_requests()

    def _agree_on_requests(self) -> str | None:
        """The DDP step boundary: exchange, act on rank 0's commands; while paused, every rank waits together."""
        paused_at: float | None = None
        while True:
            agreed = self._exchange()
            if agreed.finished and paused_at is None:
                return "finished"
            if agreed.stop:
                return "stop"
            self._run_commands(agreed.commands)
            if not self.control.paused:
                break
            paused_at = paused_at or time.monotonic()
            time.sleep(PAUSE_POLL_S)
        if paused_at is not None:  # paused time is not training time: keep ETA and the budget honest
            pause = time.monotonic() - paused_at
            self.started += pause
            if self.budget is not None:
                self.budget.started += pause
        return None

    def _exchange(self) -> Agreement:
        """One StepSync exchange: this rank's stop flag and timings, rank 0's commands and decisions."""
        main = self.world.is_main
        queued = [cmd for cmd in self.control.drain() if cmd != "stop"]  # stop travels as a flag
        if main:
            self._pending_commands += queued
        sent, self._pending_commands = self._pending_commands[:MAX_COMMANDS], self._pending_commands[MAX_COMMANDS:]
        agreed = self.sync.exchange(
            stop=self.control.stop_requested.is_set(),
            finished=main and self.finished(),
            total_steps=self.state.total_steps,
            step_s=self._step_s,
            data_s=self._data_s,
            commands=sent,
        )
        if agreed.total_steps != self.state.total_steps:  # rank 0's time budget re-planned the schedule
            if self.state.warmup_steps is None:  # its first plan: fit the warmup as rank 0 did
                self._fit_warmup_to(agreed.total_steps)
            self.state.total_steps = agreed.total_steps
            set_total_steps(self.scheduler, agreed.total_steps)
        if main and agreed.step_seconds[0] > 0:
            self.rank_rates.add(agreed.step_seconds, agreed.data_seconds, self.state.effective_batch)
        self._step_s = self._data_s = 0.0  # each step's timings travel once
        return agreed

    def stop(self) -> str:
        """Stop asked for (control socket or signal): report the last steps, save, and end."""
        self.flush_telemetry()
        if self.state.step and not self._saved_at(self.state.step):
            self.save_checkpoint()
        return "stopped"

    def complete(self) -> str:
        """The end of a finished run: a last validation and checkpoint at the final step."""
        self.flush_telemetry()
        if self.state.step and self._last_val_step != self.state.step:
            self.validate()
        if self.state.step and not self._saved_at(self.state.step):
            self.save_checkpoint()
        return "completed"

    def _saved_at(self, step: int) -> bool:
        """Whether `step` already has its checkpoint; under DDP from memory, so every rank answers alike."""
        if self.world.active or self.checkpoints is None:
            return self._last_save_step == step
        return self.checkpoints.path_for(step).exists()

    def remaining_items(self) -> int:
        return self.task.train_items() - self.state.item

    def end_epoch(self) -> None:
        s = self.state
        self.flush_telemetry()
        self.events.emit("epoch_end", epoch=s.epoch, loss=self._last_loss, seconds=time.monotonic() - self.started)
        eval_each_epoch = self.profile.train.eval_every_steps is None
        if eval_each_epoch:
            self.validate()
        due = (s.epoch + 1) % self.profile.train.checkpoint_every_epochs == 0
        if due and self._last_save_step != s.step:  # not again when validate() just saved a new best here
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
            if self.world.active:
                raise self._oom_under_ddp(message)
            # Recover outside the except block: the traceback pins the failed step's tensors.
            self._recover_from_oom(message)

    def _oom_under_ddp(self, message: str) -> VegaError:
        # Halving the batch on one rank alone would make the ranks' steps differ: fail with advice instead.
        return VegaError(
            f"out of memory on {self.world.describe()} at step {self.state.step + 1} ({message}); under DDP the "
            f"micro-batch cannot shrink on one rank alone: lower train.batch_size (now {self.state.micro_batch}) "
            "and raise train.grad_accum to keep the effective batch, then resume"
        )

    def _attempt_step(self) -> StepOutcome:
        s, t0 = self.state, time.perf_counter()
        step_no, accum, profiler = s.step + 1, s.grad_accum, self.profiler
        self.optimizer.zero_grad(set_to_none=True)
        batches = self._train_batches()
        rows: list[list[torch.Tensor]] = []  # per micro-batch: the loss as stepped, then the task's loss parts
        items = data_s = 0
        for micro in range(accum):
            d0 = time.perf_counter()
            with profiler.phase("data"):
                batch, n = next(batches)
            data_s += time.perf_counter() - d0
            with profiler.phase("transfer"):
                batch = batch_to(batch, self.device, non_blocking=self.device.type == "cuda")
            with self._gradient_sync(last=micro == accum - 1):
                with profiler.phase("forward"), self.precision.autocast():
                    self.faults.before_forward(step_no)
                    losses = self.task.compute_losses(self.model, batch)
                    loss = self.faults.poison_loss(step_no, losses["total"])
                    # Gradients average over the micro-batches; a division by 1 would only add a graph node.
                    scaled = loss / accum if accum > 1 else loss
                with profiler.phase("backward"):
                    self.precision.scaler.scale(scaled).backward()
            rows.append([loss, *losses.values()])
            items += n
        outcome = self._optimizer_step(rows, list(losses), items)
        s.item += items
        self._batches_at = (s.epoch, s.micro_batch, s.item)
        self._data_s, self._step_s = data_s, time.perf_counter() - t0
        return outcome

    def _train_batches(self) -> Iterator[tuple[Batch, int]]:
        """The batch iterator, kept from step to step while the loop's position is where it left off; a new one
        after a new epoch, a resume, a halved micro-batch or a step that failed half-way."""
        s = self.state
        if self._batches is None or self._batches_at != (s.epoch, s.micro_batch, s.item):
            self._batches = iter(self.task.train_batches(s.epoch, s.micro_batch, start_item=s.item))
        self._batches_at = None  # until this step completes, the iterator is ahead of the loop's position
        return self._batches

    def _gradient_sync(self, last: bool):
        """DDP averages gradients over ranks on the last micro-batch of a step only (no_sync on the others)."""
        if self.world.active and not last:
            return self.model.no_sync()
        return SYNC_AS_USUAL

    def _optimizer_step(self, rows: list[list[torch.Tensor]], names: list[str], items: int) -> StepOutcome:
        scaler = self.precision.scaler
        lr = self.optimizer.param_groups[0]["lr"]
        with self.profiler.phase("optimizer"):
            scaler.unscale_(self.optimizer)
            clip = self.profile.train.grad_clip or float("inf")
            grad_norm = torch.nn.utils.clip_grad_norm_(self._params, clip)
            loss, norm, parts = self._read_step_values(rows, grad_norm)
            finite = math.isfinite(loss) and math.isfinite(norm)
            if finite or scaler.is_enabled():
                scaler.step(self.optimizer)  # a scaler skips the step itself on inf/NaN gradients
            scaler.update()
            if finite:
                self.scheduler.step()
                self.state.step += 1
        self.profiler.step_done()
        return StepOutcome(finite, loss, dict(zip(names, parts, strict=True)), norm, items, lr)

    def _read_step_values(
        self, rows: list[list[torch.Tensor]], grad_norm: torch.Tensor
    ) -> tuple[float, float, list[float]]:
        """(loss, grad norm, loss parts) of the step, each loss the mean over its micro-batches.

        The step's one sync point: every micro-batch's losses and the gradient norm reach the host in a single
        `tolist()` and are averaged there, so the loss parts cost no tensor ops of their own on the device.
        """
        flat = [value for row in rows for value in row]
        with torch.no_grad():
            if self.world.active:
                # Every rank reports (and judges finiteness by) the mean loss over ranks, so their decisions agree.
                losses = mean_over_ranks(torch.stack(flat).float(), self.world)
                values = torch.cat([losses, grad_norm.float().reshape(1)]).tolist()
            else:
                values = torch.stack([*flat, grad_norm]).float().tolist()
        norm, width = values.pop(), len(rows[0])
        means = [sum(values[i::width]) / len(rows) for i in range(width)]
        return means[0], norm, means[1:]

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
            "oom_recovered",
            step=s.step + 1,
            micro_batch=s.micro_batch,
            grad_accum=s.grad_accum,
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
            step=s.step,
            epoch=s.epoch,
            loss=o.loss,
            losses=o.losses,
            lr=o.lr,
            grad_norm=o.grad_norm,
            loss_scale=scale,
            items=o.items,
            seconds=self._step_s,
            data_seconds=self._data_s,
            micro_batch=s.micro_batch,
            grad_accum=s.grad_accum,
        )

    def flush_telemetry(self) -> None:
        fields = self.window.flush()
        if fields is None:
            return
        fields["mem_device_bytes"] = self.memory.device_bytes()
        fields["mem_host_bytes"] = self.memory.host_bytes()
        fields["eta_s"] = self.eta_s()
        if self.world.active:
            fields.update(world_size=self.world.world_size, **self.rank_rates.flush())
        self.events.emit("step", **fields)

    def eta_s(self) -> float | None:
        if self.budget is not None:
            return self.budget.eta_s(self.state.step)
        done_here = self.state.step - self._first_step
        if done_here <= 0:
            return None
        rate = done_here / max(1e-9, time.monotonic() - self.started)
        return max(0, self.state.total_steps - self.state.step) / rate

    def _handle_nonfinite(self, o: StepOutcome) -> None:
        scaler = self.precision.scaler
        loss_bad = not math.isfinite(o.loss)
        # fp16 overflow with a healthy scale is routine dynamic scaling, not a precision problem.
        counts = loss_bad or not scaler.is_enabled() or scaler.get_scale() < 1.0
        fall_back = self.nonfinite.record(False) if counts else False
        action = "skipped step" + (f"; loss scale now {scaler.get_scale():g}" if scaler.is_enabled() else "")
        # Reported in the precision the step ran in, before any fallback.
        ran_in, consecutive = self.precision.name, self.nonfinite.consecutive
        if fall_back:
            action += self._fall_back_precision()
        self.events.emit(
            "nonfinite", step=self.state.step + 1, action=action, consecutive=consecutive, precision=ran_in
        )
        if consecutive >= HOPELESS_PATIENCES * self.nonfinite.patience and self.precision.fallback() is None:
            # Without this a loss that is always NaN would skip steps, and consume data, forever.
            raise VegaError(
                f"the loss or gradients were non-finite in {consecutive} steps in a row at {self.precision.name}, "
                "with no safer precision left; lower train.lr, check the data, or resume from an earlier checkpoint"
            )

    def _fall_back_precision(self) -> str:
        safer = self.precision.fallback()
        if safer is None:
            return "; already fp32, nothing safer to fall back to"
        old, self.precision = self.precision.name, safer
        self.nonfinite.reset()
        self.events.warn(
            f"falling back from {old} to {safer.name} after repeated non-finite steps", code="precision_fallback"
        )
        return f"; falling back from {old} to {safer.name}"

    def _observe_budget(self, items: int) -> None:
        # Under DDP rank 0 alone measures and plans; the step boundary exchange hands its plan to the others.
        if self.budget is None or not self.world.is_main:
            return
        plan = self.budget.observe(self.state.step, items)
        if plan is None:
            return
        first_plan = self.state.warmup_steps is None
        if first_plan:
            self._fit_warmup_to(plan.total_steps)
        self.state.total_steps = self._schedulable_length(plan.total_steps)
        set_total_steps(self.scheduler, self.state.total_steps)
        self.events.emit(
            "calibration",
            samples_per_s=plan.samples_per_s,
            planned_epochs=plan.planned_epochs,
            planned_steps=plan.total_steps,
            target_hours=self.profile.train.target_hours,
        )
        if first_plan:
            self._announce_warmup(plan.total_steps)

    def _schedulable_length(self, planned: int) -> int:
        """The schedule needs more steps than its warmup: a re-plan far below the first keeps warmup + 1 steps.

        The first plan fitted the warmup to at most half its steps (trainer_core.warmup), so this only acts when a
        later re-plan (a slowdown, an OOM) shrinks the run below the warmup; the budget still ends the run on time.
        """
        shortest = self.warmup_steps() + 1
        if planned < shortest:
            log.info(
                "the time budget now fits about %d steps, fewer than the %d-step warmup: the LR schedule "
                "keeps %d steps (the budget still ends the run on time)",
                planned,
                self.warmup_steps(),
                shortest,
            )
        return max(planned, shortest)

    def _periodic_eval_and_checkpoint(self, step: int) -> None:
        t = self.profile.train
        if t.eval_every_steps and step % t.eval_every_steps == 0:
            self.validate()
        # A new best at this step was saved by validate(): the same file twice would be wasted I/O.
        if t.checkpoint_every_steps and step % t.checkpoint_every_steps == 0 and self._last_save_step != step:
            self.save_checkpoint()

    # ------------------------------------------------------------------ the end

    def summary(self) -> dict:
        """Final figures for the `finished` event and session.json."""
        best = self.checkpoints.best() if self.checkpoints is not None else None
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
            "world_size": self.world.world_size,
        }
