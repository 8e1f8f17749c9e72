"""Start, find and talk to trainer processes; no widgets (docs/architecture.md, "Two processes").

- `train_argv` builds the `trainer_core train` command line the launch screen runs.
- `TrainerProcess.spawn` starts it in its own session with stdout/stderr going
  to files in the run folder, so
  the trainer never blocks on a pipe nobody drains and outlives the dashboard (closed laptop,
  dropped SSH).
- `trainer_pid`, `is_alive` and `run_status` tell a live run from a finished
  or crashed one using the log's
  `hello`/`finished` events and the process table (PID reuse is ruled out by the command line and
  start time).
- `send` delivers a control command; a dead trainer's stale socket is
  reported at once, never waited on.
- `run_report` runs a `trainer_core` CLI command (check-data, train --dry-run) and parses its typed
  document (`trainer_core.contract.report_model`); `run_json` parses another command's JSON object.
Every process started here gets PYTHONSAFEPATH=1: the working folder never
shadows a package it imports.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_core.contract import rundir
from trainer_core.contract.control_client import ControlError, control_socket_path, send_command
from trainer_core.contract.control_protocol import COMMAND_NAMES, CommandReply
from trainer_core.contract.errors import VegaError
from trainer_core.contract.import_path import safe_env

if TYPE_CHECKING:
    from trainer_core.contract.report_model import Report

STDOUT_LOG = "stdout.log"
# How long `send` waits for a live trainer's reply: long enough for a busy
# step, short enough for a UI.
SEND_TIMEOUT_S = 3.0
# A run whose trainer lives on another host (shared storage) counts as live while its log moves.
REMOTE_STALE_AFTER_S = 120.0
TAIL_CHUNK = 64 * 1024
# Bytes read at a time when searching events.jsonl backwards for the newest hello/finished event.
SCAN_WINDOW = 8 * 1024 * 1024
# A longer line is not a hello or finished event: it is not carried from window to window.
MAX_LIFECYCLE_LINE = 1024 * 1024
# The event types run_status cares about, matched on raw bytes before any JSON parsing.
_TYPE_RE = re.compile(rb'"type"\s*:\s*"(hello|finished)"')
_TRAINER_MARKERS = ("trainer_core", "trainer-core")


class RunnerError(VegaError):
    """A trainer_core command the dashboard ran failed; the message is the
    command's own `error: ...` line."""


# --------------------------------------------------------------------------------------------------
# Command lines


def trainer_command(*args: str) -> list[str]:
    """[python, -m, trainer_core, *args] with this interpreter: the
    dashboard and trainer share a venv."""
    return [sys.executable, "-m", "trainer_core", *args]


def train_argv(
    profile: str | Path,
    *,
    run_dir: str | Path | None,
    data: str | Path | None = None,
    mode: str | None = None,
    data_mode: str | None = None,
    device: str | None = None,
    overrides: Iterable[str] = (),
    resume: str | Path | None = None,
    init_from: str | Path | None = None,
    nproc: int | None = None,
    dry_run: bool = False,
    json: bool = False,
) -> list[str]:
    """The `trainer_core train` argument list (never a shell string);
    None/empty options are left out."""
    argv = trainer_command("train", "--profile", str(profile))
    options = {
        "--run-dir": run_dir,
        "--data": data,
        "--compute-mode": mode,
        "--data-mode": data_mode,
        "--device": device,
        "--resume": resume,
        "--init-from": init_from,
        # One process is the plain run: torchrun only when several are asked for.
        "--nproc-per-node": nproc if nproc is not None and nproc > 1 else None,
    }
    for flag, value in options.items():
        if value not in (None, ""):
            argv += [flag, str(value)]
    for item in overrides:
        argv += ["--set", item]
    if dry_run:
        argv.append("--dry-run")
    if json:
        argv.append("--json")
    return argv


# --------------------------------------------------------------------------------------------------
# Spawning


class TrainerProcess:
    """A trainer started by this dashboard. Dropping the object leaves the trainer running."""

    def __init__(self, popen: subprocess.Popen[bytes], run_dir: Path, argv: list[str]) -> None:
        self.popen = popen
        self.run_dir = run_dir
        self.argv = argv

    @classmethod
    def spawn(cls, argv: Sequence[str], run_dir: Path | str) -> TrainerProcess:
        """Start `argv` in its own session: stdin from /dev/null, stdout to
        RUN/stdout.log, stderr appended to RUN/trainer.log. Files, never pipes: nothing
        the dashboard does can block the trainer."""
        folder = Path(run_dir)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunnerError(
                f"cannot create run folder {folder}: {exc.strerror or exc}; choose another"
            ) from exc
        with open(folder / STDOUT_LOG, "ab") as out, open(folder / rundir.LOG, "ab") as err:
            try:
                popen = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    close_fds=True,
                    env=trainer_env(),
                )
            except OSError as exc:
                raise RunnerError(
                    f"cannot start the trainer ({argv[0]}): {exc.strerror or exc}"
                ) from exc
        return cls(popen, folder, list(argv))

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        """The exit code, or None while it runs (reaps it once it has exited)."""
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit code; subprocess.TimeoutExpired after `timeout` seconds."""
        return self.popen.wait(timeout)

    def __repr__(self) -> str:
        return (
            f"TrainerProcess(pid={self.pid}, run_dir={str(self.run_dir)!r},"
            f" returncode={self.popen.returncode})"
        )


def trainer_env() -> dict[str, str]:
    """This environment for a trainer: the working folder off its import
    path (contract.import_path)."""
    env = safe_env()
    env["PYTHONUNBUFFERED"] = "1"  # stdout.log shows output as it happens
    return env


# --------------------------------------------------------------------------------------------------
# Reading the end of files


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


def _last_hello(run_dir: Path | str) -> dict[str, Any] | None:
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


# --------------------------------------------------------------------------------------------------
# Is the trainer alive?


def _same_host(hello: dict[str, Any]) -> bool:
    host = hello.get("host")
    return host is None or host == os.uname().nodename


def _is_trainer_process(pid: int, started_by: float | None) -> bool:
    """True when `pid` is a running (not zombie) trainer_core process that
    started before `started_by`."""
    import psutil  # imported here: only the runs/attach paths need it

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        cmdline = " ".join(proc.cmdline())
        created = proc.create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied, ProcessLookupError):
        return False
    if not any(marker in cmdline for marker in _TRAINER_MARKERS):
        return False  # the pid was reused by an unrelated process
    # A process younger than the hello it supposedly wrote is a later process that reused the pid.
    return started_by is None or created <= started_by + 2.0


def trainer_pid(run_dir: Path | str) -> int | None:
    """The pid of the trainer serving this run if it is alive on this host, else None."""
    hello = _last_hello(run_dir)
    if hello is None or not _same_host(hello):
        return None
    pid, t = hello.get("pid"), hello.get("t")
    if not isinstance(pid, int) or pid <= 0:
        return None
    return pid if _is_trainer_process(pid, t if isinstance(t, (int, float)) else None) else None


def is_alive(run_dir: Path | str) -> bool:
    return trainer_pid(run_dir) is not None


def run_status(run_dir: Path | str) -> str:
    """ "live", "finished", "stopped", "failed", "crashed" (died without a
    finished event) or "empty"."""
    event = last_lifecycle_event(run_dir)
    if event is None:
        return "crashed" if _has_events(run_dir) else "empty"
    if event.get("type") == "finished":
        return {"completed": "finished", "stopped": "stopped"}.get(
            str(event.get("status")), "failed"
        )
    if not _same_host(event):
        return "live" if _recently_written(run_dir) else "crashed"
    return "live" if is_alive(run_dir) else "crashed"


def _has_events(run_dir: Path | str) -> bool:
    try:
        return (Path(run_dir) / rundir.EVENTS).stat().st_size > 0
    except OSError:
        return False


def _recently_written(run_dir: Path | str) -> bool:
    try:
        return time.time() - (Path(run_dir) / rundir.EVENTS).stat().st_mtime < REMOTE_STALE_AFTER_S
    except OSError:
        return False


# --------------------------------------------------------------------------------------------------
# Commands


def send(run_dir: Path | str, cmd: str, timeout: float = SEND_TIMEOUT_S) -> CommandReply:
    """Send a control command (pause, resume, save, evaluate, stop) and return the trainer's reply.

    Raises ControlError with a clear message when the run has no live trainer (a missing or stale
    socket) or no reply comes within `timeout` seconds; it never hangs.
    """
    if cmd not in COMMAND_NAMES:
        raise ControlError(f"unknown command {cmd!r}; expected one of: {', '.join(COMMAND_NAMES)}")
    folder = Path(run_dir)
    _check_not_stale(folder)
    return send_command(folder, cmd, timeout=timeout)


def _check_not_stale(run_dir: Path) -> None:
    """Fail fast on a socket whose trainer is gone, naming the pid that died."""
    sock = control_socket_path(run_dir)
    if not sock.exists():
        return  # send_command explains a missing socket
    hello = _last_hello(run_dir)
    if hello is None or not _same_host(hello) or trainer_pid(run_dir) is not None:
        return
    raise ControlError(
        f"the trainer of {run_dir} (pid {hello.get('pid')}) is not running: {rundir.SOCKET} is"
        " stale; the run crashed or was killed — resume it from a checkpoint"
    )


def socket_ready(run_dir: Path | str) -> bool:
    """True when RUN/control.sock exists and accepts a connection (the
    trainer is ready for commands)."""
    path = control_socket_path(run_dir)
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


# --------------------------------------------------------------------------------------------------
# JSON commands


def run_json(argv: Sequence[str], timeout: float = 120.0) -> dict[str, Any]:
    """Run a trainer_core CLI command that prints a JSON object (`export --piper --json`).

    RunnerError carries the command's `error: ...` message on exit 2, the end of
    stderr on other failures, and says so when the output is not a JSON object or the
    command outlives `timeout` seconds.
    """
    name, stdout = _run_command(argv, timeout)
    return _parse_json_object(name, stdout)


def run_report(argv: Sequence[str], model: type[Report], timeout: float = 120.0) -> Report:
    """Run a command that prints a typed document (check-data, train --dry-run) and parse it.

    Failures are `run_json`'s; a document that does not fit `model` is a ReportError naming fields.
    """
    # pydantic: not on the first frame's path
    from trainer_core.contract.report_model import read_report

    return read_report(model, _run_command(argv, timeout)[1])


def _run_command(argv: Sequence[str], timeout: float) -> tuple[str, str]:
    """(the command's short name, its stdout) once it exited 0; RunnerError otherwise."""
    name = (
        " ".join(argv[3:5])
        if len(argv) > 3 and argv[1:3] == ["-m", "trainer_core"]
        else " ".join(argv[:2])
    )
    try:
        done = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=safe_env(),
        )
    except subprocess.TimeoutExpired:
        raise RunnerError(f"`{name}` did not finish within {timeout:g} s") from None
    except OSError as exc:
        raise RunnerError(f"cannot run `{name}`: {exc.strerror or exc}") from exc
    if done.returncode != 0:
        raise RunnerError(_failure_message(name, done.returncode, done.stderr))
    return name, done.stdout


def _failure_message(name: str, code: int, stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    starts = [n for n, line in enumerate(lines) if line.startswith("error: ")]
    if starts:
        # The last error with the lines it continues on (a refusal's lines to
        # add to the machine file, say).
        return "\n".join(lines[starts[-1] :])[len("error: ") :]
    tail = " | ".join(lines[-3:]) if lines else "no output on stderr"
    return f"`{name}` failed with exit code {code}: {tail}"


def _parse_json_object(name: str, stdout: str) -> dict[str, Any]:
    try:
        data = json.loads(stdout)
    except ValueError:
        snippet = stdout.strip()[:200] or "(nothing)"
        raise RunnerError(f"`{name}` printed something that is not JSON: {snippet!r}") from None
    if not isinstance(data, dict):
        raise RunnerError(f"`{name}` printed JSON {type(data).__name__}, expected an object")
    return data
