"""Reading the end of a run's files without reading them whole: the last lines of trainer.log
(`log_tail`) and the newest `hello`/`finished` event of events.jsonl (`last_lifecycle_event`,
`last_hello`), searched backwards in bounded windows and cached between the runner's liveness
checks."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from trainer_core.contract import rundir

TAIL_CHUNK = 64 * 1024
# Bytes read at a time when searching events.jsonl backwards for the newest hello/finished event.
SCAN_WINDOW = 8 * 1024 * 1024
# A longer line is not a hello or finished event: it is not carried from window to window.
MAX_LIFECYCLE_LINE = 1024 * 1024
# The event types run_status cares about, matched on raw bytes before any JSON parsing.
_TYPE_RE = re.compile(rb'"type"\s*:\s*"(hello|finished)"')


def _tail_bytes(path: Path, want_newlines: int, max_bytes: int = 4 * 1024 * 1024) -> bytes:
    """The end of a file holding at least `want_newlines` newlines (or all of
    it), read backwards in chunks."""
    with open(path, "rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        data = b""
        while end > 0 and data.count(b"\n") <= want_newlines and len(data) < max_bytes:
            start = max(0, end - TAIL_CHUNK)
            handle.seek(start)
            data = handle.read(end - start) + data
            end = start
        return data


def log_tail(run_dir: Path | str, lines: int = 30) -> list[str]:
    """The last `lines` lines of RUN/trainer.log ([] when there is none);
    reads only the end of the file."""
    path = Path(run_dir) / rundir.LOG
    if lines <= 0:
        return []
    try:
        data = _tail_bytes(path, lines + 1)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return []
    text = data.decode("utf-8", errors="replace").rstrip("\n")
    return text.splitlines()[-lines:] if text else []


def last_lifecycle_event(run_dir: Path | str) -> dict[str, Any] | None:
    """The newest `hello` or `finished` event of RUN/events.jsonl as a dict,
    scanning backwards from its end."""
    return _newest_cached(Path(run_dir) / rundir.EVENTS, ("hello", "finished"))


def last_hello(run_dir: Path | str) -> dict[str, Any] | None:
    """The newest hello (the current or last trainer of the run), even when
    a finished event follows it."""
    return _newest_cached(Path(run_dir) / rundir.EVENTS, ("hello",))


# (events.jsonl, types) -> (device, inode, bytes already scanned, newest event): liveness checks
# run every second, and a long run's only hello is on line 1, so each check after the first
# reads only what was appended.
_scan_cache: dict[tuple[Path, tuple[str, ...]], tuple[int, int, int, dict[str, Any] | None]] = {}


def _newest_cached(path: Path, types: tuple[str, ...]) -> dict[str, Any] | None:
    """`_newest_event` over the whole file the first time, then only over bytes appended since."""
    path = path.absolute()
    try:
        st = path.stat()
    except OSError:
        return None
    key = (path, types)
    cached = _scan_cache.get(key)
    if cached is not None and cached[:2] == (st.st_dev, st.st_ino) and st.st_size >= cached[2]:
        # Start a chunk early so an event that was half-written at the last scan is read whole now.
        newer = _newest_event(path, types, stop_at=max(0, cached[2] - TAIL_CHUNK), end=st.st_size)
        found = newer if newer is not None else cached[3]
    else:
        found = _newest_event(path, types, end=st.st_size)
    _scan_cache[key] = (st.st_dev, st.st_ino, st.st_size, found)
    return found


def _newest_event(
    path: Path, types: tuple[str, ...], stop_at: int = 0, end: int | None = None
) -> dict[str, Any] | None:
    """The newest event of one of `types` between `stop_at` and `end`, reading backwards
    in windows of SCAN_WINDOW bytes (memory stays bounded however long the log) and
    searching each in C, not line by line."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - the `with` below owns it; only open() errors are caught here
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return None
    needles = [f'"{kind}"'.encode() for kind in types]
    with handle:
        end = handle.seek(0, os.SEEK_END) if end is None else end
        # the start of a line cut by the window's end, completed by the window before it
        carry = b""
        while end > stop_at:
            start = max(stop_at, end - SCAN_WINDOW)
            handle.seek(start)
            # searched in place: copying 8 MiB costs more than the search
            window = handle.read(end - start)
            first, last = window.find(b"\n"), window.rfind(b"\n")
            if last < 0:  # no line ends here: all of it belongs to one (giant) line
                carry = window + carry if len(window) + len(carry) <= MAX_LIFECYCLE_LINE else b""
                end = start
                continue
            found = (
                _event_of(window[last + 1 :] + carry, types)
                if carry or last + 1 < len(window)
                else None
            )
            lo = first + 1 if start > 0 else 0
            found = found or _newest_in(window, lo, last, needles, types)
            if found is not None:
                return found
            carry = window[:first] if start > 0 else b""
            end = start
    return None


def _newest_in(
    data: bytes, lo: int, hi: int, needles: list[bytes], types: tuple[str, ...]
) -> dict[str, Any] | None:
    """The last line within data[lo:hi] that is an event of one of `types`: find a type
    name with rfind, then check that its line really is such an event (the name may
    also appear inside a message)."""
    while hi > lo:
        hit = max(data.rfind(needle, lo, hi) for needle in needles)
        if hit < 0:
            return None
        line_start = max(lo, data.rfind(b"\n", lo, hit) + 1)
        line_end = data.find(b"\n", hit, hi)
        event = _event_of(data[line_start : line_end if line_end >= 0 else hi], types)
        if event is not None:
            return event
        hi = line_start
    return None


def _event_of(line: bytes, types: tuple[str, ...]) -> dict[str, Any] | None:
    match = _TYPE_RE.search(line)
    if match is None or match.group(1).decode() not in types:
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None  # a cut or garbled line: keep looking further back
    return event if isinstance(event, dict) and event.get("type") in types else None
