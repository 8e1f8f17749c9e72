"""Rich progress for headless runs on a terminal: step, loss, samples/s and ETA on one line.

Warnings and errors reach the terminal through logging (trainer.log's
format), not through this display.
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from trainer_core.contract.protocol import (
    CalibrationEvent,
    CheckpointSavedEvent,
    Event,
    StepEvent,
    ValidationEvent,
)


class ConsoleProgress:
    """An event listener: follows step/validation/finished events; knows nothing about training."""

    def __init__(self, total_steps: int | None = None) -> None:
        """`total_steps`: the planned length when known up front (a time budget plans it later)."""
        self.progress = Progress(
            TextColumn("[bold]step {task.fields[steps]}"),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        self.total = total_steps
        self.task_id = self.progress.add_task(
            "train", total=total_steps, info="starting", steps=self._steps(0)
        )
        self.val = ""

    def _steps(self, done: int) -> str:
        return f"{done}/{self.total}" if self.total else str(done)

    def __enter__(self) -> ConsoleProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def on_event(self, event: Event) -> None:
        if isinstance(event, StepEvent):
            eta = f"  ETA {event.eta_s / 60:.1f} min" if event.eta_s is not None else ""
            loss = f"{event.loss:.4f}" if event.loss is not None else "nan"
            info = f"loss {loss}  {event.samples_per_s:.1f} samples/s{self.val}{eta}"
            self.progress.update(
                self.task_id, completed=event.step, info=info, steps=self._steps(event.step)
            )
        elif isinstance(event, CalibrationEvent):
            self.total = event.planned_steps
            self.progress.update(self.task_id, total=event.planned_steps)
        elif isinstance(event, ValidationEvent):
            self.val = f"  val {event.loss:.4f}" if event.loss is not None else "  val nan"
        elif isinstance(event, CheckpointSavedEvent):
            self.progress.console.print(f"saved {event.path}")
