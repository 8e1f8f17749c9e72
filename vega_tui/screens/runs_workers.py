"""The runs screen's background jobs, each on a daemon thread (`screens.run_in_background`).

Listing the runs, reading loss curves, measuring disk use, reading and writing a run's notes and
tags, moving a run to the trash, emptying it, reading what a comparison shows. None touches a
widget: each posts its answer (`vega_tui.screens.runs_messages`) through `post`, the screen's
thread-safe `post_message`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainer_core.contract.errors import VegaError
from vega_tui import run_trash
from vega_tui.run_compare import compare_runs
from vega_tui.run_notes import read_notes, write_notes
from vega_tui.run_summary import RunSummary, list_runs, loss_curve
from vega_tui.screens.runs_messages import (
    ComparisonLoaded,
    Curve,
    CurvesLoaded,
    DiskMeasured,
    NotesRead,
    NotesSaved,
    Post,
    RunsListed,
    RunTrashed,
    TrashEmptied,
    TrashMeasured,
)

CURVE_POINTS = 400


def post_runs(runs_root: Path, post: Post) -> None:
    try:
        runs = list_runs(runs_root) if runs_root.is_dir() else []
    except OSError as exc:
        post(RunsListed(None, f"cannot read {runs_root}: {exc}"))
        return
    post(RunsListed(runs, None))


def load_curves(runs: Sequence[RunSummary]) -> list[Curve]:
    """Loss curves of `runs` (blocking); unreadable runs are left out."""
    curves: list[Curve] = []
    for run in runs:
        try:
            xs, ys = loss_curve(run.path, max_points=CURVE_POINTS)
        except (OSError, ValueError):
            continue
        if xs:
            curves.append((run.name, list(xs), list(ys)))
    return curves


def post_curves(generation: int, runs: list[RunSummary], post: Post) -> None:
    post(CurvesLoaded(generation, load_curves(runs)))


def measure_disk(run_dirs: list[Path], runs_root: Path, post: Post) -> None:
    """Bytes of each folder (checkpoints included) and of the trash."""
    sizes = {str(path): run_trash.folder_bytes(path) for path in run_dirs}
    post(DiskMeasured(sizes, run_trash.trash_contents(runs_root)))


def post_notes(run_dir: Path, post: Post) -> None:
    post(NotesRead(run_dir, read_notes(run_dir)))


def save_notes(run_dir: Path, notes: str, tags: list[str], post: Post) -> None:
    try:
        write_notes(run_dir, notes, tags)
    except VegaError as exc:
        post(NotesSaved(run_dir, str(exc)))
        return
    post(NotesSaved(run_dir, None))


def trash_run(run_dir: Path, runs_root: Path, post: Post) -> None:
    try:
        target = run_trash.move_to_trash(run_dir, runs_root)
    except VegaError as exc:  # RunIsLive among them: a live run stays where it is
        post(RunTrashed(run_dir, None, str(exc)))
        return
    post(RunTrashed(run_dir, target, None))


def measure_trash(runs_root: Path, post: Post) -> None:
    post(TrashMeasured(*run_trash.trash_contents(runs_root)))


def empty_trash(runs_root: Path, post: Post) -> None:
    post(TrashEmptied(*run_trash.empty_trash(runs_root)))


def post_comparison(run_dirs: list[Path], post: Post) -> None:
    post(ComparisonLoaded(compare_runs(run_dirs)))
