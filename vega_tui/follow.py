"""Follow a run's events.jsonl from a background thread and hand over events in batches.

`EventFollower` polls `trainer_core.eventlog.EventReader` (which reads only the bytes appended since the last
poll and keeps a partial last line until its newline arrives) and calls `on_batch(events, malformed_total,
gaps_total)` with up to `max_batch` events at a time — never once per event. A big log that already exists is
delivered in back-to-back batches; afterwards the thread sleeps `poll_interval` between polls. It knows no
widgets: the callback is where a screen posts a message to its app.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from trainer_core.eventlog import EventReader
from trainer_core.protocol import Event

BatchCallback = Callable[[list[Event], int, int], None]


class EventFollower:
    """A daemon thread following `path`. Started on construction unless `autostart=False` (then `start()`)."""

    def __init__(
        self,
        path: Path | str,
        on_batch: BatchCallback,
        poll_interval: float = 0.1,
        max_batch: int = 5000,
        *,
        max_bytes_per_poll: int = 1024 * 1024,
        autostart: bool = True,
    ) -> None:
        self.path = Path(path)
        self.on_batch = on_batch
        self.poll_interval = poll_interval
        self.max_batch = max(1, max_batch)
        self.reader = EventReader(self.path, max_bytes_per_poll=max_bytes_per_poll)
        self.batches = 0
        self.events = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._caught_up = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"vega-follow-{self.path.parent.name}", daemon=True)
        self._started = False
        if autostart:
            self.start()

    def start(self) -> None:
        """Start following (a second call does nothing)."""
        if not self._started:
            self._started = True
            self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end; it does so within one poll interval (or after the callback it is in)."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        if self._started:
            self._thread.join(timeout)

    def close(self, timeout: float | None = 2.0) -> None:
        """stop() then join()."""
        self.stop()
        self.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def wait_caught_up(self, timeout: float | None = None) -> bool:
        """Block until the follower has delivered everything the file held at some moment (tests, replay)."""
        return self._caught_up.wait(timeout)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._poll_once()
                if self.reader.pending_bytes == 0:
                    self._caught_up.set()
                    self._stop.wait(self.poll_interval)
        except Exception as exc:  # noqa: BLE001 - a failing callback ends following; keep why for the owner
            self.error = exc

    def _poll_once(self) -> None:
        """Read what is new (several slices while catching up) and deliver it in batches of `max_batch`."""
        reader = self.reader
        counters = (reader.malformed, reader.gaps)
        events: list[Event] = []
        while not self._stop.is_set():
            events.extend(reader.poll())
            if reader.pending_bytes == 0 or len(events) >= self.max_batch:
                break
        if not events and counters == (reader.malformed, reader.gaps):
            return
        for start in range(0, max(1, len(events)), self.max_batch):
            if self._stop.is_set():
                return
            self._deliver(events[start : start + self.max_batch])

    def _deliver(self, batch: list[Event]) -> None:
        self.batches += 1
        self.events += len(batch)
        self.on_batch(batch, self.reader.malformed, self.reader.gaps)
