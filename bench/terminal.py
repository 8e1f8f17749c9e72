"""A private tmux terminal for the benchmarks that drive the real `vega-tui`, and the
memory and CPU of its processes.

Scripts import this module as `terminal` (it sits beside them, like `common`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

VEGA_TUI = [sys.executable, "-m", "vega_tui"]
SIZE = (120, 40)
POLL_S = 0.01
HISTORY_WORKER = "vega_tui.history_worker"
_SERVERS = itertools.count(1)


class Terminal:
    """A tmux server of this benchmark's own (`-L`), one session, read with capture-pane."""

    def __init__(self, env: dict[str, str]) -> None:
        self.socket = f"vega-bench-{os.getpid()}-0"
        self.env = env
        self.opened = 0

    def tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = ["tmux", "-L", self.socket, "-f", "/dev/null", *args]
        return subprocess.run(
            command, env=self.env, capture_output=True, text=True, timeout=30, check=check
        )

    def open(self, argv: list[str], cwd: Path) -> float:
        """Start `argv` in a fresh session; returns the perf_counter time just before the spawn."""
        width, height = SIZE
        self.opened += 1
        # A fresh server each time (one being killed can still hold the old name for a moment), and
        # one of each terminal's own: two can be open at once.
        self.socket = f"vega-bench-{os.getpid()}-{next(_SERVERS)}"
        t0 = time.perf_counter()
        self.tmux(
            "new-session",
            "-d",
            "-s",
            "b",
            "-x",
            str(width),
            "-y",
            str(height),
            "-c",
            str(cwd),
            shlex.join(argv),
        )
        return t0

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "b", check=False).stdout

    def press(self, key: str) -> float:
        t0 = time.perf_counter()
        self.tmux("send-keys", "-t", "b", key)
        return t0

    def app_process(self):
        """The python process running in the pane (psutil.Process), or None once it has gone."""
        import psutil

        out = self.tmux(
            "display-message", "-p", "-t", "b", "#{pane_pid}", check=False
        ).stdout.strip()
        try:
            pane = psutil.Process(int(out))
        except (ValueError, psutil.NoSuchProcess):
            return None
        pythons = []
        for p in tree_of(pane):
            # a child can finish, or be a zombie not yet reaped, between the listing and the reads
            try:
                name, line = p.name(), " ".join(p.cmdline())
            except psutil.Error:
                continue
            if ("python" in name or "vega" in line) and HISTORY_WORKER not in line:
                pythons.append(p)
        return pythons[-1] if pythons else pane

    def close(self) -> None:
        self.tmux("kill-server", check=False)
        # tmux can leave the socket file of a killed server behind; it is ours, remove it.
        folder = Path(os.environ.get("TMUX_TMPDIR", "/tmp")) / f"tmux-{os.getuid()}"
        (folder / self.socket).unlink(missing_ok=True)


def wait_screen(
    term: Terminal,
    done: Callable[[str], bool],
    timeout: float,
    on_poll: Callable[[], None] | None = None,
) -> tuple[float | None, str]:
    """Poll the screen until `done(screen)`; (perf_counter when seen or None
    on timeout, last screen)."""
    deadline = time.perf_counter() + timeout
    screen = ""
    while time.perf_counter() < deadline:
        screen = term.screen()
        if done(screen):
            return time.perf_counter(), screen
        if on_poll is not None:
            on_poll()
        time.sleep(POLL_S)
    return None, screen


def app_env(config_dir: Path) -> dict[str, str]:
    """The environment vega-tui runs in: an empty config folder (no machine file), a sane TERM."""
    env = {**os.environ, "VEGA_CONFIG_DIR": str(config_dir), "TERM": "xterm-256color"}
    env.pop("TMUX", None)
    return env


def tree_of(proc) -> list:
    """The process and all its children (the history child among them), as
    psutil.Process objects."""
    import psutil

    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def tree_rss(proc) -> tuple[int, int]:
    """Resident bytes of the process and its living children together, and how
    many such children there were."""
    import psutil

    total, living = 0, 0
    for p in tree_of(proc):
        # a child can finish, or be a zombie, between the listing and the read
        with contextlib.suppress(psutil.Error):
            if p.status() != psutil.STATUS_ZOMBIE:
                total += p.memory_info().rss
                living += 1
    return total, max(0, living - 1)


def cpu_seconds(proc) -> float:
    """User + system CPU seconds of a process and its children."""
    import psutil

    total = 0.0
    for p in tree_of(proc):
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total
