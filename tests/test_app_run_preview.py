"""The real dashboard opening a big-ish finished log: the latest step shows first, from a preview, then the
exact history replaces it and every widget redraws from the new store (vega_tui/preview.py, follow.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.pilot import Pilot

from test_follow_preview import MIDDLE_MARKER, PLAN, STEPS, write_run
from vega_tui import app as vega_app
from vega_tui.app import VegaApp
from vega_tui.screens import run as run_screen_module
from vega_tui.screens.run import RunScreen, StoreReady
from vega_tui.widgets.charts import ChartGrid
from vega_tui.widgets.logs import LogPane
from vega_tui.widgets.status import StatusLine

pytestmark = pytest.mark.anyio
WAIT_S = 60.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class RecordingRunScreen(RunScreen):
    """The real screen; it notes what the status line said right after each store was swapped in."""

    CSS_PATH = str(Path(run_screen_module.__file__).with_name("run.tcss"))  # relative paths resolve from here

    def __init__(self, run_dir: Path) -> None:
        super().__init__(run_dir, read_resources=None, preview=PLAN)
        self.swaps: list[tuple[bool, str]] = []

    def on_store_ready(self, message: StoreReady) -> None:
        super().on_store_ready(message)
        self.swaps.append((message.exact, self.query_one(StatusLine).content.plain))


class PreviewApp(VegaApp):
    CSS_PATH = str(Path(vega_app.__file__).with_name("app.tcss"))

    def __init__(self, run_dir: Path) -> None:
        super().__init__(start="attach", run_dir=run_dir)

    def open_run(self, run_dir: Path, process: object = None) -> None:
        self.push_screen(RecordingRunScreen(run_dir))


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
        (first_exact, first_status), (second_exact, second_status) = screen.swaps
        assert not first_exact and f"step {STEPS}/{STEPS}" in first_status and "history 0 %" in first_status
        assert "FINISHED" in first_status
        assert second_exact and f"step {STEPS}/{STEPS}" in second_status and "history" not in second_status
        assert screen.state.history_progress is None and MIDDLE_MARKER in [line.message for line in screen.state.logs]

        loss = screen.query_one(ChartGrid).chart("loss")
        await wait_until(pilot, lambda: loss.data is not None and loss.data.points > 0, "the loss chart")
        await pilot.press("2")  # the log pane rewrites itself from the new store's lines
        pane = screen.query_one(LogPane)
        await wait_until(pilot, lambda: pane.shown == sum(1 for line in screen.state.logs if line.level != "debug"),
                         "the log pane to show the exact history's lines")
        assert f"/{len(screen.state.logs)} lines" in pane.header_text().plain
        await pilot.press("3")
        rows = screen.query_one("#ckpt-table").row_count
        assert rows == len(screen.state.checkpoints) == STEPS // 500
