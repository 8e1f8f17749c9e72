"""The runs list: a row per run folder (mark, state, results, disk use, tags, what is wrong).

Rows are keyed by the run folder's path. A listing of the same runs updates the cells in place (the
cursor and scroll stay put); a different set rebuilds the rows, keeping the cursor on its run.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from rich.text import Text
from textual.widgets import DataTable

from trainer_core.contract.units import format_bytes, format_duration, format_number
from vega_tui.run_summary import RunSummary

STATUS_STYLES = {
    "live": "bold green",
    "stopped": "yellow",
    "failed": "bold red",
    "crashed": "bold red",
    "empty": "dim",
}
COLUMNS = (
    ("mark", " "),
    ("run", "run"),
    ("status", "status"),
    ("profile", "profile"),
    ("step", "step"),
    ("best", "best val"),
    ("loss", "last loss"),
    ("time", "time"),
    ("disk", "disk"),
    ("tags", "tags · problems"),
)
Runs = Mapping[str, RunSummary]  # keyed by the run folder's path, in the order shown
Sizes = Mapping[str, int]  # bytes of each run folder, keyed by path
MEASURING = "…"  # a disk cell before its folder was measured


def run_cells(run: RunSummary, marked: bool, size: int | None = None) -> dict[str, str | Text]:
    """One table row, keyed by column; a problem shows in red after the tags."""
    about = Text(" ".join(f"#{tag}" for tag in run.tags), style="cyan")
    if run.problem:
        about.append((" " if run.tags else "") + f"⚠ {run.problem}", style="bold red")
    return {
        "mark": Text("●", style="bold cyan") if marked else Text(" "),
        "run": run.name,
        "status": Text(run.status, style=STATUS_STYLES.get(run.status, "")),
        "profile": run.profile or "-",
        "step": str(run.step) if run.step is not None else "-",
        "best": format_number(run.best_val_loss),
        "loss": format_number(run.final_loss),
        "time": format_duration(run.duration_s),
        "disk": format_bytes(size) if size is not None else MEASURING,
        "tags": about,
    }


class RunTable(DataTable[str | Text]):
    """The runs under one root, one row each, keyed by path."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    def show_runs(self, runs: Runs, marked: Collection[str], sizes: Sizes) -> bool:
        """Show `runs` (path -> summary, in order); True when the set of rows changed."""
        keys = list(runs)
        if keys == [str(row.value) for row in self.rows]:
            for key in keys:
                for column, value in run_cells(runs[key], key in marked, sizes.get(key)).items():
                    self.update_cell(key, column, value, update_width=True)
            return False
        cursor_key = self.cursor_key()
        self.clear()
        for key in keys:
            self.add_row(*run_cells(runs[key], key in marked, sizes.get(key)).values(), key=key)
        if cursor_key is not None and cursor_key in runs:
            self.move_cursor(row=self.get_row_index(cursor_key))
        return True

    def show_mark(self, key: str, marked: bool) -> None:
        self.update_cell(key, "mark", Text("●", style="bold cyan") if marked else Text(" "))

    def show_sizes(self, sizes: Mapping[str, int]) -> None:
        row_keys = {str(row.value) for row in self.rows}
        for key, size in sizes.items():
            if key in row_keys:
                self.update_cell(key, "disk", format_bytes(size), update_width=True)

    def cursor_key(self) -> str | None:
        """The path of the run under the cursor, or None."""
        if not self.row_count:
            return None
        try:
            return str(self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value)
        except Exception:  # the cursor can point past a table that just shrank
            return None
