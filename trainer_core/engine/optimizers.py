"""Optimizer groups: each one an optimizer with its parameters, learning-rate
schedule and gradient clipping.

Most tasks train one group ("main": all parameters, the profile's optimizer and schedule). A task
that declares groups (`Task.optimizer_groups`, e.g. a discriminator and a generator) gets one AdamW
and one schedule per group, in its update order; every trainable parameter must belong to exactly
one. The primary group's learning rate is the run's "lr" and its warmup the run's; the checkpoint
keeps its state under the one-group keys, so one-group checkpoints read the same as before.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR

from trainer_core.contract.errors import VegaError
from trainer_core.contract.profile import Profile
from trainer_core.engine.schedule import build_lr_scheduler, set_total_steps, set_warmup_steps
from trainer_core.models.base import GroupSpec, Task

MAIN = "main"


@dataclass
class OptimizerGroup:
    """One optimizer stepped once per training step, with its own schedule and clipping."""

    name: str
    """What the group trains ("main"; later e.g. "generator",
    "discriminator"): names its losses and LR."""
    params: list[torch.nn.Parameter]
    """Listed once: load_state_dict copies into these same Parameter
    objects, never replaces them."""
    optimizer: torch.optim.Optimizer
    scheduler: LambdaLR
    clip: float | None
    """Gradient-norm clipping for this group's parameters (None: measured, never clipped)."""

    def lr(self) -> float:
        """The learning rate the next step will use."""
        return float(self.optimizer.param_groups[0]["lr"])


class OptimizerGroups(Sequence[OptimizerGroup]):
    """The groups of a run, in update order; schedule changes apply to every group."""

    def __init__(self, groups: list[OptimizerGroup], primary: str = MAIN) -> None:
        self._groups = groups
        by_name = {group.name: group for group in groups}
        self._primary = by_name.get(primary, groups[0])

    def __len__(self) -> int:
        return len(self._groups)

    def __getitem__(self, index: Any) -> Any:
        return self._groups[index]

    def __iter__(self) -> Iterator[OptimizerGroup]:
        return iter(self._groups)

    @property
    def main(self) -> OptimizerGroup:
        """The primary group: the one whose learning rate the charts show as "lr"."""
        return self._primary

    def others(self) -> list[OptimizerGroup]:
        return [group for group in self._groups if group is not self._primary]

    def lrs(self) -> dict[str, float]:
        """Each group's next learning rate by name; empty for one group (its "lr" says it all)."""
        return {group.name: group.lr() for group in self._groups} if len(self._groups) > 1 else {}

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
        """One group keeps the checkpoint's original keys (optimizer, scheduler);
        more groups add theirs by name."""
        main = self.main
        out: dict[str, Any] = {
            "optimizer": main.optimizer.state_dict(),
            "scheduler": main.scheduler.state_dict(),
        }
        for group in self.others():
            out[f"optimizer.{group.name}"] = group.optimizer.state_dict()
            out[f"scheduler.{group.name}"] = group.scheduler.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.main.optimizer.load_state_dict(state["optimizer"])
        self.main.scheduler.load_state_dict(state["scheduler"])
        for group in self.others():
            group.optimizer.load_state_dict(state[f"optimizer.{group.name}"])
            group.scheduler.load_state_dict(state[f"scheduler.{group.name}"])


def fused_on(device: torch.device) -> bool:
    """One kernel per step where torch has it: on a CPU, 4x faster than the default for Piper's
    47M-parameter discriminator (bench/gpu_check compares it with the default on CUDA)."""
    return device.type in ("cuda", "cpu")


def single_group(
    model: torch.nn.Module, profile: Profile, device: torch.device, warmup: int, total: int
) -> OptimizerGroups:
    """AdamW over every parameter with the profile's schedule: the group
    every built-in task trains."""
    t = profile.train
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(
        params, lr=t.lr, betas=t.betas, weight_decay=t.weight_decay, fused=fused_on(device)
    )
    scheduler = build_lr_scheduler(
        optimizer, t.schedule, warmup, total, t.restart_period, t.restart_mult
    )
    return OptimizerGroups(
        [OptimizerGroup(MAIN, params, optimizer, scheduler, t.grad_clip or None)]
    )


def task_groups(
    task: Task,
    model: torch.nn.Module,
    profile: Profile,
    device: torch.device,
    warmup: int,
    total: int,
) -> OptimizerGroups:
    """The task's declared groups (in its update order), or the single
    "main" group when it declares none."""
    specs = task.optimizer_groups()
    if not specs:
        return single_group(model, profile, device, warmup, total)
    _check_cover(model, specs)
    groups = [_build_group(spec, profile, device, warmup, total) for spec in specs]
    return OptimizerGroups(groups, primary=task.primary_group())


def _build_group(
    spec: GroupSpec, profile: Profile, device: torch.device, warmup: int, total: int
) -> OptimizerGroup:
    """AdamW with the spec's settings where it has them, the profile's elsewhere."""
    t = profile.train
    optimizer = torch.optim.AdamW(
        spec.params,
        lr=t.lr if spec.lr is None else spec.lr,
        betas=t.betas if spec.betas is None else spec.betas,
        weight_decay=t.weight_decay if spec.weight_decay is None else spec.weight_decay,
        fused=fused_on(device),
    )
    schedule = spec.schedule or t.schedule
    scheduler = build_lr_scheduler(
        optimizer, schedule, warmup, total, t.restart_period, t.restart_mult
    )
    clip = t.grad_clip if spec.clip is None else spec.clip
    return OptimizerGroup(spec.name, list(spec.params), optimizer, scheduler, clip or None)


def _check_cover(model: torch.nn.Module, specs: Sequence[GroupSpec]) -> None:
    """Every trainable parameter in exactly one group: a missing one would never
    train, a shared one step twice."""
    owner: dict[int, str] = {}
    for spec in specs:
        for param in spec.params:
            if id(param) in owner:
                raise VegaError(
                    f"a parameter is in optimizer groups {owner[id(param)]!r} and {spec.name!r}"
                )
            owner[id(param)] = spec.name
    missing = [
        name for name, p in model.named_parameters() if p.requires_grad and id(p) not in owner
    ]
    if missing:
        raise VegaError(f"parameters in no optimizer group: {', '.join(missing[:5])}")
