"""What the run dashboard's actions do, as plain functions of plain values
(no widget is touched here).

The blocking ones run on the screen's thread workers: a control command over the socket, spawning a
resumed trainer, checking whether the trainer lives, playing a sample, exporting a vits voice for
Piper; each returns the message for the screen to post. The others decide what to tell the user (why
a resume cannot start, where the export is).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainer_core.contract.control_client import ControlError
from trainer_core.contract.errors import VegaError
from trainer_core.contract.rundir import PROFILE
from vega_tui import runner, runner_tail
from vega_tui.screens.run_messages import (
    CommandReplied,
    PiperExported,
    ResumeSpawned,
    TrainerChecked,
)
from vega_tui.widgets.samples import play

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel

    from vega_tui.follow import EventFollower
    from vega_tui.run_state import RunState
    from vega_tui.runner import TrainerProcess
    from vega_tui.widgets.checkpoints import RunFiles


def check_trainer(
    run_dir: Path, process: TrainerProcess | None, follower: EventFollower | None
) -> TrainerChecked | None:
    """Is the trainer alive? For a dead one: did it finish (events say so)
    or crash (then the log tail).

    None: no verdict yet (a dead trainer is judged only once its whole log
    is queued ahead of the verdict).
    """
    alive = process.alive() if process is not None else runner.is_alive(run_dir)
    if alive:
        return TrainerChecked(True)
    if follower is None or not follower.wait_caught_up(0):
        return None
    status = runner.run_status(run_dir)
    if status == "empty" and process is not None:
        # our trainer exited before its first event (a bad profile, a broken venv)
        status = "crashed"
    tail = runner_tail.log_tail(run_dir) if status == "crashed" else []
    return TrainerChecked(False, status, tail)


def send_control(run_dir: Path, cmd: str, then_exit: bool) -> CommandReplied:
    """Send one control command and describe the trainer's reply (or why none came)."""
    try:
        reply = runner.send(run_dir, cmd)
    except (ControlError, VegaError, OSError) as exc:
        return CommandReplied(cmd, False, str(exc), then_exit)
    text = (
        "sent; the trainer acknowledged it"
        if reply.ok
        else f"refused: {reply.error or 'no reason given'}"
    )
    return CommandReplied(cmd, reply.ok, text, then_exit)


def resume_problem(files: RunFiles | None, step: int | None, live: bool) -> str | None:
    """Why the run cannot resume from the checkpoint of `step` now, or None."""
    if live:
        return (
            "the trainer is still running this run: stop it (x) before resuming from a checkpoint"
        )
    if step is None:
        return "no checkpoint selected"
    facts = files.checkpoints.get(step) if files else None
    if facts is not None and facts.refused:
        return facts.refused
    if facts is None or not facts.exists:
        return f"the checkpoint of step {step} is not on disk any more; pick another one"
    return None


def spawn_resume(run_dir: Path, checkpoint: Path, step: int) -> ResumeSpawned:
    """Start a new trainer in `run_dir` that resumes from `checkpoint`, with
    the run's own frozen profile."""
    profile = run_dir / PROFILE  # the resumed run trains the same job
    if not profile.is_file():
        return ResumeSpawned(None, step, f"{profile} is missing: the trainer needs it to resume")
    argv = runner.train_argv(profile, run_dir=run_dir, resume=checkpoint)
    try:
        process = runner.TrainerProcess.spawn(argv, run_dir)
    except (VegaError, OSError) as exc:
        return ResumeSpawned(None, step, str(exc))
    return ResumeSpawned(process, step)


def play_sample(player: list[str], path: Path) -> CommandReplied:
    """Play an audio sample with `player`; the reply says what happened."""
    if not path.is_file():
        return CommandReplied("play", False, f"{path} is not on this machine any more")
    try:
        play(player, path)
    except OSError as exc:
        return CommandReplied("play", False, f"cannot play {path}: {exc.strerror or exc}")
    return CommandReplied("play", True, f"playing {path.name} with {Path(player[0]).name}")


# An export traces, checks and writes a graph: seconds for a small voice, minutes for a large one.
PIPER_EXPORT_TIMEOUT_S = 900.0


def is_vits(state: RunState) -> bool:
    """The run trains a vits voice (its task event says so)."""
    return (state.task or {}).get("name") == "vits"


def export_for_piper(run_dir: Path) -> PiperExported:
    """`trainer-core export --piper RUN` (best checkpoint -> RUN/export/piper/); blocking."""
    argv = runner.trainer_command("export", "--piper", str(run_dir), "--json")
    try:
        written = runner.run_json(argv, PIPER_EXPORT_TIMEOUT_S)
    except runner.RunnerError as exc:
        return PiperExported(None, None, str(exc))
    return PiperExported(str(written.get("onnx")), str(written.get("config")))


def piper_notice(message: PiperExported) -> tuple[str, SeverityLevel]:
    """What to tell the user once an export for Piper ended."""
    if message.error is not None:
        return f"export for Piper failed: {message.error}", "error"
    return f"Piper voice written: {message.onnx} and {message.config}", "information"


def export_notice(files: RunFiles | None, run_dir: Path) -> tuple[str, SeverityLevel]:
    """Where the run's export is, or why there is none yet, and how urgently to say it."""
    if files is not None and files.export_files:
        return f"export: {files.export_dir} ({', '.join(files.export_files)})", "information"
    text = (
        f"no export in {run_dir / 'export'}: the trainer writes model.safetensors + config.json "
        "there when a run completes or is stopped (x stops and exports)"
    )
    return text, "warning"
