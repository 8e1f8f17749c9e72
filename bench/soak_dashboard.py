"""The dashboards of the soak (bench/soak.py), each `vega-tui attach` in a private tmux terminal.

One is attached from the first step to the end and sampled with the trainer: resident memory of the
vega-tui process together with its children (the child that reads a long log's history), and CPU. At
the end, while the trainer still runs, it must show the trainer's latest step; then a second one
attaches fresh to the long log, as after a dropped SSH session, and its peak memory (history child
included) and time to the latest step are measured.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from terminal import POLL_S, VEGA_TUI, Terminal, app_env, cpu_seconds, tree_rss, wait_screen

ATTACH_TIMEOUT_S = 60.0
# The attached dashboard redraws within a second of a step event (they are coalesced to 0.5 s).
LATEST_TIMEOUT_S = 10.0
# The exact history of a 30-minute log is read by the child in seconds; this is a generous bound.
HISTORY_TIMEOUT_S = 60.0
STEP_SHOWN = re.compile(r"\bstep (\d+)\b")


@dataclass
class Reattach:
    seconds: float | None  # from spawn until the latest step shows (None: it never did)
    peak_rss: int  # vega-tui and its children together, sampled while it opened
    children_seen: int  # most children at once (1 while the history child reads a long log)
    settled_rss: int  # vega-tui and its children once the latest step showed
    log_bytes: int


def latest_step(log: Path) -> int:
    """The step of the last `step` event in the log (read from its tail)."""
    with open(log, "rb") as handle:
        handle.seek(max(0, log.stat().st_size - 65536))
        lines = handle.read().splitlines()
    for line in reversed(lines):
        if b'"type":"step"' in line:
            try:
                return int(json.loads(line)["step"])
            except (ValueError, KeyError):  # a line cut by the seek, or being written
                continue
    return 0


def shown_step(screen: str) -> int:
    """The highest step the screen shows (the status line's; log lines name earlier ones)."""
    return max((int(m) for m in STEP_SHOWN.findall(screen)), default=0)


class Dashboard:
    """`vega-tui attach RUN` in a terminal of its own; `command` starts vega-tui (through
    a wrapper in the leak control)."""

    def __init__(self, config_dir: Path, command: list[str] = VEGA_TUI) -> None:
        self.term = Terminal(app_env(config_dir))
        self.command = command
        self.process = None

    def attach(self, run_dir: Path) -> float:
        """Open it and wait until it shows a step; the seconds that took."""
        t0 = self.term.open([*self.command, "attach", str(run_dir)], run_dir.parent)
        seen, screen = wait_screen(self.term, lambda s: shown_step(s) > 0, ATTACH_TIMEOUT_S)
        if seen is None:
            raise RuntimeError(
                f"the dashboard showed no step within {ATTACH_TIMEOUT_S:g} s; screen:\n{screen}"
            )
        self.process = self.term.app_process()
        return seen - t0

    def alive(self) -> bool:
        return self.process is not None and self.process.is_running()

    def memory(self) -> tuple[int, int]:
        """Resident bytes of vega-tui and its children, and the number of
        children (0, 0 once it has gone)."""
        return tree_rss(self.process) if self.alive() else (0, 0)

    def cpu(self) -> float:
        return cpu_seconds(self.process) if self.alive() else 0.0

    def shows_latest(self, log: Path) -> tuple[bool, int, int]:
        """Whether the screen catches up with the log's latest step: (caught up, shown, latest)."""
        latest = latest_step(log)
        seen, screen = wait_screen(self.term, lambda s: shown_step(s) >= latest, LATEST_TIMEOUT_S)
        return seen is not None, shown_step(screen), latest

    def close(self) -> None:
        self.term.close()


def wait_history_read(dashboard: Dashboard, sample) -> object:
    """Sample on until vega-tui has had no child for a second (the history
    read is over); its process."""
    deadline, quiet_since = time.monotonic() + HISTORY_TIMEOUT_S, time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - quiet_since < 1.0:
        sample()
        app = dashboard.term.app_process()
        if app is not None and tree_rss(app)[1] > 0:
            quiet_since = time.monotonic()
        time.sleep(POLL_S)
    return dashboard.term.app_process()


def reattach(run_dir: Path, config_dir: Path, command: list[str] = VEGA_TUI) -> Reattach:
    """A fresh dashboard attached to the long log: time until the latest step
    shows, and its memory meanwhile."""
    log = run_dir / "events.jsonl"
    latest, size = latest_step(log), log.stat().st_size
    fresh = Dashboard(config_dir, command)
    peak, children = 0, 0

    def sample() -> None:
        nonlocal peak, children
        app = fresh.term.app_process()
        if app is not None:
            rss, count = tree_rss(app)
            peak, children = max(peak, rss), max(children, count)

    try:
        t0 = fresh.term.open([*command, "attach", str(run_dir)], run_dir.parent)
        seen, _ = wait_screen(
            fresh.term, lambda s: shown_step(s) >= latest, ATTACH_TIMEOUT_S, sample
        )
        app = wait_history_read(fresh, sample)
        settled = tree_rss(app)[0] if app is not None else 0
    finally:
        fresh.close()
    return Reattach(None if seen is None else seen - t0, peak, children, settled, size)
