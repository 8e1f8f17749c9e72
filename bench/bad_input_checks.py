"""The bad-input drill's bookkeeping: what a case is, how an outcome is judged, what is lost.

A command's outcome is one of
  error      exit 2 with an `error:` message naming the bad file, field or value (no traceback)
  skip       exit 0 and the input listed by name (a check-data or data_scan problem, a warning)
  accepted   exit 0 and the input used, where using it is right (8 channels are downmixed)
  unhandled  exit 0 or 2 without naming the input (used silently, or an error that says nothing)
  crash      a Python traceback, or an exit status other than 0 and 2
  hang       still running at its time limit (killed)
Data lost: a user file (data, checkpoints, exports, profiles) that changed or disappeared, or an
event log whose earlier bytes changed; new files do not count.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common

HANDLED = ("error", "skip", "accepted")
FAILED = ("crash", "hang")
TRACEBACK = "Traceback (most recent call last)"
# The capabilities root reads any file with: dropped to meet a mode-000 file as a user does.
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, PR_CAPBSET_DROP = 1, 2, 24

Judge = Callable[["Command", "subprocess.CompletedProcess[str]"], tuple[str, str]]


@dataclass
class Command:
    """A command fed the input: `trainer-core ARGS` in a subprocess, judged by what it names."""

    label: str
    args: list[str]
    names: tuple[str, ...]  # any of these in the message means the input was named
    timeout: float = 60.0
    judge: Judge | None = None  # how an exit 0 is read (None: unhandled, an error was due)
    run_dir: Path | None = None  # a train command's run folder (its events say what was skipped)
    unprivileged: bool = False  # root without its read-anything capabilities (unreadable files)
    env: dict[str, str] = field(default_factory=dict)  # on top of the drill's environment
    full_only: bool = False  # left out of --tiny


@dataclass
class Workspace:
    """The drill's folder: profiles, caches, the trainer's environment, and runs built once."""

    root: Path
    tts_profile: Path
    lm_profile: Path
    env: dict[str, str]
    built: dict[str, Path] = field(default_factory=dict)

    @property
    def cache(self) -> Path:
        return self.root / "cache"


@dataclass
class Trial:
    """A built case: the commands to run, the user files to hash, the append-only logs to check."""

    commands: list[Command]
    keep: list[Path] = field(default_factory=list)
    grow: list[Path] = field(default_factory=list)
    # An in-process check (the dashboard) instead of commands.
    inline: Callable[[], tuple[str, str]] | None = None
    skipped: str | None = None


@dataclass
class Case:
    key: str
    group: str
    fed: str
    build: Callable[[Workspace], Trial]
    accept_ok: bool = False
    tiny: bool = False


@dataclass
class Outcome:
    case: str
    group: str
    fed: str
    command: str
    kind: str
    message: str
    seconds: float
    lost: list[str] = field(default_factory=list)


# -------------------------------------------------------------------------------------------------
# Running and judging one command


def drop_read_override() -> None:
    """preexec_fn: as root, stop reading past file modes (mode 000 keeps it out, as a user)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def unreadable_possible() -> bool:
    """Whether a mode-000 file can be kept from the commands: always for a user; for root only
    where it may drop the capabilities (a container without CAP_SETPCAP may not)."""
    if os.geteuid() != 0:
        return True
    try:
        subprocess.run(["true"], preexec_fn=drop_read_override, check=True)  # noqa: PLW1509
    except (subprocess.SubprocessError, OSError):
        return False
    return True


def run_command(
    command: Command,
    env: dict[str, str],
    wrapper: list[str],
) -> tuple[str, str, float]:
    """(outcome, message, seconds) of a command; `wrapper` runs it under a control's script."""
    module = ["trainer_core"] if wrapper else ["-m", "trainer_core"]
    argv = [sys.executable, *wrapper, *module, *command.args]
    as_user = command.unprivileged and os.geteuid() == 0
    t0 = time.monotonic()
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            env={**env, **command.env},
            cwd=common.REPO,
            timeout=command.timeout,
            stdin=subprocess.DEVNULL,
            preexec_fn=drop_read_override if as_user else None,  # noqa: PLW1509 - no threads
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "hang", f"still running after {command.timeout:g} s (killed)", time.monotonic() - t0
    kind, message = judge(command, done)
    return kind, message, time.monotonic() - t0


def judge(command: Command, done: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    if TRACEBACK in done.stderr or TRACEBACK in done.stdout or done.returncode not in (0, 2):
        return "crash", crash_line(done)
    if done.returncode == 2:
        line = error_line(done.stderr)
        return ("error" if names_any(line, command.names) else "unhandled"), line
    if command.judge is None:
        return "unhandled", f"exit 0: taken without an error ({first_line(done.stdout)})"
    return command.judge(command, done)


def names_any(text: str, names: tuple[str, ...]) -> bool:
    return any(name in text for name in names)


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def error_line(stderr: str) -> str:
    """The CLI's error message: its `error:` line with the indented lines listing the problems."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("error:")]
    if not starts:
        return first_line(stderr) or "exit 2 with nothing on stderr"
    more = [line.strip() for line in lines[starts[-1] + 1 :] if line.startswith(" ")]
    return " / ".join([lines[starts[-1]], *more])


def crash_line(done: subprocess.CompletedProcess[str]) -> str:
    """A traceback's exception line, else the stderr's last line, with the exit status."""
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    if TRACEBACK in done.stderr:
        after = done.stderr.rsplit(TRACEBACK, 1)[1].splitlines()
        unindented = [line.strip() for line in after if line.strip() and not line.startswith(" ")]
        lines = unindented or lines
    return f"exit {done.returncode}: " + (lines[-1] if lines else "no message")


# -------------------------------------------------------------------------------------------------
# Judges of an exit 0


def check_data_judge(accept_ok: bool) -> Judge:
    """check-data --json --items: the input among the problems (skip) or the items (accepted)."""

    def judge_report(command: Command, done: subprocess.CompletedProcess[str]) -> tuple[str, str]:
        report = json.loads(done.stdout)
        items = report.get("items", [])
        kind, message = from_scan(report["problems"], items, command.names, accept_ok)
        warned = [line for line in done.stderr.splitlines() if names_any(line, command.names)]
        return ("skip", warned[0]) if kind == "unhandled" and warned else (kind, message)

    return judge_report


def train_judge(accept_ok: bool) -> Judge:
    """train: the input among the data_scan problems or the warnings (skip), or trained on."""

    def judge_run(command: Command, done: subprocess.CompletedProcess[str]) -> tuple[str, str]:
        from trainer_core.contract import protocol as p
        from trainer_core.contract.eventlog import read_all

        assert command.run_dir is not None
        events = read_all(command.run_dir / "events.jsonl")
        ends = [e.status for e in events if isinstance(e, p.FinishedEvent)]
        if ends[-1:] != ["completed"]:
            end = ends[-1] if ends else "no finished event"
            return "unhandled", f"exit 0 but the run did not complete ({end})"
        scans = [e for e in events if isinstance(e, p.DataScanEvent)]
        listed = [f"{Path(str(x.path)).name}: {x.reason}" for e in scans for x in e.problems]
        warnings = [e.message for e in events if isinstance(e, p.WarningEvent)]
        logs = [e for e in events if isinstance(e, p.LogEvent)]
        warnings += [e.message for e in logs if e.level == "warning"]
        named = [text for text in listed + warnings if names_any(text, command.names)]
        if named:
            return "skip", named[0]
        return from_scan([], used_items(command.run_dir), command.names, accept_ok)

    return judge_run


def used_items(run_dir: Path) -> list[dict[str, Any]]:
    """The items a run trained on (its items.jsonl), as check-data lists them."""
    path = run_dir / "items.jsonl"
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def from_scan(
    problems: list[dict[str, Any]],
    items: list[dict[str, Any]],
    names: tuple[str, ...],
    accept_ok: bool,
) -> tuple[str, str]:
    for problem in problems:
        text = f"{Path(problem['path']).name}: {problem['reason']}"
        if names_any(text, names):
            return "skip", text
    verdict = "accepted" if accept_ok else "unhandled"
    for item in items:
        where = str(item.get("path", item.get("id", "")))
        if names_any(where, names):
            has = "channels" in item
            facts = f" ({item['channels']} ch, {item['sample_rate']} Hz)" if has else ""
            return verdict, f"{Path(where).name}: used{facts}"
    return verdict, "exit 0; no problem, warning or item names it"


# -------------------------------------------------------------------------------------------------
# Data lost


def snapshot(paths: list[Path]) -> dict[str, str]:
    """path -> digest of every file under `paths` (a symlink by its target, never followed)."""
    found: dict[str, str] = {}
    for top in paths:
        for path in walk(top):
            found[str(path)] = digest(path)
    return found


def walk(top: Path) -> list[Path]:
    if top.is_symlink() or not top.is_dir():
        return [top] if top.is_symlink() or top.exists() else []
    out = []
    for folder, dirs, files in os.walk(top):
        out += [Path(folder) / name for name in files]
        out += [Path(folder) / name for name in dirs if (Path(folder) / name).is_symlink()]
    return sorted(out)


def digest(path: Path) -> str:
    if path.is_symlink():
        return "link:" + os.readlink(path)
    sha = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha.update(block)
    except PermissionError:  # mode 000 for a user: compared by its mode and size instead
        info = path.stat()
        return f"unreadable:{info.st_mode}:{info.st_size}"
    return sha.hexdigest()


def log_prefixes(paths: list[Path]) -> dict[str, tuple[int, str]]:
    return {str(p): (p.stat().st_size, digest(p)) for p in paths if p.is_file()}


def lost_files(before: dict[str, str], grown: dict[str, tuple[int, str]]) -> list[str]:
    """Files changed or gone since `before`, and logs whose first bytes changed."""
    lost = []
    for name, was in before.items():
        path = Path(name)
        if not (path.exists() or path.is_symlink()):
            lost.append(f"{path.name} removed")
        elif digest(path) != was:
            lost.append(f"{path.name} changed")
    for name, (size, was) in grown.items():
        path = Path(name)
        if not path.is_file() or path.stat().st_size < size:
            lost.append(f"{path.name} removed or shortened")
            continue
        with open(path, "rb") as handle:
            if hashlib.sha256(handle.read(size)).hexdigest() != was:
                lost.append(f"{path.name}: earlier lines changed")
    return lost
