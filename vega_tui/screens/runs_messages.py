"""Messages the runs screen's background jobs (`vega_tui.screens.runs_workers`) post to it and to
the comparison screen; a handler applies each on the app thread, no job touches a widget."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from vega_tui.run_compare import Comparison
    from vega_tui.run_notes import RunNotes
    from vega_tui.run_summary import RunSummary

Post = Callable[[Message], bool]
Curve = tuple[str, list[float], list[float]]


class RunsListed(Message):
    def __init__(self, runs: list[RunSummary] | None, error: str | None) -> None:
        super().__init__()
        self.runs, self.error = runs, error


class CurvesLoaded(Message):
    def __init__(self, generation: int, curves: list[Curve]) -> None:
        super().__init__()
        self.generation, self.curves = generation, curves


class DiskMeasured(Message):
    """Bytes of some run folders (keyed by path) and what the trash holds: (folders, bytes)."""

    def __init__(self, sizes: dict[str, int], trash: tuple[int, int]) -> None:
        super().__init__()
        self.sizes, self.trash = sizes, trash


class NotesRead(Message):
    def __init__(self, run_dir: Path, notes: RunNotes) -> None:
        super().__init__()
        self.run_dir, self.notes = run_dir, notes


class NotesSaved(Message):
    def __init__(self, run_dir: Path, error: str | None) -> None:
        super().__init__()
        self.run_dir, self.error = run_dir, error


class RunTrashed(Message):
    """A delete's outcome: where the run folder went, or why it stayed."""

    def __init__(self, run_dir: Path, target: Path | None, error: str | None) -> None:
        super().__init__()
        self.run_dir, self.target, self.error = run_dir, target, error


class TrashMeasured(Message):
    def __init__(self, folders: int, size: int) -> None:
        super().__init__()
        self.folders, self.size = folders, size


class TrashEmptied(Message):
    def __init__(self, freed: int, failed: list[str]) -> None:
        super().__init__()
        self.freed, self.failed = freed, failed


class ComparisonLoaded(Message):
    def __init__(self, comparison: Comparison) -> None:
        super().__init__()
        self.comparison = comparison
