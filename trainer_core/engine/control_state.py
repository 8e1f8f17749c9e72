"""Requests from the control socket and from signals, handed to the loop at step boundaries.

The socket thread and signal handlers only enqueue; the loop acts, so no lock is held while training.
"""

from __future__ import annotations

import queue
import threading


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
        out: list[str] = []
        while True:
            try:
                out.append(self._requests.get_nowait())
            except queue.Empty:
                return out
