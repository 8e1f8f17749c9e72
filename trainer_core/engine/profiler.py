"""Inter-batch profiler: where each step's time goes (data, transfer, forward, backward, optimizer).

With several optimizer groups, forward, backward and optimizer are also timed per group (a phase
named "forward.generator" adds to "forward" and to the generator's own breakdown). On CPU the phases
run synchronously, so host timestamps are exact. On CUDA the phases are bracketed with CUDA events
and read back only when a breakdown is emitted, so steps never sync.
"""

from __future__ import annotations

import time
from typing import Any

import torch

PHASES = ("data", "transfer", "forward", "backward", "optimizer")
# Bound on CUDA event pairs kept between two breakdowns.
MAX_PENDING = 4096


class HostPhase:
    """Times one phase with the host clock. Built once and re-entered every step: on a step of a few
    milliseconds, a fresh context manager per phase is a measurable part of the framework's cost."""

    __slots__ = ("name", "profiler", "_t0")

    def __init__(self, name: str, profiler: StepProfiler) -> None:
        self.name, self.profiler, self._t0 = name, profiler, 0.0

    def __enter__(self) -> None:
        self._t0 = time.perf_counter()

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:  # a failed phase (OOM, fault) is not a timing
            self.profiler.add(self.name, time.perf_counter() - self._t0)


class CudaPhase:
    """Times one phase with a pair of CUDA events, read back only at the next breakdown."""

    __slots__ = ("name", "profiler", "_start")

    def __init__(self, name: str, profiler: StepProfiler) -> None:
        self.name, self.profiler = name, profiler
        self._start: torch.cuda.Event | None = None

    def __enter__(self) -> None:
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        self._start = start

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None and self._start is not None:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.profiler.add_events(self.name, self._start, end)
        self._start = None


class StepProfiler:
    def __init__(self, device: torch.device, interval_s: float) -> None:
        self.use_cuda_events = device.type == "cuda"
        self.interval_s = interval_s
        self._totals = dict.fromkeys(PHASES, 0.0)
        self._group_totals: dict[str, dict[str, float]] = {}
        self._pending: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self._steps = 0
        self._last_emit = time.monotonic()
        # Waiting for data is host time even on a GPU: the device is idle meanwhile.
        cuda = self.use_cuda_events
        self._phases = {
            name: CudaPhase(name, self) if cuda and name != "data" else HostPhase(name, self)
            for name in PHASES
        }

    def phase(self, name: str, group: str | None = None) -> HostPhase | CudaPhase:
        """The context that times phase `name` (one of PHASES), for one optimizer group when
        named; the same object every call."""
        key = name if group is None else f"{name}.{group}"
        found = self._phases.get(key)
        if found is None:
            found = self._phases[key] = (
                CudaPhase(key, self) if self.use_cuda_events else HostPhase(key, self)
            )
        return found

    def add(self, key: str, seconds: float) -> None:
        name, _, group = key.partition(".")
        self._totals[name] += seconds
        if group:
            per_group = self._group_totals.setdefault(group, {})
            per_group[name] = per_group.get(name, 0.0) + seconds

    def add_events(self, name: str, start: torch.cuda.Event, end: torch.cuda.Event) -> None:
        if len(self._pending) < MAX_PENDING:
            self._pending.append((name, start, end))

    def step_done(self) -> None:
        self._steps += 1

    def due(self) -> bool:
        return self._steps > 0 and time.monotonic() - self._last_emit >= self.interval_s

    def flush(self) -> dict:
        """Mean seconds per step for each phase since the last flush (one sync on CUDA)."""
        if self._pending:
            self._pending[-1][2].synchronize()  # the one sync point, once per interval
            for name, start, end in self._pending:
                self.add(name, start.elapsed_time(end) / 1000.0)
            self._pending.clear()
        steps = max(1, self._steps)
        out: dict[str, Any] = {f"{name}_s": total / steps for name, total in self._totals.items()}
        out["steps"] = self._steps
        if self._group_totals:
            out["groups"] = {
                group: {f"{name}_s": total / steps for name, total in totals.items()}
                for group, totals in self._group_totals.items()
            }
        self._totals = dict.fromkeys(PHASES, 0.0)
        self._group_totals = {}
        self._steps = 0
        self._last_emit = time.monotonic()
        return out
