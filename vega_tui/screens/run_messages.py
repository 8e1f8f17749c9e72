"""Messages the run dashboard's threads post to its screen.

The event follower, the thread workers (resources probe, checkpoint file scan, liveness check,
control commands, resumed trainer, sample player, Piper export) never touch a widget: each
posts one of these messages and the matching `on_*` handler of
`vega_tui.screens.run.RunScreen` applies it on the app thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from trainer_core.contract.protocol import Event
    from trainer_core.contract.resources import MachineResources
    from vega_tui.runner import TrainerProcess
    from vega_tui.store import RunStore
    from vega_tui.widgets.checkpoints import RunFiles


class EventsArrived(Message):
    """A batch of events from the follower thread, with the reader's running counters."""

    def __init__(self, events: list[Event], malformed: int, gaps: int) -> None:
        super().__init__()
        self.events, self.malformed, self.gaps = events, malformed, gaps


class StoreReady(Message):
    """A store built by the follower thread: a preview of a big log (exact
    False), then its whole history."""

    def __init__(self, store: RunStore, exact: bool) -> None:
        super().__init__()
        self.store, self.exact = store, exact


class HistoryProgress(Message):
    def __init__(self, fraction: float) -> None:
        super().__init__()
        self.fraction = fraction


class ResourcesRead(Message):
    def __init__(self, resources: MachineResources | None, error: str | None = None) -> None:
        super().__init__()
        self.resources, self.error = resources, error


class FilesScanned(Message):
    def __init__(self, files: RunFiles) -> None:
        super().__init__()
        self.files = files


class TrainerChecked(Message):
    """Whether the trainer process lives; for a dead one, the run's status
    on disk and trainer.log's tail."""

    def __init__(
        self, alive: bool, status: str | None = None, log_tail: list[str] | None = None
    ) -> None:
        super().__init__()
        self.alive, self.status, self.log_tail = alive, status, log_tail or []


class CommandReplied(Message):
    def __init__(self, cmd: str, ok: bool, text: str, then_exit: bool = False) -> None:
        super().__init__()
        self.cmd, self.ok, self.text, self.then_exit = cmd, ok, text, then_exit


class ResumeSpawned(Message):
    def __init__(self, process: TrainerProcess | None, step: int, error: str | None = None) -> None:
        super().__init__()
        self.process, self.step, self.error = process, step, error


class PiperExported(Message):
    """`trainer-core export --piper RUN` ended: the files it wrote, or why it wrote none."""

    def __init__(self, onnx: str | None, config: str | None, error: str | None = None) -> None:
        super().__init__()
        self.onnx, self.config, self.error = onnx, config, error
