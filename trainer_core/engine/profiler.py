"""Inter-batch profiler: where each step's time goes (data, transfer, forward, backward, optimizer).

On CPU the phases run synchronously, so host timestamps are exact. On CUDA the phases are
bracketed with CUDA events and read back only when a breakdown is emitted, so steps never sync.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import torch

PHASES = ("data", "transfer", "forward", "backward", "optimizer")
# Bound on CUDA event pairs kept between two breakdowns.
MAX_PENDING = 4096


class StepProfiler:
    def __init__(self, device: torch.device, interval_s: float) -> None:
        self.use_cuda_events = device.type == "cuda"
        self.interval_s = interval_s
        self._totals = dict.fromkeys(PHASES, 0.0)
        self._pending: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self._steps = 0
        self._last_emit = time.monotonic()

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        # Waiting for data is host time even on a GPU: the device is idle meanwhile.
        if self.use_cuda_events and name != "data":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            if len(self._pending) < MAX_PENDING:
                self._pending.append((name, start, end))
            return
        t0 = time.perf_counter()
        yield
        self._totals[name] += time.perf_counter() - t0

    def step_done(self) -> None:
        self._steps += 1

    def due(self) -> bool:
        return self._steps > 0 and time.monotonic() - self._last_emit >= self.interval_s

    def flush(self) -> dict:
        """Mean seconds per step for each phase since the last flush (one sync on CUDA)."""
        if self._pending:
            self._pending[-1][2].synchronize()  # the one sync point, once per interval
            for name, start, end in self._pending:
                self._totals[name] += start.elapsed_time(end) / 1000.0
            self._pending.clear()
        steps = max(1, self._steps)
        out = {f"{name}_s": total / steps for name, total in self._totals.items()}
        out["steps"] = self._steps
        self._totals = dict.fromkeys(PHASES, 0.0)
        self._steps = 0
        self._last_emit = time.monotonic()
        return out
