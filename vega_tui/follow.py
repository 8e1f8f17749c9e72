"""Follow a run's events.jsonl from a background thread and hand over events in batches.

`EventFollower` polls `trainer_core.contract.eventlog.EventReader` (which reads only the bytes
appended since the last poll and keeps a partial last line until its newline arrives) and calls
`on_batch(events, malformed_total, gaps_total)` with up to `max_batch` events at a time — never
once per event. A big log that already exists is delivered in back-to-back batches; afterwards
the thread sleeps `poll_interval` between polls. It knows no widgets: the callback is where a
screen posts a message to its app.

With `on_store` and `make_store` given, a log of at least `preview.min_bytes` is opened in two
stages, so a long run shows its latest state at once: a preview store (vega_tui/preview.py: head,
sampled middle, tail) is handed over first, then the exact history is read from byte 0 into a
fresh store in this thread and handed over when it reaches the end of the file
(`on_progress(fraction)` reports how far it got). Lines appended meanwhile go to `on_batch` for
the preview store; after the exact store, following goes on from where it stopped reading, so no
line is lost or applied twice to the store in use.

The exact history is read by a child process (vega_tui/history_worker.py) up to the preview's end,
so this process's GIL stays free for the UI; this thread only relays its progress and the preview's
live lines. If the child fails, the history is read in this thread instead (`history_error` says
why, and the exact store gets a warning line). `VEGA_HISTORY_WORKER=0` in the environment, or
`history_worker=None`, reads it here.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from trainer_core.contract.eventlog import EventReader, follow_from
from trainer_core.contract.protocol import Event
from vega_tui.history_worker import (
    RESULT,
    WORKER_ARGV,
    HistoryChild,
    HistoryFailed,
    HistoryRequest,
    HistoryResult,
)
from vega_tui.preview import DEFAULT_PLAN, Preview, PreviewPlan, read_preview, wants_preview
from vega_tui.store import RunStore

BatchCallback = Callable[[list[Event], int, int], None]
# (store, exact): a preview store (exact False) first, then the store of the
# whole history (exact True).
StoreCallback = Callable[[RunStore, bool], None]
ProgressCallback = Callable[[float], None]
HISTORY_SWITCH_INTERVAL_S = 0.0005
# The child that reads a previewed log's exact history; "0" in the environment
# reads it in the follower thread.
DEFAULT_HISTORY_WORKER: tuple[str, ...] | None = (
    None if os.environ.get("VEGA_HISTORY_WORKER") == "0" else WORKER_ARGV
)


_slices_lock = threading.Lock()
_slices_users = 0
_slices_saved = 0.005


@contextmanager
def _short_gil_slices() -> Iterator[None]:
    """While a history is read (many seconds of computing), use a short GIL switch interval: each
    event-loop turn of the UI thread then waits a fraction of a millisecond for the GIL instead of
    up to 5 ms (a key press that takes ~20 turns answered ~3x sooner in a measurement). Nested and
    concurrent users share one setting."""
    global _slices_users, _slices_saved
    with _slices_lock:
        if _slices_users == 0:
            _slices_saved = sys.getswitchinterval()
            sys.setswitchinterval(HISTORY_SWITCH_INTERVAL_S)
        _slices_users += 1
    try:
        yield
    finally:
        with _slices_lock:
            _slices_users -= 1
            if _slices_users == 0:
                sys.setswitchinterval(_slices_saved)


class EventFollower:
    """A daemon thread following `path`. Started on construction unless
    `autostart=False` (then `start()`)."""

    def __init__(
        self,
        path: Path | str,
        on_batch: BatchCallback,
        poll_interval: float = 0.1,
        max_batch: int = 5000,
        *,
        max_bytes_per_poll: int = 1024 * 1024,
        autostart: bool = True,
        on_store: StoreCallback | None = None,
        make_store: Callable[[], RunStore] | None = None,
        on_progress: ProgressCallback | None = None,
        preview: PreviewPlan | None = DEFAULT_PLAN,
        history_worker: Sequence[str] | None = DEFAULT_HISTORY_WORKER,
    ) -> None:
        self.path = Path(path)
        self.on_batch = on_batch
        self.poll_interval = poll_interval
        self.max_batch = max(1, max_batch)
        self.reader = EventReader(self.path, max_bytes_per_poll=max_bytes_per_poll)
        self.on_store, self.make_store, self.on_progress = on_store, make_store, on_progress
        self.preview = preview if on_store is not None and make_store is not None else None
        # from opening a previewed log to handing over its exact store
        self.history_seconds: float | None = None
        self.history_worker = history_worker
        self.history_pid: int | None = None  # the child reading the exact history, once started
        # why the child gave no history (then this thread read it)
        self.history_error: str | None = None
        self._child: HistoryChild | None = None
        self.batches = 0
        self.events = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._caught_up = threading.Event()
        self._history_done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"vega-follow-{self.path.parent.name}", daemon=True
        )
        self._started = False
        if autostart:
            self.start()

    def start(self) -> None:
        """Start following (a second call does nothing)."""
        if not self._started:
            self._started = True
            self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end; it does so within one poll interval (or after the callback it is
        in). A child reading the history is killed now; the thread reaps it."""
        self._stop.set()
        child = self._child
        if child is not None:
            child.kill()

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
        """Block until the follower has delivered everything the file held at some
        moment (tests, replay); for a previewed log, once the preview (which covers the
        end of the file) was handed over."""
        return self._caught_up.wait(timeout)

    def wait_history(self, timeout: float | None = None) -> bool:
        """Block until the store handed over reflects every line (at once for
        a log that needed no preview)."""
        return self._history_done.wait(timeout)

    def _run(self) -> None:
        try:
            if wants_preview(self.path, self.preview):
                self._open_with_preview()
            self._history_done.set()
            while not self._stop.is_set():
                self._poll_once()
                if self.reader.pending_bytes == 0:
                    self._caught_up.set()
                    self._stop.wait(self.poll_interval)
        except Exception as exc:  # noqa: BLE001 - a failing callback ends following; keep why for the owner
            self.error = exc

    def _open_with_preview(self) -> None:
        """Hand over a preview store, then read the exact history into a
        fresh one and hand that over."""
        assert (
            self.on_store is not None and self.make_store is not None and self.preview is not None
        )
        started = time.monotonic()
        preview = read_preview(self.path, self.preview)
        if preview is None:
            return
        store = self.make_store()
        store.apply(preview.events)
        store.state.history_progress = 0.0
        self.on_store(store, False)
        # the preview reflects the end of the file: a dead trainer can be judged now
        self._caught_up.set()
        live = follow_from(
            self.path,
            preview.end,
            preview.identity,
            max_bytes_per_poll=self.reader.max_bytes_per_poll,
        )
        exact = self._history_in_child(live, preview) if self.history_worker is not None else None
        if exact is None:  # no child, a failed one, or stopped (then this returns at once)
            with _short_gil_slices():
                exact = self._read_history(live, preview.size)
            if exact is not None and self.history_error is not None:
                exact.note_dashboard(
                    "warning", f"{self.history_error}; the history was read in the dashboard"
                )
        if exact is not None:
            self.history_seconds = time.monotonic() - started
            self.on_store(exact, True)

    def _history_in_child(self, live: EventReader, preview: Preview) -> RunStore | None:
        """The exact store of the lines before the preview's end, read by a child
        process; following goes on from there. None when stopped first, or when the child
        failed (`history_error` says why)."""
        assert self.make_store is not None and self.history_worker is not None
        request = HistoryRequest(
            str(self.path),
            preview.end,
            preview.identity,
            self.make_store(),
            self.reader.max_bytes_per_poll,
            self.poll_interval,
        )
        try:
            child = HistoryChild(request, tuple(self.history_worker))
        except (OSError, HistoryFailed) as exc:
            self.history_error = f"history worker {self.history_worker[0]} could not start: {exc}"
            return None
        self._child, self.history_pid = child, child.pid
        try:
            result = self._wait_for_child(child, live)
        except HistoryFailed as exc:
            if not self._stop.is_set():
                self.history_error = str(exc)
            return None
        finally:
            self._child = None
            child.close()
        if result is None:
            return None
        self.reader = self._reader_after(result)
        return result.store

    def _wait_for_child(self, child: HistoryChild, live: EventReader) -> HistoryResult | None:
        """Relay the child's progress, and the preview's live lines, until
        its result (None when stopped)."""
        while not self._stop.is_set():
            progress = None
            for kind, payload in child.poll(self.poll_interval):
                if kind == RESULT:
                    return payload
                progress = payload
            self._deliver_new(live)
            if progress is not None and self.on_progress is not None:
                self.on_progress(min(1.0, progress))
        return None

    def _reader_after(self, result: HistoryResult) -> EventReader:
        """A reader that goes on from where the child stopped, with its
        counters (no false seq gap)."""
        reader = follow_from(
            self.path,
            result.end,
            result.identity,
            max_bytes_per_poll=self.reader.max_bytes_per_poll,
        )
        reader.malformed, reader.gaps, reader.missing = (
            result.malformed,
            result.gaps,
            result.missing,
        )
        reader.last_seq, reader.last_error = result.last_seq, result.last_error
        return reader

    def _read_history(self, live: EventReader, size: int) -> RunStore | None:
        """Every line from byte 0 into a fresh store (None when stopped first); between slices,
        lines appended after the preview go to `on_batch` so a live run keeps moving on screen."""
        assert self.make_store is not None
        store, reader = self.make_store(), self.reader
        next_report = time.monotonic() + self.poll_interval
        while not self._stop.is_set():
            events = reader.poll()
            for start in range(0, len(events), self.max_batch):
                store.apply(events[start : start + self.max_batch])
            if reader.pending_bytes == 0:
                store.note_reader(reader.malformed, reader.gaps)
                return store
            if time.monotonic() >= next_report:
                next_report = time.monotonic() + self.poll_interval
                self._deliver_new(live)
                if self.on_progress is not None:
                    self.on_progress(
                        min(1.0, reader.offset / max(1, size, reader.offset + reader.pending_bytes))
                    )
        return None

    def _deliver_new(self, reader: EventReader) -> None:
        """Whatever `reader` finds appended, in one or more batches (the
        preview store's live lines)."""
        events = reader.poll()
        for start in range(0, len(events), self.max_batch):
            self.on_batch(events[start : start + self.max_batch], reader.malformed, reader.gaps)

    def _poll_once(self) -> None:
        """Read what is new (several slices while catching up) and deliver
        it in batches of `max_batch`."""
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
