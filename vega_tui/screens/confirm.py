"""A reusable modal question: one button per answer, each also reachable by its own key.

    choice = await app.push_screen_wait(ConfirmScreen("Stop the run?", [("s", "Stop", "stop"),
                                                                         ("c", "Cancel", None)]))

or with a callback: `app.push_screen(ConfirmScreen(...), callback)`. The screen dismisses with the
chosen value; Escape dismisses with `escape_value` (None unless given). Left/Right or Tab move
between buttons and Enter presses the focused one, so no mouse is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static
from textual.widgets.button import ButtonVariant


class ConfirmScreen(ModalScreen[Any]):
    """Ask `question`; `choices` are (key, label, value) triples, the first one focused."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("left", "app.focus_previous", "Previous", show=False),
        Binding("right", "app.focus_next", "Next", show=False),
    ]

    def __init__(
        self, question: str, choices: Sequence[tuple[str, str, Any]], *, escape_value: Any = None
    ) -> None:
        super().__init__()
        if not choices:
            raise ValueError("ConfirmScreen needs at least one choice")
        self.question = question
        self.choices = list(choices)
        self.escape_value = escape_value

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog"):
            yield Static(self.question, id="confirm-question", markup=False)
            with Horizontal(id="confirm-buttons"):
                for index, (key, label, _value) in enumerate(self.choices):
                    variant: ButtonVariant = "primary" if index == 0 else "default"
                    # Text: no markup
                    yield Button(Text(f"{label} [{key}]"), id=f"confirm-{index}", variant=variant)

    def on_mount(self) -> None:
        self.query_one("#confirm-0", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        index = int((event.button.id or "confirm-0").removeprefix("confirm-"))
        self.dismiss(self.choices[index][2])

    def on_key(self, event: events.Key) -> None:
        """A choice's own key answers at once (case-insensitive)."""
        pressed = (event.character or event.key).lower()
        for key, _label, value in self.choices:
            if key.lower() == pressed or key.lower() == event.key:
                event.stop()
                event.prevent_default()
                self.dismiss(value)
                return

    def action_cancel(self) -> None:
        self.dismiss(self.escape_value)
