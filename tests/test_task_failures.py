"""Failures in a task's own code are reported, not fatal to the run folder (engine.task_contract).

Broken tasks (tests/broken_tasks.py: Vega's byte LM or vocoder with one method broken) train for real: in
process through `run_training` (the trainer's main) for most cases, and as real `trainer-core train` processes
for the exit status and stderr. Each failure must end events.jsonl with an `error` event naming the broken line of
tests/broken_tasks.py and what was expected, then `finished` with status "failed"; the checkpoints announced
before it stay intact and load; nothing is written after it; the dashboard shows FAILED with the file and line.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from broken_tasks import BREAK_AT_STEP, install, marked_line
from conftest import FAULTS_ON, TEST_VOICE, TINY_PROFILE, TrainerLauncher, finished, of_type
from dash_pilot import DashApp, log_view_text, plain, settled
from trainer_core.contract import rundir
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.protocol import Event
from trainer_core.engine.checkpoint_manager import list_checkpoints, load_checkpoint
from trainer_core.engine.run import run_training
from trainer_core.engine.task_contract import TASK_FAILED_EXIT
from trainer_core.models.registry import register_task
from trainer_core.plan import make_plan
from trainer_core.tiny_profiles import tiny_profile
from vega_tui.store import RunStore
from vega_tui.widgets.status import ProblemBanner, StatusLine, problem_text, status_first_line

BROKEN_TASKS = Path(__file__).with_name("broken_tasks.py")
FAULTS = Path(__file__).resolve().parent.parent / "trainer_core" / "engine" / "faults.py"
# Checkpoints at steps 3 (every 3 steps) and 4 (a new best at the validation every 4), then the task breaks at 5.
SETTINGS = ["train.max_steps=8", "train.checkpoint_every_steps=3", "train.eval_every_steps=4", "train.grad_accum=1"]

pytestmark = pytest.mark.usefixtures("one_torch_thread", "keep_torch_threads")


def train_in_process(root: Path, data: Path, name: str, *settings: str, profile_text: str = TINY_PROFILE) -> int:
    """The trainer's main, here, on broken task NAME; returns its exit status (the run folder is root/NAME)."""
    profile = root / f"{name}.toml"
    profile.write_text(profile_text, encoding="utf-8")
    plan = make_plan(str(profile), [f"data.path={data}", *settings], run_dir=root / name, use_machine_file=False)
    mode, previous = install(name)
    try:
        return run_training(plan)
    finally:
        register_task(mode, previous)
        for handler in logging.getLogger("trainer_core").handlers:  # trainer.log stays open otherwise
            handler.close()


def events_of(run_dir: Path) -> list[Event]:
    return read_all(run_dir / rundir.EVENTS)


def ends_in_failure(events: list[Event]) -> Event:
    """The log ends with an `error` event, then `finished` with status "failed"; returns the error."""
    *_, error, end = events
    assert (error.type, end.type, end.status) == ("error", "finished", "failed"), [e.type for e in events[-4:]]
    return error


def names_line(error: Event, site: str, method: str, code: str) -> None:
    assert Path(error.file) == BROKEN_TASKS and error.line == marked_line(site), (error.file, error.line)
    assert (error.task_method, error.code) == (method, code)
    assert f"{BROKEN_TASKS}:{marked_line(site)}" in error.message
    assert "broken_tasks.py" in error.traceback


def announced_checkpoints_intact(run_dir: Path, events: list[Event]) -> list[int]:
    """Every announced checkpoint still on disk is the file announced (size) and loads; nothing else was written."""
    saved = {Path(e.path): e for e in of_type(events, "checkpoint_saved")}
    on_disk = list_checkpoints(run_dir / rundir.CHECKPOINTS)
    assert on_disk and set(on_disk) <= set(saved), (on_disk, list(saved))
    assert not [p for p in (run_dir / rundir.CHECKPOINTS).iterdir() if p.suffix == ".tmp" or ".tmp" in p.name]
    for path in on_disk:
        assert path.stat().st_size == saved[path].bytes
        assert load_checkpoint(path)["step"] == saved[path].step
    return sorted(saved[path].step for path in on_disk)


@pytest.fixture(scope="module")
def loss_failure(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> tuple[int, Path]:
    """One in-process run whose compute_losses raises at step 5, after checkpoints at steps 3 and 4."""
    root = tmp_path_factory.mktemp("loss-failure")
    threads = torch.get_num_threads()
    try:
        return train_in_process(root, corpus, "raises_in_loss", *SETTINGS), root / "raises_in_loss"
    finally:
        torch.set_num_threads(threads)


def test_an_exception_in_compute_losses_is_reported_and_the_checkpoints_stay_intact(loss_failure) -> None:
    status, run_dir = loss_failure
    assert status == TASK_FAILED_EXIT == 3
    events = events_of(run_dir)
    error = ends_in_failure(events)
    names_line(error, "raises_in_loss", "compute_losses", "task_failed")
    assert error.message.startswith(f"compute_losses raised ValueError: the loss blew up at step {BREAK_AT_STEP} (")
    assert error.expected is None
    end = finished(events)
    assert end.step == BREAK_AT_STEP - 1
    assert end.summary["error_at"] == f"{BROKEN_TASKS}:{marked_line('raises_in_loss')}"
    assert max(e.step for e in of_type(events, "step")) == BREAK_AT_STEP - 1  # the steps before it were flushed
    assert announced_checkpoints_intact(run_dir, events) == [3, 4]
    # Nothing a finished run writes: no export (its folder stays empty); session.json says failed.
    assert not list((run_dir / rundir.EXPORT).iterdir())
    session = (run_dir / rundir.SESSION).read_text(encoding="utf-8")
    assert '"status": "failed"' in session and "the loss blew up" in session
    log = (run_dir / rundir.LOG).read_text(encoding="utf-8")
    assert "compute_losses raised ValueError" in log and f'File "{BROKEN_TASKS}", line' in log


CONTRACT_CASES = {
    "non_scalar": (
        "compute_losses",
        "compute_losses must return a dict with a scalar tensor 'total'",
        "got a tensor of shape (8,) for 'total'",
    ),
    "missing_total": (
        "compute_losses",
        "compute_losses must return a dict with a scalar tensor 'total'",
        "got a dict without 'total' (keys: 'ce')",
    ),
    "non_tensor": (
        "compute_losses",
        "compute_losses must return a dict with a scalar tensor 'total'",
        "got a float for 'total'",
    ),
    "detached": (
        "compute_losses",
        "compute_losses's 'total' must require grad in training (computed from the model's parameters)",
        "got a tensor that does not",
    ),
    "list_batches": (
        "train_batches",
        "train_batches must yield batches as dicts of tensors",
        "got a list",
    ),
    "short_epoch": (
        "train_batches",
        "train_batches must yield train_items() = {N} items in every epoch",
        "got the end of epoch 0 at item 8",
    ),
    "metrics_list": ("val_metrics", "val_metrics must return a dict of numbers by name", "got a list"),
}


@pytest.mark.parametrize("name", list(CONTRACT_CASES))
def test_a_task_that_breaks_the_contract_fails_with_what_was_expected(name: str, tmp_path: Path, corpus: Path) -> None:
    method, expected, got = CONTRACT_CASES[name]
    assert train_in_process(tmp_path, corpus, name, "train.max_steps=6") == TASK_FAILED_EXIT
    error = ends_in_failure(events_of(tmp_path / name))
    names_line(error, name, method, "task_contract")
    number = r"\d+"  # {N}: the corpus's item count
    assert re.fullmatch(re.escape(expected).replace(re.escape("{N}"), number), error.expected), error.expected
    assert re.match(re.escape(f"{expected}; {got}").replace(re.escape("{N}"), number), error.message), error.message


def test_a_group_loss_that_is_not_scalar_names_the_group(tmp_path: Path) -> None:
    profile = tiny_profile("vocoder", data={"cache_dir": str(tmp_path / "cache")})
    name = "vocoder_group"
    status = train_in_process(tmp_path, TEST_VOICE, name, "train.max_steps=6", profile_text=profile)
    assert status == TASK_FAILED_EXIT
    error = ends_in_failure(events_of(tmp_path / name))
    names_line(error, name, "group_losses", "task_contract")
    assert error.expected == "group_losses (group 'generator') must return a dict with a scalar tensor 'total'"
    assert "got a tensor of shape (2,) for 'total'" in error.message


def test_a_failure_while_building_the_task_is_reported(tmp_path: Path, corpus: Path) -> None:
    name = "raises_when_built"
    assert train_in_process(tmp_path, corpus, name) == TASK_FAILED_EXIT
    events = events_of(tmp_path / name)
    error = ends_in_failure(events)
    names_line(error, name, "building the task", "task_failed")
    assert error.message.startswith("building the task raised OSError: the tokenizer file is missing (")
    assert finished(events).step == 0
    assert not (tmp_path / name / rundir.CHECKPOINTS).exists() or not list_checkpoints(tmp_path / name / "checkpoints")


def test_a_failure_in_make_samples_is_a_warning_and_training_goes_on(tmp_path: Path, corpus: Path) -> None:
    name = "raises_in_samples"
    assert train_in_process(tmp_path, corpus, name, *SETTINGS) == 0
    events = events_of(tmp_path / name)
    end = finished(events)
    assert (end.status, end.step) == ("completed", 8)
    warnings = [e for e in of_type(events, "warning") if e.code == "make_samples_failed"]
    assert [w.message.rsplit(" at step ", 1)[1] for w in warnings] == ["4, training goes on", "8, training goes on"]
    where = f"{BROKEN_TASKS}:{marked_line(name)}"
    assert all(w.message.startswith("make_samples raised RuntimeError: no sampler for step") for w in warnings)
    assert all(where in w.message for w in warnings)
    assert [e.step for e in of_type(events, "validation")] == [4, 8]
    assert not of_type(events, "sample") and not of_type(events, "error")
    assert "Traceback" in (tmp_path / name / rundir.LOG).read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------------ real processes


def test_real_trainer_processes_exit_non_zero_and_say_where(tmp_path: Path, corpus: Path) -> None:
    """A broken task's process exits 3 and names its line; an engine fault (fault injection) exits 1 and names
    the innermost frame, since no task code is on the stack. Both keep their checkpoints."""
    launcher = TrainerLauncher(tmp_path, corpus)
    settings = dict(item.split("=", 1) for item in SETTINGS)
    try:
        fault = launcher.start("fault", settings, env={**FAULTS_ON, "VEGA_FAULT_FAIL_AT_STEP": str(BREAK_AT_STEP)})
        argv = launcher.command(tmp_path / "task", {k: int(v) for k, v in settings.items()}, None, ())
        task_argv = [sys.executable, str(BROKEN_TASKS), "raises_in_loss", *argv[3:]]
        task = subprocess.run(task_argv, capture_output=True, text=True, env=launcher.env, cwd=tmp_path, timeout=180)
        fault.wait()
    finally:
        launcher.close()
    where = f"{BROKEN_TASKS}:{marked_line('raises_in_loss')}"
    assert task.returncode == 3, task.stderr
    assert f"the task failed: compute_losses raised ValueError: the loss blew up at step 5 ({where}" in task.stderr
    assert f"the last checkpoint is intact: {tmp_path / 'task' / 'checkpoints' / 'step-00000004.pt'}" in task.stderr
    task_events = events_of(tmp_path / "task")
    names_line(ends_in_failure(task_events), "raises_in_loss", "compute_losses", "task_failed")
    assert announced_checkpoints_intact(tmp_path / "task", task_events) == [3, 4]

    assert fault.proc.returncode == 1, fault.stderr
    assert [w.code for w in of_type(fault.events(), "warning")] == ["fault_injection_on"]  # VEGA_FAULTS=1 was set
    assert "trainer failed: RuntimeError('injected failure at step 5 (fault injection)')" in fault.stderr
    error = ends_in_failure(fault.events())
    raise_line = next(n for n, line in enumerate(FAULTS.read_text().splitlines(), 1) if "injected failure" in line)
    assert (Path(error.file), error.line, error.code, error.task_method) == (FAULTS, raise_line, "trainer", None)
    assert announced_checkpoints_intact(fault.run_dir, fault.events()) == [3, 4]


# ------------------------------------------------------------------------------------------------ the dashboard


def test_the_store_and_status_line_show_the_failure_and_its_line(loss_failure) -> None:
    _, run_dir = loss_failure
    store = RunStore(run_dir=run_dir)
    store.apply(events_of(run_dir))
    state = store.state
    line = marked_line("raises_in_loss")
    assert state.status == "failed"
    assert (state.last_error_file, state.last_error_line) == (str(BROKEN_TASKS), line)
    assert f"  FAILED at broken_tasks.py:{line}  " in status_first_line(state, now=None).plain
    banner = problem_text(state)
    assert banner is not None
    assert f"The run failed: compute_losses raised ValueError: the loss blew up at step 5 ({BROKEN_TASKS}:{line}" in (
        banner.plain
    )
    assert any(log.kind == "error" and f"broken_tasks.py:{line}" in log.message for log in state.logs)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_dashboard_shows_failed_with_the_file_and_line(loss_failure, tmp_path: Path) -> None:
    _, recorded = loss_failure
    run_dir = tmp_path / recorded.name
    shutil.copytree(recorded, run_dir)
    line = marked_line("raises_in_loss")
    async with DashApp(run_dir).run_test(size=(120, 40)) as pilot:
        screen = await settled(pilot)
        status = plain(screen.query_one(StatusLine))
        assert f"FAILED at broken_tasks.py:{line}" in status
        banner = plain(screen.query_one(ProblemBanner))
        assert screen.query_one(ProblemBanner).display
        assert "The run failed: compute_losses raised ValueError: the loss blew up at step 5" in banner
        assert f"broken_tasks.py:{line}" in banner.replace("\n", "")
        await pilot.press("2")  # the Logs tab
        assert f"broken_tasks.py:{line}" in log_view_text(screen).replace("\n", "")


def test_a_checkpoint_of_the_failed_run_resumes(loss_failure, tmp_path: Path) -> None:
    """The last good checkpoint is a real resume point: a fixed task continues from it to the end."""
    _, recorded = loss_failure
    run_dir = tmp_path / "resumed"
    shutil.copytree(recorded, run_dir)
    digest = hashlib.sha256((run_dir / "checkpoints" / "step-00000004.pt").read_bytes()).hexdigest()
    profile = run_dir / "profile.toml"
    plan = make_plan(str(profile), [], run_dir=run_dir, resume="auto", use_machine_file=False)
    try:
        assert run_training(plan) == 0
    finally:
        for handler in logging.getLogger("trainer_core").handlers:
            handler.close()
    events = events_of(run_dir)
    assert finished(events).status == "completed" and finished(events).step == 8
    hellos = of_type(events, "hello")
    assert len(hellos) == 2 and hellos[-1].resumed
    assert any("resumed from" in e.message and "step-00000004.pt" in e.message for e in of_type(events, "log"))
    assert hashlib.sha256((run_dir / "checkpoints" / "step-00000004.pt").read_bytes()).hexdigest() == digest
