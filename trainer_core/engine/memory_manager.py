"""Memory manager: the trainer's own memory against its budget, and the level that calls for an act.

What is measured is the trainer, not the machine: CUDA's caching allocator's reserved bytes (a
host-side counter, so reading it never synchronises the GPU), MPS's current allocation, or on the
CPU this process's resident set (read through /proc at most once a second). The budget and the
levels, as fractions of it, come from the profile's [memory] section; `MemoryGuard`
(engine.memory_guard) acts on them. The reading is a plain callable, `source`, so tests (and drills)
replace it with one of their own.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil
import torch

from trainer_core.contract.profile import MemorySection
from trainer_core.contract.protocol import MemoryLevel

GIB = 1024**3
# Default budgets when the profile sets none: most of a GPU, three quarters
# of the host's RAM on CPU.
DEVICE_BUDGET_FRACTION = 0.90
HOST_BUDGET_FRACTION = 0.75
# Host RAM is read through /proc; once a second is plenty and keeps the per-step cost near zero.
HOST_READ_INTERVAL_S = 1.0
LEVEL_ORDER: tuple[MemoryLevel, ...] = ("low", "moderate", "high", "critical")

MemorySource = Callable[[], int]
"""Bytes the trainer uses now, as the budget counts them."""


class ProcessRss:
    """This process's resident set size, re-read at most every `interval_s` seconds."""

    def __init__(self, interval_s: float = HOST_READ_INTERVAL_S) -> None:
        self._process = psutil.Process()
        self._interval_s = interval_s
        self._next_read = 0.0
        self._bytes = 0

    def __call__(self) -> int:
        now = time.monotonic()
        if now >= self._next_read:
            self._bytes = int(self._process.memory_info().rss)
            self._next_read = now + self._interval_s
        return self._bytes


def device_source(device: torch.device) -> MemorySource:
    """How the budget measures the trainer on `device`."""
    if device.type == "cuda":
        return lambda: int(torch.cuda.memory_reserved(device))
    if device.type == "mps":
        return lambda: int(torch.mps.current_allocated_memory())
    return ProcessRss()


def default_budget(device: torch.device) -> int:
    """The budget when the profile sets none: a share of the GPU's memory,
    else of the host's RAM."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory * DEVICE_BUDGET_FRACTION)
    if device.type == "mps":
        return int(torch.mps.recommended_max_memory() * DEVICE_BUDGET_FRACTION)
    return int(psutil.virtual_memory().total * HOST_BUDGET_FRACTION)


@dataclass(frozen=True)
class MemoryReading:
    level: MemoryLevel
    used_bytes: int
    budget_bytes: int

    @property
    def used_frac(self) -> float:
        return self.used_bytes / self.budget_bytes


class MemoryManager:
    """Reads the trainer's memory against its budget; says which level that
    is and frees caches on request."""

    def __init__(
        self, device: torch.device, settings: MemorySection, source: MemorySource | None = None
    ) -> None:
        self.device, self.settings = device, settings
        self.source: MemorySource = source or device_source(device)
        gb = settings.budget_gb
        self.budget_bytes = int(gb * GIB) if gb is not None else default_budget(device)
        self.level: MemoryLevel = "low"
        self._process = psutil.Process()

    def level_for(self, fraction: float) -> MemoryLevel:
        s = self.settings
        if fraction >= s.pause_at:
            return "critical"
        if fraction >= s.shrink_at:
            return "high"
        if fraction >= s.release_at:
            return "moderate"
        return "low"

    def read(self) -> MemoryReading:
        used = self.source()
        return MemoryReading(self.level_for(used / self.budget_bytes), used, self.budget_bytes)

    def host_bytes(self) -> int:
        """Resident memory of this process; read at telemetry rate, not per step."""
        return self._process.memory_info().rss

    def device_bytes(self) -> int | None:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device)
        if self.device.type == "mps":
            return torch.mps.current_allocated_memory()
        return None

    def release(self) -> str:
        """Free what can be freed without touching live tensors; returns what was done."""
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            return "gc + empty_cache"
        if self.device.type == "mps":
            torch.mps.empty_cache()
            return "gc + empty_cache"
        return "gc"


def worse(level: MemoryLevel, than: MemoryLevel) -> bool:
    return LEVEL_ORDER.index(level) > LEVEL_ORDER.index(than)
