"""Learning-rate schedules: linear warmup, then cosine decay, cosine with
warm restarts, or constant.

`lr_factor(step, ...)` is the pure multiplier of the peak LR for optimizer step `step` (0-based),
shared by the trainer and the dashboard. Warmup: factor = (step + 1) / (warmup_steps + 1) for
step < warmup_steps, so the first step already learns (torch's LinearLR with start_factor
1 / (warmup_steps + 1) gives the same values); the factor is 1.0 at step == warmup_steps.
After warmup, with t = step - warmup_steps and r = min_lr_ratio:
- "cosine": r + (1 - r) * (1 + cos(pi * t / (total_steps - warmup_steps))) / 2, held at r after
  total_steps (never negative); equals CosineAnnealingLR(T_max=total_steps) when warmup is 0.
- "cosine_restarts": the same curve over cycles of restart_period steps, each cycle restart_mult
  times longer than the last; equals CosineAnnealingWarmRestarts(T_0, T_mult). total_steps is
  unused.
- "constant": 1.0.
`build_lr_scheduler` wraps this in a LambdaLR whose settings live in a callable object, so they
are saved in the scheduler's state_dict and `set_total_steps` can re-plan without losing progress.
"""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR

from trainer_core.contract.errors import ProfileError

SCHEDULES = ("cosine", "cosine_restarts", "constant")


def check_schedule(
    schedule: str,
    warmup_steps: int,
    total_steps: int | None,
    restart_period: int,
    restart_mult: int,
    min_lr_ratio: float,
) -> None:
    """Raise ProfileError naming the field when the schedule settings cannot work together."""
    if schedule not in SCHEDULES:
        raise ProfileError(f"train.schedule = {schedule!r} is not one of {', '.join(SCHEDULES)}")
    if warmup_steps < 0:
        raise ProfileError(f"train.warmup_steps = {warmup_steps} must be 0 or more")
    if schedule == "cosine" and (total_steps is None or total_steps <= warmup_steps):
        raise ProfileError(
            f"the cosine schedule needs more total steps ({total_steps}) than train.warmup_steps "
            f"({warmup_steps}): lower train.warmup_steps or train longer"
        )
    if restart_period < 1:
        raise ProfileError(f"train.restart_period = {restart_period} must be at least 1")
    if restart_mult < 1 or int(restart_mult) != restart_mult:
        raise ProfileError(
            f"train.restart_mult = {restart_mult} must be a whole number, at least 1"
        )
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ProfileError(f"min_lr_ratio = {min_lr_ratio} must be between 0 and 1")


def _cosine(position: float, length: float, min_lr_ratio: float) -> float:
    """Half a cosine from 1 at position 0 down to min_lr_ratio at position == length."""
    return min_lr_ratio + (1.0 - min_lr_ratio) * (1.0 + math.cos(math.pi * position / length)) / 2.0


def _restart_position(t: int, period: int, mult: int) -> tuple[int, int]:
    """(steps into the current cycle, current cycle length) for t steps after warmup."""
    if mult == 1:
        return t % period, period
    while t >= period:  # cycles grow geometrically, so this loops O(log t) times
        t -= period
        period *= mult
    return t, period


def lr_factor(
    step: int,
    schedule: str,
    warmup_steps: int,
    total_steps: int | None,
    restart_period: int = 1000,
    restart_mult: int = 1,
    min_lr_ratio: float = 0.0,
) -> float:
    """Multiplier of the peak LR for 0-based optimizer step `step` (see the module docstring)."""
    check_schedule(schedule, warmup_steps, total_steps, restart_period, restart_mult, min_lr_ratio)
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    t = step - warmup_steps
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        decay_steps = total_steps - warmup_steps  # type: ignore[operator]  # checked above
        return min_lr_ratio if t >= decay_steps else _cosine(t, decay_steps, min_lr_ratio)
    position, length = _restart_position(t, restart_period, int(restart_mult))
    return _cosine(position, length, min_lr_ratio)


class ScheduleLambda:
    """The LambdaLR multiplier; a callable object (not a function) so LambdaLR saves its settings.

    Its attributes are plain numbers and strings, which `torch.load(weights_only=True)` accepts.
    """

    def __init__(
        self,
        schedule: str,
        warmup_steps: int,
        total_steps: int | None,
        restart_period: int,
        restart_mult: int,
        min_lr_ratio: float,
    ) -> None:
        check_schedule(
            schedule, warmup_steps, total_steps, restart_period, restart_mult, min_lr_ratio
        )
        self.schedule = schedule
        self.warmup_steps = int(warmup_steps)
        self.total_steps = None if total_steps is None else int(total_steps)
        self.restart_period = int(restart_period)
        self.restart_mult = int(restart_mult)
        self.min_lr_ratio = float(min_lr_ratio)

    def __call__(self, step: int) -> float:
        return lr_factor(
            step,
            self.schedule,
            self.warmup_steps,
            self.total_steps,
            self.restart_period,
            self.restart_mult,
            self.min_lr_ratio,
        )


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer,
    schedule: str,
    warmup_steps: int,
    total_steps: int | None,
    restart_period: int = 1000,
    restart_mult: int = 1,
    min_lr_ratio: float = 0.0,
) -> LambdaLR:
    """A LambdaLR following `lr_factor`; call `scheduler.step()` after each
    applied optimizer step."""
    multiplier = ScheduleLambda(
        schedule, warmup_steps, total_steps, restart_period, restart_mult, min_lr_ratio
    )
    return LambdaLR(optimizer, multiplier)


def _multipliers(scheduler: LambdaLR) -> list[ScheduleLambda]:
    """The scheduler's ScheduleLambda multipliers; a LambdaLR not made by
    build_lr_scheduler is refused."""
    multipliers: list[ScheduleLambda] = []
    for multiplier in scheduler.lr_lambdas:
        if not isinstance(multiplier, ScheduleLambda):
            raise TypeError(
                f"expected a scheduler from build_lr_scheduler, got a {type(multiplier).__name__}"
                " lambda"
            )
        multipliers.append(multiplier)
    return multipliers


def set_total_steps(scheduler: LambdaLR, total_steps: int) -> None:
    """Re-plan the schedule's length (time budget, OOM) keeping its progress; applies immediately.

    Raises ProfileError, leaving the schedule unchanged, when the new length cannot hold the warmup.
    """
    multipliers = _multipliers(scheduler)
    for multiplier in multipliers:
        check_schedule(
            multiplier.schedule,
            multiplier.warmup_steps,
            total_steps,
            multiplier.restart_period,
            multiplier.restart_mult,
            multiplier.min_lr_ratio,
        )
    for multiplier in multipliers:
        multiplier.total_steps = int(total_steps)
    _apply_current_lr(scheduler)


def set_warmup_steps(scheduler: LambdaLR, warmup_steps: int) -> None:
    """Change the warmup's length (fitted to a time budget's plan) keeping
    progress; applies immediately.

    Raises ProfileError, leaving the schedule unchanged, when the schedule's
    length cannot hold the warmup.
    """
    multipliers = _multipliers(scheduler)
    for multiplier in multipliers:
        check_schedule(
            multiplier.schedule,
            warmup_steps,
            multiplier.total_steps,
            multiplier.restart_period,
            multiplier.restart_mult,
            multiplier.min_lr_ratio,
        )
    for multiplier in multipliers:
        multiplier.warmup_steps = int(warmup_steps)
    _apply_current_lr(scheduler)


def _apply_current_lr(scheduler: LambdaLR) -> None:
    """Set the optimizer's LR for the scheduler's current step after its settings changed."""
    step = scheduler.last_epoch
    new_lrs = [
        base * fn(step) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas, strict=True)
    ]
    for group, lr in zip(scheduler.optimizer.param_groups, new_lrs, strict=True):
        group["lr"] = lr
    # get_last_lr() reads this list; keep it in step with the optimizer.
    scheduler._last_lr = new_lrs
