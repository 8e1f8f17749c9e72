"""Two training loops in one process taking turns step by step (used by bench/piper_step.py).

Each loop runs in its own thread and exactly one of them runs at any time, so the two steps of a
pair see the same machine load: the step-pair method of `reference_loops.Paired`, with a real
training loop on both sides instead of a hand-written reference step. A loop calls `ready(name)`
before its first step, `step_done(name)` at the end of every step (it waits there while the other
loop takes its step) and `finish(name)` when it has no more steps, which lets the other run on
alone. A failure on either side is passed to the other, which stops at its next turn with `Aborted`.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence

# A loop that waits this long for its turn gives up: the other one hangs.
STALL_S = 1800.0


class Aborted(RuntimeError):
    """The other loop failed or hung: this one stops too."""


class Turns:
    """The turn between two named loops; per loop the start and end time of every step it took."""

    def __init__(
        self,
        names: tuple[str, str],
        first: str,
        sync: Callable[[], None] | None = None,
    ) -> None:
        if first not in names:
            raise ValueError(f"{first!r} is not one of {names}")
        self.names, self.holder = names, first
        # Waits for queued GPU work, so that a step's end is its real end.
        self.sync = sync or (lambda: None)
        self.cond = threading.Condition()
        self.starts: dict[str, list[float]] = {name: [] for name in names}
        self.ends: dict[str, list[float]] = {name: [] for name in names}
        self.readied: set[str] = set()
        self.finished: set[str] = set()
        self.failure: BaseException | None = None
        self.since = time.perf_counter()  # when the holder got the turn

    def other(self, name: str) -> str:
        return self.names[1] if name == self.names[0] else self.names[0]

    def ready(self, name: str) -> None:
        """Wait until both loops are set up and it is `name`'s turn; its first step starts then."""
        with self.cond:
            self.readied.add(name)
            self.cond.notify_all()
            self._wait(name, lambda: len(self.readied) == 2 and self.holder == name)
            self.starts[name].append(time.perf_counter())

    def step_done(self, name: str, pause_s: float = 0.0) -> None:
        """End `name`'s step (after sleeping `pause_s` inside it: the negative control), hand the
        turn over and wait for it to come back."""
        if pause_s > 0:
            time.sleep(pause_s)
        self.sync()
        end = time.perf_counter()
        other = self.other(name)
        with self.cond:
            self.ends[name].append(end)
            self._hand_over(name)
            self._wait(name, lambda: self.holder == name or other in self.finished)
            self.starts[name].append(time.perf_counter())

    def finish(self, name: str) -> None:
        """`name` takes no more steps: the other loop runs on alone."""
        with self.cond:
            self.finished.add(name)
            self.readied.add(name)
            self._hand_over(name)

    def fail(self, error: BaseException) -> None:
        with self.cond:
            self.failure = self.failure or error
            self.cond.notify_all()

    def step_seconds(self, name: str) -> list[float]:
        """Seconds of each step `name` took, from getting the turn to handing it over."""
        spans = zip(self.starts[name], self.ends[name], strict=False)
        return [end - start for start, end in spans]

    def _hand_over(self, name: str) -> None:
        other = self.other(name)
        if other not in self.finished and self.holder != other:
            self.holder, self.since = other, time.perf_counter()
        self.cond.notify_all()

    def _wait(self, name: str, until: Callable[[], bool]) -> None:
        deadline = time.monotonic() + STALL_S
        while not until():
            if self.failure is not None:
                raise Aborted(f"{name}: the other loop failed: {self.failure!r}")
            if time.monotonic() > deadline:
                raise Aborted(f"{name}: no turn for {STALL_S:.0f} s; the other loop hangs")
            self.cond.wait(timeout=1.0)
        if self.failure is not None:
            raise Aborted(f"{name}: the other loop failed: {self.failure!r}")


class UtilByTurn:
    """NVML's GPU utilisation read on a thread, each reading credited to the loop holding the turn;
    readings whose averaging window reaches back past a hand-over are left out (NVML averages over
    up to `window_s`)."""

    def __init__(self, turns: Turns, every_s: float = 0.05, window_s: float = 0.2) -> None:
        from trainer_core.contract.nvml import NvmlSource

        self.turns, self.every_s, self.window_s = turns, every_s, window_s
        self.source = NvmlSource()
        self.readings: dict[str, list[float]] = {name: [] for name in turns.names}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._poll, name="gpu-util", daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.done.wait(self.every_s):
            holder, since = self.turns.holder, self.turns.since
            started = len(self.turns.readied) == 2 and not self.turns.finished
            if not started or time.perf_counter() - since < self.window_s:
                continue
            gpus = self.source.read()
            if gpus and gpus[0].utilization_pct is not None and self.turns.since == since:
                self.readings[holder].append(float(gpus[0].utilization_pct))

    def stop(self) -> dict[str, float | None]:
        """Mean utilisation (%) per loop while it held the turn; None where nothing was read."""
        self.done.set()
        self.thread.join()
        self.source.close()
        return {name: mean_or_none(values) for name, values in self.readings.items()}


def mean_or_none(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None
