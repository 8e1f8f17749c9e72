"""The memory manager's acts, between steps: release caches, shrink the
micro-batch, checkpoint and pause.

After every step the guard reads the trainer's memory against its budget (`MemoryManager`). When the
level rises it acts once for the new level:
  moderate  release caches (gc, empty_cache);
  high      release, then halve the micro-batch through the OOM recovery's own path (`StepRunner.
            shrink_micro_batch`): accumulation doubles, so the effective batch, the data order and
            the learning rate schedule stay those of the run as planned;
  critical  release, then a checkpoint and a pause through the control queue, with the reason on the
            dashboard; `resume` (a client's command) goes on.
Every level change is a `memory` event saying what was decided. Under DDP the micro-batch cannot
shrink on one rank alone (the ranks' steps would differ), and only rank 0's pause request
reaches the step-boundary exchange.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer_core.contract.protocol import MemoryDecision, MemoryEvent
from trainer_core.engine.memory_manager import GIB, MemoryManager, MemoryReading, worse

if TYPE_CHECKING:
    from trainer_core.engine.control_state import ControlState
    from trainer_core.engine.events import EventHub
    from trainer_core.engine.step import StepRunner
    from trainer_core.world import World


class MemoryGuard:
    """Acts on the memory level after each step; every decision is a `memory` event."""

    def __init__(
        self,
        memory: MemoryManager,
        runner: StepRunner,
        control: ControlState,
        world: World,
        events: EventHub,
    ) -> None:
        self.memory, self.runner, self.control, self.world, self.events = (
            memory,
            runner,
            control,
            world,
            events,
        )

    def observe(self) -> MemoryEvent | None:
        """Read the memory; on a level change, act (when it rose) and emit
        the event (None when unchanged)."""
        reading = self.memory.read()
        previous = self.memory.level
        if reading.level == previous:
            return None
        self.memory.level = reading.level
        decision: MemoryDecision = "none"
        action = "none"
        if worse(reading.level, previous):
            decision, action = self._act(reading)
        state = self.runner.state
        shrunk = decision == "shrink"
        event = MemoryEvent(
            level=reading.level,
            used_frac=reading.used_frac,
            action=action,
            decision=decision,
            step=state.step,
            used_bytes=reading.used_bytes,
            budget_bytes=reading.budget_bytes,
            micro_batch=state.micro_batch if shrunk else None,
            grad_accum=state.grad_accum if shrunk else None,
        )
        self.events.emit(event)
        return event

    def _act(self, reading: MemoryReading) -> tuple[MemoryDecision, str]:
        if not self.memory.settings.act:
            return "none", "reported only (memory.act = false)"
        freed = f"released caches ({self.memory.release()})"
        if reading.level == "moderate":
            return "release", freed
        if reading.level == "high":
            return self._shrink(freed)
        reason = (
            f"memory at {reading.used_frac:.0%} of its {reading.budget_bytes / GIB:.1f} GiB budget"
        )
        self.control.pause_for(reason)
        return (
            "pause",
            (
                f"{freed}; {reason}: saving a checkpoint and pausing (free memory or lower"
                " train.batch_size, then resume)"
            ),
        )

    def _shrink(self, freed: str) -> tuple[MemoryDecision, str]:
        state = self.runner.state
        if self.world.active:
            return "release", f"{freed}; the micro-batch cannot shrink on one rank alone under DDP"
        before = state.micro_batch
        if self.runner.shrink_micro_batch() is None:
            return "release", f"{freed}; the micro-batch is 1 already"
        return (
            "shrink",
            (
                f"{freed}; micro-batch {before} -> {state.micro_batch} x accumulation"
                f" {state.grad_accum} (effective batch {state.effective_batch} kept)"
            ),
        )
