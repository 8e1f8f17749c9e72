"""Client side of the control channel: send pause/resume/save/evaluate/stop to a live trainer.

The trainer listens on `RUN/control.sock` (a unix stream socket, mode 0600). The wire format is one
JSON object per line each way: `{"cmd": "pause", "id": "..."}` out, `{"ok": true, "cmd": "pause",
"id": "..."}` back. Torch-free: the dashboard imports this module, and `trainer-core ctl` uses it.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
from pathlib import Path
from typing import Any

from trainer_core.contract.control_protocol import CommandReply
from trainer_core.contract.errors import VegaError
from trainer_core.contract.rundir import SOCKET

# One request or reply line may not exceed this; the server enforces the same bound.
MAX_LINE_BYTES = 64 * 1024
# sun_path holds 108 bytes on Linux and 104 on macOS/BSD, the terminating NUL included.
MAX_SOCKET_PATH_BYTES = 107 if sys.platform.startswith("linux") else 103
DEFAULT_TIMEOUT_S = 5.0


class ControlError(VegaError):
    """The control socket cannot be reached, refuses us, or answers something unreadable."""


def control_socket_path(run_dir: Path | str) -> Path:
    """Absolute path of a run's control socket (absolute: a relative bind
    would depend on the cwd)."""
    return Path(run_dir).absolute() / SOCKET


def check_socket_path_length(path: Path) -> None:
    """Unix socket paths are short; fail with a clear message instead of an obscure OSError."""
    length = len(str(path).encode())
    if length > MAX_SOCKET_PATH_BYTES:
        raise ControlError(
            f"control socket path {path} is {length} bytes, longer than the {MAX_SOCKET_PATH_BYTES}"
            " bytes a unix socket path may have; use a shorter runs folder (e.g. --run-dir under"
            " ~/runs or /tmp)"
        )


def encode_command(cmd: str, id: str | None = None) -> bytes:
    """The request line for one command."""
    request: dict[str, Any] = {"cmd": cmd}
    if id is not None:
        request["id"] = id
    return json.dumps(request).encode() + b"\n"


def decode_reply(line: bytes, path: Path) -> CommandReply:
    """Parse one reply line from the trainer, or fail naming the socket it came from."""
    try:
        return CommandReply.model_validate_json(line)
    except ValueError as exc:  # pydantic's ValidationError, bad JSON included
        snippet = line[:200].decode(errors="replace")
        raise ControlError(
            f"unreadable reply from {path}: {snippet!r} ({exc.__class__.__name__})"
        ) from exc


def open_control_socket(run_dir: Path | str, timeout: float = DEFAULT_TIMEOUT_S) -> socket.socket:
    """Connect to a run's control socket, turning every failure into a
    ControlError that says what it means."""
    run_dir = Path(run_dir)
    path = control_socket_path(run_dir)
    if not run_dir.is_dir():
        raise ControlError(f"run folder {run_dir} does not exist")
    if not path.exists():
        raise ControlError(
            f"no trainer is listening in {run_dir}: {SOCKET} not found — the run has finished or"
            " crashed"
        )
    check_socket_path_length(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError as exc:
        sock.close()
        raise connect_error(exc, run_dir, path, timeout) from exc
    return sock


def connect_error(exc: OSError, run_dir: Path, path: Path, timeout: float) -> ControlError:
    """Translate a failed connect() into the message a person needs."""
    if isinstance(exc, ConnectionRefusedError):
        return ControlError(
            f"no trainer is listening in {run_dir}: {path} is stale (its trainer died without"
            " removing it)"
        )
    if isinstance(exc, FileNotFoundError):
        return ControlError(
            f"no trainer is listening in {run_dir}: {SOCKET} disappeared — the run has just ended"
        )
    if isinstance(exc, PermissionError):
        return ControlError(f"permission denied on {path}: the trainer runs as another user")
    if isinstance(exc, TimeoutError):
        return ControlError(
            f"the trainer in {run_dir} did not accept a connection within {timeout:g} s"
        )
    return ControlError(f"cannot connect to {path}: {exc.strerror or exc}")


class ControlConnection:
    """One connection to a trainer's control socket, reused for many
    commands (the dashboard keeps one).

    Thread-safe: a lock makes each send-and-wait-for-reply atomic, so replies never cross. A broken
    connection is closed and the next `send` reconnects.
    """

    def __init__(self, run_dir: Path | str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.run_dir = Path(run_dir)
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._lock = threading.Lock()

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def connect(self) -> None:
        """Open the connection now (otherwise the first `send` does)."""
        with self._lock:
            self._ensure_connected()

    def send(self, cmd: str, id: str | None = None) -> CommandReply:
        """Send one command and wait for its reply; `ok` false in the reply
        means the trainer refused it."""
        with self._lock:
            sock = self._ensure_connected()
            try:
                line = self._exchange(sock, encode_command(cmd, id))
            except BaseException as exc:
                # A half-finished exchange leaves the stream out of step: start afresh next time.
                self._close_socket()
                if isinstance(exc, OSError):
                    raise self._io_error(exc, cmd) from exc
                raise
        return decode_reply(line, control_socket_path(self.run_dir))

    def peer_pid(self) -> int | None:
        """The trainer's process id from the connected socket's credentials (Linux), else None."""
        with self._lock:
            sock = self._ensure_connected()
        if not hasattr(socket, "SO_PEERCRED"):
            return None
        try:
            pid, _, _ = struct.unpack(
                "3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            )
        except OSError:
            return None
        return pid or None

    def close(self) -> None:
        with self._lock:
            self._close_socket()

    def __enter__(self) -> ControlConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _ensure_connected(self) -> socket.socket:
        if self._sock is None:
            self._sock = open_control_socket(self.run_dir, self.timeout)
            self._buffer = b""
        return self._sock

    def _exchange(self, sock: socket.socket, request: bytes) -> bytes:
        """Send a request and read the reply line."""
        try:
            sock.sendall(request)
        except OSError as send_error:
            # The server may have answered and closed first (e.g. refusing
            # our uid): read that answer.
            try:
                return self._read_line(sock)
            except OSError:
                raise send_error from None
        return self._read_line(sock)

    def _read_line(self, sock: socket.socket) -> bytes:
        """Read up to the next newline; keep anything after it for the next reply."""
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_LINE_BYTES:
                raise ControlError(
                    f"reply from {control_socket_path(self.run_dir)} exceeds {MAX_LINE_BYTES} bytes"
                )
            chunk = sock.recv(4096)
            if not chunk:
                raise ConnectionResetError("the trainer closed the connection without replying")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _io_error(self, exc: OSError, cmd: str) -> ControlError:
        if isinstance(exc, TimeoutError):
            return ControlError(
                f"no reply to {cmd!r} from the trainer in {self.run_dir} within {self.timeout:g} s"
            )
        reason = exc.strerror or str(exc)
        return ControlError(
            f"lost the connection to the trainer in {self.run_dir} while sending {cmd!r}: {reason}"
        )

    def _close_socket(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._buffer = b""


def send_command(
    run_dir: Path | str, cmd: str, timeout: float = DEFAULT_TIMEOUT_S, id: str | None = None
) -> CommandReply:
    """Connect, send one command, return the trainer's reply and disconnect.

    Raises ControlError when nothing listens, the socket is stale, or no
    reply comes within `timeout`.
    """
    with ControlConnection(run_dir, timeout) as connection:
        return connection.send(cmd, id)
