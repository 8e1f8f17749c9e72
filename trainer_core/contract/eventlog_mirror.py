"""The event log's copy to stdout: `LineMirror` sends lines to a stream from a daemon thread
through a bounded queue, so a pipe nobody reads never blocks training (lines are dropped and
counted instead); `_stdout_stream` picks the stream an `EventWriter`'s `stdout` argument names.
Torch-free, like `trainer_core.contract.eventlog`.
"""

from __future__ import annotations

import os
import queue
import select
import sys
import threading
import time
from typing import TextIO

# Lines waiting for a slow stdout before new ones are dropped: minutes of coalesced events.
DEFAULT_STDOUT_QUEUE_LINES = 10_000


class LineMirror:
    """Copies lines to a stream from a daemon thread; `offer()` never blocks,
    it drops when the queue is full.

    When the stream has a file descriptor, the thread writes to a private duplicate of it with
    os.write: a thread stuck on a full pipe then holds no Python-level lock, so interpreter shutdown
    is never stuck behind it. The thread owns that duplicate and closes it when it ends.
    """

    def __init__(self, stream: TextIO, max_lines: int = DEFAULT_STDOUT_QUEUE_LINES) -> None:
        self.dropped = 0
        self._stream = stream
        self._fd = self._private_fd(stream)
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=max(1, max_lines))
        self._stop = threading.Event()
        self._broken = False
        self._thread = threading.Thread(target=self._drain, name="vega-events-stdout", daemon=True)
        self._thread.start()

    @staticmethod
    def _private_fd(stream: TextIO) -> int | None:
        try:
            stream.flush()  # earlier buffered text goes out before our first raw line
            return os.dup(stream.fileno())
        except (AttributeError, OSError, ValueError):
            # no real descriptor (StringIO, pytest capture): write through the stream object
            return None

    def offer(self, line: bytes) -> None:
        if self._broken or self._stop.is_set():
            self.dropped += 1
            return
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            self.dropped += 1

    def close(self, timeout: float = 1.0) -> None:
        """Let queued lines go out for up to `timeout` seconds, then stop; a
        thread stuck on a pipe is left."""
        if not self._thread.is_alive():
            return  # the stream broke earlier; nothing is listening to the queue
        deadline = time.monotonic() + timeout
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            self._stop.set()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        self._stop.set()

    def _drain(self) -> None:
        try:
            while not self._stop.is_set():
                line = self._queue.get()
                if line is None or not self._write(line):
                    break
        finally:
            if self._fd is not None:
                os.close(self._fd)

    def _write(self, line: bytes) -> bool:
        """Write one line; False when the stream is gone (closed, broken
        pipe) and mirroring should stop."""
        try:
            if self._fd is None:
                self._stream.write(line.decode("utf-8"))
                self._stream.flush()
            else:
                self._write_fd(self._fd, line)
            return True
        except (OSError, ValueError):
            self._broken = True
            return False

    def _write_fd(self, fd: int, line: bytes) -> None:
        view = memoryview(line)
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                # Someone left the descriptor non-blocking: wait until it
                # drains instead of giving up.
                if self._stop.is_set():
                    return
                select.select([], [fd], [], 0.5)


def _stdout_stream(stdout: bool | TextIO | None) -> TextIO | None:
    if stdout is True:
        return sys.stdout  # may itself be None under pythonw or a closed stdout
    if stdout is False or stdout is None:
        return None
    return stdout
