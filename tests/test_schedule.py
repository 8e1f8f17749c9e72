"""LR schedules match torch's own schedulers step by step, resume exactly and re-plan in place."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch.optim import lr_scheduler as tl

from trainer_core.contract.errors import ProfileError
from trainer_core.engine.schedule import build_lr_scheduler, lr_factor, set_total_steps

BASE_LR = 0.01


def _optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=BASE_LR)


def _lrs(scheduler, steps: int) -> list[float]:
    """The LR used by each of `steps` optimizer steps (the optimizer has no grads: step is a no-op)."""
    out = []
    for _ in range(steps):
        out.append(scheduler.optimizer.param_groups[0]["lr"])
        scheduler.optimizer.step()
        scheduler.step()
    return out


def _compare(ours, reference, steps: int) -> None:
    assert _lrs(ours, steps) == pytest.approx(_lrs(reference, steps), rel=1e-6, abs=1e-12)


def _pair(make_reference: Callable[[torch.optim.Optimizer], object], **ours):
    return build_lr_scheduler(_optimizer(), **ours), make_reference(_optimizer())


@pytest.mark.parametrize("min_lr_ratio", [0.0, 0.1])
def test_cosine_without_warmup_matches_cosine_annealing(min_lr_ratio: float) -> None:
    ours, ref = _pair(
        lambda o: tl.CosineAnnealingLR(o, T_max=50, eta_min=BASE_LR * min_lr_ratio),
        schedule="cosine",
        warmup_steps=0,
        total_steps=50,
        min_lr_ratio=min_lr_ratio,
    )
    _compare(ours, ref, 51)


@pytest.mark.parametrize("t_mult", [1, 2, 3])
def test_restarts_without_warmup_match_cosine_warm_restarts(t_mult: int) -> None:
    ours, ref = _pair(
        lambda o: tl.CosineAnnealingWarmRestarts(o, T_0=7, T_mult=t_mult, eta_min=BASE_LR * 0.05),
        schedule="cosine_restarts",
        warmup_steps=0,
        total_steps=None,
        restart_period=7,
        restart_mult=t_mult,
        min_lr_ratio=0.05,
    )
    _compare(ours, ref, 400)


def _warmup(o: torch.optim.Optimizer, warmup: int) -> tl.LinearLR:
    return tl.LinearLR(o, start_factor=1.0 / (warmup + 1), end_factor=1.0, total_iters=warmup)


def test_warmup_then_cosine_matches_linear_then_cosine() -> None:
    ours, ref = _pair(
        lambda o: tl.SequentialLR(o, [_warmup(o, 10), tl.CosineAnnealingLR(o, T_max=90)], milestones=[10]),
        schedule="cosine",
        warmup_steps=10,
        total_steps=100,
    )
    _compare(ours, ref, 101)


def test_warmup_then_restarts_matches_linear_then_warm_restarts() -> None:
    ours, ref = _pair(
        lambda o: tl.SequentialLR(
            o, [_warmup(o, 5), tl.CosineAnnealingWarmRestarts(o, T_0=10, T_mult=2)], milestones=[5]
        ),
        schedule="cosine_restarts",
        warmup_steps=5,
        total_steps=None,
        restart_period=10,
        restart_mult=2,
    )
    _compare(ours, ref, 200)


def test_warmup_then_constant_matches_linear_lr() -> None:
    ours, ref = _pair(lambda o: _warmup(o, 8), schedule="constant", warmup_steps=8, total_steps=None)
    _compare(ours, ref, 40)


def test_lr_factor_shape() -> None:
    args = dict(schedule="cosine", warmup_steps=4, total_steps=14)
    assert [lr_factor(s, **args) for s in range(5)] == [0.2, 0.4, 0.6, 0.8, 1.0]  # first step already learns
    assert lr_factor(9, **args) == pytest.approx(0.5)  # half way through the decay
    assert lr_factor(14, **args) == 0.0
    assert all(lr_factor(s, **args) == 0.0 for s in range(14, 200))  # never negative past the end
    assert lr_factor(500, "cosine", 0, 10, min_lr_ratio=0.25) == 0.25
    assert lr_factor(10**9, "cosine_restarts", 0, None, restart_period=3, restart_mult=2) <= 1.0
    assert lr_factor(7, "cosine_restarts", 2, None, restart_period=5) == 1.0  # a restart
    assert lr_factor(0, "constant", 0, None) == 1.0


def test_state_dict_round_trip_resumes_identically(tmp_path) -> None:
    args = dict(schedule="cosine", warmup_steps=10, total_steps=120)
    straight = build_lr_scheduler(_optimizer(), **args)
    first = build_lr_scheduler(_optimizer(), **args)
    expected = _lrs(straight, 120)
    assert _lrs(first, 37) == expected[:37]
    path = tmp_path / "sched.pt"
    torch.save({"opt": first.optimizer.state_dict(), "sched": first.state_dict()}, path)
    state = torch.load(path, weights_only=True)  # checkpoints load this way: settings are plain values
    # The resumed scheduler is built from different settings: the checkpoint's plan wins.
    resumed = build_lr_scheduler(_optimizer(), schedule="cosine", warmup_steps=10, total_steps=999)
    resumed.optimizer.load_state_dict(state["opt"])
    resumed.load_state_dict(state["sched"])
    assert resumed.lr_lambdas[0].total_steps == 120
    assert _lrs(resumed, 120 - 37) == expected[37:]


def test_set_total_steps_replans_without_resetting_progress() -> None:
    scheduler = build_lr_scheduler(_optimizer(), schedule="cosine", warmup_steps=5, total_steps=100)
    _lrs(scheduler, 40)
    set_total_steps(scheduler, 300)
    assert scheduler.last_epoch == 40
    assert scheduler.optimizer.param_groups[0]["lr"] == pytest.approx(BASE_LR * lr_factor(40, "cosine", 5, 300))
    assert scheduler.get_last_lr() == [scheduler.optimizer.param_groups[0]["lr"]]
    expected = [BASE_LR * lr_factor(s, "cosine", 5, 300) for s in range(40, 80)]
    assert _lrs(scheduler, 40) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ProfileError, match="warmup_steps"):
        set_total_steps(scheduler, 5)
    assert scheduler.lr_lambdas[0].total_steps == 300  # a refused re-plan changes nothing


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(schedule="linear", warmup_steps=0, total_steps=10), "train.schedule"),
        (dict(schedule="cosine", warmup_steps=10, total_steps=10), "train.warmup_steps"),
        (dict(schedule="cosine", warmup_steps=0, total_steps=None), "total steps"),
        (dict(schedule="cosine_restarts", warmup_steps=0, total_steps=None, restart_period=0), "train.restart_period"),
        (dict(schedule="cosine_restarts", warmup_steps=0, total_steps=None, restart_mult=1.5), "train.restart_mult"),
        (dict(schedule="constant", warmup_steps=-1, total_steps=None), "train.warmup_steps"),
        (dict(schedule="cosine", warmup_steps=0, total_steps=10, min_lr_ratio=2.0), "min_lr_ratio"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ProfileError, match=field.replace(".", r"\.")):
        build_lr_scheduler(_optimizer(), **kwargs)
    with pytest.raises(ProfileError):
        lr_factor(0, **kwargs)


def test_lambda_is_finite_everywhere() -> None:
    for schedule in ("cosine", "cosine_restarts", "constant"):
        values = [lr_factor(s, schedule, 3, 50, restart_period=4, restart_mult=3) for s in range(0, 2000, 7)]
        assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values)
