"""The runs screen: every run under the runs root, its state, results, disk use and loss curves.

Listing (`vega_tui.run_summary.list_runs`, reading only the head and tail of each log), loading
curves, measuring folders and every file operation happen on background threads
(`vega_tui.screens.runs_workers`) that post messages; the list refreshes every few seconds so live
runs move on their own. Space marks runs: their loss curves are overlaid here (with none marked, the
run under the cursor), and `v` compares two or more side by side (`vega_tui.screens.compare`). `e`
edits a run's notes and tags, `x` moves a run that is not live to the trash under the root, `t`
empties the trash. Enter opens a run's dashboard (a live run reattaches with its controls).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Static
from textual_plotext import PlotextPlot

from trainer_core.contract.profile_loader import display_path
from trainer_core.contract.rundir import TRASH
from trainer_core.contract.units import format_bytes
from vega_tui.run_summary import RunSummary, default_runs_root
from vega_tui.screens import run_in_background
from vega_tui.screens.runs_messages import (
    Curve,
    CurvesLoaded,
    DiskMeasured,
    NotesRead,
    NotesSaved,
    RunsListed,
    RunTrashed,
    TrashEmptied,
    TrashMeasured,
)
from vega_tui.screens.runs_workers import (
    empty_trash,
    measure_disk,
    measure_trash,
    post_curves,
    post_notes,
    post_runs,
    save_notes,
    trash_run,
)
from vega_tui.widgets.run_table import RunTable

REFRESH_S = 2.0
DISK_REFRESH_S = 30.0  # live runs grow: their folders are measured again this often


def _shown_path(path: Path) -> str:
    """Relative to the current folder when inside it (but never just '.'), else absolute."""
    shown = display_path(path)
    return str(path.resolve()) if shown == "." else shown


class RunsScreen(Screen[None]):
    """Runs under one folder: open one, mark several to overlay or compare, annotate, delete."""

    BINDINGS = [
        # Before the table's own Enter, so the footer shows it.
        Binding("enter", "open", "Open", priority=True),
        Binding("space", "mark", "Mark"),
        Binding("c", "clear_marks", "Clear"),
        Binding("v", "compare", "Compare", tooltip="the marked runs side by side (two or more)"),
        Binding("e", "edit_notes", "Notes", tooltip="notes and tags of the run under the cursor"),
        Binding("x", "delete_run", "Delete", tooltip="move the run to the trash (not a live one)"),
        Binding("t", "empty_trash", "Empty trash", tooltip="free the space of the deleted runs"),
        Binding("l", "log_scale", "Log y"),
        Binding("n", "new_run", "New run"),
        Binding("escape", "back", "Back"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, runs_root: Path | None = None) -> None:
        super().__init__()
        self.runs_root = Path(runs_root) if runs_root is not None else default_runs_root()
        self.runs: dict[str, RunSummary] = {}
        self.marked: list[str] = []  # in marking order, so colours stay put as runs are added
        self.log_scale = False
        self.listed_once = False
        self.curve_generation = 0
        self.sizes: dict[str, int] = {}  # bytes of each run folder, as last measured
        self.trash: tuple[int, int] | None = None  # (folders, bytes) in the trash, once measured
        self._measured: dict[str, tuple[float, str]] = {}  # path -> (when, status) measured
        self._measuring = False
        self._plotted: list[str] = []
        self._last_curves: list[Curve] = []
        self._refresh_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static(f"Runs in {_shown_path(self.runs_root)}", id="runs-title")
        yield RunTable(id="runs-table")
        yield PlotextPlot(id="runs-plot")
        yield Static("", id="runs-hint")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(RunTable).focus()
        self._draw([])
        self.action_refresh()
        self._refresh_timer = self.set_interval(REFRESH_S, self.action_refresh)

    def on_screen_suspend(self) -> None:
        if self._refresh_timer is not None:
            self._refresh_timer.pause()  # a run dashboard covers the list: no need to re-read runs

    def on_screen_resume(self) -> None:
        if self._refresh_timer is not None:
            self._refresh_timer.resume()
            self.action_refresh()

    def _in_background(self, job: Callable[..., None], *args: Any) -> None:
        """Run `job(*args, post)` on a daemon thread; it answers with a message to this screen."""
        run_in_background(job, *args, self.post_message, name=f"vega-{job.__name__}")

    # ------------------------------------------------------------------ listing

    def action_refresh(self) -> None:
        self._in_background(post_runs, self.runs_root)

    @on(RunsListed)
    def _show_listed_runs(self, message: RunsListed) -> None:
        if message.runs is None:
            self.query_one("#runs-hint", Static).update(Text(message.error or "", style="red"))
            return
        self.runs = {str(run.path): run for run in message.runs}
        self.marked = [key for key in self.marked if key in self.runs]
        changed = self.query_one(RunTable).show_runs(self.runs, self.marked, self.sizes)
        self.listed_once = True
        self._show_hint()
        self._measure_disk()
        # Live runs grow: their curves are reloaded at every refresh, others when the set changes.
        plotted = [self.runs[key] for key in self._plotted if key in self.runs]
        if changed or any(run.status == "live" for run in plotted):
            self._load_curves()

    def _cursor_key(self) -> str | None:
        return self.query_one(RunTable).cursor_key()

    def _show_hint(self) -> None:
        run = self.runs.get(self._cursor_key() or "")
        if not self.runs:
            text = Text(f"No runs in {_shown_path(self.runs_root)} yet: press n to start one.")
        elif run is not None and run.problem:
            text = Text(f"{run.name}: {run.problem}", style="red")
        elif self.marked:
            text = Text(f"{len(self.marked)} marked: loss curves overlaid; v compares them.")
        else:
            text = Text("Enter opens a run. Space marks runs to compare; e notes, x deletes.")
        self.query_one("#runs-hint", Static).update(text)

    def _show_title(self) -> None:
        title = f"Runs in {_shown_path(self.runs_root)}"
        if self.sizes:
            title += f" · {format_bytes(sum(self.sizes.get(key, 0) for key in self.runs))}"
        if self.trash is not None and self.trash[0]:
            folders, size = self.trash
            title += f" · trash: {folders} run(s), {format_bytes(size)} (t empties it)"
        self.query_one("#runs-title", Static).update(title)

    # ------------------------------------------------------------------ disk use

    def _measure_disk(self) -> None:
        """Measure new folders, live ones every DISK_REFRESH_S and those whose state changed (a run
        that just finished wrote its last checkpoint); one job at a time."""
        if self._measuring:
            return
        now = time.monotonic()
        due = [key for key, run in self.runs.items() if self._disk_due(key, run.status, now)]
        if not due and self.trash is not None:
            return
        self._measuring = True
        for key in due:
            self._measured[key] = (now, self.runs[key].status)
        paths = [Path(key) for key in due]
        self._in_background(measure_disk, paths, self.runs_root)

    def _disk_due(self, key: str, status: str, now: float) -> bool:
        when, measured_status = self._measured.get(key, (-DISK_REFRESH_S, ""))
        return measured_status != status or (status == "live" and now - when > DISK_REFRESH_S)

    @on(DiskMeasured)
    def _show_disk_use(self, message: DiskMeasured) -> None:
        self._measuring = False
        self.sizes.update(message.sizes)
        self.trash = message.trash
        self.query_one(RunTable).show_sizes(message.sizes)
        self._show_title()

    def _forget_size(self, key: str) -> None:
        self.sizes.pop(key, None)
        self._measured.pop(key, None)

    # ------------------------------------------------------------------ curves

    @on(DataTable.RowHighlighted)
    def _follow_cursor(self) -> None:
        self._show_hint()
        if not self.marked:
            self._load_curves()

    def _plot_keys(self) -> list[str]:
        if self.marked:
            return list(self.marked)
        key = self._cursor_key()
        return [key] if key in self.runs else []

    def _load_curves(self) -> None:
        self.curve_generation += 1
        self._plotted = self._plot_keys()
        runs = [self.runs[key] for key in self._plotted]
        self._in_background(post_curves, self.curve_generation, runs)

    @on(CurvesLoaded)
    def _plot_loaded_curves(self, message: CurvesLoaded) -> None:
        if message.generation == self.curve_generation:
            self._draw(message.curves)

    @property
    def plotted_names(self) -> list[str]:
        """Names of the runs whose curves the plot shows now."""
        return [name for name, _xs, _ys in self._last_curves]

    def _draw(self, curves: list[Curve]) -> None:
        plot = self.query_one(PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("training loss" + (" (log scale)" if self.log_scale else ""))
        plt.xlabel("step")
        plt.yscale("log" if self.log_scale else "linear")
        for name, xs, ys in curves:
            points = [(x, y) for x, y in zip(xs, ys, strict=True) if y > 0 or not self.log_scale]
            if points:
                kept_x, kept_y = zip(*points, strict=True)
                plt.plot(list(kept_x), list(kept_y), label=name, marker="braille")
        plot.refresh()
        self._last_curves = curves

    # ------------------------------------------------------------------ open, mark, compare

    @on(DataTable.RowSelected)
    def _open_selected_run(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        key = self._cursor_key()
        if key in self.runs:
            self.app.open_run(Path(key))  # type: ignore[attr-defined]

    def action_mark(self) -> None:
        key = self._cursor_key()
        if key not in self.runs:
            return
        if key in self.marked:
            self.marked.remove(key)
        else:
            self.marked.append(key)
        self.query_one(RunTable).show_mark(key, key in self.marked)
        self._show_hint()
        self._load_curves()

    def action_clear_marks(self) -> None:
        for key in self.marked:
            self.query_one(RunTable).show_mark(key, False)
        self.marked = []
        self._show_hint()
        self._load_curves()

    def action_compare(self) -> None:
        if len(self.marked) < 2:
            self.notify("Mark two or more runs (space) to compare them.", severity="warning")
            return
        from vega_tui.screens.compare import CompareScreen

        self.app.push_screen(CompareScreen([Path(key) for key in self.marked]))

    def action_log_scale(self) -> None:
        self.log_scale = not self.log_scale
        self._draw(self._last_curves)

    # ------------------------------------------------------------------ notes and tags

    def action_edit_notes(self) -> None:
        key = self._cursor_key()
        if key in self.runs:
            self._in_background(post_notes, Path(key))

    @on(NotesRead)
    def _open_notes_editor(self, message: NotesRead) -> None:
        from vega_tui.screens.notes import NotesAnswer, NotesScreen

        def save(answer: NotesAnswer) -> None:
            if answer is not None:
                self._in_background(save_notes, message.run_dir, *answer)

        self.app.push_screen(NotesScreen(message.run_dir.name, message.notes), save)

    @on(NotesSaved)
    def _report_notes_saved(self, message: NotesSaved) -> None:
        if message.error is not None:
            self.notify(message.error, severity="error")
            return
        self.notify(f"Notes on {message.run_dir.name} saved.")
        self.action_refresh()

    # ------------------------------------------------------------------ delete and trash

    def action_delete_run(self) -> None:
        from vega_tui.screens.confirm import ConfirmScreen

        key = self._cursor_key()
        if key not in self.runs:
            return
        run = self.runs[key]
        if run.status == "live":
            self.notify(f"{run.name} is live: stop it first, then delete it.", severity="error")
            return
        size = format_bytes(self.sizes[key]) if key in self.sizes else "its files"
        where = f"{TRASH}/ under the runs folder"
        question = f"Move {run.name} ({size}) to {where}?\nEmpty the trash (t) to free the space."

        def delete(answer: str | None) -> None:
            if answer == "delete":
                self._in_background(trash_run, run.path, self.runs_root)

        choices = [("c", "Cancel", None), ("d", "Delete", "delete")]
        self.app.push_screen(ConfirmScreen(question, choices), delete)

    @on(RunTrashed)
    def _report_trashed_run(self, message: RunTrashed) -> None:
        if message.target is None:
            self.notify(message.error or "not deleted", severity="error")
            return
        key = str(message.run_dir)
        self.marked = [marked for marked in self.marked if marked != key]
        self._forget_size(key)
        self.trash = None  # measured again with the next listing
        self.notify(f"{message.run_dir.name} moved to {_shown_path(message.target)}.")
        self.action_refresh()

    def action_empty_trash(self) -> None:
        self._in_background(measure_trash, self.runs_root)

    @on(TrashMeasured)
    def _confirm_empty_trash(self, message: TrashMeasured) -> None:
        from vega_tui.screens.confirm import ConfirmScreen

        if not message.folders:
            self.notify("The trash is empty.")
            return
        size = format_bytes(message.size)
        question = f"Empty the trash: remove {message.folders} run(s) for good and free {size}?"

        def empty(answer: str | None) -> None:
            if answer == "empty":
                self._in_background(empty_trash, self.runs_root)

        choices = [("c", "Cancel", None), ("e", "Empty", "empty")]
        self.app.push_screen(ConfirmScreen(question, choices), empty)

    @on(TrashEmptied)
    def _report_emptied_trash(self, message: TrashEmptied) -> None:
        self.trash = None
        if message.failed:
            kept = ", ".join(message.failed)
            freed = format_bytes(message.freed)
            self.notify(f"Freed {freed}; could not remove {kept}.", severity="error")
        else:
            self.notify(f"Trash emptied: freed {format_bytes(message.freed)}.")
        self.action_refresh()

    # ------------------------------------------------------------------ navigation

    def action_new_run(self) -> None:
        from vega_tui.screens.launch import LaunchScreen

        below = self.app.screen_stack[-2] if len(self.app.screen_stack) > 1 else None
        if isinstance(below, LaunchScreen):
            self.app.pop_screen()
        else:
            self.app.open_launch()  # type: ignore[attr-defined]

    def action_back(self) -> None:
        self.app.pop_screen()
