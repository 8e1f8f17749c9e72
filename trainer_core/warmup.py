"""Fit the LR warmup to the planned run: a warmup longer than half the run
is shortened to a tenth of it.

`train.warmup_steps` is chosen for a full-length run; a short run (few epochs of small
data, or a time budget that fits only a few hundred steps) would otherwise spend most or
all of its steps warming up and never train at the peak learning rate. When the warmup
would take more than WARMUP_MAX_SHARE of the planned steps it becomes WARMUP_FITTED_SHARE
of them: long enough to keep the first steps gentle, short enough that most of the run
decays from the peak as the schedule intends.

Which plan: epochs x steps per epoch is known at start; a time budget's steps are known after its
calibration, so the warmup is fitted then (once per run: a checkpoint carries the fitted
warmup, and a resumed run keeps it). An explicit `train.max_steps` is left alone: the profile
already requires the warmup to be shorter, and both numbers were chosen on purpose.
Torch-free: the dry-run plan uses it.
"""

from __future__ import annotations

# A warmup longer than this share of the planned steps is shortened...
WARMUP_MAX_SHARE = 0.5
# ...to this share of them.
WARMUP_FITTED_SHARE = 0.1


def fitted_warmup(warmup_steps: int, planned_steps: int) -> int:
    """`warmup_steps`, or WARMUP_FITTED_SHARE of `planned_steps` when it would
    take more than WARMUP_MAX_SHARE."""
    if warmup_steps <= planned_steps * WARMUP_MAX_SHARE:
        return warmup_steps
    return int(max(0, planned_steps) * WARMUP_FITTED_SHARE)


def warmup_note(warmup_steps: int, fitted: int, planned_steps: int, source: str) -> str:
    """What was changed and why, for the plan's notes and the trainer's event."""
    return (
        f"train.warmup_steps ({warmup_steps}) is more than {WARMUP_MAX_SHARE:.0%} of the"
        f" ~{planned_steps} steps {source}: warming up over {fitted} steps"
        f" ({WARMUP_FITTED_SHARE:.0%} of them) instead, so the run reaches the peak LR; lower"
        " train.warmup_steps to choose yourself"
    )
