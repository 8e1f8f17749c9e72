"""Editing a run's notes and tags: a modal with the notes (free text) and the tags (one line).

Dismisses with (notes, tags) on ctrl+s, or None on Escape; the runs screen writes them
(`vega_tui.run_notes.write_notes`) on a background thread.
"""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static, TextArea

from vega_tui.run_notes import RunNotes, parse_tags

NotesAnswer = tuple[str, list[str]] | None


class NotesScreen(ModalScreen[NotesAnswer]):
    """The notes and tags of the run named `name`."""

    BINDINGS = [
        Binding("ctrl+s", "save", "Save"),
        Binding("escape", "cancel", "Cancel"),
    ]

    def __init__(self, name: str, notes: RunNotes) -> None:
        super().__init__()
        self.run_name = name
        self.notes = notes

    def compose(self) -> ComposeResult:
        with Vertical(id="notes-dialog"):
            yield Static(f"Notes on {self.run_name}", id="notes-title", markup=False)
            if self.notes.problem:
                yield Static(
                    f"⚠ {self.notes.problem} (saving replaces it)",
                    id="notes-problem",
                    markup=False,
                )
            yield TextArea(self.notes.notes, id="notes-text", soft_wrap=True)
            yield Input(
                ", ".join(self.notes.tags),
                placeholder="tags, separated by commas",
                id="notes-tags",
            )
            yield Static(
                "ctrl+s (or Enter in the tags) saves · Esc cancels · Tab: notes/tags",
                id="notes-help",
            )

    def on_mount(self) -> None:
        self.query_one("#notes-text", TextArea).focus()

    @on(Input.Submitted)
    def _save_on_enter(self) -> None:
        self.action_save()

    def action_save(self) -> None:
        notes = self.query_one("#notes-text", TextArea).text
        tags = parse_tags(self.query_one("#notes-tags", Input).value)
        self.dismiss((notes, tags))

    def action_cancel(self) -> None:
        self.dismiss(None)
