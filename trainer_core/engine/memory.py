"""Adaptive memory manager: cheap pressure reading every step, cache release under pressure.

CUDA pressure is the caching allocator's reserved bytes over the card's total: a host-side
counter, so reading it never synchronises the GPU.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass

import psutil
import torch

from trainer_core.contract.protocol import MemoryLevel

# Upper bounds of each level as a fraction of device memory.
LEVELS: tuple[tuple[float, MemoryLevel], ...] = (
    (0.60, "low"),
    (0.75, "moderate"),
    (0.85, "high"),
    (float("inf"), "critical"),
)
# Host RAM is read through /proc; once a second is plenty and keeps the per-step cost near zero.
HOST_READ_INTERVAL_S = 1.0


def level_for(fraction: float) -> MemoryLevel:
    for bound, name in LEVELS:
        if fraction < bound:
            return name
    return "critical"


@dataclass
class MemoryChange:
    level: MemoryLevel
    used_frac: float
    action: str


class MemoryManager:
    """Tracks the pressure level of the training device and reacts when it changes."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.level: MemoryLevel = "low"
        self._total = self._device_total()
        self._next_host_read = 0.0
        self._host_frac = 0.0
        self._process = psutil.Process()

    def _device_total(self) -> int | None:
        if self.device.type == "cuda":
            return torch.cuda.get_device_properties(self.device).total_memory
        if self.device.type == "mps":
            return int(torch.mps.recommended_max_memory())
        return None

    def used_fraction(self) -> float:
        if self._total and self.device.type == "cuda":
            return torch.cuda.memory_reserved(self.device) / self._total
        if self._total and self.device.type == "mps":
            return torch.mps.driver_allocated_memory() / self._total
        now = time.monotonic()
        if now >= self._next_host_read:
            self._host_frac = psutil.virtual_memory().percent / 100.0
            self._next_host_read = now + HOST_READ_INTERVAL_S
        return self._host_frac

    def host_bytes(self) -> int:
        """Resident memory of this process; read at telemetry rate, not per step."""
        return self._process.memory_info().rss

    def device_bytes(self) -> int | None:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device)
        if self.device.type == "mps":
            return torch.mps.current_allocated_memory()
        return None

    def observe(self) -> MemoryChange | None:
        """Read pressure; on a level change, act and report it (None when unchanged)."""
        frac = self.used_fraction()
        level = level_for(frac)
        if level == self.level:
            return None
        worse = [n for _, n in LEVELS].index(level) > [n for _, n in LEVELS].index(self.level)
        self.level = level
        action = self.release() if worse and level in ("high", "critical") else "none"
        return MemoryChange(level=level, used_frac=frac, action=action)

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
