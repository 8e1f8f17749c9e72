"""vega_tui.runner against real trainers: spawn detached, find, command, and tell live from dead."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trainer_core.contract.control_client import ControlError
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.protocol import Event
from trainer_core.tiny_profiles import tiny_profile
from vega_tui import runner, runner_tail
from vega_tui.runner import RunnerError, TrainerProcess

FIXTURES = Path(__file__).parent / "fixtures" / "events"
# A byte-level model small enough to start in a few seconds and to step quickly on one CPU thread;
# it trains "forever" (max_steps) so that tests decide when it stops.
PROFILE = tiny_profile(
    "lm",
    run={"name": "runner-test", "seed": 3},
    data={"context_bytes": 16},
    model={"hidden": 16, "dropout": None},
    train={
        "batch_size": 4,
        "warmup_steps": 2,
        "lr": None,
        "max_steps": 1000000,
        "eval_every_steps": 1000000,
        "checkpoint_every_steps": 1000000,
    },
    sample={"max_new_bytes": 8},
)
WAIT_S = 90.0  # generous: other test processes share the CPU


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def events_of(run_dir: Path) -> list[Event]:
    path = run_dir / "events.jsonl"
    return read_all(path) if path.is_file() else []


def has_event(run_dir: Path, kind: str, **fields: object) -> bool:
    return any(e.type == kind and all(getattr(e, k, None) == v for k, v in fields.items()) for e in events_of(run_dir))


def last_step(run_dir: Path) -> int:
    return max((e.step for e in events_of(run_dir) if e.type == "step"), default=0)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A profile, a small text corpus and a clean environment for trainers started in this module."""
    root = tmp_path_factory.mktemp("rn")
    corpus = root / "corpus"
    corpus.mkdir()
    for n in range(3):
        text = " ".join(f"the fox number {i} jumps over dog {n}." for i in range(150))
        (corpus / f"doc{n}.txt").write_text(text + "\n", encoding="utf-8")
    (root / "tiny.toml").write_text(PROFILE, encoding="utf-8")
    (root / "config").mkdir()
    with pytest.MonkeyPatch.context() as patch:
        for key in [key for key in os.environ if key.startswith("VEGA_")]:
            patch.delenv(key)
        patch.setenv("VEGA_CONFIG_DIR", str(root / "config"))  # no machine file of this computer
        patch.setenv("OMP_NUM_THREADS", "1")
        yield root


def spawn(workspace: Path, name: str) -> TrainerProcess:
    run_dir = workspace / name
    argv = runner.train_argv(workspace / "tiny.toml", run_dir=run_dir, data=workspace / "corpus", mode="cpu")
    return TrainerProcess.spawn(argv, run_dir)


@pytest.fixture(scope="module")
def live_run(workspace: Path) -> Iterator[tuple[Path, int]]:
    """A trainer spawned once for the module, whose TrainerProcess object is dropped at once."""
    process = spawn(workspace, "live")
    run_dir, pid = process.run_dir, process.pid
    assert (run_dir / "stdout.log").is_file() and (run_dir / "trainer.log").is_file()
    del process
    gc.collect()
    yield run_dir, pid
    if runner.trainer_pid(run_dir) == pid:
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not runner.is_alive(run_dir), "the killed trainer to go")


# ---------------------------------------------------------------------------------------------------------------
# Command lines


def test_train_argv_builds_an_argument_list() -> None:
    argv = runner.train_argv(
        "demo",
        run_dir=Path("/r/x"),
        data="/d",
        mode="cpu",
        data_mode="text",
        device="cpu",
        overrides=["train.max_steps=5", "model.hidden=32"],
        resume="auto",
        dry_run=True,
        json=True,
    )
    assert argv[:4] == [sys.executable, "-m", "trainer_core", "train"]
    assert argv[4:] == [
        "--profile",
        "demo",
        "--run-dir",
        "/r/x",
        "--data",
        "/d",
        "--compute-mode",
        "cpu",
        "--data-mode",
        "text",
        "--device",
        "cpu",
        "--resume",
        "auto",
        "--set",
        "train.max_steps=5",
        "--set",
        "model.hidden=32",
        "--dry-run",
        "--json",
    ]
    assert runner.train_argv("demo", run_dir=None) == [
        sys.executable,
        "-m",
        "trainer_core",
        "train",
        "--profile",
        "demo",
    ]


# ---------------------------------------------------------------------------------------------------------------
# A live trainer


def test_spawned_trainer_runs_detached_and_outlives_its_object(live_run: tuple[Path, int]) -> None:
    run_dir, pid = live_run
    assert os.getsid(pid) == pid  # its own session: a closed terminal's SIGHUP does not reach it
    wait_until(lambda: last_step(run_dir) >= 3, "training steps")
    step = last_step(run_dir)
    wait_until(lambda: last_step(run_dir) > step, "more steps after the spawning object was dropped")
    assert runner.trainer_pid(run_dir) == pid
    assert runner.is_alive(run_dir)
    assert runner.run_status(run_dir) == "live"


def test_pause_and_resume_a_live_trainer(live_run: tuple[Path, int]) -> None:
    run_dir, _ = live_run
    wait_until(lambda: runner.socket_ready(run_dir), "the control socket")
    reply = runner.send(run_dir, "pause")
    assert reply.ok and reply.cmd == "pause"
    wait_until(lambda: has_event(run_dir, "paused"), "the paused event")
    assert runner.run_status(run_dir) == "live"
    reply = runner.send(run_dir, "resume")
    assert reply.ok
    wait_until(lambda: has_event(run_dir, "resumed"), "the resumed event")
    acks = [e.cmd for e in events_of(run_dir) if e.type == "command_ack"]
    assert acks[-2:] == ["pause", "resume"]


def test_unknown_command_is_refused_before_sending(live_run: tuple[Path, int]) -> None:
    with pytest.raises(ControlError, match="unknown command 'explode'"):
        runner.send(live_run[0], "explode")


def test_stop_a_live_trainer(live_run: tuple[Path, int]) -> None:
    run_dir, _ = live_run
    wait_until(lambda: runner.socket_ready(run_dir), "the control socket")
    assert runner.send(run_dir, "stop").ok
    wait_until(lambda: not runner.is_alive(run_dir), "the trainer to exit")  # a zombie counts as gone
    assert runner.run_status(run_dir) == "stopped"
    assert has_event(run_dir, "finished", status="stopped")
    with pytest.raises(ControlError, match="no trainer is listening"):
        runner.send(run_dir, "pause")


# ---------------------------------------------------------------------------------------------------------------
# A killed trainer


def test_sigkilled_trainer_is_crashed_and_its_stale_socket_fails_fast(workspace: Path) -> None:
    process = spawn(workspace, "killed")
    run_dir = process.run_dir
    try:
        wait_until(lambda: runner.socket_ready(run_dir) and last_step(run_dir) >= 1, "a training step")
        assert runner.run_status(run_dir) == "live"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    assert process.poll() == -signal.SIGKILL and not process.alive()
    assert (run_dir / "control.sock").exists()  # left behind by the killed trainer
    assert runner.trainer_pid(run_dir) is None
    assert runner.run_status(run_dir) == "crashed"
    with pytest.raises(ControlError, match="stale") as caught:
        runner.send(run_dir, "pause")
    assert str(process.pid) in str(caught.value)


# ---------------------------------------------------------------------------------------------------------------
# Status of recorded runs, and pid reuse


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("lm_completed", "finished"),
        ("lm_stopped", "stopped"),
        ("lm_faults", "finished"),
        ("lm_failed", "failed"),
        ("lm_killed", "crashed"),
    ],
)
def test_run_status_of_recorded_runs(name: str, status: str) -> None:
    assert runner.run_status(FIXTURES / name) == status
    assert not runner.is_alive(FIXTURES / name)


def test_empty_and_missing_runs(tmp_path: Path) -> None:
    assert runner.run_status(tmp_path) == "empty"
    (tmp_path / "events.jsonl").write_text("")
    assert runner.run_status(tmp_path) == "empty"
    assert runner.trainer_pid(tmp_path / "nowhere") is None
    assert runner_tail.log_tail(tmp_path) == []


def write_hello(run_dir: Path, pid: int, t: float) -> None:
    run_dir.mkdir()
    hello = {
        "v": 1,
        "seq": 0,
        "t": t,
        "type": "hello",
        "trainer_version": "0",
        "pid": pid,
        "host": os.uname().nodename,
        "profile_hash": "x",
        "run_dir": str(run_dir),
        "python": "3",
    }
    (run_dir / "events.jsonl").write_text(json.dumps(hello) + "\n")


def test_a_reused_pid_is_not_taken_for_the_trainer(tmp_path: Path) -> None:
    # This test process is alive but is no trainer: its pid in a hello must not make the run live.
    write_hello(tmp_path / "other", os.getpid(), time.time())
    assert runner.trainer_pid(tmp_path / "other") is None
    assert runner.run_status(tmp_path / "other") == "crashed"


def test_a_process_younger_than_the_hello_is_not_the_trainer(tmp_path: Path, workspace: Path) -> None:
    probe = spawn(workspace, "young")  # a real trainer_core process, started long after "its" hello
    try:
        write_hello(tmp_path / "old", probe.pid, time.time() - 3600)
        assert runner.trainer_pid(tmp_path / "old") is None
        write_hello(tmp_path / "new", probe.pid, time.time())  # the same process, hello after its start
        assert runner.trainer_pid(tmp_path / "new") == probe.pid, (  # says why, should it ever fail again
            f"probe alive: {probe.alive()}; its log: {runner_tail.log_tail(probe.run_dir, lines=5)}"
        )
    finally:
        probe.popen.kill()
        probe.wait(30)


# ---------------------------------------------------------------------------------------------------------------
# trainer.log tail


def test_log_tail_reads_only_the_end(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    with open(log, "wb") as handle:
        handle.truncate(512 * 1024 * 1024)  # 512 MB of (sparse) zeros before the real lines
        handle.seek(0, os.SEEK_END)
        handle.write(b"".join(f"line {i}\n".encode() for i in range(100)))
    tracemalloc.start()
    try:
        tail = runner_tail.log_tail(tmp_path, lines=5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tail == [f"line {i}" for i in range(95, 100)]
    assert peak < 1_000_000


def test_log_tail_of_a_failed_recorded_run() -> None:
    tail = runner_tail.log_tail(FIXTURES / "lm_failed", lines=3)
    assert len(tail) == 3 and "injected failure at step 10" in tail[-1]


# ---------------------------------------------------------------------------------------------------------------
# run_json


def test_run_json_parses_check_data(workspace: Path) -> None:
    report = runner.run_json(runner.trainer_command("check-data", str(workspace / "corpus"), "--json"), timeout=60)
    assert report["mode"] == "text" and report["summary"]["usable"] == 3


def test_run_json_raises_the_commands_error_line(tmp_path: Path) -> None:
    with pytest.raises(RunnerError, match=r"^data folder .* is empty"):
        runner.run_json(runner.trainer_command("check-data", str(tmp_path), "--json"), timeout=60)


def test_run_json_reports_other_failures(tmp_path: Path) -> None:
    with pytest.raises(RunnerError, match="not JSON"):
        runner.run_json([sys.executable, "-c", "print('hello')"], timeout=30)
    with pytest.raises(RunnerError, match="exit code 3: boom"):
        runner.run_json([sys.executable, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"], timeout=30)
    with pytest.raises(RunnerError, match="expected an object"):
        runner.run_json([sys.executable, "-c", "print('[1, 2]')"], timeout=30)
    with pytest.raises(RunnerError, match="did not finish within 0.3 s"):
        runner.run_json([sys.executable, "-c", "import time; time.sleep(20)"], timeout=0.3)


def test_spawn_into_an_unwritable_place_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RunnerError, match="cannot create run folder"):
        TrainerProcess.spawn([sys.executable, "-c", "pass"], blocker / "run")


def test_copied_fixture_keeps_its_status(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "lm_killed", tmp_path / "k")
    assert runner.run_status(tmp_path / "k") == "crashed"
