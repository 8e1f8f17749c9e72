"""Optimizer groups: each one an optimizer with its parameters, learning-rate schedule and gradient clipping.

Today every task trains one group ("main": all parameters, the profile's optimizer and schedule). The step
(`engine.step`) and the checkpoint (`engine.checkpointing`) iterate over groups, so a task that declares a
discriminator and a generator later adds groups here without touching the loop.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR

from trainer_core.contract.profile import Profile
from trainer_core.engine.schedule import build_lr_scheduler, set_total_steps, set_warmup_steps

MAIN = "main"


@dataclass
class OptimizerGroup:
    """One optimizer stepped once per training step, with its own schedule and clipping."""

    name: str
    """What the group trains ("main"; later e.g. "generator", "discriminator"): names its losses and LR."""
    params: list[torch.nn.Parameter]
    """Listed once: load_state_dict copies into these same Parameter objects, never replaces them."""
    optimizer: torch.optim.Optimizer
    scheduler: LambdaLR
    clip: float | None
    """Gradient-norm clipping for this group's parameters (None: measured, never clipped)."""

    def lr(self) -> float:
        """The learning rate the next step will use."""
        return float(self.optimizer.param_groups[0]["lr"])


class OptimizerGroups(Sequence[OptimizerGroup]):
    """The groups of a run, in update order; schedule changes apply to every group."""

    def __init__(self, groups: list[OptimizerGroup]) -> None:
        self._groups = groups

    def __len__(self) -> int:
        return len(self._groups)

    def __getitem__(self, index: Any) -> Any:
        return self._groups[index]

    def __iter__(self) -> Iterator[OptimizerGroup]:
        return iter(self._groups)

    @property
    def main(self) -> OptimizerGroup:
        """The first group: the one whose learning rate the charts show as "lr"."""
        return self._groups[0]

    def zero_grad(self) -> None:
        for group in self._groups:
            group.optimizer.zero_grad(set_to_none=True)

    def set_total_steps(self, total_steps: int) -> None:
        for group in self._groups:
            set_total_steps(group.scheduler, total_steps)

    def set_warmup_steps(self, warmup_steps: int) -> None:
        for group in self._groups:
            set_warmup_steps(group.scheduler, warmup_steps)

    def warmup_steps(self) -> int:
        """The warmup the schedules were built or last fitted with."""
        return int(self.main.scheduler.lr_lambdas[0].warmup_steps)  # type: ignore[attr-defined]  # a ScheduleLambda

    def state_dict(self) -> dict[str, Any]:
        """One group keeps the checkpoint's original keys (optimizer, scheduler); more groups add theirs by name."""
        main = self.main
        out: dict[str, Any] = {"optimizer": main.optimizer.state_dict(), "scheduler": main.scheduler.state_dict()}
        for group in self._groups[1:]:
            out[f"optimizer.{group.name}"] = group.optimizer.state_dict()
            out[f"scheduler.{group.name}"] = group.scheduler.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.main.optimizer.load_state_dict(state["optimizer"])
        self.main.scheduler.load_state_dict(state["scheduler"])
        for group in self._groups[1:]:
            group.optimizer.load_state_dict(state[f"optimizer.{group.name}"])
            group.scheduler.load_state_dict(state[f"scheduler.{group.name}"])


def single_group(
    model: torch.nn.Module, profile: Profile, device: torch.device, warmup: int, total: int
) -> OptimizerGroups:
    """AdamW over every parameter with the profile's schedule: the group every built-in task trains."""
    t = profile.train
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(
        params, lr=t.lr, betas=t.betas, weight_decay=t.weight_decay, fused=device.type == "cuda"
    )
    scheduler = build_lr_scheduler(optimizer, t.schedule, warmup, total, t.restart_period, t.restart_mult)
    return OptimizerGroups([OptimizerGroup(MAIN, params, optimizer, scheduler, t.grad_clip or None)])
