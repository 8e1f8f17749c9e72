"""A single-choice list for keyboard users: the highlighted option is the choice.

Arrow keys move the choice (no extra key to confirm it), disabled options say why they cannot be
chosen, and a marker keeps the choice visible when the list does not have focus. Enter posts
`ChoiceList.Confirmed`, which the launch screen uses to move on to Start.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

SELECTED_MARK = "● "
UNSELECTED_MARK = "○ "


@dataclass(frozen=True)
class Choice:
    """One option: `label` is the short name, `detail` a dim explanation,
    `style` colours the label."""

    value: str
    label: str
    detail: str = ""
    disabled: bool = False
    style: str = ""


class ChoiceList(OptionList):
    """An OptionList whose highlight is its value; posts `Changed` only when
    the value really changes."""

    class Changed(Message):
        """The choice moved to `value`."""

        def __init__(self, choice_list: ChoiceList, value: str) -> None:
            super().__init__()
            self.choice_list = choice_list
            self.value = value

        @property
        def control(self) -> ChoiceList:
            return self.choice_list

    class Confirmed(Message):
        """Enter was pressed on the current choice."""

        def __init__(self, choice_list: ChoiceList, value: str) -> None:
            super().__init__()
            self.choice_list = choice_list
            self.value = value

        @property
        def control(self) -> ChoiceList:
            return self.choice_list

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, markup=False)
        self._choices: list[Choice] = []
        self._value: str | None = None

    @property
    def value(self) -> str | None:
        return self._value

    @property
    def choices(self) -> list[Choice]:
        return list(self._choices)

    def set_choices(self, choices: Iterable[Choice], value: str | None = None) -> None:
        """Replace the options; keep `value` (or the current one) when it is still enabled."""
        self._choices = list(choices)
        wanted = value if value is not None else self._value
        self._value = self._first_enabled(wanted)
        self.set_options(self._option(choice) for choice in self._choices)
        self._highlight_value()

    def select(self, value: str) -> bool:
        """Move the choice to `value`; False when it is not an enabled option."""
        if self._first_enabled(value) != value:
            return False
        self._set_value(value)
        self._highlight_value()
        return True

    def _first_enabled(self, wanted: str | None) -> str | None:
        enabled = [choice.value for choice in self._choices if not choice.disabled]
        if wanted in enabled:
            return wanted
        return enabled[0] if enabled else None

    def _highlight_value(self) -> None:
        index = next((i for i, c in enumerate(self._choices) if c.value == self._value), None)
        self.highlighted = index

    def _option(self, choice: Choice) -> Option:
        return Option(self._prompt(choice), id=choice.value, disabled=choice.disabled)

    def _prompt(self, choice: Choice) -> Text:
        mark = SELECTED_MARK if choice.value == self._value else UNSELECTED_MARK
        text = Text(mark, style="bold" if choice.value == self._value else "dim")
        text.append(choice.label, style=choice.style or ("bold" if not choice.disabled else ""))
        if choice.detail:
            text.append("  ")
            text.append(choice.detail, style="dim" if not choice.disabled else "")
        return text

    def _set_value(self, value: str) -> None:
        """Record the new value and redraw the two options whose marker changed."""
        previous, self._value = self._value, value
        for choice in self._choices:
            if choice.value in (previous, value):
                self.replace_option_prompt(choice.value, self._prompt(choice))
        if previous != value:
            self.post_message(self.Changed(self, value))

    @on(OptionList.OptionHighlighted)
    def _follow_highlight(self, event: OptionList.OptionHighlighted) -> None:
        event.stop()
        if event.option_id is not None and event.option_id != self._value:
            self._set_value(event.option_id)

    @on(OptionList.OptionSelected)
    def _confirm(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option_id is not None:
            self.post_message(self.Confirmed(self, event.option_id))
