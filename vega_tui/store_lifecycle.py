"""The run store's handlers for checkpoints, the best model, commands, pauses and the run's end."""

from __future__ import annotations

from typing import Any

from trainer_core.contract.protocol import (
    BestModelEvent,
    CheckpointSavedEvent,
    CommandAckEvent,
    FinishedEvent,
    OvertrainingEvent,
    PausedEvent,
    ResumedEvent,
)
from trainer_core.contract.units import format_bytes, format_number
from vega_tui.run_state import FINISHED_STATUS, MAX_CHECKPOINTS, CheckpointRow, finite_or_none
from vega_tui.store_base import StoreBase


class RunLifecycleHandlers(StoreBase):
    """How a run saves, picks its best model, obeys commands, pauses and
    ends, as the state shows it."""

    def _on_checkpoint_saved(self, e: CheckpointSavedEvent) -> None:
        if e.t >= self.state.last_checkpoint_t:
            self.state.last_checkpoint_t, self.state.last_checkpoint_path = e.t, e.path
        rows = self.state.checkpoints
        row = rows.get(e.step)
        if row is None:
            rows[e.step] = CheckpointRow(
                e.step, e.path, e.bytes, finite_or_none(e.val_loss), e.t, epoch=e.epoch
            )
            self._mark("checkpoint", e.step, e.t, f"checkpoint at step {e.step}")
            self._trim_checkpoints()
        else:  # the same step saved again (e.g. as best): refresh, no second marker
            row.path, row.bytes, row.t, row.epoch = e.path, e.bytes, e.t, e.epoch
            row.val_loss = finite_or_none(e.val_loss) if e.val_loss is not None else row.val_loss
        self._log(
            "info",
            "checkpoint_saved",
            f"checkpoint saved at step {e.step}: {e.path} ({format_bytes(e.bytes)})",
            e.t,
        )

    def _trim_checkpoints(self) -> None:
        rows = self.state.checkpoints
        if len(rows) <= MAX_CHECKPOINTS:
            return
        oldest = next(step for step, row in rows.items() if not row.best)
        del rows[oldest]

    def _on_best_model(self, e: BestModelEvent) -> None:
        state = self.state
        for other in state.checkpoints.values():
            other.best = False
        row = state.checkpoints.get(e.step)
        if row is None:
            row = state.checkpoints[e.step] = CheckpointRow(
                e.step, e.path, None, finite_or_none(e.val_loss), e.t
            )
        row.best, row.path = True, e.path
        state.best_val_loss, state.best_step = finite_or_none(e.val_loss), e.step
        why = (
            f"free-running distance {format_number(e.score)}"
            if e.selected_by == "free_running"
            else f"val loss {format_number(e.val_loss)}"
        )
        if state.overtraining is not None and e.step > state.overtraining["step"]:
            state.overtraining = None  # validation beat its best again: the episode is over
        self._mark("best", e.step, e.t, f"best model at step {e.step}: {why}")
        self._log("info", "best_model", f"new best model at step {e.step}: {why}", e.t)

    def _on_overtraining(self, e: OvertrainingEvent) -> None:
        """The banner and status line say so (naming the best checkpoint) until a new best model."""
        self.state.overtraining = {
            "step": e.step,
            "best_step": e.best_step,
            "best_path": e.best_path,
            "message": e.message,
            "evaluations": e.evaluations,
        }
        self._mark("overtraining", e.step, e.t, f"overtraining at step {e.step}")
        self._log("warning", "overtraining", e.message, e.t)

    def _on_command_ack(self, e: CommandAckEvent) -> None:
        state = self.state
        state.last_ack = {"cmd": e.cmd, "id": e.id, "ok": e.ok, "detail": e.detail, "t": e.t}
        outcome = "accepted" if e.ok else "refused"
        detail = f" ({e.detail})" if e.detail else ""
        self._log(
            "info" if e.ok else "warning", "command_ack", f"command {e.cmd} {outcome}{detail}", e.t
        )
        if e.cmd == "evaluate" and e.ok and state.status in ("training", "paused"):
            self._status_before_eval, self._steps_while_evaluating = state.status, 0
            self._set_status("evaluating")

    def _on_paused(self, e: PausedEvent) -> None:
        state = self.state
        if self._paused_at is None:
            self._paused_at = e.t
        self._paused_step = e.step
        if state.status == "evaluating":
            self._status_before_eval = "paused"
        else:
            self._set_status("paused")
        state.pause_reason = e.reason
        if e.reason:
            self._log(
                "warning", "paused", f"the trainer paused itself at step {e.step}: {e.reason}", e.t
            )
        else:
            self._log("info", "paused", f"paused at step {e.step}", e.t)

    def _on_resumed(self, e: ResumedEvent) -> None:
        state = self.state
        if self._paused_at is not None:
            state.paused_s += max(0.0, e.t - self._paused_at)
            self._paused_at = None
        state.pause_reason = None
        if state.status == "evaluating":
            self._status_before_eval = "training"
        else:
            self._set_status("training")
        self._log("info", "resumed", f"resumed at step {e.step}", e.t)

    def _on_finished(self, e: FinishedEvent) -> None:
        state = self.state
        state.finished = {
            "status": e.status,
            "summary": dict(e.summary),
            "step": e.step,
            "seconds": e.seconds,
        }
        state.status = FINISHED_STATUS.get(e.status, "failed")
        state.step, state.eta_s = max(state.step, e.step), None
        if e.status == "completed":
            state.total_steps = e.step
        best = e.summary.get("best_val_loss")
        if isinstance(best, (int, float)) and state.best_val_loss is None:
            state.best_val_loss = float(best)
        self._note_best_from_summary(e.summary.get("best_step"))
        level = {"completed": "info", "stopped": "warning"}.get(e.status, "error")
        self._log(
            level, "finished", f"run {e.status} at step {e.step} after {e.seconds:.1f} s", e.t
        )
        if e.summary.get("early_stopped") is True:
            self._note_early_stop(e)

    def _note_best_from_summary(self, step: Any) -> None:
        """The summary's best step marks its checkpoint row when no
        best_model event did (e.g. a lost line)."""
        state = self.state
        if not isinstance(step, int) or any(row.best for row in state.checkpoints.values()):
            return
        row = state.checkpoints.get(step)
        if row is not None:
            row.best = True
            state.best_step = step

    def _note_early_stop(self, e: FinishedEvent) -> None:
        """Early stopping ended the run: a chart marker at the last step and a
        log line naming the best step."""
        state = self.state
        state.early_stopped_step = e.step
        best = e.summary.get("best_step")
        best_text = f"; the best checkpoint is step {best}" if isinstance(best, int) else ""
        why = "validation stopped improving (train.early_stopping_patience)"
        text = f"stopped early at step {e.step}: {why}{best_text}"
        self._mark("early_stop", e.step, e.t, text)
        self._log("info", "finished", text, e.t)
