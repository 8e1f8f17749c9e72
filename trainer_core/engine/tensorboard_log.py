"""Optional TensorBoard scalars and audio samples (`[logging] tensorboard = true`),
written from the event stream.

An event listener like the console: it sees exactly what events.jsonl records (every step of each
coalesced `step` event, validations, memory), so the two never disagree. Files go to
RUN/tensorboard/. The `tensorboard` package is optional; without it the run goes on
and a warning says how to get it.
"""

from __future__ import annotations

from pathlib import Path

from trainer_core.contract.protocol import Event, SampleEvent, StepEvent, ValidationEvent

FOLDER = "tensorboard"


class TensorBoardScalars:
    def __init__(self, run_dir: Path) -> None:
        # Imported here: torch.utils.tensorboard needs the optional tensorboard package.
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / FOLDER))

    def on_event(self, event: Event) -> None:
        if isinstance(event, StepEvent):
            self._step(event)
        elif isinstance(event, ValidationEvent):
            if event.loss is not None:
                self.writer.add_scalar("val/loss", event.loss, event.step)
            for name, value in event.metrics.items():
                self.writer.add_scalar(f"val/{name}", value, event.step)
        elif isinstance(event, SampleEvent) and event.kind == "audio":
            self._audio(event)

    def _audio(self, event: SampleEvent) -> None:
        """The sample's wav, as TensorBoard audio tagged by sentence
        (`samples/01`), so steps line up."""
        import soundfile
        import torch

        try:
            wave, rate = soundfile.read(event.path, dtype="float32", always_2d=True)
        except (OSError, RuntimeError):
            # the sample event stands in the log; a missing file only leaves TensorBoard without it
            return
        tag = f"samples/{Path(event.path).stem}"
        self.writer.add_audio(tag, torch.from_numpy(wave[:, 0]), event.step, sample_rate=rate)

    def _step(self, event: StepEvent) -> None:
        for step, loss, lr in zip(
            event.step_series, event.loss_series, event.lr_series, strict=False
        ):
            if loss is not None:
                self.writer.add_scalar("train/loss", loss, step)
            self.writer.add_scalar("train/lr", lr, step)
        self.writer.add_scalar("train/samples_per_s", event.samples_per_s, event.step)
        self.writer.add_scalar("train/data_wait_frac", event.data_wait_frac, event.step)
        if event.grad_norm is not None:
            self.writer.add_scalar("train/grad_norm", event.grad_norm, event.step)
        if event.loss_scale is not None:
            self.writer.add_scalar("train/loss_scale", event.loss_scale, event.step)

    def close(self) -> None:
        self.writer.close()


def open_tensorboard(run_dir: Path) -> tuple[TensorBoardScalars | None, str | None]:
    """(writer, None), or (None, why not) when the tensorboard package is missing or broken."""
    try:
        return TensorBoardScalars(run_dir), None
    except ImportError as exc:
        return (
            None,
            (
                f"logging.tensorboard = true, but TensorBoard cannot be used ({exc}); install it"
                ' with `pip install "vega[tensorboard]"` (or `pip install tensorboard`), or set'
                " logging.tensorboard = false. Training goes on without it"
            ),
        )
