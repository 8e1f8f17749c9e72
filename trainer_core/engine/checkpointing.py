"""Saving and restoring the Trainer: everything an exact resume needs, in one checkpoint.

A mixin rather than a separate object because a checkpoint is the loop's own state (model, optimizer,
scheduler, scaler, RNG, counters, data position); the Trainer provides the attributes listed on the class.
The file format and the atomic write live in `engine.checkpoint`.

Under DDP every rank enters `save_checkpoint` at the same step (the loop's decisions agree), because the
checkpoint gathers each rank's random streams; rank 0 alone writes the file, holding the unwrapped model's
weights. On resume every rank reads the same file and takes its own streams back.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer_core.engine.checkpoint import CheckpointError, check_model_compatible, new_checkpoint_state
from trainer_core.engine.distributed import gather_rank_rng, restore_rank_rng
from trainer_core.engine.rng import capture_rng_state, restore_rng_state
from trainer_core.engine.schedule import set_total_steps

if TYPE_CHECKING:
    from trainer_core.contract.profile import Profile
    from trainer_core.engine.budget import TimeBudget
    from trainer_core.engine.checkpoint import CheckpointManager
    from trainer_core.engine.events import EventHub
    from trainer_core.engine.faults import FaultInjector
    from trainer_core.engine.loop_state import LoopState
    from trainer_core.engine.precision import NonfiniteTracker, PrecisionPolicy
    from trainer_core.world import World

log = logging.getLogger("trainer_core")


class CheckpointMixin:
    """Needs: profile, profile_toml, model, module, device, world, optimizer, scheduler, precision, state,
    nonfinite, budget, checkpoints (None on ranks other than 0), faults, events, last_val_loss and
    planned_total_steps()."""

    profile: Profile
    profile_toml: str
    model: torch.nn.Module
    module: torch.nn.Module
    device: torch.device
    world: World
    optimizer: torch.optim.Optimizer
    scheduler: Any
    precision: PrecisionPolicy
    state: LoopState
    nonfinite: NonfiniteTracker
    budget: TimeBudget | None
    checkpoints: CheckpointManager | None
    faults: FaultInjector
    events: EventHub
    last_val_loss: float | None
    _saves: int
    _last_save_step: int

    def checkpoint_state(self, rank_rng: list | None = None) -> dict:
        s = self.state
        scaler = self.precision.scaler
        extra: dict[str, Any] = {"loop": s.state_dict(), "nonfinite": self.nonfinite.state_dict()}
        if self.budget is not None:
            extra["budget_elapsed_s"] = self.budget.elapsed()
        if self.world.active:
            extra.update(world_size=self.world.world_size, rank_rng=rank_rng)
        return new_checkpoint_state(
            model=self.module.state_dict(),
            step=s.step,
            epoch=s.epoch,
            rng=capture_rng_state(),
            optimizer=self.optimizer.state_dict(),
            scheduler=self.scheduler.state_dict(),
            scaler=scaler.state_dict() if scaler.is_enabled() else None,
            data_position={"epoch": s.epoch, "item": s.item},
            profile_toml=self.profile_toml,
            precision=self.precision.name,
            micro_batch=s.micro_batch,
            grad_accum=s.grad_accum,
            val_loss=self.last_val_loss,
            extra=extra,
        )

    def save_checkpoint(self, is_best: bool = False) -> Path | None:
        """Save now; a failed write is reported and training goes on (the previous file is intact)."""
        if self.state.step == 0:
            return None
        self._saves += 1
        self._last_save_step = self.state.step
        # A collective: every rank is here at this step, each handing rank 0 its random streams.
        rank_rng = gather_rank_rng(self.world, self.device) if self.world.active else None
        if self.checkpoints is None:
            return None  # ranks other than 0 write nothing
        try:
            saved = self.checkpoints.save(
                self.checkpoint_state(rank_rng),
                self.state.step,
                val_loss=self.last_val_loss,
                is_best=is_best,
                hold_s=self.faults.checkpoint_hold_s(self._saves),
            )
        except CheckpointError as exc:
            self.events.error(str(exc))
            return None
        if self.budget is not None:
            self.budget.note_end_cost("checkpoint", saved.seconds)
        self.events.emit(
            "checkpoint_saved",
            step=self.state.step,
            epoch=self.state.epoch,
            path=str(saved.path),
            bytes=saved.bytes,
            val_loss=self.last_val_loss,
            seconds=saved.seconds,
        )
        for warning in saved.warnings:
            self.events.warn(warning, code="checkpoint_prune")
        return saved.path

    def restore(self, state: dict) -> dict:
        """Load a checkpoint's states so the next step is exactly the one after it was saved."""
        check_model_compatible(self.module, state["model"])
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self._adopt_saved_precision(state.get("precision"))
        if state.get("scaler") and self.precision.scaler.is_enabled():
            self.precision.scaler.load_state_dict(state["scaler"])
        extra = state.get("extra") or {}
        self.state.load_state_dict(extra["loop"])
        if "warmup_steps" not in extra["loop"]:  # written before warmups were fitted: the saved schedule's warmup
            self.state.warmup_steps = self.scheduler.lr_lambdas[0].warmup_steps
        self.nonfinite.load_state_dict(extra.get("nonfinite", {}))
        self._reconcile_batch_with_profile()
        self._reconcile_length_with_profile(extra.get("budget_elapsed_s"))
        self.last_val_loss = state.get("val_loss")
        for note in restore_rng_state(state["rng"]):
            self.events.warn(note, code="rng_not_restored")
        if self.world.active:
            self._restore_rank_streams(extra)
        return {
            "step": self.state.step,
            "epoch": self.state.epoch,
            "item": self.state.item,
            "lr": self.optimizer.param_groups[0]["lr"],
            "loss_scale": self.precision.scaler.get_scale() if self.precision.scaler.is_enabled() else None,
        }

    def _restore_rank_streams(self, extra: dict) -> None:
        """Each rank's own dropout stream back; a different world size changes the effective batch."""
        saved_world = extra.get("world_size", 1)
        if saved_world != self.world.world_size:
            log.warning(
                "the checkpoint was written by %d process(es), this run has %d: the effective batch changes "
                "from %d to %d items per step",
                saved_world,
                self.world.world_size,
                self.state.effective_batch * saved_world,
                self.state.effective_batch * self.world.world_size,
            )
        note = restore_rank_rng(extra.get("rank_rng"), self.world, self.device, self.profile.run.seed, self.state.step)
        if note:
            log.warning("%s", note)

    def _adopt_saved_precision(self, saved: str | None) -> None:
        """Keep a precision fallback the saved run had made, instead of repeating the failures."""
        policy: PrecisionPolicy | None = self.precision
        while policy is not None and policy.name != saved:
            policy = policy.fallback()
        if policy is not None and policy.name != self.precision.name:
            log.warning(
                "continuing in %s: the checkpoint's run had fallen back from %s", policy.name, self.precision.name
            )
            self.precision = policy

    def _reconcile_batch_with_profile(self) -> None:
        """An OOM-reduced micro-batch carries over; a batch the profile changed on purpose wins."""
        t, s = self.profile.train, self.state
        if t.batch_size * t.grad_accum != s.effective_batch:
            log.warning(
                "the effective batch changes from %d (checkpoint) to %d (train.batch_size x train.grad_accum)",
                s.effective_batch,
                t.batch_size * t.grad_accum,
            )
            s.micro_batch, s.grad_accum = t.batch_size, t.grad_accum

    def _reconcile_length_with_profile(self, budget_elapsed_s: float | None) -> None:
        """The current profile decides how long to train (a resumed run may be extended)."""
        s = self.state
        if self.budget is not None:
            # The time budget covers the whole run: time already trained counts against it.
            self.budget.started -= budget_elapsed_s or 0.0
        else:
            s.total_steps = self.planned_total_steps()
        if s.step >= s.total_steps:
            log.warning("the checkpoint is at step %d, already at or past the planned %d steps", s.step, s.total_steps)
        else:
            set_total_steps(self.scheduler, s.total_steps)
