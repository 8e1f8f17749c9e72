"""Server side of the control channel: a unix socket in the run folder that
the training loop listens on.

`ControlServer` binds `RUN/control.sock` (mode 0600) and serves it from one daemon thread with a
selector, so the training loop never blocks on a client. Each request line is parsed into a
`Command` and passed to the loop's handler, which only sets flags or queues work and returns a
`CommandReply`; the reply goes back on the same connection. Bad input (malformed JSON, unknown
commands, oversized lines, a handler that raises) gets an error reply and the server keeps serving.
Connections from another user are refused. Torch-free.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import selectors
import socket
import stat
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from trainer_core.contract.control_client import (
    MAX_LINE_BYTES,
    ControlError,
    check_socket_path_length,
    control_socket_path,
)
from trainer_core.contract.control_protocol import (
    Command,
    CommandReply,
    command_to_json,
    parse_command,
)
from trainer_core.contract.protocol import ProtocolError

log = logging.getLogger(__name__)

# The loop's handler; returning None means "accepted" and the server sends an ok reply.
CommandHandler = Callable[[Command], CommandReply | None]

# A client that stops reading its replies is dropped once this much output is queued for it.
MAX_PENDING_OUTPUT = 1024 * 1024
# How long a start-up probe waits for an existing socket to accept before calling it live.
PROBE_TIMEOUT_S = 1.0
# stop() waits this long for the serving thread; the handler is fast, so this only guards a hang.
STOP_JOIN_TIMEOUT_S = 5.0
LISTEN_BACKLOG = 16
RECV_CHUNK = 64 * 1024


# --------------------------------------------------------------------------------------------------
# Peer credentials


def read_peer_uid(conn: socket.socket) -> int | None:
    """The uid of the process at the other end (Linux SO_PEERCRED); None
    where the platform cannot tell."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None  # macOS/BSD: the socket file's 0600 mode is the only guard there
    raw = conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", raw)
    return uid


def peer_refusal(peer_uid: int | None, allowed_uid: int) -> str | None:
    """Why a peer must be refused, or None when it may send commands (only
    the trainer's own uid may)."""
    if peer_uid is None or peer_uid == allowed_uid:
        return None
    return (
        f"connection refused: it comes from uid {peer_uid}, but only uid {allowed_uid} "
        "(the user running the trainer) may control this run"
    )


# --------------------------------------------------------------------------------------------------
# Turning one request line into one reply


def error_reply(error: str, cmd: str | None = None, id: str | None = None) -> CommandReply:
    return CommandReply(ok=False, cmd=cmd, id=id, error=error)


def answer_line(line: bytes, handler: CommandHandler) -> CommandReply | None:
    """The reply to one request line (None for a blank line, which needs no answer)."""
    line = line.strip()
    if not line:
        return None
    if len(line) > MAX_LINE_BYTES:
        return error_reply(oversized_message())
    try:
        request = json.loads(line)
    except UnicodeDecodeError:
        return error_reply("malformed request: not UTF-8 text; send one JSON object per line")
    except json.JSONDecodeError as exc:
        return error_reply(
            f"malformed JSON ({exc.msg} at column {exc.colno}); send one JSON object per line, e.g."
            ' {"cmd": "pause"}'
        )
    try:
        command = parse_command(request)
    except ProtocolError as exc:
        return error_reply(str(exc), *echoed_fields(request))
    return call_handler(handler, command)


def echoed_fields(request: object) -> tuple[str | None, str | None]:
    """The cmd and id of a rejected request, echoed back when they are
    strings so a client can match it."""
    if not isinstance(request, dict):
        return None, None
    cmd, id = request.get("cmd"), request.get("id")
    return (cmd if isinstance(cmd, str) else None), (id if isinstance(id, str) else None)


def call_handler(handler: CommandHandler, command: Command) -> CommandReply:
    """Run the loop's handler; an exception in it becomes an error reply and
    never reaches the server thread."""
    try:
        reply = handler(command)
    except Exception as exc:
        log.exception("control handler failed on %r", command.cmd)
        return error_reply(
            f"the trainer failed to handle {command.cmd!r}: {exc.__class__.__name__}: {exc}",
            command.cmd,
            command.id,
        )
    if reply is None:
        return CommandReply(ok=True, cmd=command.cmd, id=command.id)
    return reply


def oversized_message() -> str:
    return f"request line longer than {MAX_LINE_BYTES} bytes; send one short JSON object per line"


def encode_reply(reply: CommandReply) -> bytes:
    return command_to_json(reply).encode() + b"\n"


# --------------------------------------------------------------------------------------------------
# Binding: stale sockets, permissions


def socket_answers(path: Path) -> bool:
    """Whether something accepts connections on `path` (a live trainer)
    rather than refusing (a dead one)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(PROBE_TIMEOUT_S)
    try:
        probe.connect(str(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except TimeoutError:
        return True  # a full backlog: alive but busy
    except OSError as exc:
        raise ControlError(
            f"cannot tell whether {path} belongs to a live trainer: {exc.strerror or exc}"
        ) from exc
    finally:
        probe.close()
    return True


def remove_stale_socket(path: Path) -> None:
    """Make room to bind: unlink a socket left by a dead trainer; refuse
    when a live one answers on it."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ControlError(
            f"{path} exists and is not a socket; remove it or choose another run folder"
        )
    if socket_answers(path):
        raise ControlError(
            f"another trainer is already serving this run folder: {path} answers; "
            "stop that trainer first or use another --run-dir"
        )
    log.info("removing stale control socket %s", path)
    path.unlink(missing_ok=True)


def bind_private_socket(path: Path) -> socket.socket:
    """A listening, non-blocking unix socket at `path` that only its owner
    can connect to (mode 0600)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # The umask makes the file private from the moment it exists; chmod afterwards makes sure of it.
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise bind_error(exc, path) from exc
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


def bind_error(exc: OSError, path: Path) -> ControlError:
    if exc.errno == errno.EADDRINUSE:
        return ControlError(
            f"another trainer is already serving this run folder: {path} was created meanwhile"
        )
    return ControlError(f"cannot create the control socket {path}: {exc.strerror or exc}")


# --------------------------------------------------------------------------------------------------
# The server


@dataclass(eq=False)
class ClientState:
    """One connected client: its socket and the bytes in flight each way."""

    sock: socket.socket
    inbox: bytearray = field(default_factory=bytearray)
    outbox: bytearray = field(default_factory=bytearray)
    discarding: bool = False  # inside an oversized line: drop bytes up to its newline
    closing: bool = False  # close as soon as the outbox is flushed
    closed: bool = False


class ControlServer:
    """Serves `RUN/control.sock` from a daemon thread and passes each command to `handler`.

    `handler` runs on the server thread: it must be fast (set a flag, queue a request) and return a
    `CommandReply` (or None for a plain ok). Use as a context manager, or call `start()`
    and `stop()`. `allowed_uid` defaults to this process's effective uid; connections
    from any other uid are refused.
    """

    def __init__(
        self, run_dir: Path | str, handler: CommandHandler, *, allowed_uid: int | None = None
    ) -> None:
        self.run_dir = Path(run_dir)
        self.path = control_socket_path(self.run_dir)
        self.handler = handler
        self.allowed_uid = os.geteuid() if allowed_uid is None else allowed_uid
        self._listener: socket.socket | None = None
        self._selector: selectors.BaseSelector | None = None
        self._wake_reader: socket.socket | None = None
        self._wake_writer: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._clients: set[ClientState] = set()
        self._socket_identity: tuple[int, int] | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> ControlServer:
        """Bind the socket (replacing a stale one) and start serving; raises
        ControlError when it cannot."""
        if self._thread is not None:
            raise RuntimeError("ControlServer.start() called twice")
        if not self.run_dir.is_dir():
            raise ControlError(
                f"run folder {self.run_dir} does not exist; cannot create its control socket"
            )
        check_socket_path_length(self.path)
        remove_stale_socket(self.path)
        self._listener = bind_private_socket(self.path)
        info = self.path.lstat()
        self._socket_identity = (info.st_dev, info.st_ino)
        self._selector = selectors.DefaultSelector()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._wake_reader.setblocking(False)
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_reader, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._serve, name="vega-control", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close every connection and remove the socket file. Safe to call twice."""
        thread = self._thread
        if thread is None:
            return
        if not self._stopping.is_set():
            self._stopping.set()
            self._wake()
        if thread is threading.current_thread():
            return  # called from inside the handler: the thread cleans up as it leaves its loop
        thread.join(STOP_JOIN_TIMEOUT_S)
        if thread.is_alive():
            log.warning(
                "control thread did not stop within %s s (a handler is stuck)", STOP_JOIN_TIMEOUT_S
            )

    def __enter__(self) -> ControlServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _wake(self) -> None:
        if self._wake_writer is None:
            return
        # the thread is already gone or the pipe is full: it wakes up anyway
        with contextlib.suppress(OSError):
            self._wake_writer.send(b"x")

    # -- the serving thread ------------------------------------------------------------------------

    def _serve(self) -> None:
        assert self._selector is not None
        try:
            while not self._stopping.is_set():
                for key, events in self._selector.select():
                    self._dispatch_guarded(key, events)
        finally:
            self._shut_down()

    def _dispatch_guarded(self, key: selectors.SelectorKey, events: int) -> None:
        """One event; an unexpected failure drops that client but never the server."""
        try:
            self._dispatch(key, events)
        except Exception:
            log.exception("control server: unexpected error; dropping the connection")
            if isinstance(key.data, ClientState):
                self._drop(key.data)

    def _dispatch(self, key: selectors.SelectorKey, events: int) -> None:
        if key.fileobj is self._listener:
            self._accept_all()
        elif key.fileobj is self._wake_reader:
            self._drain_wake()
        else:
            client: ClientState = key.data
            if not client.closed and events & selectors.EVENT_WRITE:
                self._flush(client)
            if not client.closed and events & selectors.EVENT_READ:
                self._receive(client)

    def _drain_wake(self) -> None:
        assert self._wake_reader is not None
        with contextlib.suppress(BlockingIOError):
            self._wake_reader.recv(4096)

    def _accept_all(self) -> None:
        """Accept every pending connection; refuse those from another user with an error reply."""
        assert self._listener is not None and self._selector is not None
        while True:
            try:
                conn, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            conn.setblocking(False)
            client = ClientState(conn)
            self._clients.add(client)
            self._selector.register(conn, selectors.EVENT_READ, data=client)
            refusal = peer_refusal(read_peer_uid(conn), self.allowed_uid)
            if refusal is not None:
                log.warning("control server: %s", refusal)
                client.closing = True
                self._queue(client, error_reply(refusal))

    def _receive(self, client: ClientState) -> None:
        try:
            data = client.sock.recv(RECV_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(client)
            return
        if client.closing:
            return  # a refused peer: its input is ignored until its error reply is out
        if data:
            self._feed(client, data)
        else:
            self._end_of_input(client)

    def _feed(self, client: ClientState, data: bytes) -> None:
        """Answer every complete line; guard against a line that never ends."""
        client.inbox += data
        while not client.closed and (newline := client.inbox.find(b"\n")) >= 0:
            line = bytes(client.inbox[:newline])
            del client.inbox[: newline + 1]
            if client.discarding:
                # that was the tail of an oversized line, already answered
                client.discarding = False
            else:
                self._answer(client, line)
        if client.discarding:
            client.inbox.clear()
        elif len(client.inbox) > MAX_LINE_BYTES:
            client.inbox.clear()
            client.discarding = True
            self._queue(client, error_reply(oversized_message()))

    def _end_of_input(self, client: ClientState) -> None:
        """The client finished sending: answer a last unterminated line, flush, then close."""
        if client.inbox and not client.discarding:
            self._answer(client, bytes(client.inbox))
        client.inbox.clear()
        client.closing = True
        if not client.closed:
            self._flush(client)

    def _answer(self, client: ClientState, line: bytes) -> None:
        reply = answer_line(line, self.handler)
        if reply is not None:
            self._queue(client, reply)

    # -- output ------------------------------------------------------------------------------------

    def _queue(self, client: ClientState, reply: CommandReply) -> None:
        client.outbox += encode_reply(reply)
        if len(client.outbox) > MAX_PENDING_OUTPUT:
            log.warning("control server: dropping a client that does not read its replies")
            self._drop(client)
            return
        self._flush(client)

    def _flush(self, client: ClientState) -> None:
        """Send what the socket takes now; wait for writability for the
        rest; close a finished client."""
        try:
            while client.outbox:
                sent = client.sock.send(client.outbox)
                del client.outbox[:sent]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._drop(client)
            return
        if client.outbox:
            self._watch(client, selectors.EVENT_READ | selectors.EVENT_WRITE)
        elif client.closing:
            self._drop(client)
        else:
            self._watch(client, selectors.EVENT_READ)

    def _watch(self, client: ClientState, events: int) -> None:
        assert self._selector is not None
        if self._selector.get_key(client.sock).events != events:
            self._selector.modify(client.sock, events, data=client)

    def _drop(self, client: ClientState) -> None:
        if client.closed:
            return
        client.closed = True
        self._clients.discard(client)
        if self._selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(client.sock)
        client.sock.close()

    # -- shutting down -----------------------------------------------------------------------------

    def _shut_down(self) -> None:
        """Close every connection (after one last try at pending replies),
        the listener and the socket file."""
        for client in list(self._clients):
            client.closing = True
            self._flush(client)
            self._drop(client)
        for sock in (self._listener, self._wake_reader, self._wake_writer):
            if sock is not None:
                sock.close()
        if self._selector is not None:
            self._selector.close()
        self._unlink_own_socket()

    def _unlink_own_socket(self) -> None:
        """Remove the socket file, unless another trainer has since replaced it with its own."""
        try:
            info = self.path.lstat()
        except FileNotFoundError:
            return
        if (info.st_dev, info.st_ino) == self._socket_identity:
            self.path.unlink(missing_ok=True)
