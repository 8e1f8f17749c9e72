"""Fault injection for tests and drills: real exceptions at chosen steps.

Sources: the profile's [debug] section, or environment variables (comma-separated steps):
  VEGA_FAULT_OOM_AT_STEPS        raise torch.OutOfMemoryError in the forward pass of these steps
  VEGA_FAULT_NONFINITE_AT_STEPS  make the loss NaN at these steps
  VEGA_FAULT_FAIL_AT_STEP        raise RuntimeError at this step (crash drills)
Each fault fires once per step number, so the retried or following attempt runs clean.
"""

from __future__ import annotations

import os

import torch

from trainer_core.profile import DebugSection


def _env_steps(name: str) -> set[int]:
    raw = os.environ.get(name, "")
    return {int(part) for part in raw.replace(" ", "").split(",") if part}


class FaultInjector:
    def __init__(self, debug: DebugSection) -> None:
        self.oom = set(debug.oom_at_steps) | _env_steps("VEGA_FAULT_OOM_AT_STEPS")
        self.nonfinite = set(debug.nonfinite_at_steps) | _env_steps("VEGA_FAULT_NONFINITE_AT_STEPS")
        fail = _env_steps("VEGA_FAULT_FAIL_AT_STEP")
        self.fail = fail | ({debug.fail_at_step} if debug.fail_at_step is not None else set())

    def before_forward(self, step: int) -> None:
        if step in self.fail:
            self.fail.discard(step)
            raise RuntimeError(f"injected failure at step {step} (fault injection)")
        if step in self.oom:
            self.oom.discard(step)
            raise torch.OutOfMemoryError(f"injected out-of-memory at step {step} (fault injection)")

    def poison_loss(self, step: int, loss: torch.Tensor) -> torch.Tensor:
        if step in self.nonfinite:
            self.nonfinite.discard(step)
            return loss * float("nan")
        return loss
