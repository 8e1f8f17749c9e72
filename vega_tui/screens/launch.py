"""The launch screen: pick a profile, data, compute mode, device and processes per node, read the plan, Start.

Everything slow runs on background threads that only post messages
(`vega_tui.screens.launch_workers`): probing the machine (`trainer_core.contract.resources`,
torch-free), validating profiles, watching the profile folders (watchfiles), scanning the data
folder (`trainer-core check-data --json`) and the preflight plan (`trainer-core train --dry-run
--json`); the "Start from" section (`vega_tui.widgets.start_from`) finds and checks models to
start from the same way. Each check carries a generation number, so a late answer to an outdated
question is dropped. Choices that follow the profile (modes, data folder) keep
following it until the user changes them.

Start-up time matters (the first frame should come in well under a second), so the modules that build
pydantic models (profiles, the event protocol behind `vega_tui.runner`) are imported where first used,
on those threads, after the first frame.

Start spawns the trainer in its own session (`vega_tui.runner.TrainerProcess`) and opens the run
dashboard. The demo profile is preselected and Start has focus, so Enter alone starts a run.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
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
)
from vega_tui.screens.launch_workers import (
    check_data,
    dry_run,
    probe_machine,
    read_profiles,
    watch_profiles,
)
from vega_tui.start_points import post_start_points, start_points_key
from vega_tui.widgets.choice_list import ChoiceList
from vega_tui.widgets.mode_picker import AUTO_DEVICE, compute_mode_choices, data_mode_choices, device_choices
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
        self.resources: MachineResources | None = None
        self.probe_error: str | None = None
        self.modes: dict[str, DeviceChoice | str] | None = None
        self.data_report: CheckDataReport | None = None
        self.data_error: str | None = None
        self.plan: PlanReport | None = None
        self.plan_error: str | None = None
        self.generation = 0  # bumps on every change: a plan answers one generation
        self.data_generation = 0  # bumps when the data folder, data mode or profile change
        self._data_check_started = -1  # the data generation whose check-data ran (or runs)
        # (runs folder, model kind) the "Start from" list was asked for, and the one it shows.
        self.start_key: tuple[str, str | None] | None = None
        self.start_key_shown: tuple[str, str | None] | None = None
        self._back_from_run = False
        self.start_requested = False
        self.profiles_listed = False
        self._timer: Timer | None = None
        self._stop_watch = threading.Event()

    # ----------------------------------------------------------------------- layout

    def compose(self) -> ComposeResult:
        yield Static("Vega · new training run", id="launch-title")
        with Horizontal(id="launch-body"):
            with VerticalScroll(id="launch-left", can_focus=False):
                yield _section("Profile", ProfileList(id="profiles"))
                folder = Input(id="data-folder", placeholder="path to audio or text", compact=True)
                yield _section("Data folder", folder)
                yield _section("Data mode", ChoiceList(id="data-mode"), Static("", id="data-detect"))
                yield _section("Start from", StartFrom(id="start-from-section"))
            with VerticalScroll(id="launch-right", can_focus=False):
                yield _section("Compute mode", ChoiceList(id="compute-mode"))
                yield _section("Device", ChoiceList(id="device"))
                yield _section("Processes per node", ProcessList(id="processes"))
                yield _section("Preflight", PreflightPanel(id="preflight"))
        with Horizontal(id="start-bar"):
            yield Button("Start ▶", id="start", variant="success", compact=True)
            yield Static("", id="start-why")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#data-mode", ChoiceList).set_choices(data_mode_choices(), "auto")
        self.query_one("#compute-mode", ChoiceList).set_choices(compute_mode_choices(None), "mixed")
        self.query_one("#device", ChoiceList).set_choices(device_choices(None, "mixed"))
        self.query_one(PreflightPanel).show_waiting("reading profiles and this machine…")
        self._update_start()
        # After the first frame: these threads would otherwise compete with it for the interpreter.
        self.call_after_refresh(self._start_background_work)

    def _start_background_work(self) -> None:
        post = self.post_message
        run_in_background(probe_machine, post, name="vega-probe")
        run_in_background(read_profiles, self.selection.overrides, post, name="vega-profiles")
        run_in_background(watch_profiles, self._stop_watch, post, name="vega-watch-profiles")

    def on_unmount(self) -> None:
        self._stop_watch.set()

    def on_screen_resume(self) -> None:
        # Back from a run: the next run gets a new folder and the plan may have changed (free memory, data).
        if self._back_from_run and self.selection.profile is not None:
            self._back_from_run = False
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
        self.profiles_listed = True
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
        if message.generation != self.data_generation:
            return
        self.data_report, self.data_error = message.report, message.error
        self._show_detection()
        self._update_start()
        self._scan_start_points()

    @on(StartPointsScanned)
    def _start_points_scanned(self, message: StartPointsScanned) -> None:
        if message.key != self.start_key:
            return
        self.start_key_shown = message.key
        self.query_one(StartFrom).show_found(message.choices, message.key[1])

    @on(PlanReady)
    def _plan_ready(self, message: PlanReady) -> None:
        if message.generation != self.generation:
            return
        self.plan, self.plan_error = message.plan, message.error
        panel = self.query_one(PreflightPanel)
        if message.plan is not None:
            panel.show_plan(message.plan)
        else:
            panel.show_problem("The trainer would not start:", message.error or "unknown error")
        self._update_start()
        if self.start_requested:
            self.start_requested = False
            self.action_start()

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
        if event.value != self.selection.init_from:
            self.selection.init_from = event.value
            self._schedule(data_changed=False)
        else:
            self._update_start()  # the typed path's check started or ended

    @on(ChoiceList.Changed, "#device")
    @on(ChoiceList.Changed, "#processes")
    def _device_changed(self) -> None:
        self._show_devices()  # a chosen GPU allows one process: the process list follows the device
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
        """Follow the profile's defaults for every choice the user has not changed, then re-check."""
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
        """Compute modes as the trainer's policy would pick them here, for this profile's GPU memory floor."""
        from trainer_core.contract.resources import describe_modes

        entry = self.selection.profile
        min_gb = entry.profile.compute.min_gpu_memory_gb if entry and entry.profile else 2.0
        self.modes = describe_modes(self.resources, min_gb) if self.resources is not None else None
        modes = self.query_one("#compute-mode", ChoiceList)
        wanted = self.selection.compute_mode or "mixed"
        modes.set_choices(compute_mode_choices(self.modes, self.probe_error or ""), wanted)
        if self.resources is not None and modes.value != wanted:
            self.notify(f"compute mode {wanted} is not available here; using {modes.value}", severity="warning")
        self.selection.compute_mode = modes.value
        self._show_devices()

    def _show_devices(self) -> None:
        devices = self.query_one("#device", ChoiceList)
        choices = device_choices(self.resources, self.selection.compute_mode or "mixed")
        devices.set_choices(choices, devices.value or self.selection.device)
        self.selection.device = devices.value or AUTO_DEVICE
        processes, mode = self.query_one(ProcessList), self.selection.compute_mode or "mixed"
        self.selection.nproc = processes.show(self.resources, mode, self.selection.device, processes.count)

    def _show_detection(self) -> None:
        detect = self.query_one("#data-detect", Static)
        detect.set_class(self.data_error is not None, "-problem")
        if not self.selection.data_folder:
            detect.update("no data folder chosen")
        elif self.data_error is not None:
            detect.update(f"✗ {self.data_error}")
        elif self.data_report is not None:
            detect.update(detection_text(self.data_report))
        else:
            detect.update("checking the data folder…")

    def _update_start(self) -> None:
        reason = self._blocked_reason()
        start = self.query_one("#start", Button)
        start.disabled = reason is not None
        if not start.disabled and self.focused is None:
            start.focus()  # Start lost the focus while it was disabled: give it back, Enter starts again
        waiting = reason is None and self.plan is None
        ready = "Enter or s: start training"
        why = reason or ("preparing the plan… (Start now and it begins when ready)" if waiting else ready)
        self.query_one("#start-why", Static).update(why)
        self.query_one("#start-why", Static).set_class(reason is not None, "-problem")
        self.refresh_bindings()

    def _blocked_reason(self) -> str | None:
        """Why Start cannot run now, or None (also None while the plan is still being computed)."""
        entry = self.selection.profile
        if entry is None and self.profiles_listed:
            return "no profile selected (none found in the profile folders)"
        if entry is None:
            return None  # still reading the profile folders
        if not entry.valid:
            return f"profile {entry.name} is invalid: {entry.errors[0] if entry.errors else 'see above'}"
        if not self.selection.data_folder:
            return "choose a data folder"
        if self.data_error is not None:
            return f"data folder: {self.data_error}"
        if (start_problem := self.query_one(StartFrom).problem) is not None:
            return start_problem
        if self.plan_error is not None:
            return self.plan_error
        return None

    # ----------------------------------------------------------------------- checks

    def _schedule(self, data_changed: bool) -> None:
        """Invalidate the plan now; run the checks once the choices have settled."""
        self.generation += 1
        self.plan, self.plan_error = None, None
        if data_changed:
            self.data_generation += 1
            self.data_report, self.data_error = None, None
            self._show_detection()
        entry = self.selection.profile
        if entry is not None and not entry.valid:
            self._show_invalid_profile(entry)  # nothing to compute: say why at once
        else:
            self.query_one(PreflightPanel).show_waiting()
        self._update_start()
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(DEBOUNCE_S, self._run_checks)

    def _scan_start_points(self) -> None:
        """List models to start from (on a thread) when the runs folder or the profile's model kind changed."""
        entry = self.selection.profile
        if entry is not None and entry.profile is not None:
            key = start_points_key(entry.profile, self.selection.data_mode, self.data_report)
            if key != self.start_key:
                self.start_key = key
                run_in_background(post_start_points, key, self.post_message, name="vega-start-points")

    def _run_checks(self) -> None:
        entry, folder = self.selection.profile, self.selection.data_folder
        self._scan_start_points()
        if folder and self._data_check_started != self.data_generation:
            self._data_check_started = self.data_generation
            argv = check_data_argv(folder, self.selection.data_mode or "auto", entry)
            args = (self.data_generation, argv, self.post_message)
            run_in_background(check_data, *args, name="vega-check-data")
        if entry is None and not self.profiles_listed:
            return  # the profile list will schedule the checks again when it arrives
        if entry is None or not entry.valid:
            self._show_invalid_profile(entry)
            return
        if not folder:
            self.query_one(PreflightPanel).show_problem("No data folder", "type the path of your audio or text folder")
            return
        argv = self.selection.argv(None, dry_run=True)
        run_in_background(dry_run, self.generation, argv, self.post_message, name="vega-dry-run")

    def _show_invalid_profile(self, entry: ProfileEntry | None) -> None:
        from trainer_core.contract.profile_loader import config_dir, display_path

        panel = self.query_one(PreflightPanel)
        if entry is None:
            panel.show_problem("No profile", "put a .toml profile in " + display_path(config_dir() / "profiles"))
        else:
            panel.show_problem(f"Profile {entry.name} is invalid ({display_path(entry.path)}):", entry.error_text)
        self._update_start()

    # ----------------------------------------------------------------------- actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "start":
            if getattr(self.app, "read_only", False):
                return False
            return self._blocked_reason() is None or None  # None: shown dimmed in the footer
        return True

    def action_start(self) -> None:
        reason = self._blocked_reason()
        if getattr(self.app, "read_only", False):  # the Start button calls this directly
            self.notify(read_only.notice("start"), severity="warning")
        elif reason is not None:
            self.notify(reason, title="Cannot start", severity="error")
        elif self.plan is None:
            self.start_requested = True
            self.notify("starting as soon as the plan is ready…")
        else:
            self._spawn(self.plan)

    def _spawn(self, plan: PlanReport) -> None:
        from vega_tui.runner import TrainerProcess

        runs, name = run_folder_parts(plan)
        run_dir = propose_run_dir(runs, name)
        try:
            process = TrainerProcess.spawn(self.selection.argv(run_dir, dry_run=False), run_dir)
        except (VegaError, OSError) as exc:
            self.notify(f"could not start the trainer: {exc}", title="Start failed", severity="error")
            return
        self._back_from_run = True
        self.app.open_run(run_dir, process)  # type: ignore[attr-defined]

    def action_runs(self) -> None:
        self.app.open_runs()  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------ helpers


def _section(title: str, *children: Any) -> Vertical:
    section = Vertical(*children, classes="section")
    section.border_title = title
    return section
