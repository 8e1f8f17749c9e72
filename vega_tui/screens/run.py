"""The run dashboard: follow one run (live, reattached or finished) and control its trainer.

Data flow (Textual rules): an `EventFollower` thread tails `RUN/events.jsonl` and posts one
`EventsArrived` message per batch; the handler folds it into a `RunStore` on the app thread (a
big log is opened from a preview store, then the exact one: `StoreReady` swaps them, see
vega_tui/follow.py) and rings the bell with a desktop notification for news (vega_tui.alerts);
a timer redraws the widgets a few times a second, only when `store.state.version` moved.
Whatever may block (control commands, NVML/psutil, stat() of checkpoint files, checking
whether the trainer lives, spawning a resumed trainer) runs in thread workers that post
messages back; no worker touches a widget.

Layout: status line, resources line (roomy terminals), problem banner, tabs (Charts, Logs,
Checkpoints, Samples, Resources: keys 1-5), profiler bar, footer; see run.tcss, run_layout.py,
run_messages.py, run_actions.py; the trainer controls and checkpoint actions are in
run_controls.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.css.query import NoMatches
from textual.widgets import TabbedContent

from trainer_core.contract.errors import VegaError
from trainer_core.contract.rundir import EVENTS
from vega_tui.alerts import DashboardAlerts, terminal_writer
from vega_tui.follow import EventFollower
from vega_tui.pending import PendingRequests
from vega_tui.preview import DEFAULT_PLAN, PreviewPlan
from vega_tui.run_state import ENDED, RunState
from vega_tui.screens import run_actions
from vega_tui.screens.run_controls import RunControls
from vega_tui.screens.run_layout import (
    CONTROL_ACTIONS,
    ROOMY_SIZE,
    RUN_BINDINGS,
    TAB_ACTIONS,
    TAB_FOCUS,
    compose_run_layout,
)
from vega_tui.screens.run_messages import (
    EventsArrived,
    HistoryProgress,
    ResourcesRead,
    StoreReady,
    TrainerChecked,
)
from vega_tui.store import RunStore
from vega_tui.widgets.breakdown import BreakdownBar
from vega_tui.widgets.charts import ChartGrid
from vega_tui.widgets.checkpoints import CheckpointPanel
from vega_tui.widgets.logs import LogPane
from vega_tui.widgets.resources import (
    PROBE_INTERVAL_S,
    ResourceLine,
    ResourcesPanel,
    read_resources,
)
from vega_tui.widgets.samples import SamplesPanel, find_player
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
# Events per message while catching up on a long log: small enough that one
# batch never stalls the UI.
FOLLOW_BATCH = 1000


class RunScreen(RunControls):
    """`RunScreen(run_dir, process=None)`: the dashboard of one run folder.

    `process` is the trainer this dashboard started (None when attaching). `read_resources` is the
    probe called every 2 s in a worker (tests pass a fixed one; None turns the live panel off).
    """

    CSS_PATH = "run.tcss"
    _bindings_refresh_queued = False  # see refresh_bindings
    BINDINGS = RUN_BINDINGS

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
        self.alerts = DashboardAlerts(self.run_dir.name)
        self.trainer_alive: bool | None = None if process is None else True
        self._probe = read_resources
        self._preview = preview
        self._drawn_version = self._charts_version = -1
        self._charts_drawn_at = 0.0
        self._scanned_checkpoints: tuple = ()
        self._last_status = ""
        self.pending = PendingRequests()

    # -- layout ------------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield from compose_run_layout(self.run_dir)

    def on_mount(self) -> None:
        self.follower = EventFollower(
            self.run_dir / EVENTS,
            self._on_follower_batch,
            max_batch=FOLLOW_BATCH,
            preview=self._preview,
            on_store=self._on_follower_store,
            on_progress=self._on_follower_progress,
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

    # -- following the event log -------------------------------------------------------------------

    def _on_follower_batch(self, events: list[Event], malformed: int, gaps: int) -> None:
        # Runs on the follower thread: hand the batch to the app thread, never touch widgets here.
        self.post_message(EventsArrived(events, malformed, gaps))

    def _on_follower_store(self, store: RunStore, exact: bool) -> None:
        self.post_message(StoreReady(store, exact))  # follower thread, as above

    def _on_follower_progress(self, fraction: float) -> None:
        self.post_message(HistoryProgress(fraction))  # follower thread, as above

    def on_events_arrived(self, message: EventsArrived) -> None:
        self.store.apply(message.events)
        self.alerts.on_events(message.events, terminal_writer(self.app))
        self.store.note_reader(message.malformed, message.gaps)

    def on_store_ready(self, message: StoreReady) -> None:
        """Show the follower's store from now on; every widget redraws from it on this tick."""
        old, self.store = self.store, message.store
        if old.state.status == "crashed" and self.state.finished is None:
            # the liveness verdict was given on the preview
            self.store.mark_crashed(old.state.crash_log)
        self._drawn_version = self._charts_version = -1
        self._charts_drawn_at = 0.0
        self.refresh_widgets()

    def on_history_progress(self, message: HistoryProgress) -> None:
        if self.state.history_progress is not None:
            self.state.history_progress = message.fraction

    # -- periodic refresh --------------------------------------------------------------------------

    def refresh_widgets(self) -> None:
        """Redraw what changed since the last tick (the status line also
        ticks its clock while live)."""
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
        self.query_one(BreakdownBar).show(state.breakdown, state.breakdown_groups)
        self._refresh_tab(state, self._active_tab())
        self._maybe_scan_files(state)
        if state.status != self._last_status:
            self._last_status = state.status
            self.refresh_bindings()  # pause/resume swap, and controls of an ended run

    def _refresh_tab(self, state: RunState, tab: str) -> None:
        """Bring the panel of `tab` up to date; hidden panels wait until their
        tab opens (no work off screen)."""
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
        drawn = self.query_one(ChartGrid).redraw(state)
        # none on screen: the tab just opened and is not laid out yet, so the next tick draws
        self._charts_version, self._charts_drawn_at = state.version if drawn else -1, now

    def _maybe_scan_files(self, state: RunState) -> None:
        """Stat checkpoint files again when the set of checkpoints changed
        or the run ended (export)."""
        rows = [(row.step, row.path) for row in state.checkpoints.values()]
        wanted = (state.status in ENDED, tuple(rows))
        if wanted != self._scanned_checkpoints:
            self._scanned_checkpoints = wanted
            self._scan_files(rows)

    # -- workers -----------------------------------------------------------------------------------

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
        # Until an ended run's trainer is known to be gone (a finished trainer still exits, a check
        # may have been skipped while the log was being read), keep looking.
        if self.state.status not in ENDED or self.trainer_alive is not False:
            self._check_trainer()

    @work(thread=True, exclusive=True, group="liveness")
    def _check_trainer(self) -> None:
        verdict = run_actions.check_trainer(self.run_dir, self.process, self.follower)
        if verdict is not None:
            self.post_message(verdict)

    def on_trainer_checked(self, message: TrainerChecked) -> None:
        was_alive, self.trainer_alive = self.trainer_alive, message.alive
        if message.status == "crashed" and self.state.finished is None:
            self.store.mark_crashed(message.log_tail)
        if was_alive != message.alive:
            self.refresh_bindings()

    # -- tabs --------------------------------------------------------------------------------------

    def _active_tab(self) -> str:
        try:
            return self.query_one(TabbedContent).active.removeprefix("tab-")
        except NoMatches:
            return "charts"

    def action_show_tab(self, name: str) -> None:
        self.query_one(TabbedContent).active = f"tab-{name}"
        self._focus_tab(name)

    def _focus_tab(self, name: str) -> None:
        if name in TAB_FOCUS:
            self.query_one(TAB_FOCUS[name]).focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        self.refresh_bindings()
        self._refresh_tab(self.state, self._active_tab())
        if self._active_tab() == "charts":
            self._charts_version = -1
            self.call_after_refresh(
                self._refresh_charts, self.state, time.time() + CHART_INTERVAL_S
            )

    def refresh_bindings(self) -> None:
        """Gather binding refreshes for a moment: each one makes the footer remount all its
        keys, and a tab switch asks for two or three (the tab's own keys, the focus that moves
        with it) a frame or two apart."""
        if not self._bindings_refresh_queued:
            self._bindings_refresh_queued = True
            self.set_timer(BINDINGS_SETTLE_S, self._publish_bindings)

    def _publish_bindings(self) -> None:
        self._bindings_refresh_queued = False
        super().refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Show tab-specific keys on their tab only, and Pause or Resume as
        the trainer's state asks."""
        if action in TAB_ACTIONS:
            return self._active_tab() == TAB_ACTIONS[action]
        if action in CONTROL_ACTIONS:
            if not self.is_live() or getattr(self.app, "read_only", False):
                return False
            return action not in ("pause", "resume") or (self.state.status == "paused") == (
                action == "resume"
            )
        if action == "ended_control":
            return not self.is_live()
        if action == "export_piper":
            return run_actions.is_vits(self.state)
        return True

    # -- chart and log actions ---------------------------------------------------------------------

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

    # -- sample actions ----------------------------------------------------------------------------

    def action_play_sample(self) -> None:
        panel = self.query_one(SamplesPanel)
        item = panel.selected()
        if item is None:
            self.notify("no sample selected", severity="warning")
        elif item.sample.kind != "audio":
            where = "beside" if item.sample.kind == "image" else "in"
            self.notify(
                f"a {item.sample.kind} sample: it is shown {where} the list ({item.path})",
                timeout=4,
            )
        elif (player := find_player()) is None:
            self.notify(panel.detail_text(item).plain, timeout=15)
        else:
            self._play(player, item.path)

    @work(thread=True, group="play")
    def _play(self, player: list[str], path: Path) -> None:
        self.post_message(run_actions.play_sample(player, path))
