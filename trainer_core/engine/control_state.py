"""Requests from the control socket and from signals, handed to the loop at step boundaries.

The socket thread and signal handlers only enqueue (`ControlState`); the loop acts on them between
steps (`CommandsMixin`, part of the Trainer), so no lock is held while training.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer_core.engine.budget import TimeBudget
    from trainer_core.engine.events import EventHub
    from trainer_core.engine.loop_state import LoopState

# How often a paused loop looks for new commands.
PAUSE_POLL_S = 0.05


class ControlState:
    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.stop_requested = threading.Event()
        self.paused = False

    def request(self, cmd: str) -> None:
        if cmd == "stop":
            self.stop_requested.set()
        self._requests.put(cmd)

    def drain(self) -> list[str]:
        """Pending requests in arrival order."""
        if self._requests.empty():  # the usual case, every step: no exception raised and caught
            return []
        out: list[str] = []
        while True:
            try:
                out.append(self._requests.get_nowait())
            except queue.Empty:
                return out


class CommandsMixin:
    """The loop's side of control: pause, resume, save, evaluate, stop. Needs: control, events, state,
    budget, started, flush_telemetry(), save_checkpoint() and validate()."""

    control: ControlState
    events: EventHub
    state: LoopState
    budget: TimeBudget | None
    started: float

    def handle_requests(self) -> str | None:
        """Act on commands queued by the socket or signals; returns "stop" when the run must end."""
        if self._run_commands(self.control.drain()) == "stop":
            return "stop"
        return self._wait_while_paused() if self.control.paused else None

    def _run_commands(self, commands: list[str]) -> str | None:
        for cmd in commands:
            if cmd == "stop":
                return "stop"
            self._run_command(cmd)
        return None

    def _run_command(self, cmd: str) -> None:
        if cmd == "save":
            self.save_checkpoint()
        elif cmd == "evaluate":
            self.validate()
        elif cmd == "pause" and not self.control.paused:
            self.control.paused = True
            self.flush_telemetry()
            self.events.emit("paused", step=self.state.step)
        elif cmd == "resume" and self.control.paused:
            self.control.paused = False
            self.events.emit("resumed", step=self.state.step)

    def _wait_while_paused(self) -> str | None:
        paused_at = time.monotonic()
        while self.control.paused:
            time.sleep(PAUSE_POLL_S)
            if self._run_commands(self.control.drain()) == "stop":
                return "stop"
        # Time spent paused is not training time: keep ETA and the time budget honest.
        pause = time.monotonic() - paused_at
        self.started += pause
        if self.budget is not None:
            self.budget.started += pause
        return None

    if TYPE_CHECKING:  # provided by the Trainer and its other mixins

        def flush_telemetry(self) -> None: ...

        def save_checkpoint(self, is_best: bool = False) -> Path | None: ...

        def validate(self) -> float | None: ...
