"""Telemetry: per-step metrics coalesced into at most one `step` event per
window (bounded log growth).

Each event carries the latest scalars plus the per-step series of the window, so every chart
can be redrawn at full resolution from the log whatever the step rate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainer_core.contract.protocol import ProfileBreakdownEvent, StepEvent
from trainer_core.engine.distributed import RankRates

if TYPE_CHECKING:
    from trainer_core.contract.profile import Profile
    from trainer_core.engine.events import EventHub
    from trainer_core.engine.loop_state import LoopState
    from trainer_core.engine.memory_manager import MemoryManager
    from trainer_core.engine.profiler import StepProfiler
    from trainer_core.engine.run_length import RunLength
    from trainer_core.world import World


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
    lrs: dict[str, float] = field(default_factory=dict)
    """Several optimizers: each group's learning rate for this step."""


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

    def flush(self) -> StepEvent | None:
        """One `step` event covering the window, or None when empty."""
        if not self.records:
            return None
        recs, last = self.records, self.records[-1]
        seconds = sum(r.seconds for r in recs)
        items = sum(r.items for r in recs)
        event = StepEvent(
            step=last.step,
            epoch=last.epoch,
            loss=finite_or_none(last.loss),
            losses={k: v for k, v in last.losses.items() if math.isfinite(v)},
            lr=last.lr,
            lrs=last.lrs,
            grad_norm=finite_or_none(last.grad_norm),
            loss_scale=last.loss_scale,
            samples_per_s=items / seconds if seconds > 0 else 0.0,
            data_wait_frac=sum(r.data_seconds for r in recs) / seconds if seconds > 0 else 0.0,
            micro_batch=last.micro_batch,
            grad_accum=last.grad_accum,
            steps_in_window=len(recs),
            step_series=[r.step for r in recs],
            loss_series=[finite_or_none(r.loss) for r in recs],
            lr_series=[r.lr for r in recs],
        )
        self.records = []
        self.opened_at = self.clock()
        return event


class Telemetry:
    """The loop's reporting: coalesced `step` events (with memory figures),
    profile-breakdown events, and the ETA.

    Under DDP the step events also carry each rank's throughput (`rates`, fed
    by the step-boundary exchange).
    """

    def __init__(
        self,
        profile: Profile,
        state: LoopState,
        world: World,
        events: EventHub,
        memory: MemoryManager,
        profiler: StepProfiler,
        run_length: RunLength,
    ) -> None:
        self.state, self.world, self.events = state, world, events
        self.memory, self.profiler, self.run_length = memory, profiler, run_length
        self.window = StepWindow(profile.logging.step_interval_s)
        self.rates = RankRates(world.world_size)
        self.last_loss: float | None = None
        self.started = time.monotonic()
        self.first_step = 0  # where this process started counting (a resumed run starts late)

    def start(self) -> None:
        """The loop starts now: the ETA counts steps from here."""
        self.started, self.first_step = time.monotonic(), self.state.step

    def pause(self, seconds: float) -> None:
        """Paused time is not training time: keep the ETA honest."""
        self.started += seconds

    def record(self, record: StepRecord) -> None:
        self.last_loss = record.loss
        self.window.add(record)

    def report_due(self) -> None:
        """A `step` event and a profile breakdown, each when its interval has passed."""
        if self.window.due():
            self.flush()
        if self.profiler.due():
            self.events.emit(ProfileBreakdownEvent(**self.profiler.flush()))

    def flush(self) -> None:
        """The `step` event of the steps recorded since the last one
        (nothing when there are none)."""
        event = self.window.flush()
        if event is None:
            return
        event.mem_device_bytes = self.memory.device_bytes()
        event.mem_host_bytes = self.memory.host_bytes()
        event.eta_s = self.eta_s()
        if self.world.active:
            event.world_size = self.world.world_size
            event.rank_samples_per_s, event.rank_data_wait_frac = self.rates.flush()
        self.events.emit(event)

    def eta_s(self) -> float | None:
        if self.run_length.budget is not None:
            return self.run_length.eta_s()
        done_here = self.state.step - self.first_step
        if done_here <= 0:
            return None
        rate = done_here / max(1e-9, time.monotonic() - self.started)
        return max(0, self.state.total_steps - self.state.step) / rate
