"""The control channel end to end: a real ControlServer on a real unix socket, the client, and `ctl`.

Run folders live under a short /tmp directory: a unix socket path may not exceed ~107 bytes, and
pytest's tmp_path can be longer than that.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from trainer_core.contract.control_client import ControlConnection, ControlError, send_command
from trainer_core.contract.control_protocol import COMMAND_NAMES, Command, CommandReply
from trainer_core.engine.control_server import ControlServer, peer_refusal, read_peer_uid

pytestmark = pytest.mark.timeout(60)

# A trainer stand-in for the subprocess tests: serves the run folder and prints one line per command.
SERVER_SCRIPT = textwrap.dedent(
    """
    import sys, threading
    from trainer_core.engine.control_server import ControlServer

    stop_requested = threading.Event()

    def handler(command):
        print(f"ack {command.cmd} {command.id}", flush=True)
        if command.cmd == "stop":
            stop_requested.set()

    with ControlServer(sys.argv[1], handler):
        print("ready", flush=True)
        stop_requested.wait(30)
    """
)


class Recorder:
    """A handler like the loop's: records each command and accepts it."""

    def __init__(self) -> None:
        self.commands: list[Command] = []
        self.lock = threading.Lock()

    def __call__(self, command: Command) -> CommandReply:
        with self.lock:
            self.commands.append(command)
        return CommandReply(ok=True, cmd=command.cmd, id=command.id)

    @property
    def names(self) -> list[str]:
        return [c.cmd for c in self.commands]


@pytest.fixture
def run_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="vega-ctl-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def server(run_dir: Path, recorder: Recorder) -> Iterator[ControlServer]:
    with ControlServer(run_dir, recorder) as live:
        yield live


def raw_connect(run_dir: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(str(run_dir / "control.sock"))
    return sock


def read_replies(sock: socket.socket, count: int) -> list[dict]:
    """Read exactly `count` reply lines from a raw socket."""
    buffer = b""
    while buffer.count(b"\n") < count:
        chunk = sock.recv(65536)
        assert chunk, f"server closed the connection after {len(buffer.splitlines())} of {count} replies"
        buffer += chunk
    return [json.loads(line) for line in buffer.splitlines()[:count]]


def start_server_process(run_dir: Path, script_dir: Path) -> subprocess.Popen[str]:
    """A real trainer stand-in in another process; returns once it serves the socket."""
    script = script_dir / "serve_control.py"
    script.write_text(SERVER_SCRIPT)
    process = subprocess.Popen(
        [sys.executable, str(script), str(run_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    first_line = process.stdout.readline()
    if first_line.strip() != "ready":
        process.kill()
        pytest.fail(f"server process did not start: {first_line!r} {process.stderr.read()}")
    return process


def stop_process(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(10)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainer_core", *args], capture_output=True, text=True, timeout=30)


# --- round trips ---------------------------------------------------------------------------------------------


def test_every_command_round_trips_through_the_socket(server: ControlServer, run_dir: Path, recorder: Recorder):
    for n, name in enumerate(COMMAND_NAMES):
        reply = send_command(run_dir, name, id=f"req-{n}")
        assert reply.ok and reply.cmd == name and reply.id == f"req-{n}" and reply.error is None
    assert recorder.names == list(COMMAND_NAMES)
    assert [c.id for c in recorder.commands] == [f"req-{n}" for n in range(len(COMMAND_NAMES))]


def test_handler_returning_none_means_ok(run_dir: Path):
    with ControlServer(run_dir, lambda command: None):
        reply = send_command(run_dir, "save", id="x")
    assert reply.ok and reply.cmd == "save" and reply.id == "x"


def test_handler_refusal_is_passed_through(run_dir: Path):
    def refuse(command: Command) -> CommandReply:
        return CommandReply(ok=False, cmd=command.cmd, id=command.id, error="not paused")

    with ControlServer(run_dir, refuse):
        reply = send_command(run_dir, "resume")
    assert not reply.ok and reply.error == "not paused"


def test_socket_is_private_to_its_owner(server: ControlServer, run_dir: Path):
    info = (run_dir / "control.sock").lstat()
    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid()


def test_stop_removes_the_socket_and_clients_then_get_a_clear_error(run_dir: Path, recorder: Recorder):
    server = ControlServer(run_dir, recorder).start()
    assert server.running and (run_dir / "control.sock").exists()
    server.stop()
    server.stop()  # a second stop is harmless
    assert not server.running
    assert not (run_dir / "control.sock").exists()
    with pytest.raises(ControlError, match="no trainer is listening .*control.sock not found"):
        send_command(run_dir, "pause")


def test_stop_called_from_the_handler_still_delivers_the_reply(run_dir: Path):
    server: ControlServer

    def stop_on_request(command: Command) -> None:
        if command.cmd == "stop":
            server.stop()

    server = ControlServer(run_dir, stop_on_request).start()
    reply = send_command(run_dir, "stop", id="last")
    assert reply.ok and reply.id == "last"
    assert server._thread is not None
    server._thread.join(5)
    assert not server.running and not (run_dir / "control.sock").exists()


# --- bad input -----------------------------------------------------------------------------------------------


def test_unknown_command_gets_an_error_reply_listing_valid_ones(server: ControlServer, run_dir: Path):
    reply = send_command(run_dir, "jump", id="j1")
    assert not reply.ok and reply.id == "j1"
    assert "unknown command 'jump'" in reply.error
    assert all(name in reply.error for name in COMMAND_NAMES)


def test_malformed_requests_get_error_replies_on_a_connection_that_keeps_working(
    server: ControlServer, run_dir: Path, recorder: Recorder
):
    with raw_connect(run_dir) as sock:
        sock.sendall(b'not json\n[1, 2]\n{"id": "no-cmd"}\n\n{"cmd": "pause", "id": "after"}\r\n')
        bad_json, not_object, no_cmd, good = read_replies(sock, 4)
    assert not bad_json["ok"] and "malformed JSON" in bad_json["error"]
    assert not not_object["ok"] and not_object["error"]
    assert not no_cmd["ok"] and no_cmd["error"] and no_cmd["id"] == "no-cmd"
    assert good == {"ok": True, "cmd": "pause", "id": "after", "error": None}
    assert recorder.names == ["pause"]
    assert send_command(run_dir, "resume").ok  # and the server serves new connections


def test_oversized_line_is_rejected_and_the_connection_recovers(server: ControlServer, run_dir: Path):
    with raw_connect(run_dir) as sock:
        # One line arriving in pieces without a newline, then its end and a valid request.
        for _ in range(3):
            sock.sendall(b"x" * 40_000)
        sock.sendall(b'yyy\n{"cmd": "save"}\n')
        oversized, good = read_replies(sock, 2)
        # A whole oversized line, newline included, in one write.
        sock.sendall(b'{"cmd": "' + b"z" * 70_000 + b'"}\n{"cmd": "evaluate"}\n')
        oversized_whole, good_again = read_replies(sock, 2)
    for reply in (oversized, oversized_whole):
        assert not reply["ok"] and "longer than 65536 bytes" in reply["error"]
    assert good["ok"] and good["cmd"] == "save"
    assert good_again["ok"] and good_again["cmd"] == "evaluate"


def test_last_line_without_newline_is_answered_when_the_client_stops_sending(server: ControlServer, run_dir: Path):
    with raw_connect(run_dir) as sock:
        sock.sendall(b'{"cmd": "pause"}')
        sock.shutdown(socket.SHUT_WR)
        (reply,) = read_replies(sock, 1)
        assert sock.recv(100) == b""  # then the server closes its end
    assert reply["ok"] and reply["cmd"] == "pause"


def test_handler_exception_becomes_an_error_reply_and_the_server_lives(run_dir: Path):
    calls: list[str] = []

    def flaky(command: Command) -> None:
        calls.append(command.cmd)
        if command.cmd == "save":
            raise OSError("disk full")

    with ControlServer(run_dir, flaky) as server:
        failed = send_command(run_dir, "save", id="s")
        after = send_command(run_dir, "pause")
        assert server.running
    assert not failed.ok and failed.cmd == "save" and failed.id == "s"
    assert "OSError" in failed.error and "disk full" in failed.error
    assert after.ok and calls == ["save", "pause"]


# --- several clients -------------------------------------------------------------------------------------------


def test_two_clients_connected_at_once(server: ControlServer, run_dir: Path, recorder: Recorder):
    with ControlConnection(run_dir) as first, ControlConnection(run_dir) as second:
        assert first.send("pause", id="a1").id == "a1"
        assert second.send("save", id="b1").id == "b1"
        assert first.send("resume", id="a2").id == "a2"
        assert second.send("evaluate", id="b2").id == "b2"
        assert first.connected and second.connected
    assert recorder.names == ["pause", "save", "resume", "evaluate"]


def test_one_connection_shared_by_threads_keeps_replies_matched(server: ControlServer, run_dir: Path):
    mismatches: list[str] = []

    def worker(connection: ControlConnection, tag: str) -> None:
        for n in range(20):
            reply = connection.send("save", id=f"{tag}-{n}")
            if reply.id != f"{tag}-{n}" or not reply.ok:
                mismatches.append(f"{tag}-{n} -> {reply}")

    with ControlConnection(run_dir) as shared:
        threads = [threading.Thread(target=worker, args=(shared, f"t{k}")) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
    assert mismatches == []


def test_connection_reconnects_after_the_trainer_restarts(run_dir: Path, recorder: Recorder):
    with ControlConnection(run_dir) as connection:
        with ControlServer(run_dir, recorder):
            assert connection.send("pause").ok
        with pytest.raises(ControlError):
            connection.send("resume")  # the server is gone: the connection breaks with a clear error
        assert not connection.connected
        with ControlServer(run_dir, recorder):
            assert connection.send("resume").ok
    assert recorder.names == ["pause", "resume"]


# --- start-up: stale and live sockets, path length -----------------------------------------------------------


def test_stale_socket_left_by_a_closed_listener_is_replaced(run_dir: Path, recorder: Recorder):
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(run_dir / "control.sock"))
    leftover.close()  # closed without unlinking, as a crashed trainer leaves it
    with pytest.raises(ControlError, match="stale"):
        send_command(run_dir, "pause")
    with ControlServer(run_dir, recorder):
        assert send_command(run_dir, "pause").ok


def test_socket_of_a_killed_trainer_process_is_replaced(run_dir: Path, recorder: Recorder):
    process = start_server_process(run_dir, run_dir)
    process.send_signal(signal.SIGKILL)
    stop_process(process)
    assert (run_dir / "control.sock").exists()
    with ControlServer(run_dir, recorder):
        assert send_command(run_dir, "stop").ok
    assert recorder.names == ["stop"]


def test_second_server_refuses_while_a_live_trainer_serves_the_run(run_dir: Path, recorder: Recorder):
    process = start_server_process(run_dir, run_dir)
    try:
        with pytest.raises(ControlError, match="another trainer is already serving this run folder"):
            ControlServer(run_dir, recorder).start()
        assert send_command(run_dir, "pause", id="p").ok  # the live trainer's socket is untouched
        assert process.stdout is not None and process.stdout.readline().strip() == "ack pause p"
    finally:
        stop_process(process)
    assert recorder.commands == []


def test_a_file_in_the_way_is_not_deleted(run_dir: Path, recorder: Recorder):
    (run_dir / "control.sock").write_text("not a socket")
    with pytest.raises(ControlError, match="exists and is not a socket"):
        ControlServer(run_dir, recorder).start()
    assert (run_dir / "control.sock").read_text() == "not a socket"


def test_too_long_socket_path_fails_clearly(run_dir: Path, recorder: Recorder):
    deep = run_dir / ("long-run-name-" * 8)
    deep.mkdir()
    with pytest.raises(ControlError, match="shorter runs folder"):
        ControlServer(deep, recorder).start()
    (deep / "control.sock").touch()  # so the client gets as far as the length check
    with pytest.raises(ControlError, match="shorter runs folder"):
        send_command(deep, "pause")


def test_missing_run_folder_is_a_clear_error(run_dir: Path, recorder: Recorder):
    with pytest.raises(ControlError, match="does not exist"):
        ControlServer(run_dir / "missing", recorder).start()
    with pytest.raises(ControlError, match="does not exist"):
        send_command(run_dir / "missing", "pause")


# --- client errors -------------------------------------------------------------------------------------------


def test_client_error_when_nothing_listens(run_dir: Path):
    with pytest.raises(ControlError, match=r"no trainer is listening in .*: control.sock not found — the run has"):
        send_command(run_dir, "pause")


def test_client_times_out_when_the_trainer_never_answers(run_dir: Path):
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(run_dir / "control.sock"))
    silent.listen(1)  # accepts into the backlog, never reads or replies
    try:
        with pytest.raises(ControlError, match="no reply to 'pause' .* within 0.2 s"):
            send_command(run_dir, "pause", timeout=0.2)
    finally:
        silent.close()


# --- peer credentials ----------------------------------------------------------------------------------------


def test_peer_uid_comparison():
    me = os.geteuid()
    assert peer_refusal(me, me) is None
    assert peer_refusal(None, me) is None  # the platform cannot tell; the 0600 mode guards instead
    refusal = peer_refusal(me + 1, me)
    assert refusal is not None and f"uid {me + 1}" in refusal and f"only uid {me}" in refusal
    assert peer_refusal(0, me + 1) is not None  # root is refused too when the trainer runs as someone else


@pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="SO_PEERCRED is Linux-only")
def test_peer_uid_read_from_a_real_connection_is_ours(run_dir: Path):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(run_dir / "peer.sock"))
    listener.listen(1)
    with listener, raw_connect_path(run_dir / "peer.sock") as client:
        accepted, _ = listener.accept()
        with accepted:
            assert read_peer_uid(accepted) == os.geteuid()
            assert read_peer_uid(client) == os.geteuid()


def raw_connect_path(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    return sock


@pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="SO_PEERCRED is Linux-only")
def test_connection_from_another_uid_is_refused(run_dir: Path, recorder: Recorder):
    # The server expects a different uid, so this process is "another user" to it.
    with ControlServer(run_dir, recorder, allowed_uid=os.geteuid() + 1):
        reply = send_command(run_dir, "stop")
    assert not reply.ok and "connection refused" in reply.error and f"uid {os.geteuid()}" in reply.error
    assert recorder.commands == []


# --- the CLI against a trainer in another process ------------------------------------------------------------


def test_ctl_cli_sends_commands_to_a_trainer_process(run_dir: Path):
    process = start_server_process(run_dir, run_dir)
    assert process.stdout is not None
    try:
        paused = run_cli("ctl", str(run_dir), "pause")
        assert paused.returncode == 0, paused.stderr
        assert paused.stdout.strip() == "pause: ok"
        assert process.stdout.readline().startswith("ack pause")

        # This stand-in trainer writes no events: the CLI only queues (waiting is tested with real trainers).
        saved = run_cli("ctl", str(run_dir), "save", "--json", "--timeout", "5", "--no-wait")
        assert saved.returncode == 0, saved.stderr
        assert json.loads(saved.stdout) == {"ok": True, "cmd": "save", "id": None, "error": None, "done": None}

        stopped = run_cli("ctl", str(run_dir), "stop")
        assert stopped.returncode == 0 and stopped.stdout.strip() == "stop: ok"
        process.wait(10)
        assert process.returncode == 0
    finally:
        stop_process(process)
    assert not (run_dir / "control.sock").exists()


def test_ctl_cli_errors_exit_2_without_traceback(run_dir: Path):
    nothing = run_cli("ctl", str(run_dir), "pause")
    assert nothing.returncode == 2
    assert "error: no trainer is listening" in nothing.stderr and "Traceback" not in nothing.stderr

    unknown = run_cli("ctl", str(run_dir), "jump")
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr

    bad_timeout = run_cli("ctl", str(run_dir), "pause", "--timeout", "0")
    assert bad_timeout.returncode == 2 and "--timeout must be more than 0" in bad_timeout.stderr


def test_ctl_cli_refused_command_exits_2(run_dir: Path):
    def refuse(command: Command) -> CommandReply:
        return CommandReply(ok=False, cmd=command.cmd, id=command.id, error="already paused")

    with ControlServer(run_dir, refuse):
        refused = run_cli("ctl", str(run_dir), "pause", "--json")
    assert refused.returncode == 2
    assert json.loads(refused.stdout)["error"] == "already paused"
    assert "error: the trainer refused 'pause': already paused" in refused.stderr
