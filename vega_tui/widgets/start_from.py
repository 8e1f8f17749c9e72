"""The launch screen's "Start from" section: the models found to start from, and a typed path.

The list (`#start-from`, a `ChoiceList`) holds "nothing (from scratch)", the finished runs and
exports of the profile's kind under the runs folder and, for vits profiles, the Piper voices
under the machine file's `[voices] dirs` (found by `vega_tui.start_points.post_start_points` on
a worker thread). Under it, a field (`#start-path`) takes any run folder, checkpoint, export,
Piper `.ckpt`, transformers VITS folder or hub id (`hf:ORG/NAME`): once typing settles, a worker
thread checks it (`post_start_path`, torch-free) and posts the answer; a good path joins the
list, chosen, and a bad one says why under the field
and blocks Start (`problem`) until it is fixed or cleared. `Changed` tells the screen what
`--init-from` is now (None: from scratch) and why Start must wait.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Input, Static

from vega_tui.screens import run_in_background
from vega_tui.start_points import SCRATCH, StartPathChecked, post_start_path, start_choices
from vega_tui.widgets.choice_list import Choice, ChoiceList

# Typing settles for this long before the path is checked.
CHECK_DELAY_S = 0.4
PLACEHOLDER = "or type a path to start from"  # short: ~30 cells wide at 80x24
TOOLTIP = (
    "a run folder, a checkpoint (.pt), an export folder, a Piper checkpoint (.ckpt),"
    " a transformers VITS folder or a hub model (hf:ORG/NAME)"
)


class StartFrom(Vertical):
    """The list of models to start from and the typed path; `value` is what `--init-from` gets."""

    DEFAULT_CSS = """
    StartFrom { height: auto; }
    StartFrom #start-path { margin: 0 1 0 0; }
    StartFrom #start-path-status { height: auto; color: $text-muted; }
    StartFrom #start-path-status.-problem { color: $text-error; }
    """

    @dataclass
    class Changed(Message):
        """What the run starts from (`value`: a path for `--init-from`, None: from scratch) or what
        keeps Start waiting (`problem`) changed."""

        value: str | None
        problem: str | None

    @dataclass
    class Confirmed(Message):
        """Enter in the path field, and the path is good: the screen moves on to Start."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.kind: str | None = None  # the model kind the list was found for
        self.found: list[Choice] = start_choices([], None)
        self.typed: Choice | None = None  # the typed path, once checked good
        self.path_text = ""
        self.path_error: str | None = None
        self.checking = False
        self._checked_kind: str | None = None  # the kind the typed path was checked against
        self._generation = 0  # bumps on every edit: a check answers one generation
        self._timer: Timer | None = None
        self._told: tuple[str | None, str | None] | None = None  # the screen's (value, problem)
        self._submitted = False  # Enter in the path field: confirm once the path is good

    def compose(self) -> ComposeResult:
        yield ChoiceList(id="start-from")
        path = Input(id="start-path", placeholder=PLACEHOLDER, compact=True)
        path.tooltip = TOOLTIP
        yield path
        yield Static("", id="start-path-status")

    def on_mount(self) -> None:
        self._show_list()

    # ---------------------------------------------------------------------------------- state

    @property
    def value(self) -> str | None:
        """The chosen model's path, or None when the run starts from scratch."""
        chosen = self.query_one(ChoiceList).value
        return None if chosen in (None, SCRATCH) else chosen

    @property
    def problem(self) -> str | None:
        """Why Start must wait: the typed path is being checked, or cannot be started from."""
        if self.checking:
            return "checking the path to start from…"
        if self.path_error is not None:
            return f"start from: {self.path_error}"
        return None

    def show_found(self, choices: list[Choice], kind: str | None) -> None:
        """The models found for `kind`; a typed path is checked again when the kind changed."""
        self.found, self.kind = list(choices), kind
        if self.path_text and kind != self._checked_kind:
            self._check_path_soon(0.0)
        self._show_list()

    # --------------------------------------------------------------------------------- typing

    @on(Input.Changed, "#start-path")
    def _check_typed_path(self, event: Input.Changed) -> None:
        event.stop()
        text = event.value.strip()
        if text == self.path_text:
            return
        self.path_text, self._submitted = text, False
        self._check_path_soon(CHECK_DELAY_S)

    @on(Input.Submitted, "#start-path")
    def _confirm_typed_path(self, event: Input.Submitted) -> None:
        event.stop()
        self._submitted = True
        if self._timer is not None:  # still waiting for typing to settle: check now
            self._check_path_soon(0.0)
        self._confirm_if_submitted()

    def _confirm_if_submitted(self) -> None:
        if self._submitted and not self.checking:
            self._submitted = False
            if self.path_error is None:
                self.post_message(self.Confirmed())

    def _check_path_soon(self, delay: float) -> None:
        """Forget the last answer (a late one is dropped); check the path after `delay` seconds."""
        self._generation += 1
        self.typed, self.path_error = None, None
        self.checking = bool(self.path_text)
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        if self.checking and delay > 0:
            self._timer = self.set_timer(delay, self._check_path)
        elif self.checking:
            self._check_path()
        self._show_status()
        self._show_list()  # the typed choice leaves the list until checked again

    def _check_path(self) -> None:
        self._timer = None
        self._checked_kind = self.kind
        args = (self._generation, self.path_text, self.kind, self.post_message)
        run_in_background(post_start_path, *args, name="vega-start-path")

    @on(StartPathChecked)
    def _apply_path_check(self, message: StartPathChecked) -> None:
        message.stop()
        if message.generation != self._generation:
            return
        self.checking = False
        self.typed, self.path_error = message.choice, message.error
        self._show_status()
        self._show_list(message.choice.value if message.choice is not None else None)
        self._confirm_if_submitted()

    # -------------------------------------------------------------------------------- showing

    def _show_list(self, wanted: str | None = None) -> None:
        """The found models with the typed one after "nothing"; the choice stays (or moves to
        `wanted`)."""
        choices, typed = self.query_one(ChoiceList), self.typed
        found = [choice for choice in self.found if typed is None or choice.value != typed.value]
        listed = [*found[:1], *([typed] if typed else []), *found[1:]]
        choices.set_choices(listed, wanted)
        self._post_value()

    @on(ChoiceList.Changed, "#start-from")
    def _tell_choice(self, event: ChoiceList.Changed) -> None:
        event.stop()
        self._post_value()

    def _post_value(self) -> None:
        """Tell the screen when the value or the problem changed."""
        now = (self.value, self.problem)
        if now != self._told:
            self._told = now
            self.post_message(self.Changed(*now))

    def _show_status(self) -> None:
        status = self.query_one("#start-path-status", Static)
        status.set_class(self.path_error is not None, "-problem")
        if self.checking:
            status.update("checking…")
        elif self.path_error is not None:
            status.update(f"✗ {self.path_error}")
        elif self.typed is not None:
            status.update(f"✓ {self.typed.label}: chosen above")
        else:
            status.update("")
