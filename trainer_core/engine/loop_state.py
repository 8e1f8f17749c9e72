"""Counters and flags of the train loop that a checkpoint must carry for an exact resume."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class LoopState:
    step: int = 0
    """Optimizer steps applied (skipped non-finite steps do not count)."""
    epoch: int = 0
    """Current epoch, from 0."""
    item: int = 0
    """Training items already consumed in the current epoch (the data position)."""
    micro_batch: int = 1
    """Items per forward pass; halved on out-of-memory."""
    grad_accum: int = 1
    """Micro-batches per optimizer step; doubled on out-of-memory so the effective batch holds."""
    total_steps: int = 1
    """Planned optimizer steps for the whole run (the LR schedule's length)."""
    warmup_steps: int | None = None
    """LR warmup steps in use, once fitted to the plan (trainer_core.warmup); None
    until a budget's plan is known."""
    best_val: float | None = None
    """Lowest validation loss seen."""
    evals_since_best: int = 0
    """Validations in a row without improvement (early stopping)."""

    @property
    def effective_batch(self) -> int:
        return self.micro_batch * self.grad_accum

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            if hasattr(self, key):
                setattr(self, key, value)


def halve_micro_batch(micro: int, accum: int) -> tuple[int, int] | None:
    """Largest micro-batch at most half the current one that keeps micro*accum unchanged.

    None when the micro-batch is already 1 (nothing left to halve).
    """
    effective = micro * accum
    for candidate in range(micro // 2, 0, -1):
        if effective % candidate == 0:
            return candidate, effective // candidate
    return None
