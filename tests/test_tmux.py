"""End to end in a real terminal: `vega-tui` under tmux at 80x24 and 120x40, a real demo training run.

Start `vega-tui`, press Enter to start the preselected demo profile, watch the step counter move,
detach and quit: the trainer keeps running (its pid, read from the run's hello event, is alive).
Then `vega-tui attach RUN` shows the run from its first events and the controls work: pause
(paused shown and logged), save (a checkpoint_saved event), stop (confirmed; the run finishes as
stopped and the trainer exits).

The demo profile is used as shipped; a machine file in a temporary VEGA_CONFIG_DIR makes it tiny and
long (small model, one CPU thread, many steps, no scheduled evaluations or checkpoints), as a user
would on a slow machine. Each size runs in its own tmux server (`-L`), so no user session is touched.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tomli_w

from trainer_core.tiny_profiles import TINY

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (apt install tmux; macOS: brew install tmux)"
)

VEGA_TUI = [sys.executable, "-m", "vega_tui"]
# The tiny voice model (trainer_core.tiny_profiles) over whatever profile the dashboard starts, training "forever".
MACHINE_FILE = tomli_w.dumps(
    {
        "model": {k: v for k, v in TINY["tts"]["model"].items() if k not in ("kind", "dropout")},
        "train": {
            "max_steps": 1000000,
            "warmup_steps": 5,
            "eval_every_steps": 1000000,
            "checkpoint_every_epochs": 1000000,
        },
        "compute": TINY["tts"]["compute"],
        "logging": {"step_interval_s": 0.2, "report": False},
    }
)
STEP = re.compile(r"\bstep (\d+)")


class Terminal:
    """One tmux server of our own, one session at a time, driven like a person at a keyboard."""

    def __init__(self, socket: str, size: tuple[int, int], env: dict[str, str]) -> None:
        self.socket, self.size, self.env = socket, size, env

    def tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = ["tmux", "-L", self.socket, "-f", "/dev/null", *args]
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=20, check=check)

    def open(self, argv: list[str], cwd: Path) -> None:
        width, height = self.size
        size = ["-x", str(width), "-y", str(height)]
        self.tmux("new-session", "-d", "-s", "vega", *size, "-c", str(cwd), shlex.join(argv))

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "vega", check=False).stdout

    def press(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "vega", *keys)

    def is_open(self) -> bool:
        return self.tmux("has-session", "-t", "vega", check=False).returncode == 0

    def wait_for(self, predicate: Callable[[str], bool], what: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        shown = ""
        while time.monotonic() < deadline:
            shown = self.screen()
            if predicate(shown):
                return shown
            time.sleep(0.2)
        pytest.fail(f"timed out after {timeout:g} s waiting for {what}; the terminal shows:\n{shown}")

    def wait_closed(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while self.is_open():
            if time.monotonic() > deadline:
                pytest.fail(f"vega-tui did not exit; the terminal shows:\n{self.screen()}")
            time.sleep(0.1)

    def close(self) -> None:
        self.tmux("kill-server", check=False)


def shown_step(screen: str) -> int | None:
    steps = [int(found) for found in STEP.findall(screen)]
    return max(steps) if steps else None


def wait_for_event(
    term: Terminal, events: Path, predicate: Callable[[dict], bool], what: str, timeout: float = 30.0
) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in events.read_text(encoding="utf-8").splitlines() if events.exists() else []:
            event = json.loads(line)
            if predicate(event):
                return event
        time.sleep(0.1)
    pytest.fail(f"no {what} event within {timeout:g} s in {events}; the terminal shows:\n{term.screen()}")


def trainer_alive(pid: int) -> bool:
    """True while `pid` is a trainer_core process that has not exited (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return state != "Z" and b"trainer_core" in cmdline


@pytest.fixture
def sandbox() -> Iterator[dict[str, Path]]:
    # A short root: pytest's tmp_path under a worker (popen-gw0/...) makes RUN/control.sock longer than
    # the 107 bytes a unix socket path may have, and the run would start with no controls.
    tmp_path = Path(tempfile.mkdtemp(prefix="vega-tmux-"))
    config = tmp_path / "config"
    config.mkdir()
    (config / "machine.toml").write_text(MACHINE_FILE, encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    paths = {"config": config, "work": work, "runs": tmp_path / "runs"}
    yield paths
    for hello in paths["runs"].glob("*/events.jsonl"):  # never leave a trainer behind
        pid = json.loads(hello.read_text(encoding="utf-8").splitlines()[0])["pid"]
        if trainer_alive(pid):
            os.killpg(pid, signal.SIGKILL)
    shutil.rmtree(tmp_path, ignore_errors=True)


def terminal_env(config: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("VEGA_", "TMUX"))}
    env.update(VEGA_CONFIG_DIR=str(config), OMP_NUM_THREADS="1", TERM="xterm-256color")
    return env


@pytest.mark.timeout(150)
@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_start_detach_reattach_and_control_a_demo_run(sandbox: dict[str, Path], size: tuple[int, int]) -> None:
    term = Terminal(f"vega-test-{os.getpid()}-{size[0]}", size, terminal_env(sandbox["config"]))
    try:
        run_dir, pid = start_and_detach(term, sandbox)
        assert trainer_alive(pid), "the trainer must outlive the dashboard that started it"
        reattach_and_control(term, sandbox, run_dir, pid)
    finally:
        term.close()


def start_and_detach(term: Terminal, sandbox: dict[str, Path]) -> tuple[Path, int]:
    """Enter starts the preselected demo; steps move; d detaches, q quits. Returns (run folder, trainer pid)."""
    term.open([*VEGA_TUI, "--runs-root", str(sandbox["runs"])], cwd=sandbox["work"])
    term.wait_for(lambda s: "demo" in s and "start training" in s, "the launch screen with the demo plan")
    term.press("Enter")
    first = shown_step(term.wait_for(lambda s: (shown_step(s) or 0) > 0, "the first steps", timeout=60))
    term.wait_for(lambda s: (shown_step(s) or 0) > (first or 0), "the step counter to advance")
    (run_dir,) = list(sandbox["runs"].iterdir())
    hello = json.loads((run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert hello["type"] == "hello"
    term.press("d")
    term.wait_for(lambda s: "new training run" in s, "the launch screen after detaching")
    term.press("q")
    term.wait_closed()
    return run_dir, int(hello["pid"])


def reattach_and_control(term: Terminal, sandbox: dict[str, Path], run_dir: Path, pid: int) -> None:
    events = run_dir / "events.jsonl"
    term.open([*VEGA_TUI, "attach", str(run_dir)], cwd=sandbox["work"])
    before = shown_step(term.wait_for(lambda s: (shown_step(s) or 0) > 0, "the attached run"))
    term.wait_for(lambda s: (shown_step(s) or 0) > (before or 0), "steps advancing after attach")
    # History from the start: searching the log finds what the trainer said before its first step.
    term.press("2")
    term.wait_for(lambda s: "level ≥" in s, "the log tab")
    term.press("/")
    term.wait_for(lambda s: "search the log" in s, "the log search box")  # typed too early, letters are keys
    term.press("-l", "AcousticModel")
    term.press("Enter")
    term.wait_for(lambda s: "model: AcousticModel" in s and "search the log" not in s, "the start-up log line")
    time.sleep(0.5)  # the focus leaves the closed search box a moment later; keys sent sooner land in it
    term.press("1")
    term.wait_for(lambda s: "Log y" in s, "the charts tab")

    term.press("p")
    wait_for_event(term, events, lambda e: e["type"] == "paused", "paused")
    term.wait_for(lambda s: "PAUSED" in s.upper(), "the paused state on screen")
    term.press("p")
    wait_for_event(term, events, lambda e: e["type"] == "resumed", "resumed")

    term.press("s")
    wait_for_event(term, events, lambda e: e["type"] == "checkpoint_saved", "checkpoint_saved")

    term.press("x")
    term.wait_for(lambda s: "Stop the run?" in s, "the stop confirmation")
    term.press("y")
    finished = wait_for_event(term, events, lambda e: e["type"] == "finished", "finished", timeout=60)
    assert finished["status"] == "stopped"
    term.wait_for(lambda s: "STOPPED" in s.upper(), "the stopped state on screen")
    deadline = time.monotonic() + 30
    while trainer_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not trainer_alive(pid), "the trainer exits after a stop"
    term.press("q")
    term.wait_closed()
