"""Start, find and talk to trainer processes; no widgets (docs/architecture.md, "Two processes").

- `train_argv` builds the `trainer_core train` command line the launch screen runs.
- `TrainerProcess.spawn` starts it in its own session with stdout/stderr going
  to files in the run folder, so
  the trainer never blocks on a pipe nobody drains and outlives the dashboard (closed laptop,
  dropped SSH).
- `trainer_pid`, `is_alive` and `run_status` tell a live run from a finished
  or crashed one using the log's
  `hello`/`finished` events (found by vega_tui/runner_tail.py) and the process table (PID reuse is
  ruled out by the command line and start time).
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
from vega_tui.runner_tail import last_hello, last_lifecycle_event

if TYPE_CHECKING:
    from trainer_core.contract.report_model import Report

STDOUT_LOG = "stdout.log"
# How long `send` waits for a live trainer's reply: long enough for a busy
# step, short enough for a UI.
SEND_TIMEOUT_S = 3.0
# A run whose trainer lives on another host (shared storage) counts as live while its log moves.
REMOTE_STALE_AFTER_S = 120.0
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
    hello = last_hello(run_dir)
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


def modified_at(path: Path) -> float | None:
    """The file's or folder's modification time; None when it cannot be read."""
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _recently_written(run_dir: Path | str) -> bool:
    written = modified_at(Path(run_dir) / rundir.EVENTS)
    return written is not None and time.time() - written < REMOTE_STALE_AFTER_S


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
    hello = last_hello(run_dir)
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
