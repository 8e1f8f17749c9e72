"""Rich progress for headless runs on a terminal: step, loss, samples/s and ETA on one line."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from trainer_core.protocol import Event


class ConsoleProgress:
    """An event listener: follows step/validation/finished events; knows nothing about training."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("[bold]step {task.completed:.0f}/{task.total:.0f}"),
            BarColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        self.task_id = self.progress.add_task("train", total=None, info="starting")
        self.val = ""

    def __enter__(self) -> ConsoleProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def on_event(self, event: Event) -> None:
        kind = event.type
        if kind == "step":
            eta = f"  ETA {event.eta_s / 60:.1f} min" if event.eta_s is not None else ""
            loss = f"{event.loss:.4f}" if event.loss is not None else "nan"
            info = f"loss {loss}  {event.samples_per_s:.1f} samples/s{self.val}{eta}"
            self.progress.update(self.task_id, completed=event.step, info=info)
        elif kind == "calibration":
            self.progress.update(self.task_id, total=event.planned_steps)
        elif kind == "validation":
            self.val = f"  val {event.loss:.4f}"
        elif kind in ("warning", "error"):
            self.progress.console.print(f"[yellow]{kind}:[/] {event.message}")
        elif kind == "checkpoint_saved":
            self.progress.console.print(f"saved {event.path}")
