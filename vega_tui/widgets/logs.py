"""The log pane: the run's log lines with a level filter, a search box and the reader's health
counters (malformed lines, seq gaps, unknown event types).

Lines come from the store's bounded ring (`RunState.logs`); the pane keeps the matching ones in a
virtual `LogView`, which formats and renders only the rows on screen, so catching up on lines that
arrived while the tab was hidden, or a filter change, costs O(lines) of cheap bookkeeping and
O(screen) of drawing. New lines are appended incrementally; changing the filter or the search, or
a new store, rebuilds the view.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from rich.text import Text
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Static

from vega_tui.widgets.log_view import LogView, text_measure

if TYPE_CHECKING:
    from textual.app import ComposeResult

    from vega_tui.run_state import LogLine, RunState

LEVELS = ("debug", "info", "warning", "error")
LEVEL_RANK = {"debug": 0, "info": 1, "warning": 2, "error": 3, "critical": 4}
LEVEL_STYLES = {
    "debug": "dim",
    "info": "",
    "warning": "yellow",
    "error": "bold red",
    "critical": "bold red",
}
MAX_VIEW_LINES = 5000
PREFIX_CELLS = len("00:00:00 INFO ")  # stamp and level before every message


def line_matches(line: LogLine, min_level: str, search: str) -> bool:
    """Whether a line passes the level filter and the (case-insensitive) search."""
    if LEVEL_RANK.get(line.level, 1) < LEVEL_RANK[min_level]:
        return False
    if not search:
        return True
    needle = search.casefold()
    return needle in line.message.casefold() or needle in (line.kind or "").casefold()


def clean(text: str) -> str:
    """Replace control characters (a sample of random bytes, a stray escape)
    that would corrupt the screen."""
    if text.isprintable():
        return text  # the common case, checked in C
    return "".join(
        ch if ch.isprintable() or ch == "\n" else " " * 4 if ch == "\t" else "·" for ch in text
    )


def format_line(line: LogLine) -> Text:
    stamp = time.strftime("%H:%M:%S", time.localtime(line.t)) if line.t else "--:--:--"
    text = Text(no_wrap=False)
    text.append(f"{stamp} ", style="dim")
    text.append(f"{line.level[:4].upper():<4} ", style=LEVEL_STYLES.get(line.level, ""))
    if line.kind and line.kind != "log":
        text.append(f"[{line.kind}] ", style="cyan")
    text.append(
        clean(line.message), style=LEVEL_STYLES.get(line.level, "") if line.level != "info" else ""
    )
    return text


def measure_line(line: LogLine) -> tuple[int, int]:
    """(rows, widest row in cells) of a formatted line, without formatting
    it (see `format_line`)."""
    kind = len(line.kind) + 3 if line.kind and line.kind != "log" else 0
    return text_measure(line.message, PREFIX_CELLS + kind)


def new_lines(logs: Iterable[LogLine], last: LogLine | None) -> list[LogLine] | None:
    """Lines after `last` (by identity), oldest first; None when `last` fell
    out of the ring (rewrite all)."""
    fresh: list[LogLine] = []
    for line in reversed(logs):  # type: ignore[call-overload]  # deque supports reversed()
        if line is last:
            return fresh[::-1]
        fresh.append(line)
    return None if last is not None else fresh[::-1]


class SearchInput(Input):
    """The log search box; Escape closes it."""

    BINDINGS = [Binding("escape", "close", "Close search")]

    def action_close(self) -> None:
        pane = next((node for node in self.ancestors if isinstance(node, LogPane)), None)
        if pane is not None:
            pane.close_search()


class LogPane(Vertical):
    """Header with filter/search/counters, the log view, and a search box shown on demand."""

    DEFAULT_CSS = """
    LogPane { height: 1fr; }
    LogPane #log-header { height: 1; padding: 0 1; background: $boost; }
    LogPane LogView { height: 1fr; }
    LogPane SearchInput { display: none; height: 3; }
    LogPane.-searching SearchInput { display: block; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.min_level = "info"
        self.search = ""
        self.shown = 0  # lines currently in the view
        self._last: LogLine | None = None
        self._state: RunState | None = None
        self._logs: object = None  # the ring the view was filled from: a new store means a rebuild

    def compose(self) -> ComposeResult:
        yield Static(id="log-header")
        yield LogView(format_line, measure_line, max_entries=MAX_VIEW_LINES, id="log-view")
        yield SearchInput(
            placeholder="search the log (Enter keeps it, Escape closes)", id="log-search"
        )

    @property
    def view(self) -> LogView[LogLine]:
        return self.query_one("#log-view", LogView)

    def update_from(self, state: RunState) -> None:
        """Append the lines that arrived since the last call; rewrite when the
        ring moved past our last line."""
        # first call, or the store was replaced
        if state is not self._state or state.logs is not self._logs:
            self._state, self._logs = state, state.logs
            self.rewrite()
            return
        fresh = new_lines(state.logs, self._last)
        if fresh is None:
            self.rewrite()
            return
        self._append(fresh)
        self._update_header()

    def rewrite(self) -> None:
        """Rebuild the view from the ring: the newest MAX_VIEW_LINES
        matching lines (the view's bound)."""
        self.view.clear()
        self.shown = 0
        self._last = None
        if self._state is not None:
            lines = list(self._state.logs)
            matching = [line for line in lines if line_matches(line, self.min_level, self.search)]
            self.view.extend(matching[-MAX_VIEW_LINES:])
            self.shown = len(matching)
            self._last = lines[-1] if lines else None
        self._update_header()

    def _append(self, lines: list[LogLine]) -> None:
        matching = [line for line in lines if line_matches(line, self.min_level, self.search)]
        self.view.extend(matching)
        self.shown += len(matching)
        if lines:
            self._last = lines[-1]

    def _update_header(self) -> None:
        self.query_one("#log-header", Static).update(self.header_text())

    def header_text(self) -> Text:
        state = self._state
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"level ≥ {self.min_level}", style="bold")
        if self.search:
            text.append(f" · search '{self.search}'", style="bold cyan")
        total = len(state.logs) if state else 0
        text.append(f" · {min(self.shown, MAX_VIEW_LINES)}/{total} lines")
        if state is not None:
            problems = (state.malformed_lines, state.seq_gaps, state.unknown_events)
            style = "bold yellow" if any(problems) else "dim"
            text.append(
                f" · bad lines {problems[0]} · seq gaps {problems[1]} · unknown events"
                f" {problems[2]}",
                style,
            )
        return text

    def cycle_level(self) -> str:
        """debug -> info -> warning -> error -> debug; returns the new minimum level."""
        self.min_level = LEVELS[(LEVELS.index(self.min_level) + 1) % len(LEVELS)]
        self.rewrite()
        return self.min_level

    def open_search(self) -> None:
        self.add_class("-searching")
        search = self.query_one(SearchInput)
        search.value = self.search
        search.focus()

    def close_search(self, clear: bool = True) -> None:
        """Hide the box; Escape also clears the search, Enter keeps it."""
        self.remove_class("-searching")
        if clear and self.search:
            self.search = ""
            self.rewrite()
        self.view.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.search = event.value.strip()
        self.rewrite()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.close_search(clear=False)
