"""Coalesces per-step metrics into at most one `step` event per window (bounded log growth).

Each event carries the latest scalars plus the per-step series of the window, so every chart
can be redrawn at full resolution from the log whatever the step rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class StepRecord:
    """What the loop knows after one optimizer step (plain floats: already synced once)."""

    step: int
    epoch: int
    loss: float
    losses: dict[str, float]
    lr: float
    grad_norm: float | None
    loss_scale: float | None
    items: int
    seconds: float
    data_seconds: float
    micro_batch: int
    grad_accum: int


def finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


@dataclass
class StepWindow:
    """Accumulates StepRecords until `interval_s` has passed since the last flush."""

    interval_s: float
    clock: Callable[[], float] = time.monotonic
    records: list[StepRecord] = field(default_factory=list)
    opened_at: float = 0.0

    def __post_init__(self) -> None:
        self.opened_at = self.clock()

    def add(self, record: StepRecord) -> None:
        self.records.append(record)

    def due(self) -> bool:
        return bool(self.records) and self.clock() - self.opened_at >= self.interval_s

    def flush(self) -> dict | None:
        """Fields for one `step` event covering the window, or None when empty."""
        if not self.records:
            return None
        recs, last = self.records, self.records[-1]
        seconds = sum(r.seconds for r in recs)
        items = sum(r.items for r in recs)
        fields = {
            "step": last.step,
            "epoch": last.epoch,
            "loss": finite_or_none(last.loss),
            "losses": {k: v for k, v in last.losses.items() if math.isfinite(v)},
            "lr": last.lr,
            "grad_norm": finite_or_none(last.grad_norm),
            "loss_scale": last.loss_scale,
            "samples_per_s": items / seconds if seconds > 0 else 0.0,
            "data_wait_frac": sum(r.data_seconds for r in recs) / seconds if seconds > 0 else 0.0,
            "micro_batch": last.micro_batch,
            "grad_accum": last.grad_accum,
            "steps_in_window": len(recs),
            "step_series": [r.step for r in recs],
            "loss_series": [finite_or_none(r.loss) for r in recs],
            "lr_series": [r.lr for r in recs],
        }
        self.records = []
        self.opened_at = self.clock()
        return fields
