"""Webhook endpoints on 127.0.0.1 for the notification tests: one that records what it receives, one that
never answers, and a port that refuses connections."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Inbox:
    """What the recording server received; `/status/NNN` paths answer with that status."""

    url: str
    requests: list[Received] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        with self.arrived:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self.requests)} of {count} notifications arrived in {timeout:g} s")
                self.arrived.wait(left)
            return list(self.requests)


@contextmanager
def recording_server() -> Iterator[Inbox]:
    inbox = Inbox("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with inbox.arrived:
                inbox.requests.append(Received(self.path, dict(self.headers.items()), body))
                inbox.arrived.notify_all()
            status = int(self.path.rsplit("/", 1)[1]) if self.path.startswith("/status/") else 200
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    inbox.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)  # quick to shut down
    thread.start()
    try:
        yield inbox
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def hanging_server() -> Iterator[str]:
    """Takes connections (the kernel's backlog) and never reads or answers: every request times out."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hang"
    finally:
        listener.close()


def refused_url() -> str:
    """A port nothing listens on (bound, then closed): connections are refused at once."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"http://127.0.0.1:{port}/refused"
