"""The trainer's single way out for telemetry: validated events to the log, plus local listeners.

Also bridges Python logging: records become `log` events and lines in trainer.log.
Under DDP only rank 0 writes events: the other ranks' hubs hold a `NullEventWriter`, and their
log records go to `trainer-rank<N>.log` (errors also to stderr, which torchrun passes on to
the launching terminal or log).
"""

from __future__ import annotations

import logging
import sys
import traceback
from collections.abc import Callable
from typing import Any, Literal

from trainer_core.contract.eventlog import EventWriter
from trainer_core.contract.protocol import ErrorEvent, Event, LogEvent, WarningEvent

Listener = Callable[[Event], None]
LogLevel = Literal["debug", "info", "warning", "error", "critical"]
# Set on a log record that already has its own event, so the bridge does not
# repeat it as a `log` event.
NO_EVENT = "vega_no_event"
log = logging.getLogger("trainer_core")


class NullEventWriter:
    """The event writer of ranks other than 0: events are still built and
    validated, but written nowhere."""

    def emit(self, event: Event) -> Event:
        return event

    def close(self, timeout: float = 1.0) -> None:
        pass


class EventHub:
    """Appends protocol events (built by the caller, so type-checked) to
    events.jsonl and tells local listeners."""

    def __init__(
        self, writer: EventWriter | NullEventWriter, listeners: list[Listener] | None = None
    ) -> None:
        self.writer = writer
        self.listeners = list(listeners or [])

    def emit(self, event: Event) -> None:
        """Write one protocol event and tell the listeners. Never raises:
        telemetry must not stop training."""
        try:
            self.writer.emit(event)
        # the writer already survives I/O errors; anything else is a bug to report
        except Exception as exc:
            print(f"vega: dropped {event.type!r} event: {exc}", file=sys.stderr)
            return
        for listener in self.listeners:
            try:
                listener(event)
            except Exception:  # a broken console must not stop training either
                traceback.print_exc()

    def warn(self, message: str, code: str | None = None) -> None:
        """A `warning` event, also written to trainer.log (without a duplicate `log` event)."""
        log.warning("%s", message, extra={NO_EVENT: True})
        self.emit(WarningEvent(message=message, code=code))

    def error(self, message: str, tb: str | None = None, **details: Any) -> None:
        """An `error` event, also written to trainer.log (without a duplicate
        `log` event); `details` are the event's other fields (code, task_method,
        file, line, function, expected)."""
        log.error("%s", message, extra={NO_EVENT: True})
        if tb:
            log.error("%s", tb, extra={NO_EVENT: True})
        self.emit(ErrorEvent(message=message, traceback=tb, **details))


class EventLogHandler(logging.Handler):
    """Forwards log records at INFO and above as `log` events so every viewer sees them."""

    def __init__(self, hub: EventHub) -> None:
        super().__init__(level=logging.INFO)
        self.hub = hub

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, NO_EVENT, False):
            return
        self.hub.emit(LogEvent(level=_level_name(record.levelno), message=record.getMessage()))


def _level_name(levelno: int) -> LogLevel:
    """The protocol's name for a logging level (custom levels round down to
    the nearest standard one)."""
    if levelno >= logging.CRITICAL:
        return "critical"
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warning"
    return "info" if levelno >= logging.INFO else "debug"


class CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time: a live progress display
    swaps it to draw around logs."""

    @property
    def stream(self):  # noqa: ANN202 - a property standing in for StreamHandler's attribute
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def setup_logging(
    log_path, hub: EventHub, level: str, to_stderr: bool, rank: int | None = None
) -> None:
    """trainer.log always; stderr only when it is not already redirected into trainer.log.

    `rank` (DDP ranks other than 0): lines carry "[rank N]", and errors reach stderr even when
    `to_stderr` is off, so that a failing rank is seen where torchrun's output goes.
    """
    for old in log.handlers:  # an earlier run's in this process: its log file is closed, not leaked
        old.close()
    log.handlers.clear()
    log.setLevel(level.upper())
    log.propagate = False
    tag = f"[rank {rank}] " if rank is not None else ""
    fmt = logging.Formatter(f"%(asctime)s %(levelname)-7s {tag}%(message)s")
    file_handler = logging.FileHandler(log_path, encoding="utf-8")
    file_handler.setFormatter(fmt)
    log.addHandler(file_handler)
    if to_stderr or rank is not None:
        console = CurrentStderrHandler()
        console.setFormatter(fmt)
        if not to_stderr:
            console.setLevel(logging.ERROR)
        log.addHandler(console)
    log.addHandler(EventLogHandler(hub))
