"""The run store's handlers for training progress: epochs, steps (and the step series derived
from them), the time breakdown, memory pressure, out-of-memory recoveries and non-finite losses."""

from __future__ import annotations

from typing import Any

from trainer_core.contract.protocol import (
    EpochEndEvent,
    EpochStartEvent,
    MemoryEvent,
    NonfiniteEvent,
    OomRecoveredEvent,
    ProfileBreakdownEvent,
    StepEvent,
)
from trainer_core.contract.units import format_number
from vega_tui.chart_specs import GROUP_LR, LOSS, LOSS_SMOOTH, LR
from vega_tui.run_state import finite_or_none
from vega_tui.store_base import StoreBase


class RunProgressHandlers(StoreBase):
    """How training advances, as the state and its step series show it."""

    def _on_epoch_start(self, e: EpochStartEvent) -> None:
        state = self.state
        state.epoch = e.epoch
        if self._train_start_t is None:
            self._train_start_t = e.t
        if state.status in ("starting", "preloading"):
            self._set_status("training")

    def _on_epoch_end(self, e: EpochEndEvent) -> None:
        self._log("info", "epoch_end", f"epoch {e.epoch} done: loss {format_number(e.loss)}", e.t)

    def _on_step(self, e: StepEvent) -> None:
        state = self.state
        state.step, state.epoch = e.step, e.epoch
        state.loss, state.lr = finite_or_none(e.loss), e.lr
        state.losses = {
            name: value for name, value in e.losses.items() if finite_or_none(value) is not None
        }
        state.grad_norm, state.loss_scale = e.grad_norm, e.loss_scale
        state.samples_per_s, state.data_wait_frac = e.samples_per_s, e.data_wait_frac
        state.rank_samples_per_s, state.rank_data_wait_frac = (
            list(e.rank_samples_per_s),
            list(e.rank_data_wait_frac),
        )
        state.micro_batch, state.grad_accum, state.eta_s = e.micro_batch, e.grad_accum, e.eta_s
        if state.phase is not None and e.step > state.phase[0]:
            state.phase = None  # steps go on: whatever the trainer was doing between them is over
        if self._train_start_t is None:
            self._train_start_t = e.t
        if e.lrs:
            self._note_groups(e)
        self._append_step_series(e)
        self._step_status()
        self._estimate_total_steps(e)

    def _append_step_series(self, e: Any) -> None:
        """The derived step series (LOSS, LR, GROUP_LR in chart_specs): every step of the window,
        and the smoothed loss; the generic feeder copies the step event's other declared fields."""
        step = e.step
        steps, losses = e.step_series, e.loss_series
        if steps and len(steps) == len(losses):
            for x, y in zip(steps, losses, strict=False):
                self._append_loss(x, y)
        else:
            self._append_loss(step, e.loss)
        lr = self.state.series[LR.key]  # made with the state, as every declared plain series
        if steps and len(steps) == len(e.lr_series):
            for x, y in zip(steps, e.lr_series, strict=False):
                lr.append(x, y)
        else:
            lr.append(step, e.lr)
        if e.lrs:
            self._append_group_lrs(e)

    def _note_groups(self, e: StepEvent) -> None:
        """Learn the optimizer groups, and which one `loss` and `lr` belong
        to (its loss total is `loss`)."""
        state = self.state
        if list(e.lrs) != state.groups:
            state.groups = list(e.lrs)
        if state.primary_group in e.lrs:
            return
        by_loss = [
            group
            for group in e.lrs
            if e.loss is not None and e.losses.get(f"{group}.total") == e.loss
        ]
        by_lr = [group for group, lr in e.lrs.items() if lr == e.lr]
        found = by_loss if len(by_loss) == 1 else by_lr
        state.primary_group = found[0] if len(found) == 1 else None

    def _append_group_lrs(self, e: StepEvent) -> None:
        """One `lr:<group>` series per optimizer group. `lrs` holds the window's last step only; the
        primary group's rate is `lr`, whose lr_series has every step of the window."""
        every_step = 0 < len(e.step_series) == len(e.lr_series)
        for group, value in e.lrs.items():
            series = self._series(GROUP_LR.of(group))
            if every_step and group == self.state.primary_group:
                for x, y in zip(e.step_series, e.lr_series, strict=False):
                    series.append(x, y)
            else:
                series.append(e.step, value)

    def _append_loss(self, step: int, loss: float | None) -> None:
        series = self.state.series
        if series[LOSS.key].append(step, loss):
            series[LOSS_SMOOTH.key].append(step, self._ema.update(loss))  # type: ignore[arg-type]

    def _step_status(self) -> None:
        status = self.state.status
        if status == "evaluating":
            # The trainer flushes one step event right before it evaluates; a
            # second one means it is done.
            self._steps_while_evaluating += 1
            if self._steps_while_evaluating >= 2:
                self._set_status(self._status_before_eval)
        elif status in ("starting", "preloading"):
            self._set_status("training")
        elif status == "paused" and self.state.step > self._paused_step:
            self._set_status("training")  # the resumed event was lost (a seq gap), but steps go on

    def _estimate_total_steps(self, e: Any) -> None:
        """Without a calibration plan, infer the total from the trainer's
        ETA and our own step rate."""
        state = self.state
        if state.planned_epochs is not None or e.eta_s is None or self._train_start_t is None:
            return
        trained_s = e.t - self._train_start_t - state.paused_s
        if trained_s > 0 and e.step > 0:
            state.total_steps = e.step + round(e.eta_s * e.step / trained_s)

    def _on_profile_breakdown(self, e: ProfileBreakdownEvent) -> None:
        self.state.breakdown = {
            "data": e.data_s,
            "transfer": e.transfer_s,
            "forward": e.forward_s,
            "backward": e.backward_s,
            "optimizer": e.optimizer_s,
        }
        groups = {
            group: {phase.removesuffix("_s"): seconds for phase, seconds in times.items()}
            for group, times in e.groups.items()
        }
        self.state.breakdown_groups = groups or None

    def _on_memory(self, e: MemoryEvent) -> None:
        state = self.state
        state.memory_level = e.level
        level = "warning" if e.level in ("high", "critical") else "info"
        text = f"memory pressure {e.level} ({e.used_frac:.0%} used): {e.action}"
        self._log(level, "memory", text, e.t)
        if e.micro_batch is not None and e.grad_accum is not None:  # shrunk ahead of an OOM
            state.micro_batch, state.grad_accum = e.micro_batch, e.grad_accum
        if e.decision not in (None, "none") and e.step is not None:
            self._mark("memory", e.step, e.t, f"memory {e.level}: {e.decision}")

    def _on_oom_recovered(self, e: OomRecoveredEvent) -> None:
        state = self.state
        state.micro_batch, state.grad_accum = e.micro_batch, e.grad_accum
        text = (
            f"out of memory at step {e.step}: micro-batch now {e.micro_batch} x accumulation"
            f" {e.grad_accum}"
        )
        self._mark("oom", e.step, e.t, text)
        self._log("warning", "oom_recovered", text, e.t)

    def _on_nonfinite(self, e: NonfiniteEvent) -> None:
        self.state.precision = e.precision
        text = f"non-finite loss/gradient at step {e.step} ({e.consecutive} in a row): {e.action}"
        self._mark("nonfinite", e.step, e.t, text)
        self._log("warning", "nonfinite", text, e.t)
