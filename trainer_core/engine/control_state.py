"""Requests from the control socket and from signals, handed to the loop at step boundaries.

The socket thread and signal handlers only enqueue (`ControlState`); the loop acts on them between
steps (`Controller`, the Trainer's control component), so no lock is held while training. Under DDP
the step-boundary exchange (`StepSync`) hands rank 0's commands, its plan and every rank's stop flag
to all ranks, so every rank acts alike; while paused, every rank waits together.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING

from trainer_core.contract.protocol import PausedEvent, ResumedEvent
from trainer_core.engine.distributed import MAX_COMMANDS, Agreement, StepSync

if TYPE_CHECKING:
    from trainer_core.engine.checkpointer import Checkpointer
    from trainer_core.engine.evaluation import Evaluator
    from trainer_core.engine.events import EventHub
    from trainer_core.engine.loop_state import LoopState
    from trainer_core.engine.run_length import RunLength
    from trainer_core.engine.step import StepRunner
    from trainer_core.engine.telemetry import Telemetry
    from trainer_core.world import World

# How often a paused loop looks for new commands.
PAUSE_POLL_S = 0.05

log = logging.getLogger("trainer_core")


class ControlState:
    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.stop_requested = threading.Event()
        self.paused = False
        # why the trainer paused itself; None for a client's pause
        self.pause_reason: str | None = None
        # the signal that asked for the stop; the loop logs it, the handler must not
        self.stop_signal: str | None = None

    def pause_for(self, reason: str) -> None:
        """The trainer pauses itself (memory near its budget): a checkpoint at the next
        step boundary, then the pause, through the same queue as a client's commands;
        `resume` goes on as after any pause."""
        self.pause_reason = reason
        self.request("save")
        self.request("pause")

    def stop_on_signal(self, name: str) -> None:
        """A signal handler's stop: an attribute and a queue put only. Logging there could
        deadlock: the handler may interrupt the main thread inside the event log's lock."""
        self.stop_signal = name
        self.request("stop")

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


class Controller:
    """The loop's side of control: pause, resume, save, evaluate, stop; under
    DDP agreed at each step boundary."""

    def __init__(
        self,
        control: ControlState,
        state: LoopState,
        world: World,
        events: EventHub,
        runner: StepRunner,
        run_length: RunLength,
        telemetry: Telemetry,
        checkpointer: Checkpointer,
        evaluator: Evaluator,
    ) -> None:
        self.control, self.state, self.world, self.events = control, state, world, events
        self.runner, self.run_length, self.telemetry = runner, run_length, telemetry
        self.checkpointer, self.evaluator = checkpointer, evaluator
        self.sync = StepSync(world)
        self._pending: list[str] = []  # rank 0's commands waiting for a step boundary with room

    def next_request(self) -> str | None:
        """ "finished", "stop" or None (train on), after acting on queued commands;
        all ranks get the same answer."""
        request = self._next_request()
        if request == "stop" and self.control.stop_signal is not None:
            name = self.control.stop_signal
            log.warning("received %s: saving a checkpoint and stopping", name)
        return request

    def _next_request(self) -> str | None:
        if self.world.active:
            return self._agree_on_requests()
        if self.run_length.finished():
            return "finished"
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
            self.checkpointer.save()
        elif cmd == "evaluate":
            self.evaluator.validate()
        elif cmd == "pause" and not self.control.paused:
            self.control.paused = True
            self.telemetry.flush()
            self.events.emit(PausedEvent(step=self.state.step, reason=self.control.pause_reason))
        elif cmd == "resume" and self.control.paused:
            self.control.paused, self.control.pause_reason = False, None
            self.events.emit(ResumedEvent(step=self.state.step))

    def _wait_while_paused(self) -> str | None:
        paused_at = time.monotonic()
        while self.control.paused:
            time.sleep(PAUSE_POLL_S)
            if self._run_commands(self.control.drain()) == "stop":
                return "stop"
        self._paused_for(time.monotonic() - paused_at)
        return None

    def _paused_for(self, seconds: float) -> None:
        # Time spent paused is not training time: keep ETA and the time budget honest.
        self.telemetry.pause(seconds)
        self.run_length.pause(seconds)

    def _agree_on_requests(self) -> str | None:
        """The DDP step boundary: exchange, act on rank 0's commands; while
        paused, every rank waits together."""
        paused_at: float | None = None
        while True:
            agreed = self._exchange()
            if agreed.finished and paused_at is None:
                return "finished"
            if agreed.stop:
                return "stop"
            self._run_commands(agreed.commands)
            if not self.control.paused:
                break
            paused_at = paused_at or time.monotonic()
            time.sleep(PAUSE_POLL_S)
        if paused_at is not None:
            self._paused_for(time.monotonic() - paused_at)
        return None

    def _exchange(self) -> Agreement:
        """One StepSync exchange: this rank's stop flag and timings, rank
        0's commands and decisions."""
        main, runner = self.world.is_main, self.runner
        queued = [cmd for cmd in self.control.drain() if cmd != "stop"]  # stop travels as a flag
        if main:
            self._pending += queued
        sent, self._pending = self._pending[:MAX_COMMANDS], self._pending[MAX_COMMANDS:]
        agreed = self.sync.exchange(
            stop=self.control.stop_requested.is_set(),
            finished=main and self.run_length.finished(),
            total_steps=self.state.total_steps,
            step_s=runner.step_s,
            data_s=runner.data_s,
            commands=sent,
        )
        # rank 0's time budget may have re-planned the schedule
        self.run_length.adopt(agreed.total_steps)
        if main and agreed.step_seconds[0] > 0:
            self.telemetry.rates.add(
                agreed.step_seconds, agreed.data_seconds, self.state.effective_batch
            )
        runner.step_s = runner.data_s = 0.0  # each step's timings travel once
        return agreed
