"""Fault injection against real processes: random SIGKILLs, a dashboard that dies, a trainer that raises,
stale sockets, several dashboards, garbage on the control socket, and the two long benchmarks run tiny.

The kill drill (bench/kill_loop.py, and its negative controls) and the soak (bench/soak.py) start in the
background when this module starts and are checked by the last tests; the other tests run meanwhile. Their
trainers sleep in every step (VEGA_FAULT_STEP_SLEEP_S), so they stay alive long enough to be killed, attached
to and commanded.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO, TINY_PROFILE
from trainer_core.contract.control_client import MAX_LINE_BYTES, ControlError, open_control_socket
from trainer_core.contract.control_protocol import CommandReply
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.protocol import Event
from vega_tui import runner, runner_tail
from vega_tui.follow import EventFollower
from vega_tui.runner import TrainerProcess
from vega_tui.store import RunStore

WAIT_S = 90.0  # generous: the benchmarks share the two cores with these tests
# A trainer that runs until told to stop; checkpoints now and then so that `save` and `stop` have work to do.
FOREVER = ["train.max_steps=1000000", "train.eval_every_steps=50", "train.checkpoint_every_steps=50"]
# A stand-in dashboard: spawns the trainer exactly as the launch screen does, prints its pid, then idles.
# With a terminal path it opens it first: as a session leader, that makes it its controlling terminal.
PARENT = """\
import json, os, signal, sys, time
from vega_tui.runner import TrainerProcess
argv, run_dir, tty = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
# As from a login shell: a suite started under nohup would otherwise hand down an ignored SIGHUP.
signal.signal(signal.SIGHUP, signal.SIG_DFL)
if tty:
    os.open(tty, os.O_RDWR)
trainer = TrainerProcess.spawn(argv, run_dir)
print(trainer.pid, flush=True)
while True:
    time.sleep(1)
"""


# ---------------------------------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Iterator[Path]:
    """A tiny profile, the shared corpus, and a clean environment for every trainer this module spawns."""
    root = tmp_path_factory.mktemp("rel")
    (root / "tiny.toml").write_text(TINY_PROFILE, encoding="utf-8")
    (root / "config").mkdir()
    (root / "parent.py").write_text(PARENT, encoding="utf-8")
    (root / "corpus").symlink_to(corpus)
    with pytest.MonkeyPatch.context() as patch:
        for key in [key for key in os.environ if key.startswith("VEGA_")]:
            patch.delenv(key)
        patch.setenv("VEGA_CONFIG_DIR", str(root / "config"))
        patch.setenv("OMP_NUM_THREADS", "1")
        patch.setenv("VEGA_FAULTS", "1")  # the fault switches act only with the gate open
        patch.setenv("VEGA_FAULT_STEP_SLEEP_S", "0.05")
        yield root


def argv_for(workspace: Path, run_dir: Path, *overrides: str) -> list[str]:
    return runner.train_argv(
        workspace / "tiny.toml", run_dir=run_dir, data=workspace / "corpus", overrides=[*FOREVER, *overrides]
    )


@pytest.fixture(scope="module", autouse=True)
def benchmarks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[subprocess.Popen, Path]]]:
    """bench/kill_loop.py --tiny, its two negative controls, bench/soak.py --minutes 0.2 and its
    leak control, started at once, in the background."""
    root = tmp_path_factory.mktemp("bench")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VEGA_")}
    commands = {
        "kill_loop": ("kill_loop", ["--tiny"]),
        "kill_in_place": ("kill_loop", ["--control", "in-place"]),
        "kill_vacuous": ("kill_loop", ["--control", "vacuous"]),
        "soak": ("soak", ["--minutes", "0.2"]),
        "soak_leaky": ("soak", ["--minutes", "0.3", "--control", "leaky"]),
    }
    started = {}
    for name, (script, args) in commands.items():
        out = root / name
        with open(root / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, str(REPO / "bench" / f"{script}.py"), *args, "--out", str(out)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=REPO,
                start_new_session=True,  # a group of its own: the teardown ends its trainers too
            )
        started[name] = (proc, out)
    yield started
    for proc, _ in started.values():
        with contextlib.suppress(ProcessLookupError):  # the bench and any trainer it left behind
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_until(predicate, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def events_of(run_dir: Path) -> list[Event]:
    path = run_dir / "events.jsonl"
    return read_all(path) if path.is_file() else []


def last_step(run_dir: Path) -> int:
    return max((e.step for e in events_of(run_dir) if e.type == "step"), default=0)


def wait_for_step(run_dir: Path, step: int) -> None:
    wait_until(lambda: last_step(run_dir) >= step and runner.socket_ready(run_dir), f"step {step} in {run_dir}")


class Dashboard:
    """What a freshly opened `vega-tui attach RUN` holds: a follower replaying the log into a store."""

    def __init__(self, run_dir: Path) -> None:
        self.store = RunStore(run_dir=run_dir)
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self.follower = EventFollower(run_dir / "events.jsonl", self._on_batch, poll_interval=0.05)

    def _on_batch(self, events: list[Event], malformed: int, gaps: int) -> None:
        with self._lock:
            self.events.extend(events)
            self.store.apply(events)
            self.store.note_reader(malformed, gaps)

    def seen(self, kind: str, **fields: object) -> bool:
        with self._lock:
            return any(e.type == kind and all(getattr(e, k, None) == v for k, v in fields.items()) for e in self.events)

    def close(self) -> None:
        self.follower.close()


def send_raw(sock: socket.socket, line: bytes) -> CommandReply:
    """Send one raw request line and read one reply line."""
    sock.sendall(line)
    reply = b""
    while not reply.endswith(b"\n"):
        chunk = sock.recv(65536)
        assert chunk, "the trainer closed the connection instead of answering"
        reply += chunk
    return CommandReply.model_validate_json(reply)


# ---------------------------------------------------------------------------------------------------------------
# The dashboard dies; the trainer does not


def start_dashboard_process(workspace: Path, run_dir: Path, tty: str = "") -> tuple[subprocess.Popen, int]:
    """The stand-in dashboard in its own session (as from a login shell); returns it and the trainer's pid."""
    out = workspace / f"{run_dir.name}.parent.out"
    with open(out, "wb") as handle:
        parent = subprocess.Popen(
            [sys.executable, str(workspace / "parent.py"), json.dumps(argv_for(workspace, run_dir)), str(run_dir), tty],
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    wait_until(lambda: out.read_text().strip().isdigit() or parent.poll() is not None, "the spawned trainer's pid")
    assert parent.poll() is None, out.read_text()
    return parent, int(out.read_text().strip())


def attach_and_control(run_dir: Path) -> None:
    """A new dashboard replays the whole history, then pauses, resumes and stops the trainer."""
    on_disk = events_of(run_dir)
    dashboard = Dashboard(run_dir)
    try:
        assert dashboard.follower.wait_caught_up(WAIT_S)
        wait_until(lambda: len(dashboard.events) >= len(on_disk), "the replay")
        assert [e.seq for e in dashboard.events[: len(on_disk)]] == [e.seq for e in on_disk]
        assert dashboard.events[0].type == "hello" and dashboard.store.state.pid == runner.trainer_pid(run_dir)
        assert dashboard.store.state.step >= 3 and dashboard.store.state.status == "training"
        for cmd, status in (("pause", "paused"), ("resume", "training"), ("stop", "stopped")):
            assert runner.send(run_dir, cmd).ok
            wait_until(
                lambda cmd=cmd, status=status: (
                    dashboard.seen("command_ack", cmd=cmd) and dashboard.store.state.status == status
                ),
                f"{cmd} to reach the new dashboard",
            )
    finally:
        dashboard.close()
    wait_until(lambda: not runner.is_alive(run_dir), "the stopped trainer to exit")
    assert runner.run_status(run_dir) == "stopped"


def test_a_sigkilled_dashboard_leaves_the_trainer_running_and_controllable(workspace: Path) -> None:
    run_dir = workspace / "dash-kill"
    parent, pid = start_dashboard_process(workspace, run_dir)
    wait_for_step(run_dir, 3)
    parent.kill()
    assert parent.wait(10) == -signal.SIGKILL
    before = last_step(run_dir)
    wait_until(lambda: last_step(run_dir) > before + 2, "training to go on after the dashboard died")
    assert runner.trainer_pid(run_dir) == pid and runner.run_status(run_dir) == "live"
    attach_and_control(run_dir)


def test_a_dropped_terminal_hangs_up_the_dashboard_not_the_trainer(workspace: Path) -> None:
    run_dir = workspace / "dash-hup"
    controller, terminal = os.openpty()
    try:
        parent, pid = start_dashboard_process(workspace, run_dir, tty=os.ttyname(terminal))
    finally:
        os.close(terminal)
    wait_for_step(run_dir, 3)
    os.close(controller)  # the SSH connection drops: the kernel hangs up the terminal's session
    assert parent.wait(10) == -signal.SIGHUP
    before = last_step(run_dir)
    wait_until(lambda: last_step(run_dir) > before + 2, "training to go on after the hang-up")
    assert runner.trainer_pid(run_dir) == pid
    attach_and_control(run_dir)


# ---------------------------------------------------------------------------------------------------------------
# The trainer dies


def test_a_trainer_that_raises_shows_as_failed_with_the_end_of_its_log(workspace: Path, monkeypatch) -> None:
    run_dir = workspace / "raises"
    monkeypatch.setenv("VEGA_FAULT_FAIL_AT_STEP", "6")
    trainer = TrainerProcess.spawn(argv_for(workspace, run_dir), run_dir)
    assert trainer.wait(WAIT_S) == 1
    assert runner.run_status(run_dir) == "failed"
    tail = "\n".join(runner_tail.log_tail(run_dir, 40))
    assert "injected failure at step 6" in tail and "Traceback" in tail
    dashboard = RunStore(run_dir=run_dir)
    dashboard.apply(events_of(run_dir))
    assert dashboard.state.status == "failed" and "injected failure at step 6" in (dashboard.state.last_error or "")
    # Still usable: the same store keeps taking events (here, a replay of the same log) without error.
    assert dashboard.apply(events_of(run_dir)[:3])


def test_a_killed_trainers_stale_socket_fails_fast_and_the_run_shows_crashed(workspace: Path) -> None:
    run_dir = workspace / "stale"
    trainer = TrainerProcess.spawn(argv_for(workspace, run_dir), run_dir)
    wait_for_step(run_dir, 2)
    os.kill(trainer.pid, signal.SIGKILL)
    trainer.wait(10)
    assert (run_dir / "control.sock").is_socket()  # left behind: nobody removed it
    with pytest.raises(ControlError, match=rf"pid {trainer.pid}\) is not running: control.sock is stale"):
        runner.send(run_dir, "pause", timeout=30)
    assert runner.run_status(run_dir) == "crashed"
    store = RunStore(run_dir=run_dir)
    store.apply(events_of(run_dir))
    store.mark_crashed(runner_tail.log_tail(run_dir))
    assert store.state.status == "crashed" and store.state.crash_log


# ---------------------------------------------------------------------------------------------------------------
# Several dashboards, and garbage on the socket


@pytest.fixture(scope="module")
def live_run(workspace: Path) -> Iterator[Path]:
    run_dir = workspace / "live"
    trainer = TrainerProcess.spawn(argv_for(workspace, run_dir), run_dir)
    wait_for_step(run_dir, 2)
    yield run_dir
    if trainer.alive():
        trainer.popen.kill()
        trainer.wait(10)


def test_two_dashboards_on_one_run_both_get_acks(live_run: Path) -> None:
    first, second = Dashboard(live_run), Dashboard(live_run)
    a, b = open_control_socket(live_run), open_control_socket(live_run)
    try:
        # Both connections open at once: a pause from one, a resume from the other, each answered on its own.
        assert send_raw(a, b'{"cmd": "pause", "id": "from-a"}\n') == CommandReply(ok=True, cmd="pause", id="from-a")
        assert send_raw(b, b'{"cmd": "resume", "id": "from-b"}\n') == CommandReply(ok=True, cmd="resume", id="from-b")
        for dashboard in (first, second):
            wait_until(
                lambda d=dashboard: (
                    d.seen("command_ack", id="from-a") and d.seen("command_ack", id="from-b") and d.seen("resumed")
                ),
                "both acks in both dashboards",
            )
    finally:
        a.close()
        b.close()
        first.close()
        second.close()


MALFORMED = [
    (b"this is not json\n", "malformed JSON"),
    (b"[1, 2, 3]\n", "JSON object"),
    (b'{"cmd": "jump"}\n', "unknown command"),
    (b'{"cmd": "pause", "extra": {"nested": [1]}, "id": 7}\n', ""),
    (b"\xff\xfe\xfd\n", "not UTF-8"),
    (b"x" * (MAX_LINE_BYTES + 100) + b"\n", "longer than"),
]


def test_malformed_commands_get_error_replies_and_the_trainer_goes_on(live_run: Path) -> None:
    sock = open_control_socket(live_run, timeout=30)
    try:
        for line, why in MALFORMED:
            reply = send_raw(sock, line)
            assert not reply.ok and why in (reply.error or ""), (line[:40], reply)
        # The same connection still works, and so does the trainer.
        step = last_step(live_run)
        assert send_raw(sock, b'{"cmd": "save", "id": "after-garbage"}\n').ok
    finally:
        sock.close()
    wait_until(lambda: any(e.type == "checkpoint_saved" and e.step >= step for e in events_of(live_run)), "the save")
    wait_until(lambda: last_step(live_run) > step + 2, "steps after the garbage")
    assert runner.run_status(live_run) == "live"
    assert runner.send(live_run, "stop").ok
    wait_until(lambda: runner.run_status(live_run) == "stopped", "the stop")


# ---------------------------------------------------------------------------------------------------------------
# The benchmarks, tiny


def bench_figures(benchmarks, name: str, key: str | None = None, status: int | None = 0) -> dict[str, dict]:
    """The figures of a background benchmark, once it exited with `status` (None: any)."""
    proc, out = benchmarks[name]
    try:
        code = proc.wait(timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail(f"bench {name} did not finish")
    log = (out.parent / f"{name}.log").read_text(errors="replace")
    assert code == status or (status is None and (out / f"{key or name}.json").is_file()), log
    result = json.loads((out / f"{key or name}.json").read_text())
    return {figure["name"]: figure for figure in result["figures"]}


COUNTERS = (
    "vacuous_kills", "unreadable_latest", "lost_checkpoints", "failed_resumes", "event_log_damage",
    "torn_samples", "bad_cache", "bad_best",
)  # fmt: skip


def test_random_sigkills_never_leave_an_unreadable_checkpoint_or_a_failed_resume(benchmarks) -> None:
    """Kills mid-write, in best.json, before the rename, in a cold preload's cache write and in a
    sample file: every file is whole after each, and every resume continues."""
    figures = bench_figures(benchmarks, "kill_loop", key="kill")
    assert figures["kills"]["value"] == 5 and figures["kills"]["met"]
    for phase in ("write", "best_json", "rename", "cache_write", "sample_write"):
        assert figures[f"kills at {phase}"]["value"] == 1, figures
    assert figures["kills on the two-optimizer vocoder run"]["value"] == 3
    for name in COUNTERS:
        assert figures[name]["value"] == 0 and figures[name]["met"], figures[name]
    assert figures["checkpoints announced"]["value"] > 0
    assert figures["start to resumed (median)"]["value"] > 0
    for name in ("sample and view files checked", "feature cache checks", "best.json checks"):
        assert figures[name]["value"] > 0 and figures[name]["met"], figures[name]


def test_the_kill_drill_fails_when_checkpoints_are_written_in_place(benchmarks) -> None:
    """Negative control: without the temp file and rename, a kill mid-write leaves a torn newest checkpoint."""
    figures = bench_figures(benchmarks, "kill_in_place", key="kill", status=1)
    assert figures["kills at write"]["value"] == 1 and figures["vacuous_kills"]["value"] == 0
    assert figures["unreadable_latest"]["value"] >= 1 and figures["unreadable_latest"]["met"] is False
    assert figures["negative control (in-place): unreadable_latest"]["met"]


def test_the_kill_drill_fails_when_the_trainer_exits_before_the_kill(benchmarks) -> None:
    """Negative control: a trainer that finishes before its hold point is a failure, not a counted kill."""
    figures = bench_figures(benchmarks, "kill_vacuous", key="kill", status=1)
    assert figures["kills"]["value"] == 0 and figures["kills"]["met"] is False
    assert figures["vacuous_kills"]["value"] == 1 and figures["vacuous_kills"]["met"] is False
    assert figures["negative control (vacuous): vacuous_kills"]["met"]


def test_the_soak_samples_memory_and_the_log_and_stops_cleanly(benchmarks) -> None:
    """The soak with the dashboard attached: every figure is there (a 12-second soak on a machine busy with the
    rest of the suite is no measurement of memory growth or CPU, so their targets are not judged here)."""
    figures = bench_figures(benchmarks, "soak", status=None)
    assert figures["RSS samples"]["value"] >= 3
    assert figures["ended stopped after SIGTERM"]["met"]
    assert figures["checkpoints on disk (max)"]["met"]
    assert figures["optimizer steps"]["value"] > 0 and figures["event log size at the end"]["value"] > 0
    assert figures["RSS growth after warm-up"]["value"] is not None


def test_the_soak_follows_with_a_dashboard_and_reattaches_to_the_log(benchmarks) -> None:
    figures = bench_figures(benchmarks, "soak", status=None)
    assert figures["dashboard alive at every sample"]["met"]
    assert figures["dashboard shows the latest step at the end"]["met"], figures[
        "dashboard shows the latest step at the end"
    ]
    assert figures["reattach at the end: until the latest step shows"]["value"] is not None
    assert figures["reattach at the end: peak RSS (vega-tui and its children)"]["value"] > 10
    growth = figures["dashboard RSS growth after warm-up (vega-tui and its children)"]
    assert growth["value"] is not None and "child process" in growth["detail"]
    assert figures["dashboard CPU after warm-up"]["value"] > 0


def test_the_soak_fails_when_the_trainer_and_the_dashboard_leak(benchmarks) -> None:
    """Negative control: both processes keep memory they never free (bench/leak_wrapper.py); both growth figures
    must miss and the soak exits 1."""
    figures = bench_figures(benchmarks, "soak_leaky", key="soak_control", status=1)
    assert figures["RSS growth after warm-up"]["met"] is False
    assert figures["dashboard RSS growth after warm-up (vega-tui and its children)"]["met"] is False
    assert figures["dashboard shows the latest step at the end"]["met"]  # it leaks, yet it works: memory caught it
