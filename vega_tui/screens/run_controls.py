"""The run screen's keys that act on the trainer and its checkpoints, as a base class of
`RunScreen`: pause, resume, save, evaluate, stop, detach and quit (with their confirmations and the
trainer's replies), resuming from a checkpoint, the export notice and the Piper export, and the
worker that stats checkpoint files. Blocking work runs in thread workers that post a message
(vega_tui/screens/run_messages.py) back; no worker touches a widget."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.screen import Screen

from vega_tui.run_state import ENDED, RunState
from vega_tui.screens import run_actions
from vega_tui.screens.confirm import ConfirmScreen
from vega_tui.screens.run_messages import (
    CommandReplied,
    FilesScanned,
    PiperExported,
    ResumeSpawned,
)
from vega_tui.widgets.checkpoints import CheckpointPanel, scan_run_files

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel

    from vega_tui.pending import PendingRequests
    from vega_tui.runner import TrainerProcess
    from vega_tui.store import RunStore


class RunControls(Screen[None]):
    """Trainer controls and checkpoint actions; `RunScreen` sets the attributes below."""

    run_dir: Path
    process: TrainerProcess | None
    store: RunStore
    trainer_alive: bool | None
    pending: PendingRequests
    _drawn_version: int

    if TYPE_CHECKING:
        # RunScreen's tab switch; declared for type checking only, so the screen's own is called.
        def action_show_tab(self, name: str) -> None: ...

    @property
    def state(self) -> RunState:
        return self.store.state

    # -- trainer controls --------------------------------------------------------------------------

    def is_live(self) -> bool:
        """A trainer is (as far as we know) still running this run."""
        return self.state.status not in ENDED and self.trainer_alive is not False

    def action_pause(self) -> None:
        self.send_command("pause")

    def action_resume(self) -> None:
        self.send_command("resume")

    def action_save(self) -> None:
        self.pending.ask("save")
        self.send_command("save")

    def action_evaluate(self) -> None:
        self.pending.ask("evaluate")
        self.send_command("evaluate")

    def _settle_requests(self, state: RunState) -> None:
        """Say when a save or evaluation asked for here is done (the status
        line shows it until then)."""
        for cmd, done in self.pending.settle(state):
            if not done:
                self.notify(
                    f"{cmd}: the run ended before it was done", severity="warning", timeout=8
                )
            elif cmd == "save":
                self.notify(f"save: checkpoint written: {state.last_checkpoint_path}", timeout=8)
            else:
                self.notify(f"evaluate: validation loss {state.val_loss}", timeout=8)

    def action_ended_control(self, cmd: str) -> None:
        """A control key pressed while no trainer seems to run: try anyway,
        so the reason gets reported."""
        if self.state.status in ENDED and self.state.status != "crashed":
            self.notify(
                f"the run has {self.state.status}: no trainer is running to {cmd}",
                severity="warning",
            )
        else:
            self.send_command(cmd)

    def action_stop(self) -> None:
        question = "Stop the run? The trainer saves a checkpoint first, then exits."
        choices = [("y", "Stop the run", "stop"), ("n", "Keep training", None)]
        self.app.push_screen(ConfirmScreen(question, choices), self._stop_answered)

    def _stop_answered(self, answer: Any) -> None:
        if answer == "stop":
            self.send_command("stop")

    def action_detach(self) -> None:
        """Leave the trainer running and leave this screen (quit when nothing is under it)."""
        if self.is_live():
            self.app.notify(
                f"detached: the trainer keeps running; reattach with vega-tui attach {self.run_dir}"
            )
        self._leave()

    def action_quit(self) -> None:
        if not self.is_live():
            self.app.exit()
            return
        question = "The trainer is still running. Stop it, or leave it running and quit?"
        choices = [
            ("s", "Stop it", "stop"),
            ("l", "Leave it running", "leave"),
            ("c", "Cancel", None),
        ]
        self.app.push_screen(ConfirmScreen(question, choices), self._quit_answered)

    def _quit_answered(self, answer: Any) -> None:
        if answer == "stop":
            self.send_command("stop", then_exit=True)
        elif answer == "leave":
            self.app.exit()

    def _leave(self) -> None:
        below = self.app.screen_stack[:-1]
        if all(screen.id == "_default" for screen in below):
            self.app.exit()
        else:
            self.app.pop_screen()

    def send_command(self, cmd: str, then_exit: bool = False) -> None:
        """Send a control command from a worker; the reply (or why none
        came) becomes a notification."""
        self.run_worker(lambda: self._send_blocking(cmd, then_exit), thread=True, group="commands")

    def _send_blocking(self, cmd: str, then_exit: bool) -> None:
        self.post_message(run_actions.send_control(self.run_dir, cmd, then_exit))

    def on_command_replied(self, message: CommandReplied) -> None:
        if not message.ok:
            self.pending.forget(message.cmd)
        severity: SeverityLevel = "information" if message.ok else "error"
        self.notify(f"{message.cmd}: {message.text}", severity=severity, timeout=6)
        if message.then_exit and message.ok:
            self.app.exit()  # quit after "stop it" only once the trainer took the command

    # -- checkpoint actions ------------------------------------------------------------------------

    def action_resume_from_selected(self) -> None:
        """Start a new trainer in this run folder that resumes from the highlighted checkpoint."""
        panel = self.query_one(CheckpointPanel)
        step = panel.selected_step()
        problem = run_actions.resume_problem(panel.files, step, self.is_live())
        if problem:
            self.notify(problem, severity="warning", timeout=6)
            return
        assert step is not None and panel.files is not None
        self._spawn_resume(panel.files.checkpoints[step].path, step)

    @work(thread=True, exclusive=True, group="resume")
    def _spawn_resume(self, checkpoint: Path, step: int) -> None:
        self.post_message(run_actions.spawn_resume(self.run_dir, checkpoint, step))

    def on_resume_spawned(self, message: ResumeSpawned) -> None:
        if message.process is None:
            self.notify(
                f"could not start the trainer: {message.error}", severity="error", timeout=8
            )
            return
        # Same folder, same log: the new trainer appends to events.jsonl and
        # the store starts its new life.
        self.process, self.trainer_alive = message.process, True
        self.refresh_bindings()
        self.notify(
            f"resuming from step {message.step} (trainer pid {message.process.pid})", timeout=6
        )
        self.action_show_tab("charts")

    def action_show_export(self) -> None:
        text, severity = run_actions.export_notice(
            self.query_one(CheckpointPanel).files, self.run_dir
        )
        self.notify(text, severity=severity, timeout=10)
        self._scan_files([(row.step, row.path) for row in self.state.checkpoints.values()])

    def action_export_piper(self) -> None:
        """Write the run's best checkpoint as a Piper voice (RUN/export/piper/) from a worker."""
        if not run_actions.is_vits(self.state):
            self.notify("export for Piper: only a vits run is a Piper voice", severity="warning")
            return
        self.notify(f"exporting for Piper into {self.run_dir / 'export' / 'piper'}…", timeout=6)
        self._export_piper()

    @work(thread=True, exclusive=True, group="piper")
    def _export_piper(self) -> None:
        self.post_message(run_actions.export_for_piper(self.run_dir))

    def on_piper_exported(self, message: PiperExported) -> None:
        text, severity = run_actions.piper_notice(message)
        self.notify(text, severity=severity, timeout=15)

    # -- checkpoint files --------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="files")
    def _scan_files(self, rows: list[tuple[int, str]]) -> None:
        self.post_message(FilesScanned(scan_run_files(self.run_dir, rows)))

    def on_files_scanned(self, message: FilesScanned) -> None:
        self.query_one(CheckpointPanel).set_files(message.files)
        self._drawn_version = -1  # re-render the rows with the sizes now known
