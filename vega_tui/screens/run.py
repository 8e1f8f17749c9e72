"""The run dashboard: follow one run (live, reattached or finished) and control its trainer.

Data flow (Textual rules): an `EventFollower` thread tails `RUN/events.jsonl` and posts one
`EventsArrived` message per batch; the handler folds it into a `RunStore` on the app thread (a big log is
opened from a preview store, then the exact one: `StoreReady` swaps them, see vega_tui/follow.py); a timer
redraws the widgets a few times a second, and only when `store.state.version` moved. Everything that may
block (control commands, NVML/psutil, stat() of checkpoint files, checking whether the trainer still
lives, spawning a resumed trainer) runs in thread workers that post messages back; no worker touches a
widget.

Layout: status line, (resources line on roomy terminals), crash/failure banner, tabs (Charts, Logs,
Checkpoints, Samples, Resources; keys 1-5), profiler bar, footer. See run.tcss.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, TabbedContent, TabPane

from trainer_core.contract.control_client import ControlError
from trainer_core.contract.errors import VegaError
from trainer_core.contract.rundir import EVENTS, PROFILE
from vega_tui import runner
from vega_tui.follow import EventFollower
from vega_tui.pending import PendingRequests
from vega_tui.preview import DEFAULT_PLAN, PreviewPlan
from vega_tui.run_state import ENDED, RunState
from vega_tui.screens.confirm import ConfirmScreen
from vega_tui.store import RunStore
from vega_tui.widgets.breakdown import BreakdownBar
from vega_tui.widgets.charts import ChartGrid
from vega_tui.widgets.checkpoints import CheckpointPanel, RunFiles, scan_run_files
from vega_tui.widgets.logs import LogPane
from vega_tui.widgets.resources import PROBE_INTERVAL_S, ResourceLine, ResourcesPanel, read_resources
from vega_tui.widgets.samples import SamplesPanel, find_player, play
from vega_tui.widgets.status import ProblemBanner, StatusLine

if TYPE_CHECKING:
    from textual.app import ComposeResult
    from textual.events import Resize

    from trainer_core.contract.protocol import Event
    from trainer_core.contract.resources import MachineResources
    from vega_tui.runner import TrainerProcess

REFRESH_INTERVAL_S = 0.25  # widgets: 4 Hz, only when the store changed
CHART_INTERVAL_S = 0.5  # charts: at most 2 Hz (plotext rebuilds are the costly part)
LIVENESS_INTERVAL_S = 1.0
BINDINGS_SETTLE_S = 0.05  # footer refreshes asked for within this time become one
# Events per message while catching up on a long log: small enough that one batch never stalls the UI.
FOLLOW_BATCH = 1000
# Width and height from which every chart and the resources line fit at once.
ROOMY_SIZE = (110, 32)
TABS = ("charts", "logs", "checkpoints", "samples", "resources")
# Control keys that still answer after the run ended (see the hidden bindings below).
ENDED_KEYS = (("p", "pause"), ("s", "save"), ("e", "evaluate"), ("x", "stop"))
TAB_TITLES = {
    "charts": "Charts",
    "logs": "Logs",
    "checkpoints": "Checkpoints",
    "samples": "Samples",
    "resources": "Resources",
}


# ---------------------------------------------------------------------------------------------------------------
# Messages from threads


class EventsArrived(Message):
    """A batch of events from the follower thread, with the reader's running counters."""

    def __init__(self, events: list[Event], malformed: int, gaps: int) -> None:
        super().__init__()
        self.events, self.malformed, self.gaps = events, malformed, gaps


class StoreReady(Message):
    """A store built by the follower thread: a preview of a big log (exact False), then its whole history."""

    def __init__(self, store: RunStore, exact: bool) -> None:
        super().__init__()
        self.store, self.exact = store, exact


class HistoryProgress(Message):
    def __init__(self, fraction: float) -> None:
        super().__init__()
        self.fraction = fraction


class ResourcesRead(Message):
    def __init__(self, resources: MachineResources | None, error: str | None = None) -> None:
        super().__init__()
        self.resources, self.error = resources, error


class FilesScanned(Message):
    def __init__(self, files: RunFiles) -> None:
        super().__init__()
        self.files = files


class TrainerChecked(Message):
    """Whether the trainer process lives; for a dead one, the run's status on disk and trainer.log's tail."""

    def __init__(self, alive: bool, status: str | None = None, log_tail: list[str] | None = None) -> None:
        super().__init__()
        self.alive, self.status, self.log_tail = alive, status, log_tail or []


class CommandReplied(Message):
    def __init__(self, cmd: str, ok: bool, text: str, then_exit: bool = False) -> None:
        super().__init__()
        self.cmd, self.ok, self.text, self.then_exit = cmd, ok, text, then_exit


class ResumeSpawned(Message):
    def __init__(self, process: TrainerProcess | None, step: int, error: str | None = None) -> None:
        super().__init__()
        self.process, self.step, self.error = process, step, error


# ---------------------------------------------------------------------------------------------------------------
# The screen


class RunScreen(Screen[None]):
    """`RunScreen(run_dir, process=None)`: the dashboard of one run folder.

    `process` is the trainer this dashboard started (None when attaching). `read_resources` is the probe
    called every 2 s in a worker (tests pass a fixed one; None turns the live panel off).
    """

    CSS_PATH = "run.tcss"
    _bindings_refresh_queued = False  # see refresh_bindings

    BINDINGS = [
        Binding("p", "pause", "Pause", tooltip="Pause training (the trainer keeps its state)"),
        Binding("p", "resume", "Resume", tooltip="Resume training"),
        Binding("s", "save", "Save", tooltip="Save a checkpoint now"),
        Binding("e", "evaluate", "Eval", tooltip="Validate and write samples now"),
        Binding("x", "stop", "Stop", tooltip="Save a checkpoint, then stop the trainer (asks first)"),
        Binding("d", "detach", "Detach", tooltip="Leave the trainer running and close this view"),
        Binding("q", "quit", "Quit", tooltip="Quit; asks whether to stop a live run"),
        Binding("l", "toggle_log_scale", "Log y", tooltip="Loss chart: log or linear scale"),
        Binding("c", "next_chart", "Chart", tooltip="Show the next secondary chart"),
        Binding("f", "log_filter", "Level", tooltip="Log pane: cycle the lowest level shown"),
        Binding("slash", "log_search", "Search", tooltip="Log pane: search"),
        # Without a live trainer the controls leave the footer, but the keys still answer (a stale socket,
        # a run that ended) instead of doing nothing.
        *(Binding(key, f"ended_control('{cmd}')", show=False) for key, cmd in ENDED_KEYS),
        *(Binding(str(i + 1), f"show_tab('{name}')", TAB_TITLES[name], show=False) for i, name in enumerate(TABS)),
    ]

    def __init__(
        self,
        run_dir: Path,
        process: TrainerProcess | None = None,
        *,
        read_resources: Callable[[], MachineResources] | None = read_resources,
        preview: PreviewPlan | None = DEFAULT_PLAN,
    ) -> None:
        super().__init__()
        self.run_dir = Path(run_dir)
        self.process = process
        self.store = RunStore(run_dir=self.run_dir)
        self.follower: EventFollower | None = None
        self.trainer_alive: bool | None = None if process is None else True
        self._probe = read_resources
        self._preview = preview
        self._drawn_version = -1
        self._charts_version = -1
        self._charts_drawn_at = 0.0
        self._scanned_checkpoints: tuple = ()
        self._last_status = ""
        self.pending = PendingRequests()

    @property
    def state(self) -> RunState:
        return self.store.state

    # -- layout --------------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield ResourceLine(id="resource-line")
        yield ProblemBanner(id="problem")
        with TabbedContent(id="tabs", initial="tab-charts"):
            with TabPane(f"1 {TAB_TITLES['charts']}", id="tab-charts"):
                yield ChartGrid(id="charts")
            with TabPane(f"2 {TAB_TITLES['logs']}", id="tab-logs"):
                yield LogPane(id="logs")
            with TabPane(f"3 {TAB_TITLES['checkpoints']}", id="tab-checkpoints"):
                yield CheckpointPanel(self.run_dir, id="checkpoints")
            with TabPane(f"4 {TAB_TITLES['samples']}", id="tab-samples"):
                yield SamplesPanel(self.run_dir, id="samples")
            with TabPane(f"5 {TAB_TITLES['resources']}", id="tab-resources"):
                yield ResourcesPanel(id="resources")
        yield BreakdownBar(id="breakdown")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.follower = EventFollower(
            self.run_dir / EVENTS,
            self._on_follower_batch,
            max_batch=FOLLOW_BATCH,
            preview=self._preview,
            on_store=lambda store, exact: self.post_message(StoreReady(store, exact)),
            on_progress=lambda fraction: self.post_message(HistoryProgress(fraction)),
            make_store=lambda: RunStore(run_dir=self.run_dir),
        )
        self.set_interval(REFRESH_INTERVAL_S, self.refresh_widgets)
        self.set_interval(LIVENESS_INTERVAL_S, self._check_trainer_if_running)
        self._check_trainer()
        if self._probe is not None:
            self.query_one(ResourcesPanel).show(None)
            self._read_resources()
            self.set_interval(PROBE_INTERVAL_S, self._read_resources)
        else:
            self.query_one(ResourcesPanel).show(None, live=False)
            self.query_one(ResourceLine).show(None, live=False)
        self.refresh_widgets()

    def on_unmount(self) -> None:
        if self.follower is not None:
            self.follower.stop()

    def on_resize(self, event: Resize) -> None:
        width, height = event.size
        self.set_class(width >= ROOMY_SIZE[0] and height >= ROOMY_SIZE[1], "-roomy")
        self._charts_version = -1  # chart sizes changed: redraw on the next tick

    # -- following the event log ---------------------------------------------------------------------------

    def _on_follower_batch(self, events: list[Event], malformed: int, gaps: int) -> None:
        # Runs on the follower thread: hand the batch to the app thread, never touch widgets here.
        self.post_message(EventsArrived(events, malformed, gaps))

    def on_events_arrived(self, message: EventsArrived) -> None:
        self.store.apply(message.events)
        self.store.note_reader(message.malformed, message.gaps)

    def on_store_ready(self, message: StoreReady) -> None:
        """Show the follower's store from now on; every widget redraws from it on this tick."""
        old, self.store = self.store, message.store
        if old.state.status == "crashed" and self.state.finished is None:
            self.store.mark_crashed(old.state.crash_log)  # the liveness verdict was given on the preview
        self._drawn_version = self._charts_version = -1
        self._charts_drawn_at = 0.0
        self.refresh_widgets()

    def on_history_progress(self, message: HistoryProgress) -> None:
        if self.state.history_progress is not None:
            self.state.history_progress = message.fraction

    # -- periodic refresh ----------------------------------------------------------------------------------

    def refresh_widgets(self) -> None:
        """Redraw what changed since the last tick (the status line also ticks its clock while live)."""
        state = self.state
        now = time.time()
        self._settle_requests(state)
        self.query_one(StatusLine).show(state, now, self.pending.labels())
        if state.version != self._drawn_version:
            self._drawn_version = state.version
            self._refresh_panels(state)
        self._refresh_charts(state, now)

    def _refresh_panels(self, state: RunState) -> None:
        self.query_one(ProblemBanner).show(state)
        self.query_one(BreakdownBar).show(state.breakdown)
        self._refresh_tab(state, self._active_tab())
        self._maybe_scan_files(state)
        if state.status != self._last_status:
            self._last_status = state.status
            self.refresh_bindings()  # pause/resume swap, and controls of an ended run

    def _refresh_tab(self, state: RunState, tab: str) -> None:
        """Bring the panel of `tab` up to date; hidden panels wait until their tab opens (no work off screen)."""
        if tab == "logs":
            self.query_one(LogPane).update_from(state)
        elif tab == "samples":
            self.query_one(SamplesPanel).update_from(state, state.host)
        elif tab == "checkpoints":
            ended = state.status in ENDED
            reference = state.last_t if ended else time.time()
            self.query_one(CheckpointPanel).update_from(state, reference, ended)

    def _refresh_charts(self, state: RunState, now: float) -> None:
        if self._charts_version == state.version or now - self._charts_drawn_at < CHART_INTERVAL_S:
            return
        if self._active_tab() != "charts":
            return  # hidden charts are drawn when their tab opens
        self._charts_version, self._charts_drawn_at = state.version, now
        self.query_one(ChartGrid).redraw(state)

    def _maybe_scan_files(self, state: RunState) -> None:
        """Stat checkpoint files again when the set of checkpoints changed or the run ended (export)."""
        rows = [(row.step, row.path) for row in state.checkpoints.values()]
        wanted = (state.status in ENDED, tuple(rows))
        if wanted != self._scanned_checkpoints:
            self._scanned_checkpoints = wanted
            self._scan_files(rows)

    # -- workers -------------------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="files")
    def _scan_files(self, rows: list[tuple[int, str]]) -> None:
        self.post_message(FilesScanned(scan_run_files(self.run_dir, rows)))

    def on_files_scanned(self, message: FilesScanned) -> None:
        self.query_one(CheckpointPanel).set_files(message.files)
        self._drawn_version = -1  # re-render the rows with the sizes now known

    @work(thread=True, exclusive=True, group="resources")
    def _read_resources(self) -> None:
        assert self._probe is not None
        try:
            self.post_message(ResourcesRead(self._probe()))
        except (VegaError, OSError) as exc:
            self.post_message(ResourcesRead(None, str(exc)))

    def on_resources_read(self, message: ResourcesRead) -> None:
        self.query_one(ResourcesPanel).show(message.resources, message.error)
        self.query_one(ResourceLine).show(message.resources)

    def _check_trainer_if_running(self) -> None:
        # Until an ended run's trainer is known to be gone (a finished trainer still exits, a check may
        # have been skipped while the log was being read), keep looking.
        if self.state.status not in ENDED or self.trainer_alive is not False:
            self._check_trainer()

    @work(thread=True, exclusive=True, group="liveness")
    def _check_trainer(self) -> None:
        """Is the trainer alive? For a dead one: did it finish (events say so) or crash (then the log tail)."""
        process = self.process
        alive = process.alive() if process is not None else runner.is_alive(self.run_dir)
        if alive:
            self.post_message(TrainerChecked(True))
            return
        if self.follower is None or not self.follower.wait_caught_up(0):
            return  # judge a dead trainer only once its whole log is queued ahead of this verdict
        status = runner.run_status(self.run_dir)
        if status == "empty" and process is not None:
            status = "crashed"  # our trainer exited before its first event (a bad profile, a broken venv)
        tail = runner.log_tail(self.run_dir) if status == "crashed" else []
        self.post_message(TrainerChecked(False, status, tail))

    def on_trainer_checked(self, message: TrainerChecked) -> None:
        was_alive, self.trainer_alive = self.trainer_alive, message.alive
        if message.status == "crashed" and self.state.finished is None:
            self.store.mark_crashed(message.log_tail)
        if was_alive != message.alive:
            self.refresh_bindings()

    # -- tabs ----------------------------------------------------------------------------------------------

    def _active_tab(self) -> str:
        try:
            return self.query_one(TabbedContent).active.removeprefix("tab-")
        except NoMatches:
            return "charts"

    def action_show_tab(self, name: str) -> None:
        self.query_one(TabbedContent).active = f"tab-{name}"
        self._focus_tab(name)

    def _focus_tab(self, name: str) -> None:
        targets = {"logs": "#log-view", "checkpoints": "#ckpt-table", "samples": "#sample-list"}
        if name in targets:
            self.query_one(targets[name]).focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.refresh_bindings()
        self._refresh_tab(self.state, self._active_tab())
        if self._active_tab() == "charts":
            self._charts_version = -1
            self.call_after_refresh(self._refresh_charts, self.state, time.time() + CHART_INTERVAL_S)

    def refresh_bindings(self) -> None:
        """Gather binding refreshes for a moment: each one makes the footer remount all its keys, and a tab
        switch asks for two or three (the tab's own keys, the focus that moves with it) a frame or two apart."""
        if not self._bindings_refresh_queued:
            self._bindings_refresh_queued = True
            self.set_timer(BINDINGS_SETTLE_S, self._publish_bindings)

    def _publish_bindings(self) -> None:
        self._bindings_refresh_queued = False
        super().refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Show tab-specific keys on their tab only, and Pause or Resume as the trainer's state asks."""
        tab_actions = {"toggle_log_scale": "charts", "next_chart": "charts", "log_filter": "logs", "log_search": "logs"}
        if action in tab_actions:
            return self._active_tab() == tab_actions[action]
        if action in ("pause", "resume", "save", "evaluate", "stop"):
            if not self.is_live():
                return False
            return action not in ("pause", "resume") or (self.state.status == "paused") == (action == "resume")
        if action == "ended_control":
            return not self.is_live()
        return True

    # -- chart and log actions -----------------------------------------------------------------------------

    def action_toggle_log_scale(self) -> None:
        grid = self.query_one(ChartGrid)
        grid.log_y = not grid.log_y
        self._redraw_charts_now()
        self.notify(f"loss chart: {'log' if grid.log_y else 'linear'} scale", timeout=2)

    def action_next_chart(self) -> None:
        name = self.query_one(ChartGrid).cycle()
        self.call_after_refresh(self._redraw_charts_now)
        self.notify(f"showing the {name} chart", timeout=2)

    def _redraw_charts_now(self) -> None:
        self._charts_version, self._charts_drawn_at = self.state.version, time.time()
        self.query_one(ChartGrid).draw_all_now(self.state)

    def action_log_filter(self) -> None:
        level = self.query_one(LogPane).cycle_level()
        self.notify(f"log: showing {level} and above", timeout=2)

    def action_log_search(self) -> None:
        self.query_one(LogPane).open_search()

    # -- trainer controls ----------------------------------------------------------------------------------

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
        """Say when a save or evaluation asked for here is done (the status line shows it until then)."""
        for cmd, done in self.pending.settle(state):
            if not done:
                self.notify(f"{cmd}: the run ended before it was done", severity="warning", timeout=8)
            elif cmd == "save":
                self.notify(f"save: checkpoint written: {state.last_checkpoint_path}", timeout=8)
            else:
                self.notify(f"evaluate: validation loss {state.val_loss}", timeout=8)

    def action_ended_control(self, cmd: str) -> None:
        """A control key pressed while no trainer seems to run: try anyway, so the reason gets reported."""
        if self.state.status in ENDED and self.state.status != "crashed":
            self.notify(f"the run has {self.state.status}: no trainer is running to {cmd}", severity="warning")
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
            self.app.notify(f"detached: the trainer keeps running; reattach with vega-tui attach {self.run_dir}")
        self._leave()

    def action_quit(self) -> None:
        if not self.is_live():
            self.app.exit()
            return
        question = "The trainer is still running. Stop it, or leave it running and quit?"
        choices = [("s", "Stop it", "stop"), ("l", "Leave it running", "leave"), ("c", "Cancel", None)]
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
        """Send a control command from a worker; the reply (or why none came) becomes a notification."""
        self.run_worker(lambda: self._send_blocking(cmd, then_exit), thread=True, group="commands")

    def _send_blocking(self, cmd: str, then_exit: bool) -> None:
        try:
            reply = runner.send(self.run_dir, cmd)
        except (ControlError, VegaError, OSError) as exc:
            self.post_message(CommandReplied(cmd, False, str(exc), then_exit))
            return
        text = "sent; the trainer acknowledged it" if reply.ok else f"refused: {reply.error or 'no reason given'}"
        self.post_message(CommandReplied(cmd, reply.ok, text, then_exit))

    def on_command_replied(self, message: CommandReplied) -> None:
        if not message.ok:
            self.pending.forget(message.cmd)
        severity = "information" if message.ok else "error"
        self.notify(f"{message.cmd}: {message.text}", severity=severity, timeout=6)
        if message.then_exit and message.ok:
            self.app.exit()  # quit after "stop it" only once the trainer took the command

    # -- checkpoint actions --------------------------------------------------------------------------------

    def action_resume_from_selected(self) -> None:
        """Start a new trainer in this run folder that resumes from the highlighted checkpoint."""
        panel = self.query_one(CheckpointPanel)
        step = panel.selected_step()
        problem = self._resume_problem(panel, step)
        if problem:
            self.notify(problem, severity="warning", timeout=6)
            return
        assert step is not None and panel.files is not None
        self._spawn_resume(panel.files.checkpoints[step].path, step)

    def _resume_problem(self, panel: CheckpointPanel, step: int | None) -> str | None:
        if self.is_live():
            return "the trainer is still running this run: stop it (x) before resuming from a checkpoint"
        if step is None:
            return "no checkpoint selected"
        facts = panel.files.checkpoints.get(step) if panel.files else None
        if facts is None or not facts.exists:
            return f"the checkpoint of step {step} is not on disk any more; pick another one"
        return None

    @work(thread=True, exclusive=True, group="resume")
    def _spawn_resume(self, checkpoint: Path, step: int) -> None:
        profile = self.run_dir / PROFILE  # the run's own frozen profile: the resumed run trains the same job
        if not profile.is_file():
            self.post_message(ResumeSpawned(None, step, f"{profile} is missing: the trainer needs it to resume"))
            return
        argv = runner.train_argv(profile, run_dir=self.run_dir, resume=checkpoint)
        try:
            process = runner.TrainerProcess.spawn(argv, self.run_dir)
        except (VegaError, OSError) as exc:
            self.post_message(ResumeSpawned(None, step, str(exc)))
            return
        self.post_message(ResumeSpawned(process, step))

    def on_resume_spawned(self, message: ResumeSpawned) -> None:
        if message.process is None:
            self.notify(f"could not start the trainer: {message.error}", severity="error", timeout=8)
            return
        # Same folder, same log: the new trainer appends to events.jsonl and the store starts its new life.
        self.process, self.trainer_alive = message.process, True
        self.refresh_bindings()
        self.notify(f"resuming from step {message.step} (trainer pid {message.process.pid})", timeout=6)
        self.action_show_tab("charts")

    def action_show_export(self) -> None:
        files = self.query_one(CheckpointPanel).files
        if files is not None and files.export_files:
            self.notify(f"export: {files.export_dir} ({', '.join(files.export_files)})", timeout=10)
        else:
            self.notify(
                f"no export in {self.run_dir / 'export'}: the trainer writes model.safetensors + config.json "
                "there when a run completes or is stopped (x stops and exports)",
                severity="warning",
                timeout=10,
            )
        self._scan_files([(row.step, row.path) for row in self.state.checkpoints.values()])

    # -- sample actions ------------------------------------------------------------------------------------

    def action_play_sample(self) -> None:
        panel = self.query_one(SamplesPanel)
        item = panel.selected()
        if item is None:
            self.notify("no sample selected", severity="warning")
        elif item.sample.kind != "audio":
            self.notify(f"a text sample: it is shown in the list ({item.path})", timeout=4)
        elif (player := find_player()) is None:
            self.notify(panel.detail_text(item).plain, timeout=15)
        else:
            self._play(player, item.path)

    @work(thread=True, group="play")
    def _play(self, player: list[str], path: Path) -> None:
        if not path.is_file():
            self.post_message(CommandReplied("play", False, f"{path} is not on this machine any more"))
            return
        try:
            play(player, path)
        except OSError as exc:
            self.post_message(CommandReplied("play", False, f"cannot play {path}: {exc.strerror or exc}"))
        else:
            self.post_message(CommandReplied("play", True, f"playing {path.name} with {Path(player[0]).name}"))
