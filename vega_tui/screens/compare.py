"""Marked runs side by side: validation losses and free-running distances overlaid (one chart
each, a legend naming the runs), then the settings their frozen profiles disagree on.

What it shows is read on a background thread (`vega_tui.run_compare.compare_runs`); the charts are
the run dashboard's `RunChart`, fed a `ChartData` with one line per run.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from vega_tui.run_compare import Comparison, RunCurves
from vega_tui.screens import run_in_background
from vega_tui.screens.runs_messages import ComparisonLoaded
from vega_tui.screens.runs_workers import post_comparison
from vega_tui.widgets.chart_data import ChartData, Line
from vega_tui.widgets.charts import RunChart

# One colour per run, in marking order; plotext's names.
RUN_COLORS = ("cyan", "magenta", "yellow", "green", "red", "blue", "white", "orange")
CELL_CHARS = 40  # a longer value (a data path) is cut in the middle so every run's column fits


def cell(value: str) -> str:
    """A profile value as the diff table shows it: long ones cut in the middle."""
    if len(value) <= CELL_CHARS:
        return value
    half = (CELL_CHARS - 1) // 2
    return f"{value[:half]}…{value[-half:]}"


def overlay(title: str, curves: list[RunCurves], which: str, log_y: bool = False) -> ChartData:
    """A line per run with points in `which` ("validation" or "free_running"), labelled by name."""
    lines = []
    for index, run in enumerate(curves):
        xs, ys = getattr(run, which)
        if log_y:
            xs, ys = [x for x, y in zip(xs, ys, strict=True) if y > 0], [y for y in ys if y > 0]
        if xs:
            lines.append(Line(run.name, list(xs), list(ys), RUN_COLORS[index % len(RUN_COLORS)]))
    return ChartData(title, lines, log_y=log_y)


def summary_lines(comparison: Comparison) -> list[str]:
    """The lines under the charts: how many settings differ, runs with no curve, problems."""
    count = len(comparison.diff)
    if comparison.profiles_read < 2:
        lines = ["Fewer than two frozen profiles could be read: no settings to compare"]
    elif count:
        lines = [f"{count} settings differ between their frozen profiles"]
    else:
        lines = ["Their frozen profiles are the same"]
    for which, what in (
        ("validation", "validation losses"),
        ("free_running", "free-running scores"),
    ):
        without = [run.name for run in comparison.curves if not getattr(run, which)[0]]
        if without and len(without) < len(comparison.curves):
            lines.append(f"No {what} from {', '.join(without)}")
    return lines + [f"⚠ {problem}" for problem in comparison.problems]


class CompareScreen(Screen[None]):
    """The runs in `run_dirs` (two or more), compared."""

    BINDINGS = [
        Binding("l", "log_scale", "Log y"),
        Binding("escape", "back", "Back"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, run_dirs: list[Path]) -> None:
        super().__init__()
        self.run_dirs = list(run_dirs)
        self.comparison: Comparison | None = None
        self.log_scale = False

    def compose(self) -> ComposeResult:
        names = ", ".join(path.name for path in self.run_dirs)
        yield Static(f"Comparing {names}", id="compare-title", markup=False)
        with Horizontal(id="compare-charts"):
            yield RunChart("validation", id="compare-validation")
            yield RunChart("free_running", id="compare-free-running")
        yield Static("Reading the runs…", id="compare-summary", markup=False)
        yield DataTable(id="compare-diff", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#compare-diff", DataTable)
        table.add_column("setting", key="setting")
        for index, path in enumerate(self.run_dirs):
            color = RUN_COLORS[index % len(RUN_COLORS)]
            table.add_column(Text(path.name, style=color), key=str(index))
        run_in_background(post_comparison, self.run_dirs, self.post_message, name="vega-compare")

    @on(ComparisonLoaded)
    def _show_comparison(self, message: ComparisonLoaded) -> None:
        comparison = self.comparison = message.comparison
        self._draw_charts()
        table = self.query_one("#compare-diff", DataTable)
        table.clear()
        for key, values in comparison.diff.items():
            table.add_row(key, *map(cell, values), key=key)
        self.query_one("#compare-summary", Static).update("\n".join(summary_lines(comparison)))

    def _draw_charts(self) -> None:
        if self.comparison is None:
            return
        curves, log_y = self.comparison.curves, self.log_scale
        validation = overlay("validation loss", curves, "validation", log_y)
        self.query_one("#compare-validation", RunChart).draw(validation)
        free = overlay("free-running distance", curves, "free_running", log_y)
        self.query_one("#compare-free-running", RunChart).draw(free)

    @property
    def diff_rows(self) -> dict[str, list[str]]:
        """The profile differences shown (setting -> a value per run), as the table holds them."""
        table = self.query_one("#compare-diff", DataTable)
        return {
            str(row[0]): [str(cell) for cell in row[1:]]
            for row in (table.get_row_at(i) for i in range(table.row_count))
        }

    def action_log_scale(self) -> None:
        self.log_scale = not self.log_scale
        self._draw_charts()

    def action_back(self) -> None:
        self.app.pop_screen()
