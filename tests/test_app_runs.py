"""The runs screen, the confirm dialog, the command palette's controls and the `vega-tui` command line.

The runs screen is driven with Textual's pilot over run folders recorded from real trainer runs
(tests/fixtures/events: completed, stopped, with faults, failed, killed), copied into a temporary
runs root. The command line is tested as a real subprocess (`python -m vega_tui`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import Button, DataTable, Static

from vega_tui.app import VegaApp
from vega_tui.run_summary import loss_curve
from vega_tui.screens.confirm import ConfirmScreen
from vega_tui.screens.runs import RunsScreen

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).parent / "fixtures" / "events"
# Recorded runs and the state each must be listed with (killed: no `finished` event and no live trainer).
EXPECTED_STATUS = {
    "lm_completed": "finished",
    "lm_stopped": "stopped",
    "lm_faults": "finished",
    "lm_failed": "failed",
    "lm_killed": "crashed",
}
WAIT_S = 30.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def runs_root(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for name in EXPECTED_STATUS:
        shutil.copytree(FIXTURES / name, root / name)
    return root


async def wait_until(pilot: Pilot, predicate: Callable[[], Any], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(0.05)
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}; screen: {pilot.app.screen!r}")


def runs_screen(app: App) -> RunsScreen:
    screen = app.screen
    assert isinstance(screen, RunsScreen), f"expected the runs screen, got {screen!r}"
    return screen


def row_of(screen: RunsScreen, name: str) -> dict[str, str]:
    table = screen.query_one(DataTable)
    key = str(screen.runs_root / name)
    cells = table.get_row(key)
    return {column.key.value: str(cell) for column, cell in zip(table.ordered_columns, cells, strict=True)}


def cursor_to(screen: RunsScreen, name: str) -> None:
    table = screen.query_one(DataTable)
    table.move_cursor(row=table.get_row_index(str(screen.runs_root / name)))


# ------------------------------------------------------------------------------------------------ runs screen


async def test_runs_listed_with_state_profile_loss_and_duration(runs_root: Path) -> None:
    app = VegaApp("runs", runs_root=runs_root)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = runs_screen(app)
        await wait_until(pilot, lambda: screen.query_one(DataTable).row_count == len(EXPECTED_STATUS), "5 rows")
        for name, status in EXPECTED_STATUS.items():
            assert row_of(screen, name)["status"] == status, name
        completed = row_of(screen, "lm_completed")
        assert completed["profile"] == "lm-small"
        assert completed["step"] == "60"
        assert completed["best"] == "4.535"  # best validation loss of the recorded run
        assert completed["time"] == "17s"  # one duration format everywhere (trainer_core.contract.units)
        assert row_of(screen, "lm_failed")["best"] == "—"  # failed before its first validation


async def test_marked_runs_have_their_loss_curves_overlaid(runs_root: Path) -> None:
    app = VegaApp("runs", runs_root=runs_root)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = runs_screen(app)
        await wait_until(pilot, lambda: screen.query_one(DataTable).row_count == len(EXPECTED_STATUS), "5 rows")
        # Nothing marked: the plot follows the cursor.
        cursor_to(screen, "lm_stopped")
        await wait_until(pilot, lambda: screen.plotted_names == ["lm_stopped"], "the highlighted run's curve")
        await pilot.press("space")
        cursor_to(screen, "lm_completed")
        await pilot.press("space")
        await wait_until(pilot, lambda: screen.plotted_names == ["lm_stopped", "lm_completed"], "two curves")
        assert row_of(screen, "lm_completed")["mark"] == "●" and row_of(screen, "lm_faults")["mark"] == " "
        plotted = {name: (xs, ys) for name, xs, ys in screen._last_curves}
        assert plotted["lm_completed"] == tuple(map(list, loss_curve(runs_root / "lm_completed", max_points=400)))
        assert "2 marked" in str(screen.query_one("#runs-hint", Static).render())
        await pilot.press("l")  # log scale keeps the same curves
        assert screen.log_scale and screen.plotted_names == ["lm_stopped", "lm_completed"]
        await pilot.press("space")  # unmark the one under the cursor
        await wait_until(pilot, lambda: screen.plotted_names == ["lm_stopped"], "one curve")
        await pilot.press("c")
        await wait_until(pilot, lambda: screen.plotted_names == ["lm_completed"] and not screen.marked, "cursor curve")


async def test_enter_opens_the_run_and_detach_comes_back(runs_root: Path) -> None:
    from vega_tui.screens.run import RunScreen

    app = VegaApp("runs", runs_root=runs_root)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = runs_screen(app)
        await wait_until(pilot, lambda: screen.query_one(DataTable).row_count == len(EXPECTED_STATUS), "5 rows")
        cursor_to(screen, "lm_killed")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen), "the run dashboard")
        assert app.screen.run_dir == runs_root / "lm_killed"
        await pilot.press("d")
        await wait_until(pilot, lambda: app.screen is screen, "back on the runs screen")


async def test_list_refreshes_when_a_run_appears(runs_root: Path) -> None:
    app = VegaApp("runs", runs_root=runs_root)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = runs_screen(app)
        table = screen.query_one(DataTable)
        await wait_until(pilot, lambda: table.row_count == len(EXPECTED_STATUS), "5 rows")
        shutil.copytree(FIXTURES / "lm_completed", runs_root / "lm_completed_again")
        await wait_until(pilot, lambda: table.row_count == len(EXPECTED_STATUS) + 1, "the new run listed")
        assert row_of(screen, "lm_completed_again")["status"] == "finished"


async def test_empty_runs_root_says_how_to_start(tmp_path: Path) -> None:
    app = VegaApp("runs", runs_root=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = runs_screen(app)
        hint = screen.query_one("#runs-hint", Static)
        await wait_until(pilot, lambda: screen.listed_once, "the first listing")
        assert "No runs in" in str(hint.render()) and "press n" in str(hint.render())


async def test_escape_on_the_first_screen_quits(runs_root: Path) -> None:
    app = VegaApp("runs", runs_root=runs_root)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.return_code is not None, "the app to exit")


async def test_attach_opens_the_run_and_detach_quits(runs_root: Path) -> None:
    from vega_tui.screens.run import RunScreen

    app = VegaApp("attach", run_dir=runs_root / "lm_completed")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen), "the run dashboard")
        await pilot.press("d")
        await wait_until(pilot, lambda: app.return_code is not None, "the app to exit")


async def test_command_palette_lists_the_screen_controls(runs_root: Path) -> None:
    app = VegaApp("runs", runs_root=runs_root)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        titles = [command.title for command in app.get_system_commands(app.screen)]
        for control in ("Open", "Mark", "Clear", "Log y", "New run", "Back", "Quit"):
            assert control in titles, titles
        assert titles.count("Quit") == 1  # Textual's own Quit is not listed twice
        help_text = {command.title: command.help for command in app.get_system_commands(app.screen)}
        assert help_text["Mark"].startswith("key: space")


# ------------------------------------------------------------------------------------------------ confirm


class AskApp(App[None]):
    """Asks one question on start and records the answer."""

    def __init__(self, choices: list[tuple[str, str, Any]]) -> None:
        super().__init__()
        self.choices = choices
        self.answers: list[Any] = []

    def compose(self) -> ComposeResult:
        yield Static("under the dialog")

    def on_mount(self) -> None:
        self.push_screen(ConfirmScreen("Stop the run?", self.choices), self.answers.append)


CHOICES = [("s", "Stop it", "stop"), ("l", "Leave it running", "leave"), ("c", "Cancel", None)]


@pytest.mark.parametrize(
    ("keys", "answer"),
    [
        (["l"], "leave"),
        (["S"], "stop"),
        (["enter"], "stop"),
        (["tab", "enter"], "leave"),
        (["right", "right", "enter"], None),
        (["escape"], None),
    ],
    ids=["key", "key-any-case", "enter-first", "tab-enter", "arrows", "escape"],
)
async def test_confirm_answers_by_key_or_button(keys: list[str], answer: Any) -> None:
    app = AskApp(CHOICES)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press(*keys)
        await wait_until(pilot, lambda: app.answers, "an answer")
        assert app.answers == [answer] and not isinstance(app.screen, ConfirmScreen)


async def test_confirm_buttons_name_their_keys() -> None:
    app = AskApp(CHOICES)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        labels = [str(button.label) for button in app.screen.query(Button)]
        assert labels == ["Stop it [s]", "Leave it running [l]", "Cancel [c]"]
        assert app.focused is app.screen.query_one("#confirm-0", Button)


# ------------------------------------------------------------------------------------------------ command line


def vega_tui(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "vega_tui", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=cwd, stdin=subprocess.DEVNULL)


def test_cli_help_lists_the_commands() -> None:
    result = vega_tui("--help")
    assert result.returncode == 0
    for word in ("launch", "attach", "runs", "--runs-root", "--set"):
        assert word in result.stdout


def test_cli_attach_rejects_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    result = vega_tui("attach", tmp_path)
    assert result.returncode == 2
    expected = f"error: {tmp_path} is not a run folder (no events.jsonl in it); try: vega-tui runs {tmp_path}"
    assert result.stderr.strip() == expected
    missing = vega_tui("attach", tmp_path / "missing")
    assert missing.returncode == 2 and "is not a folder" in missing.stderr and "Traceback" not in missing.stderr


def test_cli_attach_without_runs_says_so(tmp_path: Path) -> None:
    result = vega_tui("--runs-root", tmp_path, "attach")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: no runs under {tmp_path}")


def test_cli_runs_rejects_a_missing_root(tmp_path: Path) -> None:
    result = vega_tui("runs", tmp_path / "nowhere")
    assert result.returncode == 2 and "does not exist" in result.stderr
