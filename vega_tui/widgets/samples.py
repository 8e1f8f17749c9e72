"""The samples list: text samples shown inline, audio samples with their path, a play action that
uses a local player when there is one, and the `scp` command that fetches the file otherwise (the
usual case over SSH: the audio lives on the GPU box, the ears are at the laptop). Image samples (a
voice's mel and alignment pictures, listed after the same step's audio) are drawn beside the list
when highlighted (SamplePicture).

Samples are grouped by the evaluation (step) that wrote them, and `[` / `]` jump to the same
sentence at the previous / next evaluation, so one sentence can be heard as training goes on. A
sentence is known by its file name (`samples/step-N/01.wav` is the first `sample.sentences` entry at
every step; `mel.png` the same picture at every step)."""

from __future__ import annotations

import getpass
import shlex
import shutil
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import ListItem, ListView, Static

from trainer_core.contract.confined_path import PathEscapeError
from vega_tui.widgets.checkpoints import locate
from vega_tui.widgets.logs import clean
from vega_tui.widgets.sample_picture import SamplePicture

if TYPE_CHECKING:
    from textual.app import ComposeResult

    from vega_tui.run_state import RunState, SampleRow

SAMPLES_DIR = "samples"
MAX_TEXT_LINES = 8
ICONS = {"audio": "♪", "image": "▣", "text": "¶"}
# Players tried in order, with the flags that make them play once and exit without a window.
PLAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("paplay", ()),
    ("aplay", ("-q",)),
    ("afplay", ()),
    ("ffplay", ("-nodisp", "-autoexit", "-loglevel", "quiet")),
)


def find_player() -> list[str] | None:
    """The command prefix of the first local audio player found on PATH, or None."""
    for name, flags in PLAYERS:
        exe = shutil.which(name)
        if exe:
            return [exe, *flags]
    return None


def scp_command(host: str | None, path: Path) -> str:
    """The command to run on the laptop to fetch a file from this machine."""
    user = getpass.getuser()
    return f"scp {user}@{host or socket.gethostname()}:{shlex.quote(str(path))} ."


def play(player: list[str], path: Path) -> subprocess.Popen[bytes]:
    """Start the player on a file (argument list, own session, no pipes: it
    never blocks the dashboard)."""
    return subprocess.Popen(
        [*player, str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def sentence_key(sample: SampleRow) -> tuple[str, str]:
    """What stays the same for one sentence across evaluations: its kind and file name."""
    return sample.kind, Path(sample.path).name


def sample_text(sample: SampleRow, path: Path, first_of_step: bool = False) -> Text:
    """One list entry: a rule opening each step's group, a header line, then the text itself (text
    samples) or the file path and the sentence or caption (audio, image)."""
    text = Text()
    if first_of_step:
        text.append(f"── step {sample.step} ──\n", style="bold reverse")
    icon = ICONS.get(sample.kind, "·")
    text.append(f"{icon} step {sample.step} · {sample.kind} {Path(sample.path).stem}", style="bold")
    if sample.kind in ("audio", "image"):
        text.append(f"\n  {path}", style="dim")
        if sample.text:
            text.append(f"\n  “{clean(sample.text)}”")
        return text
    lines = clean(sample.text or "(empty sample)").splitlines() or [""]
    for line in lines[:MAX_TEXT_LINES]:
        text.append(f"\n  {line}")
    if len(lines) > MAX_TEXT_LINES:
        text.append(f"\n  … {len(lines) - MAX_TEXT_LINES} more lines in {path}", style="dim")
    return text


def appended(rows: Sequence[SampleRow], last: SampleRow | None) -> list[SampleRow] | None:
    """Rows after `last` (by identity); None when `last` was dropped from
    the bounded list (rebuild)."""
    if last is None:
        return list(rows)
    for index in range(len(rows) - 1, -1, -1):
        if rows[index] is last:
            return list(rows[index + 1 :])
    return None


class SampleItem(ListItem):
    def __init__(self, sample: SampleRow, path: Path, first_of_step: bool = False) -> None:
        super().__init__(Static(sample_text(sample, path, first_of_step)))
        self.sample = sample
        self.path = path


class SampleList(ListView):
    BINDINGS = [
        Binding("a", "screen.play_sample", "Play / fetch"),
        Binding("left_square_bracket", "same_sentence(-1)", "Earlier step"),
        Binding("right_square_bracket", "same_sentence(1)", "Later step"),
        Binding("w", "open_in_browser", "In browser", tooltip="Served: open it in the browser"),
    ]

    def action_open_in_browser(self) -> None:
        """Under `vega-tui serve`, the file goes to the browser (a WAV plays, a PNG shows); in a
        terminal, only a notice says where the file is."""
        item = self.highlighted_child
        if not isinstance(item, SampleItem):
            self.app.notify("no sample selected", severity="warning")
        elif not self.app.is_web:
            where = f"w opens a sample in the browser under vega-tui serve; here it is {item.path}"
            self.app.notify(where)
        elif not item.path.is_file():
            self.app.notify(f"{item.path} is not on this machine any more", severity="warning")
        else:
            self.app.deliver_binary(item.path, open_method="browser")
            self.app.notify(f"{item.path.name}: sent to the browser (a new tab)", timeout=4)

    def action_same_sentence(self, direction: int) -> None:
        index = same_sentence_index(
            [item.sample for item in self.query(SampleItem)], self.index, direction
        )
        if index is not None:
            self.index = index


def same_sentence_index(
    samples: Sequence[SampleRow], current: int | None, direction: int
) -> int | None:
    """The index of the nearest sample of the same sentence at an earlier
    (-1) or later (+1) step."""
    if current is None or not 0 <= current < len(samples):
        return None
    here = samples[current]
    order = range(current - 1, -1, -1) if direction < 0 else range(current + 1, len(samples))
    for index in order:
        other = samples[index]
        if sentence_key(other) == sentence_key(here) and other.step != here.step:
            return index
    return None


class SamplesPanel(Vertical):
    """The list, newest at the bottom, and a detail line for the highlighted sample."""

    DEFAULT_CSS = """
    SamplesPanel { height: 1fr; }
    SamplesPanel SampleList { height: 1fr; }
    SamplesPanel #sample-detail { height: auto; max-height: 3; padding: 0 1; background: $boost; }
    """

    def __init__(self, run_dir: Path, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.run_dir = run_dir
        self.host: str | None = None
        self._last: SampleRow | None = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="sample-body"):
            yield SampleList(id="sample-list")
            yield SamplePicture(id="sample-picture")
        yield Static(
            "no samples yet: the trainer writes them at each evaluation (press e to evaluate now)",
            id="sample-detail",
        )

    @property
    def list_view(self) -> SampleList:
        return self.query_one(SampleList)

    def update_from(self, state: RunState, host: str | None) -> None:
        self.host = host
        fresh = appended(state.samples, self._last)
        if fresh is None:
            self.list_view.clear()
            fresh = list(state.samples)
            self._last = None
        if not fresh:
            return
        items = []
        for row in fresh:
            opens_group = self._last is None or row.step != self._last.step
            self._last = row
            try:
                path = locate(self.run_dir, row.path, SAMPLES_DIR)
            except PathEscapeError as exc:  # never listed, so never shown, played or fetched
                self.notify(str(exc), severity="warning", timeout=10)
                continue
            items.append(SampleItem(row, path, opens_group))
        self.list_view.extend(items)
        if self.list_view.index is None:
            self.list_view.index = 0

    def items(self) -> list[SampleItem]:
        return list(self.query(SampleItem))

    def selected(self) -> SampleItem | None:
        child = self.list_view.highlighted_child
        return child if isinstance(child, SampleItem) else None

    def on_list_view_highlighted(self, event: ListView.Highlighted) -> None:
        item = event.item
        if isinstance(item, SampleItem):
            self.query_one("#sample-detail", Static).update(self.detail_text(item))
            self.show_picture(item)

    def show_picture(self, item: SampleItem) -> None:
        """Draw an image sample beside the list; any other kind hides the picture."""
        picture = self.query_one(SamplePicture)
        image = item.sample.kind == "image"
        picture.set_class(image, "-shown")
        if image:
            picture.show(item.path, item.sample.text)
        else:
            picture.clear()

    def detail_text(self, item: SampleItem) -> Text:
        """What the line under the list says about the highlighted sample
        (players looked up afresh)."""
        compare = " · [ ]: same sentence, earlier/later step"
        if self.app.is_web:  # served: the browser is where the ears and eyes are
            return Text(f"{item.sample.kind} sample · w: open it in the browser{compare}")
        if item.sample.kind == "image":
            fetch = scp_command(self.host, item.path)
            return Text(f"image sample · [ ]: same picture, earlier/later step · fetch: {fetch}")
        if item.sample.kind != "audio":
            return Text(f"text sample: {item.path}{compare}")
        player = find_player()
        if player:
            return Text(
                f"a: play with {Path(player[0]).name}{compare} · fetch:"
                f" {scp_command(self.host, item.path)}"
            )
        return Text(
            f"no local audio player{compare}; fetch it: {scp_command(self.host, item.path)}"
        )
