"""The virtual log view and the log pane on it: a bounded ring, only visible rows rendered, following the
tail, scrolling back, and a rebuild when the store is replaced. Real widgets under `App.run_test`."""

from __future__ import annotations

import time

import pytest
from rich.text import Text
from textual.app import App, ComposeResult

from trainer_core.contract.event_lines import parse_event
from vega_tui.run_state import LogLine
from vega_tui.store import RunStore
from vega_tui.widgets.log_view import LogView, text_measure
from vega_tui.widgets.logs import LogPane, measure_line

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def plain(entry: str) -> Text:
    return Text(entry)


def measure(entry: str) -> tuple[int, int]:
    return text_measure(entry, 0)


class ViewApp(App[None]):
    def __init__(self, max_entries: int = 100) -> None:
        super().__init__()
        self.max_entries = max_entries

    def compose(self) -> ComposeResult:
        yield LogView(plain, measure, max_entries=self.max_entries, id="view")


def row_text(view: LogView, y: int) -> str:
    return view.render_line(y).text.rstrip()


async def test_ring_keeps_the_newest_entries_and_plain_text_shows_them() -> None:
    async with ViewApp(max_entries=100).run_test(size=(40, 10)) as pilot:
        view = pilot.app.query_one(LogView)
        view.extend(f"line {i}" for i in range(250))
        await pilot.pause()
        assert view.entry_count == 100 and view.row_count == 100
        assert view.plain_text().splitlines() == [f"line {i}" for i in range(150, 250)]


async def test_a_burst_renders_only_the_rows_on_screen_and_follows_the_tail() -> None:
    async with ViewApp(max_entries=5000).run_test(size=(40, 10)) as pilot:
        view = pilot.app.query_one(LogView)
        view.extend(f"line {i}" for i in range(5000))
        await pilot.pause()
        assert view.following and view.scroll_y == view.max_scroll_y
        assert row_text(view, view.size.height - 1) == "line 4999"
        assert 0 < view.rendered_rows <= 3 * view.size.height  # a screenful or so, not 5000


async def test_scrolling_back_stops_following_and_the_end_resumes_it() -> None:
    async with ViewApp(max_entries=50).run_test(size=(40, 10)) as pilot:
        view = pilot.app.query_one(LogView)
        view.extend(f"line {i}" for i in range(50))
        await pilot.pause()
        view.scroll_to(y=5, animate=False)
        await pilot.pause()
        assert not view.following and row_text(view, 0) == "line 5"
        view.extend(f"line {i}" for i in range(50, 60))  # ten oldest entries fall out of the ring
        await pilot.pause()
        assert not view.following and row_text(view, 0) == "line 10"  # scrolled back: the first row lost is shown
        view.extend(["line 60"])
        await pilot.pause()
        assert row_text(view, 0) == "line 11"
        view.scroll_end(animate=False)
        await pilot.pause()
        assert view.following
        view.extend(["line 61"])
        await pilot.pause()
        assert row_text(view, view.size.height - 1) == "line 61"


async def test_a_multi_line_message_takes_one_row_per_line() -> None:
    async with ViewApp().run_test(size=(40, 10)) as pilot:
        view = pilot.app.query_one(LogView)
        view.extend(["Traceback:\n  File x\nValueError: bad", "after"])
        await pilot.pause()
        assert view.row_count == 4 and view.virtual_size.width == len("ValueError: bad")
        assert [row_text(view, y) for y in range(4)] == ["Traceback:", "  File x", "ValueError: bad", "after"]


def log_events(messages: list[str], level: str = "info") -> list:
    return [
        parse_event({"v": 1, "seq": i, "t": time.time(), "type": "log", "level": level, "message": message})
        for i, message in enumerate(messages)
    ]


class PaneApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LogPane(id="logs")


async def test_pane_rebuilds_from_a_replaced_store_and_appends_new_lines() -> None:
    first, second = RunStore(), RunStore()
    first.apply(log_events(["old one", "old two"]))
    second.apply(log_events(["new one"]))
    async with PaneApp().run_test(size=(60, 12)) as pilot:
        pane = pilot.app.query_one(LogPane)
        pane.update_from(first.state)
        assert "old two" in pane.view.plain_text()
        pane.update_from(second.state)  # a store swap: nothing of the old one may stay
        text = pane.view.plain_text()
        assert "new one" in text and "old" not in text and pane.shown == 1
        second.apply(log_events(["new two", "new three"]))
        pane.update_from(second.state)
        rows = pane.view.plain_text().splitlines()
        assert len(rows) == 3 and rows[-2].endswith("new two") and rows[-1].endswith("new three")
        assert pane.shown == 3


def test_measure_line_matches_the_formatted_line() -> None:
    from vega_tui.widgets.logs import format_line

    for line in (LogLine(time.time(), "info", "log", "hello"), LogLine(time.time(), "warning", "oom", "a\nlonger b")):
        rows = format_line(line).plain.split("\n")
        assert measure_line(line) == (len(rows), max(len(row) for row in rows))
