"""Read a big event log's exact history in a child process, so the
dashboard's interpreter stays free.

Parsing a million lines takes ~25 s of pure Python (pydantic validation plus
`RunStore.apply`). Done in a thread of the dashboard it holds the GIL that the UI thread needs
to answer keys; done here, in `python -m vega_tui.history_worker`, it costs the dashboard
nothing but a ~100 KiB pickle at the end.

Protocol (parent `HistoryChild` <-> child `main`), both ends in this module:
- stdin: one pickled `HistoryRequest` (the log, the line end to stop at, an
  empty store to fold into).
  The parent then keeps stdin open and writes nothing more; EOF means the dashboard went away
  (closed, killed) and the child exits at once, so it never outlives the dashboard.
- stdout: frames (`FRAME` header: kind byte, payload length) of pickles: progress fractions while
  reading, then one `HistoryResult` (the finished store and the reader's state at the stop offset).
- stderr: a traceback or a one-line reason when it fails (exit status not 0).

The child imports only trainer_core.contract.eventlog/protocol and
vega_tui.store: no textual, no torch.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from trainer_core.contract.eventlog import EventReader
from trainer_core.contract.import_path import safe_env
from vega_tui.store import RunStore

FRAME = struct.Struct("<cI")  # kind, payload length
PROGRESS, RESULT = b"p", b"r"
WORKER_ARGV = (sys.executable, "-m", "vega_tui.history_worker")
STDERR_TAIL_CHARS = 600
EXIT_PARENT_GONE = 3
EXIT_FAILED = 2


class HistoryFailed(RuntimeError):
    """The child could not deliver the history; the message says why (exit
    status, its last stderr line)."""


@dataclass
class HistoryRequest:
    path: str
    stop: int  # the end of a complete line: bytes from here on are read by the parent's follower
    identity: tuple[int, int]  # (st_dev, st_ino) of the file the preview read
    store: RunStore  # empty, made by the parent's factory (its run folder and limits)
    max_bytes_per_poll: int = 1024 * 1024
    progress_interval: float = 0.1


@dataclass
class HistoryResult:
    """The store of every line before `end`, and what the parent's reader
    needs to go on from `end`."""

    store: RunStore
    end: int
    identity: tuple[int, int]
    malformed: int
    gaps: int
    missing: int
    last_seq: int | None
    last_error: str | None


# --------------------------------------------------------------------------------------------------
# The child


def read_history(request: HistoryRequest, on_progress: Any) -> HistoryResult:
    """Fold every line before `request.stop` into `request.store`;
    HistoryFailed if the file was replaced."""
    path = Path(request.path)
    info = os.stat(path)
    if (info.st_dev, info.st_ino) != tuple(request.identity):
        raise HistoryFailed(f"{path} was replaced after its preview was read")
    reader = EventReader(
        path, max_bytes_per_poll=request.max_bytes_per_poll, stop_offset=request.stop
    )
    store = request.store
    next_report = time.monotonic() + request.progress_interval
    while True:
        store.apply(reader.poll())
        if reader.restarts:
            raise HistoryFailed(f"{path} was truncated or replaced while its history was read")
        if reader.pending_bytes == 0:
            break
        if time.monotonic() >= next_report:
            next_report = time.monotonic() + request.progress_interval
            on_progress(reader.offset / max(1, request.stop))
    if reader.offset != request.stop:
        raise HistoryFailed(
            f"{path} ends at byte {reader.offset}, before the {request.stop} bytes its preview saw"
        )
    store.note_reader(reader.malformed, reader.gaps)
    dev, ino = request.identity  # a plain tuple, even if the request carried a list
    return HistoryResult(
        store,
        reader.offset,
        (dev, ino),
        reader.malformed,
        reader.gaps,
        reader.missing,
        reader.last_seq,
        reader.last_error,
    )


def write_frame(out: BinaryIO, kind: bytes, payload: object) -> None:
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(FRAME.pack(kind, len(data)) + data)
    out.flush()


def _exit_when_parent_goes(fd: int) -> None:
    """The parent never writes after the request: EOF on stdin means it closed the
    pipe or died. (Raw reads: a daemon thread inside sys.stdin's buffered reader would
    abort the interpreter's shutdown.)"""
    while os.read(fd, 4096):
        pass
    os._exit(EXIT_PARENT_GONE)


def main() -> int:
    stdin, out = sys.stdin.buffer, sys.stdout.buffer
    request = pickle.load(stdin)
    threading.Thread(target=_exit_when_parent_goes, args=(stdin.fileno(),), daemon=True).start()
    try:
        result = read_history(request, lambda fraction: write_frame(out, PROGRESS, fraction))
    except (HistoryFailed, OSError) as exc:
        print(f"history worker: {exc}", file=sys.stderr)
        return EXIT_FAILED
    write_frame(out, RESULT, result)
    return 0


# --------------------------------------------------------------------------------------------------
# The parent's handle


class HistoryChild:
    """A running `python -m vega_tui.history_worker` (or `argv`) with
    `request` sent; `poll()` its frames."""

    def __init__(
        self, request: HistoryRequest, argv: tuple[str, ...] | list[str] = WORKER_ARGV
    ) -> None:
        try:
            data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - e.g. a store factory whose class a child cannot import
            raise HistoryFailed(f"the history request cannot be sent to a worker: {exc}") from exc
        # A file, not a pipe: a long traceback cannot block the child; closed with the worker.
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        self.process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            close_fds=True,
            env=safe_env(),
        )
        self.pid = self.process.pid
        self._buffer = bytearray()
        self._eof = False
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(data)
            self.process.stdin.flush()
        except OSError:
            pass  # the child is already gone: poll() reports why

    def poll(self, timeout: float) -> list[tuple[bytes, Any]]:
        """Frames that arrived within `timeout` s, in order; HistoryFailed once
        the child ended without a result."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        if not self._eof and select.select([fd], [], [], timeout)[0]:
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    self._eof = True
                    break
                self._buffer += chunk
                if not select.select([fd], [], [], 0)[0]:
                    break
        frames = self._take_frames()
        if self._eof and not any(kind == RESULT for kind, _ in frames):
            raise HistoryFailed(self._why_it_ended())
        return frames

    def _take_frames(self) -> list[tuple[bytes, Any]]:
        frames = []
        while len(self._buffer) >= FRAME.size:
            kind, size = FRAME.unpack_from(self._buffer)
            if len(self._buffer) < FRAME.size + size:
                break
            payload = bytes(self._buffer[FRAME.size : FRAME.size + size])
            del self._buffer[: FRAME.size + size]
            try:
                frames.append((kind, pickle.loads(payload)))
            except Exception as exc:  # noqa: BLE001 - any damage to the stream means no usable history
                raise HistoryFailed(f"history worker sent an unreadable frame: {exc}") from exc
        return frames

    def _why_it_ended(self) -> str:
        try:
            code = self.process.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        self._errors.seek(0)
        text = self._errors.read().decode("utf-8", "replace").strip()
        last = text.splitlines()[-1][-STDERR_TAIL_CHARS:] if text else "no message"
        status = (
            f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
        )
        return f"history worker (pid {self.pid}) ended without a result ({status}): {last}"

    def close(self) -> None:
        """Close its stdin (it exits on EOF), make sure it is gone and reaped."""
        for stream in (self.process.stdin, self.process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        self._errors.close()

    def kill(self) -> None:
        """SIGKILL unless it has already been reaped (safe from another thread)."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


if __name__ == "__main__":
    # so results pickle as vega_tui.history_worker's classes, not __main__'s
    from vega_tui import history_worker

    raise SystemExit(history_worker.main())
