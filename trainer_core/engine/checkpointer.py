"""Saving and restoring a run: everything an exact resume needs, in one
checkpoint (the Trainer's component).

A checkpoint holds the loop's own state (model, every optimizer group with its schedule, the loss
scaler, RNG, counters, data position) and, in `extra["model_config"]`, the task's model config (what
an export's config.json holds under "model", e.g. a voice's speaker names); the file format lives
in `engine.checkpoint_manager`, the atomic write in `engine.checkpoint_write`.

Under DDP every rank enters `save` at the same step (the loop's decisions agree), because the
checkpoint gathers each rank's random streams; rank 0 alone writes the file, holding the unwrapped
model's weights. On resume every rank reads the same file and takes its own streams back.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from trainer_core.contract.profile import Profile
from trainer_core.contract.protocol import CheckpointSavedEvent
from trainer_core.engine.checkpoint_compat import check_model_compatible
from trainer_core.engine.checkpoint_manager import (
    CheckpointError,
    CheckpointManager,
    new_checkpoint_state,
)
from trainer_core.engine.distributed import gather_rank_rng, restore_rank_rng
from trainer_core.engine.events import EventHub
from trainer_core.engine.faults import FaultInjector
from trainer_core.engine.loop_state import LoopState
from trainer_core.engine.precision import NonfiniteTracker, PrecisionPolicy
from trainer_core.engine.rng import capture_rng_state, restore_rng_state
from trainer_core.engine.run_length import RunLength
from trainer_core.engine.step import StepRunner
from trainer_core.models.base import unwrap_model
from trainer_core.world import World

log = logging.getLogger("trainer_core")


def plain_config(config: dict[str, Any]) -> dict[str, Any] | None:
    """The config as plain JSON values (tuples become lists), as a weights-only load reads it back;
    None when it holds something JSON cannot (then checkpoints go without it)."""
    try:
        return json.loads(json.dumps(config, allow_nan=False))
    except (TypeError, ValueError):
        return None


class Checkpointer:
    """Writes checkpoints of the run (rank 0; `manager` is None elsewhere)
    and restores one into it."""

    def __init__(
        self,
        profile: Profile,
        profile_toml: str,
        runner: StepRunner,
        state: LoopState,
        nonfinite: NonfiniteTracker,
        run_length: RunLength,
        manager: CheckpointManager | None,
        world: World,
        faults: FaultInjector,
        events: EventHub,
    ) -> None:
        self.profile, self.profile_toml, self.runner, self.state = (
            profile,
            profile_toml,
            runner,
            state,
        )
        self.nonfinite, self.run_length, self.manager, self.world = (
            nonfinite,
            run_length,
            manager,
            world,
        )
        self.faults, self.events = faults, events
        self.val_loss: float | None = None  # the last validation loss, saved with each checkpoint
        # The task's model config (Task.model_config()), saved with each
        # checkpoint; set by the Trainer.
        self.model_config: dict[str, Any] | None = None
        self.saves = 0
        self.last_save_step = -1

    def state_dict(self, rank_rng: list[Any] | None = None) -> dict[str, Any]:
        s, runner = self.state, self.runner
        scaler = runner.precision.scaler
        extra: dict[str, Any] = {"loop": s.state_dict(), "nonfinite": self.nonfinite.state_dict()}
        if self.run_length.budget is not None:
            extra["budget_elapsed_s"] = self.run_length.budget.elapsed()
        if self.world.active:
            extra.update(world_size=self.world.world_size, rank_rng=rank_rng)
        if self.model_config is not None:
            extra["model_config"] = self.model_config
        groups = runner.groups.state_dict()
        return new_checkpoint_state(
            model=unwrap_model(runner.model).state_dict(),
            step=s.step,
            epoch=s.epoch,
            rng=capture_rng_state(),
            optimizer=groups.pop("optimizer"),
            scheduler=groups.pop("scheduler"),
            scaler=scaler.state_dict() if scaler.is_enabled() else None,
            data_position={"epoch": s.epoch, "item": s.item},
            profile_toml=self.profile_toml,
            precision=runner.precision.name,
            micro_batch=s.micro_batch,
            grad_accum=s.grad_accum,
            val_loss=self.val_loss,
            extra={**extra, **({"optimizer_groups": groups} if groups else {})},
        )

    def saved_at(self, step: int) -> bool:
        """Whether `step` already has its checkpoint; under DDP from memory,
        so every rank answers alike."""
        if self.world.active or self.manager is None:
            return self.last_save_step == step
        return self.manager.path_for(step).exists()

    def save(self, is_best: bool = False) -> Path | None:
        """Save now; a failed write is reported and training goes on (the
        previous file is intact)."""
        if self.state.step == 0:
            return None
        self.saves += 1
        self.last_save_step = self.state.step
        # A collective: every rank is here at this step, each handing rank 0 its random streams.
        rank_rng = gather_rank_rng(self.world, self.runner.device) if self.world.active else None
        if self.manager is None:
            return None  # ranks other than 0 write nothing
        try:
            saved = self.manager.save(
                self.state_dict(rank_rng),
                self.state.step,
                val_loss=self.val_loss,
                is_best=is_best,
                hold_s=self.faults.checkpoint_hold_s(self.saves),
            )
        except CheckpointError as exc:
            self.events.error(str(exc))
            return None
        self.run_length.note_end_cost("checkpoint", saved.seconds)
        self.events.emit(
            CheckpointSavedEvent(
                step=self.state.step,
                epoch=self.state.epoch,
                path=str(saved.path),
                bytes=saved.bytes,
                val_loss=self.val_loss,
                seconds=saved.seconds,
            )
        )
        for warning in saved.warnings:
            self.events.warn(warning, code="checkpoint_prune")
        if saved.over_budget is not None:
            self.events.warn(saved.over_budget, code="checkpoint_budget")
        return saved.path

    def restore(self, state: dict[str, Any]) -> dict[str, Any]:
        """Load a checkpoint's states so the next step is exactly the one after it was saved."""
        runner = self.runner
        module = unwrap_model(runner.model)
        extra = state.get("extra") or {}
        self._check_same_speakers(extra.get("model_config"))
        check_model_compatible(module, state["model"])
        module.load_state_dict(state["model"])
        runner.groups.load_state_dict(
            {
                "optimizer": state["optimizer"],
                "scheduler": state["scheduler"],
                **extra.get("optimizer_groups", {}),
            }
        )
        self._adopt_saved_precision(state.get("precision"))
        scaler = runner.precision.scaler
        if state.get("scaler") and scaler.is_enabled():
            scaler.load_state_dict(state["scaler"])
        self.state.load_state_dict(extra["loop"])
        # written before warmups were fitted: the saved schedule's warmup
        if "warmup_steps" not in extra["loop"]:
            self.state.warmup_steps = runner.groups.warmup_steps()
        self.nonfinite.load_state_dict(extra.get("nonfinite", {}))
        self._reconcile_batch_with_profile()
        self.run_length.restored(extra.get("budget_elapsed_s"))
        self.val_loss = state.get("val_loss")
        for note in restore_rng_state(state["rng"]):
            self.events.warn(note, code="rng_not_restored")
        if self.world.active:
            self._restore_rank_streams(extra)
        s = self.state
        return {
            "step": s.step,
            "epoch": s.epoch,
            "item": s.item,
            "lr": runner.groups.main.lr(),
            "loss_scale": scaler.get_scale() if scaler.is_enabled() else None,
        }

    def _check_same_speakers(self, saved: dict[str, Any] | None) -> None:
        """A resume must give every speaker id the voice it was trained with: the same
        names in the same order (a checkpoint from before model configs were saved: the
        weights' shapes are checked alone)."""
        if saved is None:
            return
        before = list(saved.get("speaker_names") or [])
        now = list((self.model_config or {}).get("speaker_names") or [])
        if before != now:
            raise CheckpointError(
                f"the checkpoint's speakers ({', '.join(before) or 'one, unnamed'}) differ from the"
                f" data's ({', '.join(now) or 'one, unnamed'}): resume with the data it was trained"
                " on (data.path, data.speakers)"
            )

    def _restore_rank_streams(self, extra: dict[str, Any]) -> None:
        """Each rank's own dropout stream back; a different world size
        changes the effective batch."""
        saved_world = extra.get("world_size", 1)
        if saved_world != self.world.world_size:
            log.warning(
                "the checkpoint was written by %d process(es), this run has %d: the effective batch"
                " changes from %d to %d items per step",
                saved_world,
                self.world.world_size,
                self.state.effective_batch * saved_world,
                self.state.effective_batch * self.world.world_size,
            )
        note = restore_rank_rng(
            extra.get("rank_rng"),
            self.world,
            self.runner.device,
            self.profile.run.seed,
            self.state.step,
        )
        if note:
            log.warning("%s", note)

    def _adopt_saved_precision(self, saved: str | None) -> None:
        """Keep a precision fallback the saved run had made, instead of repeating the failures."""
        current = self.runner.precision
        policy: PrecisionPolicy | None = current
        while policy is not None and policy.name != saved:
            policy = policy.fallback()
        if policy is not None and policy.name != current.name:
            log.warning(
                "continuing in %s: the checkpoint's run had fallen back from %s",
                policy.name,
                current.name,
            )
            self.runner.precision = policy

    def _reconcile_batch_with_profile(self) -> None:
        """An OOM-reduced micro-batch carries over; a batch the profile changed on purpose wins."""
        t, s = self.profile.train, self.state
        if t.batch_size * t.grad_accum != s.effective_batch:
            log.warning(
                "the effective batch changes from %d (checkpoint) to %d (train.batch_size x"
                " train.grad_accum)",
                s.effective_batch,
                t.batch_size * t.grad_accum,
            )
            s.micro_batch, s.grad_accum = t.batch_size, t.grad_accum
