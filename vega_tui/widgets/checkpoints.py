"""The checkpoints table: step, training loss at that step, validation loss, best marker, size and
age, plus an info line for the export folder and the actions' hints.

File facts (does the checkpoint still exist, its size on disk, the export folder's contents) are
read by `scan_run_files` in a worker thread; the table only renders what it is given. Ages are
measured against a reference time the screen passes: now for a live run, the run's last event for an
ended one, so a finished run always renders the same.
"""

from __future__ import annotations

import bisect
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from trainer_core.contract.confined_path import PathEscapeError, inside
from trainer_core.contract.rundir import EVENTS
from trainer_core.contract.units import format_bytes, format_duration, format_number
from vega_tui.init_from_view import init_from_lines

if TYPE_CHECKING:
    from textual.app import ComposeResult

    from vega_tui.run_state import CheckpointRow, RunState

CHECKPOINTS_DIR = "checkpoints"
EXPORT_DIR = "export"
PIPER_TOOLTIP = "Write the best checkpoint as a Piper voice (RUN/export/piper/)"


@dataclass(frozen=True)
class FileFacts:
    """What the disk says about one checkpoint file (the path it was found at, after relocation)."""

    path: Path
    exists: bool
    bytes: int | None
    refused: str | None = None
    """Why the recorded name was not followed (it leads out of the run folder), when it was not."""


@dataclass
class RunFiles:
    """Disk facts for a run: checkpoints by step, and the export folder's files (name -> size)."""

    checkpoints: dict[int, FileFacts] = field(default_factory=dict)
    export_dir: Path | None = None
    export_files: dict[str, int] = field(default_factory=dict)


def locate(run_dir: Path, recorded: str | Path, sub: str) -> Path:
    """Where a file the trainer recorded belongs in this run folder: its path below the last
    `sub` folder of the recorded path (`samples/step-00000060/01.wav` keeps its step folder),
    under `run_dir / sub`. The recorded absolute path is not trusted, so a run folder copied or
    moved elsewhere shows its own files. A name that still leads out of `run_dir / sub`
    (through a link) is a PathEscapeError."""
    parts = Path(recorded).parts
    below = parts[len(parts) - parts[::-1].index(sub) :] if sub in parts else parts[-1:]
    if not below or ".." in below:
        below = parts[-1:]
    where = f"{run_dir / EVENTS} (a {sub} file)"
    return inside(run_dir / sub, "/".join(below), field="path", source=where, fix="not opened")


def scan_run_files(run_dir: Path, rows: list[tuple[int, str]]) -> RunFiles:
    """Stat the checkpoints `(step, recorded path)` and list the export
    folder. Blocking: run it in a worker."""
    files = RunFiles()
    for step, recorded in rows:
        try:
            path = locate(run_dir, recorded, CHECKPOINTS_DIR)
        except PathEscapeError as exc:
            files.checkpoints[step] = FileFacts(run_dir / CHECKPOINTS_DIR, False, None, str(exc))
            continue
        try:
            size = path.stat().st_size
        except OSError:
            files.checkpoints[step] = FileFacts(path, False, None)
        else:
            files.checkpoints[step] = FileFacts(path, True, size)
    export_dir = run_dir / EXPORT_DIR
    try:
        entries = sorted(os.scandir(export_dir), key=lambda entry: entry.name)
        files.export_files = {
            entry.name: entry.stat().st_size for entry in entries if entry.is_file()
        }
        files.export_dir = export_dir
    except OSError:
        pass  # no export folder: the run has not reached the end yet
    return files


def loss_at(points: list[tuple[float, float]], step: int) -> float | None:
    """Training loss recorded at `step` (or the last one before it);
    `points` are the loss series' points."""
    index = bisect.bisect_right(points, (step, math.inf)) - 1
    return points[index][1] if index >= 0 else None


def loss_points(state: RunState) -> list[tuple[float, float]]:
    series = state.series.get("loss")
    # a resumed run revisits earlier steps
    return sorted(series.points()) if series is not None else []


def row_cells(
    row: CheckpointRow, loss: float | None, facts: FileFacts | None, reference_t: float | None
) -> list:
    """The table cells for one checkpoint."""
    best = Text("★ best", style="bold green") if row.best else Text("")
    if facts is not None and not facts.exists:
        size = Text("missing", style="dim")
    else:
        size = Text(format_bytes(facts.bytes if facts and facts.bytes is not None else row.bytes))
    age = format_duration(reference_t - row.t) if reference_t is not None and row.t else "—"
    return [str(row.step), format_number(loss), format_number(row.val_loss), best, size, age]


def export_text(files: RunFiles | None, run_dir: Path, ended: bool) -> Text:
    """One line about the export folder: its files, or why there are none."""
    if files is None:
        return Text("export: checking…", style="dim")
    if files.export_files:
        listing = ", ".join(
            f"{name} {format_bytes(size)}" for name, size in files.export_files.items()
        )
        return Text(f"export: {files.export_dir} ({listing})")
    if ended:
        return Text(f"export: no files in {run_dir / EXPORT_DIR}", style="dim")
    return Text("export: none yet (written when the run ends)", style="dim")


class CheckpointTable(DataTable):
    """The table; its bindings show in the footer while it has focus."""

    BINDINGS = [
        Binding("r", "screen.resume_from_selected", "Resume from here"),
        Binding("o", "screen.show_export", "Export"),
        Binding("v", "screen.export_piper", "Export for Piper", tooltip=PIPER_TOOLTIP),
    ]


class CheckpointPanel(Vertical):
    """Table plus an info line (export folder, hints)."""

    DEFAULT_CSS = """
    CheckpointPanel { height: 1fr; }
    CheckpointPanel CheckpointTable { height: 1fr; }
    CheckpointPanel #ckpt-info { height: auto; max-height: 6; padding: 0 1; }
    """

    def __init__(self, run_dir: Path, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.run_dir = run_dir
        self.ended = False
        self.files: RunFiles | None = None
        self._age_header = "age"
        self._signature: tuple = ()
        # what the run started from (train.init_from), shown above the hints
        self._started_from: list[str] = []
        self._vits = False  # a vits run: its hints offer the export for Piper

    def compose(self) -> ComposeResult:
        table = CheckpointTable(id="ckpt-table", cursor_type="row", zebra_stripes=True)
        yield table
        yield Static(id="ckpt-info")

    def on_mount(self) -> None:
        self._add_columns()
        self._show_info()

    @property
    def table(self) -> CheckpointTable:
        return self.query_one(CheckpointTable)

    def _add_columns(self) -> None:
        table = self.table
        table.add_column("step", key="step")
        table.add_column("loss", key="loss")
        table.add_column("val loss", key="val")
        table.add_column("best", key="best")
        table.add_column("size", key="size")
        table.add_column(self._age_header, key="age")

    def update_from(self, state: RunState, reference_t: float | None, ended: bool) -> None:
        """Rebuild the rows when anything they show changed, keeping the
        cursor on the same checkpoint."""
        started_from = init_from_lines(state.init_from)
        vits = (state.task or {}).get("name") == "vits"
        if ended != self.ended or started_from != self._started_from or vits != self._vits:
            self.ended, self._started_from, self._vits = ended, started_from, vits
            self._show_info()
        header = "before end" if ended else "age"
        rows = sorted(state.checkpoints.values(), key=lambda row: row.step)
        points = loss_points(state)
        cells = [
            row_cells(row, loss_at(points, row.step), self._facts(row.step), reference_t)
            for row in rows
        ]
        signature = (header, tuple(tuple(str(c) for c in row) for row in cells))
        if signature == self._signature:
            return
        self._signature = signature
        self._rebuild(header, rows, cells)

    def _rebuild(self, header: str, rows: list[CheckpointRow], cells: list[list]) -> None:
        table = self.table
        selected = self.selected_step()
        if header != self._age_header:
            self._age_header = header
            table.clear(columns=True)
            self._add_columns()
        else:
            table.clear()
        for row, row_cells_ in zip(rows, cells, strict=True):
            table.add_row(*row_cells_, key=str(row.step))
        if selected is not None and str(selected) in {str(row.step) for row in rows}:
            table.move_cursor(row=table.get_row_index(str(selected)))

    def _facts(self, step: int) -> FileFacts | None:
        return self.files.checkpoints.get(step) if self.files else None

    def set_files(self, files: RunFiles) -> None:
        self.files = files
        self._signature = ()  # sizes and missing flags may have changed: rebuild on the next update
        self._show_info()

    def _show_info(self) -> None:
        text = export_text(self.files, self.run_dir, self.ended)
        for number, line in enumerate(self._started_from):
            text.append(f"\n{line}", "" if number == 0 else "dim")
        hints = "r: resume from the selected checkpoint · o: export · s: save now"
        text.append(f"\n{hints}" + (" · v: export for Piper" if self._vits else ""), "dim")
        self.query_one("#ckpt-info", Static).update(text)

    def selected_step(self) -> int | None:
        table = self.table
        if table.row_count == 0:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return int(row_key.value) if row_key.value is not None else None
