"""`vega-tui serve` as a real subprocess, a TCP forwarder standing in for an SSH tunnel, and a
websocket reader of the served dashboard's terminal output (tests/test_serve*.py)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import wave
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parent.parent
URL_RE = re.compile(r"Open:\s+http://[^/\s]+:(\d+)/\?token=([A-Za-z0-9_-]+)")
# CSI sequences, OSC strings, DCS/APC strings, and any other escape plus one character.
ANSI_RE = re.compile(
    r"\x1b(\[[0-9;?<>=]*[ -/]*[@-~]"
    r"|\][^\x07\x1b]*(\x07|\x1b\\)"
    r"|[PX^_][^\x1b]*\x1b\\|.)"
)
START_S = 60.0  # upper bound only: the server and dashboards share two busy cores with other tests


class Served:
    """`python -m vega_tui serve --port 0 ARGS` until `stop()`; `port`, `token` from its URL."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.out = tmp / "serve.out"
        env = {**os.environ, "PYTHONPATH": str(REPO), "VEGA_CONFIG_DIR": str(tmp / "config")}
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "vega_tui", "serve", "--port", "0", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=tmp,
                env=env,
            )
        deadline = time.monotonic() + START_S
        while not (found := URL_RE.search(self.text())):
            assert self.proc.poll() is None, f"vega-tui serve exited: {self.text()}"
            assert time.monotonic() < deadline, f"no URL printed in {START_S} s: {self.text()}"
            time.sleep(0.1)
        self.port, self.token = int(found.group(1)), found.group(2)
        self.base = f"http://127.0.0.1:{self.port}"

    def wait_for(self, wanted: str, timeout: float = 10.0) -> str:
        deadline = time.monotonic() + timeout
        while wanted not in (text := self.text()):
            assert time.monotonic() < deadline, f"{wanted!r} never printed: {text}"
            time.sleep(0.05)
        return text

    def text(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Forwarder:
    """127.0.0.1:`port` -> 127.0.0.1:`target`, byte for byte: an SSH tunnel's local end."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


def plain(raw: bytes) -> str:
    """Terminal output without its escape sequences (text drawn in one run stays contiguous)."""
    return ANSI_RE.sub("", raw.decode("utf-8", errors="replace"))


class Terminal:
    """The served dashboard seen through its websocket: what it drew, and keys sent to it."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket, self.raw = socket, b""
        self.texts: list[Any] = []  # the JSON messages (deliver_file_start, ...)

    async def read_until(self, wanted: str | re.Pattern[str], timeout: float = START_S) -> str:
        """Read frames until the output (since the last mark) holds `wanted`; returns that text."""
        deadline = time.monotonic() + timeout
        while True:
            screen = plain(self.raw)
            if wanted.search(screen) if isinstance(wanted, re.Pattern) else wanted in screen:
                return screen
            left = deadline - time.monotonic()
            assert left > 0, f"{wanted!r} never drawn; last output: {screen[-1500:]!r}"
            try:
                message = await self.socket.receive(timeout=left)
            except TimeoutError:
                continue
            if message.type == aiohttp.WSMsgType.BINARY:
                self.raw += message.data
            elif message.type == aiohttp.WSMsgType.TEXT:
                self.texts.append(json.loads(message.data))
            else:
                ended = f"websocket ended ({message.type}); output: {screen[-1500:]!r}"
                raise AssertionError(ended)

    def mark(self) -> None:
        self.raw = b""

    async def press(self, keys: str) -> None:
        await self.socket.send_json(["stdin", keys])


def write_wav(path: Path, seconds: float = 0.2, rate: int = 16000) -> bytes:
    """A real 16-bit mono WAV (a 440 Hz tone); returns its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = int(seconds * rate)
    tone = (int(8000 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(count))
    frames = b"".join(struct.pack("<h", value) for value in tone)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(frames)
    return path.read_bytes()
