"""The launch screen: pick a profile, data, compute mode, device and processes per node, read the
plan, Start.

What the screen is doing (checking, ready, blocked, waiting to start, starting, running) is one
small state machine, `vega_tui.screens.launch_state.LaunchFlow`: the handlers here tell it what
happened and `_show_state` shows what it holds.

Everything slow runs on background threads that only post messages
(`vega_tui.screens.launch_workers`): probing the machine (torch-free), validating and watching
profiles, and one helper, `run_check`, for both the data check (`trainer-core check-data --json`)
and the plan (`trainer-core train --dry-run --json`); "Start from" (`vega_tui.widgets.start_from`)
finds and checks models the same way. Choices that follow the profile (modes, data folder) keep
following it until the user changes them. Modules that build pydantic models are imported where
first used, on those threads, after the first frame (which should come well under a second).

Start spawns the trainer in its own session (`vega_tui.runner.TrainerProcess`) and opens the run
dashboard. The demo profile is preselected and Start has focus, so Enter alone starts a run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Button, Footer, Input, Static

from trainer_core.contract.errors import VegaError
from trainer_core.contract.rundir import propose_run_dir
from vega_tui import read_only
from vega_tui.screens import run_in_background
from vega_tui.screens.launch_messages import (
    BackgroundProblem,
    DataChecked,
    PlanReady,
    ProfilesChanged,
    ProfilesScanned,
    ResourcesProbed,
    StartPointsScanned,
)
from vega_tui.screens.launch_selection import (
    Selection,
    check_data_argv,
    detection_text,
    overrides_with_runs_root,
    profile_defaults,
    selection_problem,
)
from vega_tui.screens.launch_state import LaunchFlow, Phase, Preflight
from vega_tui.screens.launch_workers import probe_machine, read_profiles, run_check, watch_profiles
from vega_tui.start_points import post_start_points, start_points_key
from vega_tui.widgets.choice_list import ChoiceList
from vega_tui.widgets.mode_picker import (
    AUTO_DEVICE,
    compute_mode_choices,
    data_mode_choices,
    device_choices,
)
from vega_tui.widgets.preflight import PreflightPanel, run_folder_parts
from vega_tui.widgets.process_list import ProcessList
from vega_tui.widgets.profile_list import ProfileEntry, ProfileList, default_profile_name
from vega_tui.widgets.start_from import StartFrom

if TYPE_CHECKING:
    from trainer_core.contract.data_report import CheckDataReport
    from trainer_core.contract.plan_report import PlanReport
    from trainer_core.contract.resources import DeviceChoice, MachineResources

# Typing in the data folder or moving through a list settles for this long before a check runs.
DEBOUNCE_S = 0.4

_T = TypeVar("_T")


# ------------------------------------------------------------------------------------------ screen


class LaunchScreen(Screen[None]):
    """What `vega-tui` opens on."""

    AUTO_FOCUS = "#start"  # Enter alone starts the preselected demo profile

    BINDINGS = [
        Binding("s", "start", "Start"),
        Binding("r", "runs", "Runs"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, runs_root: Path | None = None, overrides: Sequence[str] = ()) -> None:
        super().__init__()
        self.selection = Selection(overrides=overrides_with_runs_root(overrides, runs_root))
        self.flow = LaunchFlow()
        self.resources: MachineResources | None = None
        self.probe_error: str | None = None
        self.modes: dict[str, DeviceChoice | str] | None = None
        # (runs folder, model kind) the "Start from" list was asked for, and the one it shows.
        self.start_key: tuple[str, str | None] | None = None
        self.start_key_shown: tuple[str, str | None] | None = None
        self._timer: Timer | None = None
        self._stop_watch = threading.Event()
        self._preflight_shown: Preflight | None = None

    # The checks' answers, as the flow holds them.
    @property
    def plan(self) -> PlanReport | None:
        return self.flow.plan.result

    @property
    def plan_error(self) -> str | None:
        return self.flow.plan.error

    @property
    def data_report(self) -> CheckDataReport | None:
        return self.flow.data.result

    @property
    def data_error(self) -> str | None:
        return self.flow.data.error

    # ----------------------------------------------------------------------- layout

    def compose(self) -> ComposeResult:
        yield Static("Vega · new training run", id="launch-title")
        with Horizontal(id="launch-body"):
            with VerticalScroll(id="launch-left", can_focus=False):
                yield _section("Profile", ProfileList(id="profiles"), id="profile-section")
                folder = Input(id="data-folder", placeholder="path to audio or text", compact=True)
                yield _section("Data folder", folder)
                detect = Static("", id="data-detect")
                yield _section("Data mode", ChoiceList(id="data-mode"), detect)
                yield _section("Start from", StartFrom(id="start-from-section"))
            with VerticalScroll(id="launch-right", can_focus=False):
                yield _section("Compute mode", ChoiceList(id="compute-mode"))
                yield _section("Device", ChoiceList(id="device"))
                yield _section("Processes per node", ProcessList(id="processes"))
                panel = PreflightPanel(id="preflight")
                yield _section("Preflight", panel, id="preflight-section", scroll=True)
        with Horizontal(id="start-bar"):
            yield Button("Start ▶", id="start", variant="success", compact=True)
            yield Static("", id="start-why")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#data-mode", ChoiceList).set_choices(data_mode_choices(), "auto")
        modes = self.query_one("#compute-mode", ChoiceList)
        modes.set_choices(compute_mode_choices(None), "mixed")
        self.query_one("#device", ChoiceList).set_choices(device_choices(None, "mixed"))
        self._show_state()
        # After the first frame: these threads would otherwise compete with it for the interpreter.
        self.call_after_refresh(self._start_background_work)

    def _start_background_work(self) -> None:
        post, overrides = self.post_message, self.selection.overrides
        run_in_background(probe_machine, post, name="vega-probe")
        run_in_background(read_profiles, overrides, post, name="vega-profiles")
        run_in_background(watch_profiles, self._stop_watch, post, name="vega-watch-profiles")

    def on_unmount(self) -> None:
        self._stop_watch.set()

    def on_screen_resume(self) -> None:
        # Back from a run: the next run gets a new folder and the plan may have changed.
        if self.flow.phase is Phase.RUNNING:
            self.flow.back_from_run()
            self.start_key = None  # the run just left may be a model to start from now
            self._schedule(data_changed=False)

    # ----------------------------------------------------------------------- results

    @on(ResourcesProbed)
    def _resources_probed(self, message: ResourcesProbed) -> None:
        self.resources, self.probe_error = message.resources, message.error
        if message.error:
            self.notify(message.error, severity="warning")
        self._show_modes()
        self._schedule(data_changed=False)

    @on(ProfilesScanned)
    def _profiles_scanned(self, message: ProfilesScanned) -> None:
        profiles = self.query_one(ProfileList)
        wanted = profiles.value or default_profile_name(message.entries)
        profiles.show_entries(message.entries, wanted)
        self.flow.profiles_read()
        self._profile_selected(profiles.selected_entry)

    @on(ProfilesChanged)
    def _profiles_changed(self) -> None:
        self.start_key = None  # the machine file's [voices] dirs may have changed: list again
        post = self.post_message
        run_in_background(read_profiles, self.selection.overrides, post, name="vega-profiles")

    @on(BackgroundProblem)
    def _background_problem(self, message: BackgroundProblem) -> None:
        self.notify(message.text, severity="warning", timeout=10)

    @on(DataChecked)
    def _data_checked(self, message: DataChecked) -> None:
        if self._tell(self.flow.data_checked, message.generation, message.result, message.error):
            self._scan_start_points()

    @on(StartPointsScanned)
    def _start_points_scanned(self, message: StartPointsScanned) -> None:
        if message.key != self.start_key:
            return
        self.start_key_shown = message.key
        self.query_one(StartFrom).show_found(message.choices, message.key[1])

    @on(PlanReady)
    def _plan_ready(self, message: PlanReady) -> None:
        self._tell(self.flow.planned, message.generation, message.result, message.error)

    # ----------------------------------------------------------------------- user choices

    @on(ChoiceList.Changed, "#profiles")
    def _profile_changed(self) -> None:
        self._profile_selected(self.query_one(ProfileList).selected_entry)

    @on(ChoiceList.Changed, "#compute-mode")
    def _compute_mode_changed(self, event: ChoiceList.Changed) -> None:
        self.selection.compute_mode = event.value
        self._show_devices()
        self._schedule(data_changed=False)

    @on(StartFrom.Changed)
    def _use_start_point(self, event: StartFrom.Changed) -> None:
        # A typed path's check began or ended.
        self._tell(self.flow.start_point_checked, event.problem)
        if event.value != self.selection.init_from:
            self.selection.init_from = event.value
            self._schedule(data_changed=False)

    @on(ChoiceList.Changed, "#device")
    @on(ChoiceList.Changed, "#processes")
    def _device_changed(self) -> None:
        self._show_devices()  # a chosen GPU allows one process: the process list follows it
        self._schedule(data_changed=False)

    @on(ChoiceList.Changed, "#data-mode")
    def _data_mode_changed(self, event: ChoiceList.Changed) -> None:
        self.selection.data_mode = event.value
        self._schedule(data_changed=True)

    @on(Input.Changed, "#data-folder")
    def _data_folder_changed(self, event: Input.Changed) -> None:
        if event.value.strip() != self.selection.data_folder:
            self.selection.data_folder = event.value.strip()
            self._schedule(data_changed=True)

    @on(ChoiceList.Confirmed)
    @on(StartFrom.Confirmed)
    @on(Input.Submitted, "#data-folder")
    def _go_to_start(self) -> None:
        """Enter in a list, the folder field or a good typed path accepts it, moves on to Start."""
        start = self.query_one("#start", Button)
        if not start.disabled:
            start.focus()

    @on(Button.Pressed, "#start")
    def _start_pressed(self) -> None:
        self.action_start()

    def _profile_selected(self, entry: ProfileEntry | None) -> None:
        """Follow the profile's defaults for each choice the user has not changed; re-check."""
        old = profile_defaults(self.selection.profile)
        new = profile_defaults(entry)
        self.selection.profile = entry
        if new is not None:
            self._follow_defaults(old, new)
        self._show_modes()
        self._schedule(data_changed=True)

    def _follow_defaults(self, old: dict[str, str] | None, new: dict[str, str]) -> None:
        current = {
            "compute-mode": self.selection.compute_mode,
            "data-mode": self.selection.data_mode,
            "data-folder": self.selection.data_folder,
        }
        for key, value in new.items():
            if old is None or current[key] == old[key] or current[key] in (None, ""):
                self._set_choice(key, value)

    def _set_choice(self, key: str, value: str) -> None:
        if key == "data-folder":
            self.selection.data_folder = value
            self.query_one("#data-folder", Input).value = value
        elif key == "data-mode":
            self.selection.data_mode = value
            self.query_one("#data-mode", ChoiceList).select(value)
        else:
            self.selection.compute_mode = value

    # ----------------------------------------------------------------------- showing state

    def _show_modes(self) -> None:
        """Compute modes as the trainer's policy would pick them here, for this profile's GPU
        memory floor."""
        from trainer_core.contract.resources import describe_modes

        entry = self.selection.profile
        min_gb = entry.profile.compute.min_gpu_memory_gb if entry and entry.profile else 2.0
        resources = self.resources
        self.modes = describe_modes(resources, min_gb) if resources is not None else None
        modes = self.query_one("#compute-mode", ChoiceList)
        wanted = self.selection.compute_mode or "mixed"
        modes.set_choices(compute_mode_choices(self.modes, self.probe_error or ""), wanted)
        if resources is not None and modes.value != wanted:
            text = f"compute mode {wanted} is not available here; using {modes.value}"
            self.notify(text, severity="warning")
        self.selection.compute_mode = modes.value
        self._show_devices()

    def _show_devices(self) -> None:
        devices = self.query_one("#device", ChoiceList)
        choices = device_choices(self.resources, self.selection.compute_mode or "mixed")
        devices.set_choices(choices, devices.value or self.selection.device)
        self.selection.device = devices.value or AUTO_DEVICE
        processes, mode = self.query_one(ProcessList), self.selection.compute_mode or "mixed"
        count = processes.count
        self.selection.nproc = processes.show(self.resources, mode, self.selection.device, count)

    def _show_state(self) -> None:
        """Show what the flow holds: the preflight, the data detection, Start and its reason."""
        self._show_preflight()
        self._show_detection()
        reason = self.flow.reason
        start = self.query_one("#start", Button)
        start.disabled = reason is not None
        if not start.disabled and self.focused is None:
            start.focus()  # Start lost the focus while it was disabled: Enter starts again
        self.query_one("#start-why", Static).update(self.flow.start_line)
        self.query_one("#start-why", Static).set_class(reason is not None, "-problem")
        self.refresh_bindings()

    def _show_preflight(self) -> None:
        view, panel = self.flow.preflight, self.query_one(PreflightPanel)
        if view == self._preflight_shown:
            return  # the same thing again: keep the rendered plan
        self._preflight_shown = view
        if view.plan is not None and self.flow.plan.result is not None:
            panel.show_plan(self.flow.plan.result)
        elif view.problem is not None:
            panel.show_problem(*view.problem)
        else:
            panel.show_waiting(view.waiting)

    def _show_detection(self) -> None:
        detect, data = self.query_one("#data-detect", Static), self.flow.data
        detect.set_class(data.error is not None, "-problem")
        if not self.selection.data_folder:
            detect.update("no data folder chosen")
        elif data.error is not None:
            detect.update(f"✗ {data.error}")
        elif data.result is not None:
            detect.update(detection_text(data.result))
        else:
            detect.update("checking the data folder…")

    # ----------------------------------------------------------------------- checks

    def _tell(self, event: Callable[..., _T], *args: Any) -> _T:
        """Tell the flow what happened, then act on where it went and show it."""
        before = self.flow.phase
        answer = event(*args)
        if before is Phase.WAITING and self.flow.phase is Phase.BLOCKED:
            self.notify(self.flow.reason or "", title="Cannot start", severity="error")
        if self.flow.phase is Phase.STARTING:
            self._spawn()
        self._show_state()
        return answer

    def _schedule(self, data_changed: bool) -> None:
        """Forget the plan now; run the checks once the choices have settled."""
        problem = selection_problem(self.selection, self.flow.profiles_known)
        self._tell(self.flow.choices_changed, problem, data_changed)
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(DEBOUNCE_S, self._run_checks)

    def _scan_start_points(self) -> None:
        """List models to start from (on a thread) when the runs folder or the profile's model
        kind changed."""
        entry = self.selection.profile
        if entry is not None and entry.profile is not None:
            key = start_points_key(entry.profile, self.selection.data_mode, self.flow.data.result)
            if key != self.start_key:
                self.start_key = key
                post = self.post_message
                run_in_background(post_start_points, key, post, name="vega-start-points")

    def _run_checks(self) -> None:
        """The data check and the dry run the flow says are due, each on its own thread."""
        self._timer = None
        self._scan_start_points()
        folder, entry, post = self.selection.data_folder, self.selection.profile, self.post_message
        if folder and (generation := self.flow.data_check_due()) is not None:
            argv = check_data_argv(folder, self.selection.data_mode or "auto", entry)
            args = (DataChecked, generation, argv, post)
            run_in_background(run_check, *args, name="vega-check-data")
        if (generation := self.flow.plan_due()) is not None:
            argv = self.selection.argv(None, dry_run=True)
            run_in_background(run_check, PlanReady, generation, argv, post, name="vega-dry-run")

    # ----------------------------------------------------------------------- actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "start":
            if getattr(self.app, "read_only", False):
                return False
            return self.flow.reason is None or None  # None: shown dimmed in the footer
        return True

    def action_start(self) -> None:
        reason = self.flow.reason
        if getattr(self.app, "read_only", False):  # the Start button calls this directly
            self.notify(read_only.notice("start"), severity="warning")
        elif reason is not None:
            self.notify(reason, title="Cannot start", severity="error")
        elif self.flow.allows("press_start"):
            self._tell(self.flow.press_start)
            if self.flow.phase is Phase.WAITING:
                self.notify("starting as soon as the plan is ready…")

    def _spawn(self) -> None:
        from vega_tui.runner import TrainerProcess

        plan = self.flow.plan.result
        assert plan is not None  # the flow starts only with a plan
        runs, name = run_folder_parts(plan)
        try:
            run_dir = propose_run_dir(runs, name)
            process = TrainerProcess.spawn(self.selection.argv(run_dir, dry_run=False), run_dir)
        except (VegaError, OSError) as exc:
            self.flow.start_failed()
            text = f"could not start the trainer: {exc}"
            self.notify(text, title="Start failed", severity="error")
            return
        self.flow.started()
        self.app.open_run(run_dir, process)  # type: ignore[attr-defined]

    def action_runs(self) -> None:
        self.app.open_runs()  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------------------- helpers


def _section(title: str, *children: Any, id: str | None = None, scroll: bool = False) -> Widget:
    """A titled part of the screen; `scroll`: it scrolls on its own when its content is taller."""
    section: Widget
    if scroll:
        section = VerticalScroll(*children, classes="section", id=id, can_focus=False)
    else:
        section = Vertical(*children, classes="section", id=id)
    section.border_title = title
    return section
