"""The real dashboard opening a big-ish finished log: the latest step shows first, from a preview, then the
exact history replaces it and every widget redraws from the new store (vega_tui/preview.py, follow.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from test_follow_preview import MIDDLE_MARKER, PLAN, STEPS, gone, write_long_run, write_run
from vega_tui import app as vega_app
from vega_tui.app import VegaApp
from vega_tui.screens import run as run_screen_module
from vega_tui.screens.run import RunScreen
from vega_tui.screens.run_messages import StoreReady
from vega_tui.widgets.charts import ChartGrid
from vega_tui.widgets.logs import LogPane
from vega_tui.widgets.status import ProblemBanner, StatusLine

pytestmark = pytest.mark.anyio
WAIT_S = 60.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class RecordingRunScreen(RunScreen):
    """The real screen; it notes what the status line said right after each store was swapped in."""

    CSS_PATH = str(Path(run_screen_module.__file__).with_name("run.tcss"))  # relative paths resolve from here

    def __init__(self, run_dir: Path, hold_until_crashed: bool = False) -> None:
        super().__init__(run_dir, read_resources=None, preview=PLAN)
        self.hold_until_crashed = hold_until_crashed
        self.swaps: list[tuple[bool, str, str]] = []

    def on_store_ready(self, message: StoreReady) -> None:
        message.prevent_default()  # Textual would call RunScreen's handler again after this one
        if message.exact and self.hold_until_crashed and self.state.status != "crashed":
            # Keep the preview on screen until the liveness check has judged the run from it.
            self.set_timer(0.05, lambda: self.post_message(StoreReady(message.store, True)))
            return
        super().on_store_ready(message)
        self.swaps.append((message.exact, self.query_one(StatusLine).content.plain, self.state.status))


class PreviewApp(VegaApp):
    CSS_PATH = str(Path(vega_app.__file__).with_name("app.tcss"))

    def __init__(self, run_dir: Path, hold_until_crashed: bool = False) -> None:
        super().__init__(start="attach", run_dir=run_dir)
        self.hold_until_crashed = hold_until_crashed

    def open_run(self, run_dir: Path, process: object = None) -> None:
        self.push_screen(RecordingRunScreen(run_dir, self.hold_until_crashed))


async def wait_until(pilot: Pilot, predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(0.05)
    pytest.fail(f"timed out after {WAIT_S:g} s waiting for {what}")


async def test_big_log_shows_its_latest_step_first_then_the_exact_history(tmp_path: Path) -> None:
    run_dir = tmp_path / "big-run"
    run_dir.mkdir()
    write_run(run_dir / "events.jsonl")
    async with PreviewApp(run_dir).run_test(size=(120, 40)) as pilot:
        screen = pilot.app.screen
        assert isinstance(screen, RecordingRunScreen)
        await wait_until(pilot, lambda: len(screen.swaps) == 2, "the preview and then the exact history")
        (first_exact, first_status, _), (second_exact, second_status, _) = screen.swaps
        assert not first_exact and f"step {STEPS}/{STEPS}" in first_status and "history 0 %" in first_status
        assert "FINISHED" in first_status
        assert second_exact and f"step {STEPS}/{STEPS}" in second_status and "history" not in second_status
        assert screen.state.history_progress is None and MIDDLE_MARKER in [line.message for line in screen.state.logs]

        loss = screen.query_one(ChartGrid).chart("loss")
        await wait_until(pilot, lambda: loss.data is not None and loss.data.points > 0, "the loss chart")
        await pilot.press("2")  # the log pane rewrites itself from the new store's lines
        pane = screen.query_one(LogPane)
        await wait_until(
            pilot,
            lambda: pane.shown == sum(1 for line in screen.state.logs if line.level != "debug"),
            "the log pane to show the exact history's lines",
        )
        assert f"/{len(screen.state.logs)} lines" in pane.header_text().plain
        await pilot.press("3")
        rows = screen.query_one("#ckpt-table").row_count
        assert rows == len(screen.state.checkpoints) == STEPS // 500


async def test_a_crash_judged_on_the_preview_survives_the_swap(tmp_path: Path) -> None:
    """No finished event and no trainer: the verdict given while the preview shows stays on the exact store."""
    run_dir = tmp_path / "crashed-run"
    run_dir.mkdir()
    path = run_dir / "events.jsonl"
    write_run(path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))  # the trainer died before its finished event
    (run_dir / "trainer.log").write_text("step 4000\nKilled\n")
    async with PreviewApp(run_dir, hold_until_crashed=True).run_test(size=(120, 40)) as pilot:
        screen = pilot.app.screen
        assert isinstance(screen, RecordingRunScreen)
        await wait_until(pilot, lambda: len(screen.swaps) == 2, "the exact history of a crashed run")
        assert [status for _, _, status in screen.swaps] == ["training", "crashed"]  # judged on the preview
        assert "CRASHED" in screen.swaps[1][1] and screen.state.crash_log == ["step 4000", "Killed"]
        await pilot.pause(0.3)
        banner = screen.query_one(ProblemBanner)
        assert banner.display and "died without finishing" in banner.content.plain


async def test_closing_the_screen_ends_the_child_reading_the_history(tmp_path: Path) -> None:
    run_dir = tmp_path / "long-run"
    run_dir.mkdir()
    write_long_run(run_dir / "events.jsonl", 40_000)  # the child needs about a second: the screen closes first
    async with PreviewApp(run_dir).run_test(size=(120, 40)) as pilot:
        screen = pilot.app.screen
        assert isinstance(screen, RecordingRunScreen)
        follower = screen.follower
        assert follower is not None
        await wait_until(pilot, lambda: bool(screen.swaps) and follower.history_pid is not None, "the history child")
        pid = follower.history_pid
        assert pid is not None and len(screen.swaps) == 1 and not gone(pid)  # the preview shows, the child reads
        await pilot.app.pop_screen()
        await pilot.pause(0.1)
        follower.join(10)
        assert not follower.alive and gone(pid) and follower.history_error is None
