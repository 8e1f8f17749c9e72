"""The runs screen: every run under the runs root, its state and results, and their loss curves overlaid.

Listing (`vega_tui.runs.list_runs`, reading only the head and tail of each log) and loading curves
(`vega_tui.runs.loss_curve`) happen on background threads that post messages; the list refreshes
every few seconds so live runs move on their own. Space marks runs to compare; with none marked
the plot shows the run under the cursor. Enter opens a run's dashboard (a live run reattaches with
its controls).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Static
from textual_plotext import PlotextPlot

from trainer_core.contract.profile_loader import display_path
from trainer_core.contract.units import format_duration, format_number
from vega_tui.runs import RunSummary, default_runs_root, list_runs, loss_curve
from vega_tui.screens import run_in_background

REFRESH_S = 2.0
CURVE_POINTS = 400
STATUS_STYLES = {"live": "bold green", "stopped": "yellow", "failed": "bold red", "crashed": "bold red", "empty": "dim"}
COLUMNS = (
    ("mark", " "),
    ("run", "run"),
    ("status", "status"),
    ("profile", "profile"),
    ("step", "step"),
    ("best", "best val"),
    ("loss", "last loss"),
    ("time", "time"),
)

Curve = tuple[str, list[float], list[float]]


class RunsListed(Message):
    def __init__(self, runs: list[RunSummary] | None, error: str | None) -> None:
        super().__init__()
        self.runs, self.error = runs, error


class CurvesLoaded(Message):
    def __init__(self, generation: int, curves: list[Curve]) -> None:
        super().__init__()
        self.generation, self.curves = generation, curves


def run_cells(run: RunSummary, marked: bool) -> dict[str, str | Text]:
    """One table row, keyed by column."""
    return {
        "mark": Text("●", style="bold cyan") if marked else Text(" "),
        "run": run.name,
        "status": Text(run.status, style=STATUS_STYLES.get(run.status, "")),
        "profile": run.profile or "-",
        "step": str(run.step) if run.step is not None else "-",
        "best": format_number(run.best_val_loss),
        "loss": format_number(run.final_loss),
        "time": format_duration(run.duration_s),
    }


def _shown_path(path: Path) -> str:
    """Relative to the current folder when inside it (but never just '.'), else absolute."""
    shown = display_path(path)
    return str(path.resolve()) if shown == "." else shown


def load_curves(runs: Sequence[RunSummary]) -> list[Curve]:
    """Loss curves of `runs` (blocking: call it from a background thread); unreadable runs are left out."""
    curves: list[Curve] = []
    for run in runs:
        try:
            xs, ys = loss_curve(run.path, max_points=CURVE_POINTS)
        except (OSError, ValueError):
            continue
        if xs:
            curves.append((run.name, list(xs), list(ys)))
    return curves


class RunsScreen(Screen[None]):
    """Runs under one folder; open one, or mark several and compare their loss curves."""

    BINDINGS = [
        Binding("enter", "open", "Open", priority=True),  # before the table's own Enter, so the footer shows it
        Binding("space", "mark", "Mark"),
        Binding("c", "clear_marks", "Clear"),
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
        self._plotted: list[str] = []
        self._last_curves: list[Curve] = []
        self._refresh_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static(f"Runs in {_shown_path(self.runs_root)}", id="runs-title")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield PlotextPlot(id="runs-plot")
        yield Static("", id="runs-hint")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        table.focus()
        self._draw([])
        self.action_refresh()
        self._refresh_timer = self.set_interval(REFRESH_S, self.action_refresh)

    def on_screen_suspend(self) -> None:
        if self._refresh_timer is not None:
            self._refresh_timer.pause()  # a run dashboard covers the list: no need to re-read every run

    def on_screen_resume(self) -> None:
        if self._refresh_timer is not None:
            self._refresh_timer.resume()
            self.action_refresh()

    # ------------------------------------------------------------------ listing

    def action_refresh(self) -> None:
        run_in_background(self._list_runs, name="vega-list-runs")

    def _list_runs(self) -> None:
        try:
            runs = list_runs(self.runs_root) if self.runs_root.is_dir() else []
        except OSError as exc:
            self.post_message(RunsListed(None, f"cannot read {self.runs_root}: {exc}"))
            return
        self.post_message(RunsListed(runs, None))

    @on(RunsListed)
    def _runs_listed(self, message: RunsListed) -> None:
        if message.runs is None:
            self.query_one("#runs-hint", Static).update(Text(message.error or "", style="red"))
            return
        changed = self._show_runs(message.runs)
        self.listed_once = True
        self._show_hint()
        # Live runs grow: their curves are reloaded on every refresh, finished ones only when the set changes.
        if changed or any(self.runs[key].status == "live" for key in self._plotted if key in self.runs):
            self._load_curves()

    def _show_runs(self, runs: list[RunSummary]) -> bool:
        """Update the table in place when the same runs are listed, else rebuild it; True when the set changed."""
        table = self.query_one(DataTable)
        keys = [str(run.path) for run in runs]
        self.runs = dict(zip(keys, runs, strict=True))
        self.marked = [key for key in self.marked if key in self.runs]
        if keys == [str(row.value) for row in table.rows]:
            for key in keys:
                for column, value in run_cells(self.runs[key], key in self.marked).items():
                    table.update_cell(key, column, value)
            return False
        cursor_key = self._cursor_key()
        table.clear()
        for key in keys:
            table.add_row(*run_cells(self.runs[key], key in self.marked).values(), key=key)
        if cursor_key in self.runs:
            table.move_cursor(row=table.get_row_index(cursor_key))
        return True

    def _cursor_key(self) -> str | None:
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        try:
            return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        except Exception:  # the cursor can point past a table that just shrank
            return None

    def _show_hint(self) -> None:
        if not self.runs:
            text = f"No runs in {_shown_path(self.runs_root)} yet: press n to start one."
        elif self.marked:
            text = f"{len(self.marked)} marked: their loss curves are overlaid. Space marks or unmarks, c clears."
        else:
            text = "Enter opens a run (live runs reattach). Space marks runs to compare their loss curves."
        self.query_one("#runs-hint", Static).update(text)

    # ------------------------------------------------------------------ curves

    @on(DataTable.RowHighlighted)
    def _row_highlighted(self) -> None:
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
        run_in_background(self._curves_worker, self.curve_generation, runs, name="vega-curves")

    def _curves_worker(self, generation: int, runs: list[RunSummary]) -> None:
        self.post_message(CurvesLoaded(generation, load_curves(runs)))

    @on(CurvesLoaded)
    def _curves_loaded(self, message: CurvesLoaded) -> None:
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
                plt.plot([p[0] for p in points], [p[1] for p in points], label=name, marker="braille")
        plot.refresh()
        self._last_curves = curves

    # ------------------------------------------------------------------ actions

    @on(DataTable.RowSelected)
    def _row_selected(self) -> None:
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
        self.query_one(DataTable).update_cell(key, "mark", run_cells(self.runs[key], key in self.marked)["mark"])
        self._show_hint()
        self._load_curves()

    def action_clear_marks(self) -> None:
        for key in self.marked:
            self.query_one(DataTable).update_cell(key, "mark", Text(" "))
        self.marked = []
        self._show_hint()
        self._load_curves()

    def action_log_scale(self) -> None:
        self.log_scale = not self.log_scale
        self._draw(self._last_curves)

    def action_new_run(self) -> None:
        from vega_tui.screens.launch import LaunchScreen

        below = self.app.screen_stack[-2] if len(self.app.screen_stack) > 1 else None
        if isinstance(below, LaunchScreen):
            self.app.pop_screen()
        else:
            self.app.open_launch()  # type: ignore[attr-defined]

    def action_back(self) -> None:
        self.app.pop_screen()
