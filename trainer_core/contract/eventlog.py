"""The append-only event log: `EventWriter` (trainer side) and `EventReader` (dashboard side).

`RUN/events.jsonl` is the source of truth for live, reattached and finished runs
(docs/architecture.md). The writer stamps each event with the next `seq` and the current time,
appends one line and makes it visible to readers at once (one unbuffered `write` per line on an
O_APPEND descriptor). It never raises an I/O error into the training loop: a failed write is
counted, reported once on stderr, and retried on the next event; the lost line shows up to readers
as a `seq` gap. An optional copy to stdout goes through a bounded queue drained by a daemon thread,
so a pipe nobody reads can never block training (lines are dropped and counted instead;
`eventlog_mirror`).

The reader follows a growing file incrementally: each `poll()` reads only bytes appended since the
last one (at most `max_bytes_per_poll`), keeps a partial last line until its newline arrives, counts
malformed lines and `seq` gaps, and starts over when the file is truncated or replaced.

Torch-free: the dashboard imports this module. Only stdlib and pydantic (through `protocol`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, TextIO

from trainer_core.contract.errors import VegaError
from trainer_core.contract.event_lines import event_to_json, parse_event
from trainer_core.contract.eventlog_mirror import (
    DEFAULT_STDOUT_QUEUE_LINES,
    LineMirror,
    _stdout_stream,
)
from trainer_core.contract.protocol import PROTOCOL_VERSION, Event, ProtocolError

# How much one poll() reads at most, so that a huge log loads in slices rather than all at once.
DEFAULT_MAX_BYTES_PER_POLL = 4 * 1024 * 1024
# A "line" longer than this without a newline is garbage, not an event; it is skipped, not buffered.
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
# Chunk size for scanning a log backwards to find its last seq.
TAIL_CHUNK_BYTES = 64 * 1024


class EventLogError(VegaError):
    """An event log that should exist cannot be read."""


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte to a descriptor: regular files may accept a partial
    write when the disk fills."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written == 0:
            raise OSError(errno.ENOSPC, "no bytes written")
        view = view[written:]


def _report(message: str) -> None:
    """One line on stderr; a closed or broken stderr must not turn a report into a crash."""
    with contextlib.suppress(OSError, ValueError):
        print(f"vega: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------------
# The writer


class EventWriter:
    """Appends events to `path` (None: no file) and optionally copies them
    to stdout (True, or a stream).

    Thread-safe: the training loop and the control thread both emit. `emit()` never raises an I/O
    error. Counters: `write_errors` (failed file writes), `lost_lines` (lines that never reached the
    file), `stdout_dropped` (lines the stdout copy skipped because its reader was too slow or gone).
    """

    def __init__(
        self,
        path: Path | str | None,
        stdout: bool | TextIO = False,
        *,
        start_seq: int = 0,
        stdout_queue_lines: int = DEFAULT_STDOUT_QUEUE_LINES,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.write_errors = 0
        self.lost_lines = 0
        self._seq = start_seq
        self._fd: int | None = None
        self._closed = False
        self._failing = False
        self._reported = False
        self._lock = threading.Lock()
        stream = _stdout_stream(stdout)
        self._mirror = LineMirror(stream, stdout_queue_lines) if stream is not None else None

    @classmethod
    def resume(cls, path: Path | str, stdout: bool | TextIO = False, **options: Any) -> EventWriter:
        """A writer appending to an existing log, numbering on from its last
        valid `seq` (from 0 if none)."""
        last = last_seq(path)
        return cls(path, stdout, start_seq=0 if last is None else last + 1, **options)

    @property
    def next_seq(self) -> int:
        return self._seq

    @property
    def stdout_dropped(self) -> int:
        return self._mirror.dropped if self._mirror is not None else 0

    def emit(self, event: Event | Mapping[str, Any]) -> Event:
        """Stamp `seq` and `t`, append the line and return the stamped event
        (the argument is not changed).

        A mapping is validated like a line read back (ProtocolError if it is not a valid event); I/O
        errors are never raised. After close() events are counted as lost.
        """
        model = _as_event(event)
        with self._lock:
            stamped = model.model_copy(update={"seq": self._seq, "t": time.time()})
            line = (event_to_json(stamped) + "\n").encode("utf-8")
            self._seq += 1
            self._append(line)
            if self._mirror is not None:
                self._mirror.offer(line)
        return stamped

    def close(self, timeout: float = 1.0) -> None:
        """Close the file, and give the stdout copy up to `timeout` seconds to catch up."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._close_fd()
        if self._mirror is not None:
            self._mirror.close(timeout)

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _append(self, line: bytes) -> None:
        """Write one line to the file, or count it as lost; a failing file
        is retried on every emit."""
        if self.path is None:
            return
        if self._closed:
            self.lost_lines += 1
            return
        try:
            _write_all(self._open(self.path), line)
        except OSError as exc:
            self._on_write_error(exc)
            return
        if self._failing:
            self._failing = False
            _report(
                f"event log {self.path} is writable again; {self.lost_lines} event(s) were lost"
            )

    def _open(self, path: Path) -> int:
        if self._fd is None:
            flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
            fd = os.open(path, flags, 0o644)
            try:
                _terminate_partial_line(fd)
            except OSError:
                os.close(fd)
                raise
            self._fd = fd
        return self._fd

    def _on_write_error(self, exc: OSError) -> None:
        self.write_errors += 1
        self.lost_lines += 1
        self._failing = True
        self._close_fd()  # reopen next time: the folder may come back, the disk may free up
        if not self._reported:
            self._reported = True
            _report(
                f"cannot write the event log {self.path}: {exc}; events are dropped until it works"
                " again"
            )

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.close(fd)


def _as_event(event: Event | Mapping[str, Any]) -> Event:
    if isinstance(event, Event):
        return event
    if isinstance(event, Mapping):
        # The writer stamps seq and t; supply the envelope so a plain dict
        # validates like a read-back line.
        return parse_event({"v": PROTOCOL_VERSION, "seq": 0, "t": 0.0, **event})
    raise TypeError(f"emit() takes an Event model or a mapping, got {type(event).__name__}")


def _terminate_partial_line(fd: int) -> None:
    """If the file ends in the middle of a line (a crash or a full disk cut a write), end that line
    first, so the next event starts on a line of its own and readers lose one line, not two."""
    info = os.fstat(fd)
    if (
        stat.S_ISREG(info.st_mode)
        and info.st_size > 0
        and os.pread(fd, 1, info.st_size - 1) != b"\n"
    ):
        _write_all(fd, b"\n")


def last_seq(path: Path | str) -> int | None:
    """The `seq` of the last valid event in a log, reading backwards from
    its end; None if there is none."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - the `with` below owns it; only open() errors are caught here
    except FileNotFoundError:
        return None
    with handle:
        end = handle.seek(0, os.SEEK_END)
        head = b""  # the incomplete first piece of the last chunk, completed by the chunk before it
        while end > 0:
            start = max(0, end - TAIL_CHUNK_BYTES)
            handle.seek(start)
            pieces = (handle.read(end - start) + head).split(b"\n")
            head = pieces.pop(0) if start > 0 else b""
            for line in reversed(pieces):
                seq = _seq_of(line)
                if seq is not None:
                    return seq
            end = start
        return None


def _seq_of(line: bytes) -> int | None:
    if not line.strip():
        return None
    try:
        return parse_event(line).seq
    except ProtocolError:
        return None


# --------------------------------------------------------------------------------------------------
# The reader


class EventReader:
    """Follows a growing event log. Each `poll()` returns the events
    appended since the previous one.

    Counters and state: `malformed` (lines that are not events; `last_error` says why for the
    latest), `gaps` (places where `seq` jumped) and `missing` (how many seq numbers those jumps
    skipped), `restarts` (times the file was truncated or replaced and reading began again from byte
    0), `pending_bytes` (bytes already in the file that a further poll will read: 0 means caught
    up). With `stop_offset`, bytes from there on are treated as not written yet (reading a history
    up to a known line end while the file grows).
    """

    def __init__(
        self,
        path: Path | str,
        *,
        max_bytes_per_poll: int = DEFAULT_MAX_BYTES_PER_POLL,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        start_offset: int = 0,
        identity: tuple[int, int] | None = None,
        stop_offset: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.stop_offset = stop_offset
        self.max_bytes_per_poll = max(1, max_bytes_per_poll)
        self.max_line_bytes = max_line_bytes
        self.offset = max(0, start_offset)
        self.pending_bytes = 0
        self.malformed = 0
        self.last_error: str | None = None
        self.gaps = 0
        self.missing = 0
        self.restarts = 0
        self.last_seq: int | None = None
        self._partial = b""
        self._skipping_long_line = False
        self._identity = identity if self.offset > 0 else None

    def poll(self) -> list[Event]:
        """Events from the bytes appended since the last call (at most `max_bytes_per_poll` of
        them). A file that does not exist yet gives []."""
        return self._parse_chunk(self._read_new_bytes())

    def read_to_end(self, include_partial: bool = True) -> list[Event]:
        """Every event up to the current end of the file, in as many slices as it takes.
        For a finished log, `include_partial` also parses a last line that lacks its
        newline (a trainer killed mid-write)."""
        events = self.poll()
        while self.pending_bytes > 0:
            events.extend(self.poll())
        if include_partial and self._partial:
            tail, self._partial = self._partial, b""
            event = self._parse_line(tail)
            events.extend([event] if event is not None else [])
        return events

    def _read_new_bytes(self) -> bytes:
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - the `with` below owns it; only open() errors are caught here
        except (FileNotFoundError, NotADirectoryError):
            self.pending_bytes = 0
            return b""
        with handle:
            info = os.fstat(handle.fileno())
            if self._was_replaced(handle, info):
                self._restart()
            self._identity = (info.st_dev, info.st_ino)
            size = info.st_size if self.stop_offset is None else min(info.st_size, self.stop_offset)
            if size <= self.offset:
                self.pending_bytes = 0
                return b""
            handle.seek(self.offset)
            data = handle.read(min(size - self.offset, self.max_bytes_per_poll))
        self.offset += len(data)
        self.pending_bytes = max(0, size - self.offset)
        return data

    def _was_replaced(self, handle: BinaryIO, info: os.stat_result) -> bool:
        """A different file under the same name, a truncated one, or one rewritten in place (the
        byte before our offset should still end the last complete line we read)."""
        if self._identity is None or self.offset == 0:
            return False
        if (info.st_dev, info.st_ino) != self._identity or info.st_size < self.offset:
            return True
        if self._partial or self._skipping_long_line:
            return False
        handle.seek(self.offset - 1)
        return handle.read(1) != b"\n"

    def _restart(self) -> None:
        self.offset = 0
        self.last_seq = None  # a new log numbers from scratch: no false gap
        self._partial = b""
        self._skipping_long_line = False
        self.restarts += 1

    def _parse_chunk(self, data: bytes) -> list[Event]:
        if not data:
            return []
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # b"" when the chunk ended on a newline
        if self._skipping_long_line and lines:
            lines.pop(0)  # the end of an overlong line finally arrived: drop it with the rest
            self._skipping_long_line = False
        if len(self._partial) > self.max_line_bytes:
            self._count_malformed(f"a line longer than {self.max_line_bytes} bytes was skipped")
            self._partial, self._skipping_long_line = b"", True
        events = []
        for line in lines:
            event = self._parse_line(line)
            if event is not None:
                events.append(event)
        return events

    def _parse_line(self, line: bytes) -> Event | None:
        if not line.strip():
            return None
        try:
            event = parse_event(line)
        except ProtocolError as exc:
            self._count_malformed(str(exc))
            return None
        self._track_seq(event.seq)
        return event

    def _count_malformed(self, reason: str) -> None:
        self.malformed += 1
        self.last_error = reason

    def _track_seq(self, seq: int) -> None:
        if self.last_seq is not None and seq > self.last_seq + 1:
            self.gaps += 1
            self.missing += seq - self.last_seq - 1
        # A seq at or below the last one means a new writer numbering
        # afresh: follow it without a gap.
        self.last_seq = seq


def follow_from(
    path: Path | str, offset: int, identity: tuple[int, int] | None = None, **options: Any
) -> EventReader:
    """A reader whose first poll starts at byte `offset`, the end of a complete line already
    read another way (a preview of a big log). `identity` (st_dev, st_ino) of the file read then
    lets it notice a replaced file."""
    return EventReader(path, start_offset=offset, identity=identity, **options)


def parse_lines(lines: list[bytes]) -> tuple[list[Event], int]:
    """(events, malformed count) from complete lines that need not be
    consecutive: no seq gap tracking."""
    events: list[Event] = []
    malformed = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            events.append(parse_event(line))
        except ProtocolError:
            malformed += 1
    return events, malformed


def read_all(path: Path | str) -> list[Event]:
    """Every event of a finished log (malformed lines skipped).
    EventLogError if the file is missing."""
    reader = EventReader(path)
    if not reader.path.is_file():
        raise EventLogError(
            f"event log {reader.path} not found (or not a file); is this a run folder?"
        )
    return reader.read_to_end()
