"""A training run from plan to finished event: set-up, train, clean-up, whatever happens.

`run_training` is the trainer's main(): short, with the clean-up in `finally` so that every run
ends with a `finished` event, a session.json and a closed log, even when it fails.

Under torchrun every rank runs this too, but only rank 0 touches the run folder's shared files:
events, session.json, profile.toml, the control socket, TensorBoard, exports. The other ranks log to
trainer-rank<N>.log and follow rank 0's decisions through the loop's step-boundary exchange.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_core import __version__
from trainer_core.contract import rundir
from trainer_core.contract.errors import VegaError
from trainer_core.contract.eventlog import EventWriter
from trainer_core.contract.notify_config import read_notify_config
from trainer_core.contract.profile_loader import machine_file_path, profile_to_toml
from trainer_core.contract.protocol import (
    CommandAckEvent,
    DataProblem,
    DataScanEvent,
    FinishedEvent,
    FinishedStatus,
    GpuInfo,
    HelloEvent,
    ResourcesEvent,
)
from trainer_core.data.item_selection import record_items
from trainer_core.engine.control_state import ControlState
from trainer_core.engine.events import EventHub, NullEventWriter, setup_logging
from trainer_core.engine.notify import RunWatchers
from trainer_core.engine.task_contract import TaskError, error_details
from trainer_core.plan import TrainPlan
from trainer_core.world import rank_log_name

if TYPE_CHECKING:
    from trainer_core.engine.trainer import Trainer
    from trainer_core.engine.wandb_log import WandbSink

log = logging.getLogger("trainer_core")


def run_training(plan: TrainPlan, events_to_stdout: bool = False) -> int:
    main = plan.world.is_main
    run_dir = rundir.create_run_dir(plan.run_dir) if main else _rank_folder(plan.run_dir)
    if main:
        _refuse_a_live_run(run_dir)
    writer = (
        EventWriter.resume(run_dir / rundir.EVENTS, stdout=events_to_stdout)
        if main
        else NullEventWriter()
    )
    console = _console_for(events_to_stdout, plan) if main else None
    hub = EventHub(writer, [console.on_event] if console else [])
    _setup_rank_logging(plan, hub, run_dir)
    control = ControlState()
    outcome = RunOutcome(started=time.time())
    watchers = RunWatchers()  # overtraining and notifications (rank 0)
    try:
        # Signals are caught from the start: a stop during set-up still ends
        # with a `finished` event.
        with console or _nothing(), _stop_on_signals(control):
            if main:
                _announce(plan, hub, run_dir)
                notify = read_notify_config(machine_file_path())
                watchers.attach(hub, run_dir, plan.profile.train.overtraining_evals, notify)
            outcome.status = _train(plan, hub, control, run_dir, outcome)
    except TaskError as exc:  # the task's own code failed: its line and what was expected, status 3
        outcome.fail(exc, hub, exit_code=exc.exit_code, tb=traceback.format_exc())
    except VegaError as exc:
        outcome.fail(exc, hub, exit_code=2)
    except Exception as exc:
        outcome.fail(exc, hub, exit_code=1, tb=traceback.format_exc())
    finally:
        try:
            outcome.finish(hub, run_dir, plan)
        finally:
            watchers.close()
            writer.close()
    if isinstance(outcome.error, VegaError):
        raise outcome.error
    if outcome.exit_code != 0:
        log_name = rundir.LOG if main else rank_log_name(plan.world.rank)
        print(outcome.failure_text(run_dir / log_name), file=sys.stderr)
    return outcome.exit_code


def _rank_folder(path: Path) -> Path:
    """Ranks other than 0 only need the folder to exist for their own log
    (rank 0 lays out the rest)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VegaError(
            f"cannot create run folder {path}: {exc.strerror or exc}; choose another --run-dir"
        ) from exc
    return path


def _setup_rank_logging(plan: TrainPlan, hub: EventHub, run_dir: Path) -> None:
    """trainer.log for rank 0 (and single runs); trainer-rank<N>.log for the other ranks."""
    level, world = plan.profile.logging.level, plan.world
    if world.is_main:
        setup_logging(run_dir / rundir.LOG, hub, level, to_stderr=_stderr_is_free(run_dir))
    else:
        setup_logging(
            run_dir / rank_log_name(world.rank), hub, level, to_stderr=False, rank=world.rank
        )


class RunOutcome:
    """What the `finished` event and session.json report, filled in as the run goes."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.status: FinishedStatus = "failed"
        self.exit_code = 0
        self.error: BaseException | None = None
        self.trainer: Trainer | None = None
        self.summary: dict[str, Any] = {}

    def fail(
        self, exc: BaseException, hub: EventHub, exit_code: int, tb: str | None = None
    ) -> None:
        """The `error` event; a failure with a traceback also names the code
        it happened in (file and line)."""
        self.status, self.exit_code, self.error = "failed", exit_code, exc
        if self.trainer is not None:
            self.trainer.telemetry.flush()  # the steps before the failure belong in the log
        message = str(exc) or type(exc).__name__
        details = error_details(exc, self.trainer.task if self.trainer else None) if tb else {}
        if getattr(exc, "event_code", None):  # e.g. a non-finite stop, which notifications name
            details["code"] = exc.event_code  # type: ignore[attr-defined]
        hub.error(message, tb=tb, **details)
        self.summary["error"] = message
        if details.get("file"):
            self.summary["error_at"] = f"{details['file']}:{details['line']}"

    def failure_text(self, log_path: Path) -> str:
        """What stderr says when the run failed with a traceback: the error, then
        the log and the last checkpoint."""
        t = self.trainer
        manager = t.checkpointer.manager if t is not None else None
        saved = manager.list_complete() if manager is not None else []
        kept = f"; the last checkpoint is intact: {saved[0]}" if saved else ""
        if isinstance(self.error, TaskError):
            return f"the task failed: {self.error}\n  traceback in {log_path}{kept}"
        return f"trainer failed: {self.error!r} (traceback in {log_path}){kept}"

    def finish(self, hub: EventHub, run_dir: Path, plan: TrainPlan) -> None:
        """session.json, then the `finished` event: always the log's last line (rank 0 only)."""
        from trainer_core.engine.session import write_session

        if not plan.world.is_main:
            return
        t = self.trainer
        seconds = time.time() - self.started
        summary = t.summary() if t is not None else {}
        summary.update(self.summary)
        try:
            write_session(run_dir, plan, self.status, self.started, seconds, summary)
        # the events tell the story too; a summary file must not crash the end
        except OSError as exc:
            hub.error(f"session.json not written in {run_dir}: {exc.strerror or exc}")
        hub.emit(
            FinishedEvent(
                status=self.status,
                step=t.state.step if t else 0,
                epoch=t.state.epoch if t else 0,
                seconds=seconds,
                summary=summary,
            )
        )


def _train(
    plan: TrainPlan, hub: EventHub, control: ControlState, run_dir: Path, outcome: RunOutcome
) -> FinishedStatus:
    from trainer_core.engine.setup import (
        build_trainer,
        check_ranks_agree,
        finalize,
        load_start_source,
        start_model,
    )

    main = plan.world.is_main
    # W&B starts first: its service starts (seconds) in a thread while the model is built.
    with _wandb(plan, hub, run_dir) if main else _nothing() as wandb:
        source = load_start_source(plan)
        trainer = build_trainer(plan, hub, control, run_dir)
        outcome.trainer = trainer
        start_model(trainer, plan, hub, source)
        if wandb is not None:  # a resume replays what W&B lost in a kill, up to the checkpoint
            wandb.starts_after(trainer.state.step)
        del source  # its weights are in the model now
        board = _tensorboard(plan, hub, run_dir) if main else _nothing()
        commands = _control_socket(run_dir, control, hub) if main else _nothing()
        with board, commands:
            status = trainer.fit()
    if plan.world.active:
        check_ranks_agree(trainer, hub)
    if main:
        outcome.summary.update(finalize(trainer, plan, hub, run_dir))
    return status


@contextmanager
def _tensorboard(plan: TrainPlan, hub: EventHub, run_dir: Path) -> Iterator[None]:
    """TensorBoard scalars while training, when the profile asks for them
    and the package is there."""
    if not plan.profile.logging.tensorboard:
        yield
        return
    from trainer_core.engine.tensorboard_log import open_tensorboard

    board, why_not = open_tensorboard(run_dir)
    if board is None:
        hub.warn(why_not or "TensorBoard is not available", code="tensorboard_unavailable")
        yield
        return
    hub.listeners.append(board.on_event)
    try:
        yield
    finally:
        hub.listeners.remove(board.on_event)
        board.close()


def _wandb(
    plan: TrainPlan, hub: EventHub, run_dir: Path
) -> AbstractContextManager[WandbSink | None]:
    """Weights & Biases logging while training (engine.wandb_log), when the profile asks for it."""
    from trainer_core.engine.wandb_log import wandb_logging

    return wandb_logging(plan.profile.logging, hub, run_dir, resume=plan.resume is not None)


def _refuse_a_live_run(run_dir: Path) -> None:
    """Two trainers in one run folder would interleave events and overwrite
    checkpoints: refuse early."""
    from trainer_core.contract.control_client import control_socket_path
    from trainer_core.engine.control_server import socket_answers

    path = control_socket_path(run_dir)
    if path.is_socket() and socket_answers(path):
        raise VegaError(
            f"a trainer is already running in {run_dir} (its control socket answers); "
            f"stop it first (trainer-core ctl {run_dir} stop) or choose another --run-dir"
        )


@contextmanager
def _control_socket(run_dir: Path, control: ControlState, hub: EventHub) -> Iterator[None]:
    """The control socket while training; where the path is too long for a
    socket, train without one."""
    from trainer_core.contract.control_client import (
        ControlError,
        check_socket_path_length,
        control_socket_path,
    )
    from trainer_core.engine.control_server import ControlServer

    try:
        check_socket_path_length(control_socket_path(run_dir))
    except ControlError as exc:
        hub.warn(
            f"{exc}; training goes on without control commands (SIGTERM still stops it cleanly)",
            code="no_control_socket",
        )
        yield
        return
    with ControlServer(run_dir, _command_handler(control, hub)):
        yield


def _command_handler(control: ControlState, hub: EventHub):
    from trainer_core.contract.control_protocol import CommandReply

    def handle(command) -> CommandReply:
        # Runs on the socket thread: only enqueue and acknowledge; the loop acts at the next step.
        control.request(command.cmd)
        hub.emit(CommandAckEvent(cmd=command.cmd, id=command.id, ok=True, detail="queued"))
        return CommandReply(ok=True, cmd=command.cmd, id=command.id, error=None)

    return handle


@contextmanager
def _stop_on_signals(control: ControlState) -> Iterator[None]:
    """SIGINT/SIGTERM ask for a clean stop (checkpoint, then `finished: stopped`)."""

    def on_signal(signum, _frame) -> None:
        control.stop_on_signal(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _announce(plan: TrainPlan, hub: EventHub, run_dir: Path) -> None:
    """The opening events: who we are, what the machine has, what was chosen and why."""
    p = plan.profile
    hub.emit(
        HelloEvent(
            trainer_version=__version__,
            pid=os.getpid(),
            host=os.uname().nodename,
            profile_hash=_profile_hash(p),
            run_dir=str(run_dir),
            argv=sys.argv,
            python=sys.version.split()[0],
            profile_path=str(plan.profile_path),
            resumed=plan.resume is not None,
            torch=_torch_version(),
            world_size=plan.world.world_size,
            rank=plan.world.rank,
            backend=plan.backend,
        )
    )
    r = plan.resources
    hub.emit(
        ResourcesEvent(
            cpu_cores=r.cpu_logical,
            ram_total_bytes=r.ram_total_bytes,
            ram_available_bytes=r.ram_available_bytes,
            gpus=[GpuInfo(**g.to_dict()) for g in r.gpus],
        )
    )
    for warning in plan.notes:
        hub.warn(warning)
    data = plan.data
    hub.emit(
        DataScanEvent(
            data_mode=data.mode,
            reason=data.reason,
            usable=data.usable_count,
            skipped=len(data.problems),
            total_hours=data.voice.hours_usable,
            problems=[DataProblem(**pr.to_dict()) for pr in data.problems],
            speakers={name: figures.clips for name, figures in data.voice.speakers.items()},
        )
    )
    for problem in data.problems:
        log.warning("skipped %s: %s", problem.path, problem.reason)
    changed = record_items(run_dir / rundir.ITEMS, data)
    if changed is not None:
        hub.warn(changed, code="items_changed")
    frozen = run_dir / rundir.PROFILE
    if not frozen.exists():
        frozen.write_text(profile_to_toml(p), encoding="utf-8")


def _torch_version() -> str | None:
    """The installed torch's version, read from its metadata: importing
    torch here would delay `hello`."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def _profile_hash(profile) -> str:
    import hashlib

    return hashlib.sha256(profile_to_toml(profile).encode()).hexdigest()[:16]


def _stderr_is_free(run_dir: Path) -> bool:
    """False when stderr already goes into trainer.log (the dashboard redirects it there)."""
    try:
        err, log_file = os.fstat(2), os.stat(run_dir / rundir.LOG)
    except OSError:
        return True
    return (err.st_dev, err.st_ino) != (log_file.st_dev, log_file.st_ino)


def _console_for(events_to_stdout: bool, plan: TrainPlan):
    """A Rich progress display on an interactive terminal, unless events go to stdout."""
    if events_to_stdout or not sys.stderr.isatty():
        return None
    from trainer_core.engine.console import ConsoleProgress

    t = plan.profile.train
    total = None if t.target_hours else t.max_steps or t.epochs * plan.steps_per_epoch
    return ConsoleProgress(total)


@contextmanager
def _nothing() -> Iterator[None]:
    yield
