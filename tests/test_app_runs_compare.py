"""The runs screen as a comparison tool, through the real app: marked runs compared (validation
and free-running curves overlaid, the frozen profiles' differences), notes and tags, disk use,
delete to the trash (a live run refused) and emptying it, problem folders listed as such.

Run folders are copies of runs recorded from the real trainer (tests/fixtures/events); a second
vits run is the recorded one with a different learning rate in its frozen profile.
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input, Static, TextArea

from dash_pilot import wait_until
from trainer_core.contract.units import format_bytes
from vega_tui import app as vega_app
from vega_tui.app import VegaApp
from vega_tui.run_compare import flatten, show_value
from vega_tui.run_summary import newest_run
from vega_tui.screens.compare import CompareScreen, cell
from vega_tui.screens.confirm import ConfirmScreen
from vega_tui.screens.notes import NotesScreen
from vega_tui.screens.runs import RunsScreen
from vega_tui.widgets.run_table import RunTable

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).parent / "fixtures" / "events"
RECORDED = ("lm_completed", "lm_stopped", "vits_completed")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for name in RECORDED:
        shutil.copytree(FIXTURES / name, root / name)
    retuned = root / "vits_retuned"
    shutil.copytree(FIXTURES / "vits_completed", retuned)
    profile = (retuned / "profile.toml").read_text(encoding="utf-8")
    assert "\nlr = 0.002\n" in profile
    profile = profile.replace("\nlr = 0.002\n", "\nlr = 0.0005\n")
    (retuned / "profile.toml").write_text(profile, encoding="utf-8")
    os.utime(retuned / "profile.toml", (1.7e9, 1.7e9))  # old, like the others: nothing writes it
    return root


class RecordingApp(VegaApp):
    """The real app on the runs screen; it keeps the notifications it shows."""

    # A relative CSS path would resolve from this file's folder.
    CSS_PATH = str(Path(vega_app.__file__).with_name("app.tcss"))

    def __init__(self, runs_root: Path) -> None:
        super().__init__("runs", runs_root=runs_root)
        self.messages: list[str] = []

    def notify(self, message: str, **kwargs: Any) -> None:
        self.messages.append(str(message))
        super().notify(message, **kwargs)


def runs_screen(app: VegaApp) -> RunsScreen:
    screen = app.screen_stack[1]
    assert isinstance(screen, RunsScreen)
    return screen


def row_of(screen: RunsScreen, name: str) -> dict[str, str]:
    table = screen.query_one(RunTable)
    cells = table.get_row(str(screen.runs_root / name))
    columns = [column.key.value for column in table.ordered_columns]
    return {column: str(cell) for column, cell in zip(columns, cells, strict=True)}


def cursor_to(screen: RunsScreen, name: str) -> None:
    table = screen.query_one(RunTable)
    table.move_cursor(row=table.get_row_index(str(screen.runs_root / name)))


async def listed(pilot: Pilot, count: int) -> RunsScreen:
    screen = runs_screen(pilot.app)  # type: ignore[arg-type]
    await wait_until(pilot, lambda: screen.query_one(RunTable).row_count == count, f"{count} rows")
    return screen


def bytes_under(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


async def test_marked_runs_compared_with_overlaid_curves_and_profile_diff(runs_root: Path) -> None:
    app = RecordingApp(runs_root)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await listed(pilot, 4)
        palette = {command.title: command.help for command in app.get_system_commands(screen)}
        for title, key in (
            ("Compare", "v"),
            ("Notes", "e"),
            ("Delete", "x"),
            ("Empty trash", "t"),
        ):
            assert palette[title].startswith(f"key: {key} - "), palette  # the key and what it does
        await pilot.press("v")  # nothing marked: no comparison
        cursor_to(screen, "vits_completed")
        await pilot.press("space", "v")  # one marked: still none
        assert not isinstance(app.screen, CompareScreen)
        assert app.messages.count("Mark two or more runs (space) to compare them.") == 2
        for name in ("vits_retuned", "lm_completed"):
            cursor_to(screen, name)
            await pilot.press("space")
        await pilot.press("v")
        compare = app.screen
        assert isinstance(compare, CompareScreen)
        await wait_until(pilot, lambda: compare.comparison is not None, "the comparison")
        await pilot.pause()

        charts = {chart.build_name: chart for chart in compare.query("RunChart")}
        validation, free = charts["validation"].data, charts["free_running"].data
        assert validation is not None and free is not None
        assert [line.label for line in validation.lines] == [
            "vits_completed",
            "vits_retuned",
            "lm_completed",
        ]
        assert [line.label for line in free.lines] == [
            "vits_completed",
            "vits_retuned",
        ]  # lm runs speak nothing
        summary = str(compare.query_one("#compare-summary", Static).render())
        assert "No free-running scores from lm_completed" in summary  # said once, under the charts
        assert "No validation losses" not in summary
        log = runs_root / "lm_completed" / "events.jsonl"
        events = [json.loads(line) for line in log.open()]
        lm = validation.lines[2]
        assert lm.ys == [e["loss"] for e in events if e["type"] == "validation"]
        legend = str(charts["validation"].render())
        assert all(name in legend for name in ("vits_completed", "vits_retuned", "lm_completed"))

        rows = compare.diff_rows
        assert rows["train.lr"] == ["0.002", "0.0005", "0.0006"]
        assert rows["model.kind"] == ['"vits"', '"vits"', '"lm"']
        profiles = [
            flatten(tomllib.loads((runs_root / name / "profile.toml").read_text()))
            for name in ("vits_completed", "vits_retuned", "lm_completed")
        ]
        first = profiles[0]
        same = [key for key in first if all(p.get(key) == first[key] for p in profiles)]
        assert "logging.level" in same and not set(same) & set(rows)  # only the keys that differ
        for key, values in rows.items():
            assert values == [cell(show_value(p[key])) if key in p else "—" for p in profiles], key
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen, "back on the runs list")
        assert len(screen.marked) == 3


async def test_notes_and_tags_written_beside_the_trainer_files_and_read_back(
    runs_root: Path,
) -> None:
    run = runs_root / "lm_completed"
    trainer_files = {p.name: p.read_bytes() for p in run.iterdir()}
    app = RecordingApp(runs_root)
    async with app.run_test(size=(100, 32)) as pilot:
        screen = await listed(pilot, 4)
        cursor_to(screen, "lm_completed")
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, NotesScreen), "the notes editor")
        await pilot.press(*"lr high", "tab", *"base, cpu base")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: "#base #cpu" in row_of(screen, run.name)["tags"], "tags")
        assert (run / "notes.md").read_text(encoding="utf-8") == "lr high\n"
        assert json.loads((run / "tags.json").read_bytes()) == {"tags": ["base", "cpu"]}
        kept = {p.name: p.read_bytes() for p in run.iterdir() if p.name in trainer_files}
        assert kept == trainer_files  # the trainer's files untouched, two files added
        assert {p.name for p in run.iterdir()} == {*trainer_files, "notes.md", "tags.json"}

        await pilot.press("e")  # read back into the editor; Escape leaves the files as they are
        await wait_until(pilot, lambda: isinstance(app.screen, NotesScreen), "the editor again")
        assert app.screen.query_one(TextArea).text == "lr high\n"
        assert app.screen.query_one(Input).value == "base, cpu"
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen, "back on the list")
        assert (run / "notes.md").read_text(encoding="utf-8") == "lr high\n"


async def test_disk_use_delete_to_trash_refuses_a_live_run_and_empty_trash_frees_it(
    runs_root: Path,
) -> None:
    # A run whose trainer writes from another host (shared storage): live while its log moves.
    live = runs_root / "lm_remote"
    shutil.copytree(FIXTURES / "lm_killed", live)
    events = (live / "events.jsonl").read_text(encoding="utf-8")
    (live / "events.jsonl").write_text(events.replace('"host":"vm"', '"host":"gpu-node-7"'))
    # Its trainer died on this machine, yet its log was just written: a trainer may be starting.
    starting = runs_root / "lm_starting"
    shutil.copytree(FIXTURES / "lm_killed", starting)
    here = f'"host":"{os.uname().nodename}"'
    (starting / "events.jsonl").write_text(events.replace('"host":"vm"', here))
    checkpoint = runs_root / "lm_stopped" / "checkpoints"
    checkpoint.mkdir()
    (checkpoint / "step-00000014.pt").write_bytes(os.urandom(300_000))  # counted in its disk use
    stopped_bytes = bytes_under(runs_root / "lm_stopped")
    app = RecordingApp(runs_root)

    def asked() -> bool:
        return isinstance(app.screen, ConfirmScreen)

    async with app.run_test(size=(140, 32)) as pilot:
        screen = await listed(pilot, 6)
        await wait_until(
            pilot,
            lambda: row_of(screen, "lm_stopped")["disk"] == format_bytes(stopped_bytes),
            "disk",
        )
        completed = format_bytes(bytes_under(runs_root / "lm_completed"))
        assert row_of(screen, "lm_completed")["disk"] == completed

        assert row_of(screen, "lm_remote")["status"] == "live"
        cursor_to(screen, "lm_remote")
        await pilot.press("x")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmScreen) and live.is_dir()
        assert app.messages[-1] == "lm_remote is live: stop it first, then delete it."

        assert row_of(screen, "lm_starting")["status"] == "crashed"  # the delete checks again
        cursor_to(screen, "lm_starting")
        await pilot.press("x")
        await wait_until(pilot, asked, "the delete question")
        await pilot.press("d")
        refused = "lm_starting is live: it was written"
        await wait_until(pilot, lambda: refused in app.messages[-1], "the refusal")
        assert starting.is_dir() and not (runs_root / ".trash").exists()

        cursor_to(screen, "lm_stopped")
        await pilot.press("x")
        await wait_until(pilot, asked, "the delete question")
        assert format_bytes(stopped_bytes) in app.screen.question  # type: ignore[attr-defined]
        await pilot.press("c")  # cancel: nothing moves
        await pilot.pause(0.2)
        assert (runs_root / "lm_stopped").is_dir()
        await pilot.press("x")
        await wait_until(pilot, asked, "the delete question again")
        await pilot.press("d")
        await wait_until(pilot, lambda: not (runs_root / "lm_stopped").exists(), "the run moved")
        (trashed,) = (runs_root / ".trash").iterdir()
        assert trashed.name.startswith("lm_stopped-") and bytes_under(trashed) == stopped_bytes
        await listed(pilot, 5)
        title = screen.query_one("#runs-title", Static)
        await wait_until(
            pilot,
            lambda: f"trash: 1 run(s), {format_bytes(stopped_bytes)}" in str(title.render()),
            "",
        )

        await pilot.press("t")
        await wait_until(pilot, asked, "the empty-trash question")
        assert f"free {format_bytes(stopped_bytes)}" in app.screen.question
        await pilot.press("e")
        await wait_until(pilot, lambda: not any((runs_root / ".trash").iterdir()), "no trash")
        await wait_until(pilot, lambda: app.messages[-1].startswith("Trash emptied"), "the report")
        assert app.messages[-1] == f"Trash emptied: freed {format_bytes(stopped_bytes)}."
        await pilot.press("t")  # nothing left: no question
        await wait_until(pilot, lambda: app.messages[-1] == "The trash is empty.", "said so")
        assert not isinstance(app.screen, ConfirmScreen)


async def test_problem_folders_are_listed_with_what_is_wrong(runs_root: Path) -> None:
    no_events = runs_root / "never_started"
    no_events.mkdir()
    shutil.copy(FIXTURES / "lm_completed" / "profile.toml", no_events / "profile.toml")
    broken = runs_root / "bad_profile"
    shutil.copytree(FIXTURES / "lm_failed", broken)
    (broken / "profile.toml").write_text("[train\nlr = ", encoding="utf-8")
    (runs_root / "not-a-run").mkdir()  # no log, profile or checkpoints: not listed
    (runs_root / ".trash").mkdir()
    app = RecordingApp(runs_root)
    async with app.run_test(size=(160, 32)) as pilot:
        screen = await listed(pilot, 6)
        assert "⚠ no events.jsonl" in row_of(screen, "never_started")["tags"]
        assert "profile.toml is not valid TOML" in row_of(screen, "bad_profile")["tags"]
        assert row_of(screen, "bad_profile")["status"] == "failed"  # the log still tells its end
        assert "⚠" not in row_of(screen, "lm_completed")["tags"]
        cursor_to(screen, "bad_profile")
        hint = screen.query_one("#runs-hint", Static)
        await wait_until(
            pilot,
            lambda: str(hint.render()).startswith("bad_profile: profile.toml is not"),
            "hint",
        )
        for name in ("bad_profile", "lm_completed"):
            cursor_to(screen, name)
            await pilot.press("space")
        await pilot.press("v")
        compare = app.screen
        assert isinstance(compare, CompareScreen)
        await wait_until(pilot, lambda: compare.comparison is not None, "the comparison")
        problems = compare.comparison.problems if compare.comparison else []
        assert any("bad_profile: profile.toml is not valid TOML" in p for p in problems)
        assert compare.diff_rows == {}  # one readable profile: nothing to diff against
        summary = str(compare.query_one("#compare-summary", Static).render())
        assert summary.startswith("Fewer than two frozen profiles could be read")
    assert newest_run(runs_root) != no_events  # attach never picks a folder without a log


async def test_a_read_only_dashboard_deletes_edits_and_empties_nothing(runs_root: Path) -> None:
    app = RecordingApp(runs_root)
    app.read_only = True  # what `vega-tui serve` runs without --allow-control
    (runs_root / ".trash").mkdir()
    (runs_root / ".trash" / "old").mkdir()
    async with app.run_test(size=(140, 32)) as pilot:
        screen = await listed(pilot, 4)
        cursor_to(screen, "lm_stopped")
        for key in ("x", "e", "t"):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.screen, RunsScreen), f"{key} opened {app.screen}"
        refused = [m for m in app.messages if m.startswith("cannot ")]
        assert refused == [
            "cannot delete a run: this dashboard is read-only (served without --allow-control)",
            "cannot edit a run's notes and tags: this dashboard is read-only (served without --allow-control)",
            "cannot empty the trash: this dashboard is read-only (served without --allow-control)",
        ]
    assert (runs_root / "lm_stopped").is_dir() and (runs_root / ".trash" / "old").is_dir()
