"""A virtual log view: a bounded ring of log entries of which only the rows
on screen are ever rendered.

`RichLog` renders every line it is given at write time, so showing a few thousand lines at
once (the first switch to the Logs tab, a filter change) costs O(lines) on the UI thread. This
view stores the entries unformatted and formats a row only when Textual asks for it
(`render_line`), so appending a burst of entries or (re)filling the view costs O(entries) of
cheap bookkeeping and drawing costs O(screen).

Rows do not wrap: a multi-line message takes one row per line, long rows scroll sideways.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from rich.cells import cell_len
from rich.text import Text
from textual.cache import LRUCache
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

Entry = TypeVar("Entry")

STRIP_CACHE_ENTRIES = 512  # formatted entries kept: a few screens' worth


class LogView(ScrollView, Generic[Entry], can_focus=True):
    """Holds at most `max_entries` entries; `format` turns one into a Text (newlines split it into
    rows), `measure` gives (rows, widest row in cells) of an entry without formatting it.

    The view follows the tail while it is scrolled to the bottom; scrolling up stops that, scrolling
    back to the bottom (or End) resumes it.
    """

    DEFAULT_CSS = """
    LogView { background: $surface; color: $text; overflow: auto; }
    LogView:focus { background-tint: $foreground 5%; }
    """

    def __init__(
        self,
        format: Callable[[Entry], Text],
        measure: Callable[[Entry], tuple[int, int]],
        *,
        max_entries: int,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self._format, self._measure = format, measure
        self.max_entries = max_entries
        self.following = True
        self._entries: list[Entry] = []
        # absolute first row of each entry (rows dropped off the front included)
        self._starts: list[int] = []
        self._serials: list[int] = []  # absolute number of each entry: the key of its cached strips
        self._next_serial = 0
        self._base_row = 0  # absolute row number of the first row still held
        self._end_row = 0  # absolute row number just past the last row
        self._width = 0
        self._strips: LRUCache[int, list[Strip]] = LRUCache(STRIP_CACHE_ENTRIES)
        # rows rendered so far (tests check that only visible rows are drawn)
        self.rendered_rows = 0

    # -- content -----------------------------------------------------------------------------------

    @property
    def entry_count(self) -> int:
        return len(self._entries)

    @property
    def row_count(self) -> int:
        return self._end_row - self._base_row

    def entries(self) -> list[Entry]:
        return list(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self._starts.clear()
        self._serials.clear()
        self._base_row = self._end_row = self._width = 0
        self._strips.clear()
        self.following = True
        self._resize()

    def extend(self, entries: Iterable[Entry]) -> None:
        """Append entries (oldest first), dropping the oldest beyond
        `max_entries`; keeps following the tail."""
        added = 0
        for entry in entries:
            rows, width = self._measure(entry)
            self._entries.append(entry)
            self._starts.append(self._end_row)
            self._serials.append(self._next_serial)
            self._next_serial += 1
            self._end_row += max(1, rows)
            self._width = max(self._width, width)
            added += 1
        if not added:
            return
        dropped_rows = self._trim()
        if not self.following and dropped_rows:
            # Keep the rows the reader is looking at in place while the
            # front of the ring falls away.
            self.set_scroll(self.scroll_x, max(0, self.scroll_y - dropped_rows))
        self._resize()

    def _trim(self) -> int:
        """Drop the oldest entries beyond the bound (in chunks, so a steady
        stream costs O(1) per entry)."""
        excess = len(self._entries) - self.max_entries
        if excess <= 0:
            return 0
        del self._entries[:excess], self._starts[:excess], self._serials[:excess]
        old_base = self._base_row
        self._base_row = self._starts[0] if self._starts else self._end_row
        return self._base_row - old_base

    def _resize(self) -> None:
        self.virtual_size = Size(self._width, self.row_count)
        self._stick_to_end()
        self.refresh()

    def _stick_to_end(self) -> None:
        """While following, show the last rows: now, and again once the layout is
        known (a view that just became visible, or whose horizontal scrollbar just
        appeared, learns its height only then)."""
        if not self.following:
            return
        self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.call_after_refresh(self._end_after_layout)

    def _end_after_layout(self) -> None:
        if self.following and self.scroll_y != self.max_scroll_y:
            self.scroll_end(animate=False, immediate=True, x_axis=False)

    # -- scrolling ---------------------------------------------------------------------------------

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if self.size.height:  # a hidden view cannot be scrolled by its reader: keep its mode
            self.following = new_value >= self.max_scroll_y

    def on_resize(self) -> None:
        self._stick_to_end()

    def on_show(self) -> None:
        self._stick_to_end()

    # -- drawing -----------------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        if self.following:
            # the scroll position may lag a frame behind a burst or a resize
            scroll_y = self.max_scroll_y
        width = self.size.width
        style = self.rich_style
        row = self._base_row + scroll_y + y
        if not self._entries or row >= self._end_row:
            return Strip.blank(width, style)
        index = bisect_right(self._starts, row) - 1
        strips = self._entry_strips(index)
        strip = strips[min(row - self._starts[index], len(strips) - 1)]
        return strip.crop_extend(scroll_x, scroll_x + width, style).apply_offsets(
            scroll_x, scroll_y + y
        )

    def _entry_strips(self, index: int) -> list[Strip]:
        serial = self._serials[index]
        strips = self._strips.get(serial)
        if strips is None:
            console, style = self.app.console, self.rich_style
            rows = self._format(self._entries[index]).split("\n", allow_blank=True)
            strips = []
            for text in rows:
                text.no_wrap = True
                text.stylize_before(style)
                strips.append(Strip(text.render(console), text.cell_len))
            self._strips[serial] = strips
            self.rendered_rows += len(strips)
        return strips

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()

    def plain_text(self) -> str:
        """Every row held, as plain text (tests and copy/paste)."""
        return "\n".join(self._format(entry).plain for entry in self._entries)


def text_measure(text: str, prefix_cells: int) -> tuple[int, int]:
    """(rows, widest row in cells) of a message shown after a prefix of
    `prefix_cells` cells (first row only)."""
    if "\n" not in text:
        return 1, prefix_cells + cell_len(text)
    first, *rest = text.split("\n")
    return 1 + len(rest), max(prefix_cells + cell_len(first), *(cell_len(part) for part in rest))
