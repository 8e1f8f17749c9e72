"""`VegaApp`: the dashboard's shell. It opens the launch screen, the runs list or one run, and
routes between them; the screens do the work.

Screens are imported when first opened, not at start-up, so that the first frame does not wait
for the run dashboard or the plotting library. The command palette lists the current screen's
controls (its footer bindings) besides Textual's own commands, so every control can also be found
by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from textual.actions import ActionParseResult
from textual.app import App, SystemCommand
from textual.dom import DOMNode
from textual.screen import Screen

from vega_tui import read_only

if TYPE_CHECKING:
    from vega_tui.runner import TrainerProcess

StartScreen = Literal["launch", "attach", "runs"]


class BaseScreen(Screen[None]):
    """The empty screen under every other one: coming back to it means
    nothing is left open, so quit."""

    def __init__(self) -> None:
        super().__init__(id="_default")
        self._covered = False

    def on_screen_suspend(self) -> None:
        self._covered = True

    def on_screen_resume(self) -> None:
        if self._covered:
            self.app.exit()


class VegaApp(App[None]):
    """`VegaApp(start, run_dir, runs_root)`: open on the launch screen, a
    run (attach), or the runs list."""

    CSS_PATH = "app.tcss"
    TITLE = "Vega"

    def __init__(
        self,
        start: StartScreen = "launch",
        run_dir: Path | None = None,
        runs_root: Path | None = None,
        *,
        overrides: Sequence[str] = (),
        read_only: bool = False,
    ) -> None:
        super().__init__()
        if start not in ("launch", "attach", "runs"):
            raise ValueError(f"start must be launch, attach or runs, not {start!r}")
        if start == "attach" and run_dir is None:
            raise ValueError("start='attach' needs a run_dir")
        self.start = start
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.runs_root = Path(runs_root) if runs_root is not None else None
        self.overrides = list(overrides)
        self.read_only = read_only  # watch only: run_action refuses what changes or starts a run

    def get_default_screen(self) -> Screen:
        return BaseScreen()

    def on_mount(self) -> None:
        if self.start == "attach":
            assert self.run_dir is not None
            self.open_run(self.run_dir)
        elif self.start == "runs":
            self.open_runs()
        else:
            self.open_launch()

    # ------------------------------------------------------------------ navigation

    def open_launch(self) -> None:
        from vega_tui.screens.launch import LaunchScreen

        self.push_screen(LaunchScreen(self.runs_root, self.overrides))

    def open_runs(self) -> None:
        """The runs list; from the launch screen it opens on top, so Escape goes back."""
        from vega_tui.screens.runs import RunsScreen

        self.push_screen(RunsScreen(self.runs_root))

    def open_run(self, run_dir: Path, process: TrainerProcess | None = None) -> None:
        """The dashboard of one run: a live one with its controls, a finished one as a record."""
        from vega_tui.screens.run import RunScreen

        self.push_screen(RunScreen(Path(run_dir), process))

    # ------------------------------------------------------------------ read-only

    async def run_action(
        self,
        action: str | ActionParseResult,
        default_namespace: DOMNode | None = None,
        namespaces: Mapping[str, DOMNode] | None = None,
    ) -> bool:
        """Keys, footer clicks and the palette all come here: a read-only app refuses run
        controls, and quits without offering to stop a live run."""
        name = read_only.action_name(action) if self.read_only else ""
        if name in read_only.REFUSED:
            self.notify(read_only.notice(name), severity="warning", timeout=6)
            return True
        if name == "quit":
            self.exit()
            return True
        return await super().run_action(action, default_namespace, namespaces)

    # ------------------------------------------------------------------ command palette

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The screen's own controls first (as in its footer), then
        Textual's commands not already listed."""
        seen: set[str] = set()
        for command in self._screen_commands(screen):
            seen.add(command.title.lower())
            yield command
        for command in super().get_system_commands(screen):
            if command.title.lower() not in seen:
                yield command

    def _screen_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        for _key, active in screen.active_bindings.items():
            binding = active.binding
            if not (binding.show and binding.description and active.enabled):
                continue
            help_text = f"key: {self.get_key_display(binding)}" + (
                f" - {binding.tooltip}" if binding.tooltip else ""
            )
            yield SystemCommand(
                binding.description,
                help_text,
                partial(self.run_action, binding.action, active.node),
            )
