"""Pictures of one held-out clip at each evaluation of a voice run: recorded vs
predicted mel, and the alignment.

The clip is fixed for the run: the held-out recording of middle length. The model runs
teacher-forced on it, as in training (`AcousticModel.teacher_forced`): MAS aligns the recording to
its text and the decoder predicts the mel along that path. Two PNGs go in the evaluation's sample
folder, each announced as an "image" sample:

- `mel.png`: the recorded log-mel above the predicted one, on one colour scale;
- `alignment.png`: text symbols x mel frames, each frame's log-likelihood under
  every symbol's mean relative to
  the frame's most likely symbol (how sure the model is where a frame belongs), with MAS's hard path
  drawn on it.

matplotlib is imported only when a picture is drawn, and draws with its Agg canvas
(no display, no pyplot state).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trainer_core.atomic import write_whole
from trainer_core.contract.rundir import ALIGNMENT_VIEW, MEL_VIEW
from trainer_core.models.base import SampleResult, batch_to

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from trainer_core.data.voice_dataset import VoiceDataset
    from trainer_core.models.text_frontend import TextEncoder
    from trainer_core.models.tts import AcousticModel

DPI = 100
MEL_FIGSIZE = (8.0, 5.0)  # inches: 800 x 500 pixels at DPI
ALIGNMENT_FIGSIZE = (8.0, 4.0)  # 800 x 400 pixels
# With more symbols than this the text axis shows positions: the labels would overlap.
MAX_SYMBOL_LABELS = 60
# Log-likelihood gaps below this (nats, summed over mel bins) draw darkest; the
# closer ones are the contenders.
LIKELIHOOD_FLOOR = -200.0
# Fixed margins (figure fractions) in place of constrained layout, which took 40 % of each
# picture's time; the colour bar takes its share of the right side from these.
MEL_MARGINS = {"left": 0.07, "right": 0.99, "bottom": 0.09, "top": 0.89, "hspace": 0.3}
ALIGNMENT_MARGINS = {"left": 0.07, "right": 0.99, "bottom": 0.12, "top": 0.9}
# Shown for symbols that are invisible on an axis.
VISIBLE_SYMBOLS = {" ": "␣", "\t": "⇥", "\n": "↵"}


@dataclass(frozen=True)
class ClipView:
    """The fixed clip as the model sees it at one step, on the CPU."""

    step: int
    item_id: str
    text: str
    symbols: list[str]
    """One per text token, in order."""
    target: np.ndarray
    """(n_mels, frames) the recorded log-mel."""
    predicted: np.ndarray
    """(n_mels, frames) the teacher-forced prediction, log-mel."""
    likelihood: np.ndarray
    """(tokens, frames) each frame's log-likelihood under each symbol, minus
    the frame's best (so <= 0)."""
    path: np.ndarray
    """(frames,) the token MAS gives each frame."""

    @property
    def mel_l1(self) -> float:
        return float(np.abs(self.predicted - self.target).mean())


def middle_clip(val_ids: Sequence[int], frames: Sequence[int]) -> int | None:
    """The held-out item of middle length (the earlier of equals), or None
    when nothing is held out."""
    if not val_ids:
        return None
    ordered = sorted(val_ids, key=lambda index: (frames[index], index))
    return ordered[len(ordered) // 2]


class ClipViews:
    """Draws a voice task's fixed clip; the clip is chosen once, on first use."""

    def __init__(self, dataset: VoiceDataset, encoder: TextEncoder) -> None:
        self.dataset, self.encoder = dataset, encoder
        self._clip: int | None = None
        self._picked = False

    def clip(self) -> int | None:
        if not self._picked:
            self._clip = middle_clip(self.dataset.val_ids, self.dataset.features.frames)
            self._picked = True
        return self._clip

    def view(self, model: AcousticModel, step: int) -> ClipView | None:
        """The clip through the model in eval mode (its mode restored after);
        None when nothing is held out."""
        index = self.clip()
        if index is None:
            return None
        was_training = model.training
        model.eval()
        try:
            return self._view(model, index, step)
        finally:
            model.train(was_training)

    def _view(self, model: AcousticModel, index: int, step: int) -> ClipView:
        batch = batch_to(self.dataset.collate([index]), model.mel_mean.device)
        seen = model.teacher_forced(
            batch["text"],
            batch["text_lens"],
            batch["mel"],
            batch["mel_lens"],
            batch.get("f0"),
            batch.get("speaker"),
        )
        likelihood = seen.log_likelihood[0].float()
        features = self.dataset.features
        return ClipView(
            step=step,
            item_id=features.item_ids[index],
            text=features.texts[index],
            symbols=[self.encoder.symbols[i] for i in batch["text"][0].tolist()],
            target=batch["mel"][0].float().cpu().numpy(),
            predicted=seen.mel[0].float().cpu().numpy(),
            likelihood=(likelihood - likelihood.max(dim=0, keepdim=True).values).cpu().numpy(),
            path=seen.path[0].argmax(dim=0).cpu().numpy(),
        )

    def write(self, model: AcousticModel, folder: Path, step: int) -> list[SampleResult]:
        """mel.png and alignment.png of the clip in `folder`, described for
        `sample` events; none without a clip."""
        view = self.view(model, step)
        if view is None:
            return []
        folder.mkdir(parents=True, exist_ok=True)
        mel, alignment = folder / MEL_VIEW, folder / ALIGNMENT_VIEW
        save(mel_figure(view), mel)
        save(alignment_figure(view), alignment)
        frames, symbols = view.target.shape[1], len(view.symbols)
        return [
            SampleResult(
                "image",
                mel,
                f"{view.item_id}: recorded vs predicted mel (teacher-forced), L1 {view.mel_l1:.3f}",
            ),
            SampleResult(
                "image",
                alignment,
                f"{view.item_id}: alignment of {symbols} symbols to {frames} frames",
            ),
        ]


def new_figure(size: tuple[float, float]) -> Figure:
    """A figure on matplotlib's Agg canvas: drawn in memory, never shown, no
    global pyplot state to leak; its axes are placed by fixed margins."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, dpi=DPI)
    FigureCanvasAgg(figure)
    return figure


def save(figure: Figure, path: Path) -> None:
    """The picture as `path`, atomically (a kill never leaves a torn view)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, dpi=DPI, format="png")
    write_whole(path, buffer.getvalue(), "sample_write")


def mel_figure(view: ClipView) -> Figure:
    """The recorded mel above the predicted one, one colour scale for both (one colour bar)."""
    figure = new_figure(MEL_FIGSIZE)
    top, bottom = figure.subplots(2, 1, sharex=True, gridspec_kw=MEL_MARGINS)
    low = float(min(view.target.min(), view.predicted.min()))
    high = float(max(view.target.max(), view.predicted.max()))
    panels = (
        (top, view.target, "recorded"),
        (bottom, view.predicted, "predicted (teacher-forced)"),
    )
    images = [
        axes.imshow(
            mel,
            origin="lower",
            aspect="auto",
            cmap="magma",
            vmin=low,
            vmax=high,
            interpolation="nearest",
        )
        for axes, mel, _ in panels
    ]
    for axes, _, title in panels:
        axes.set_title(title, fontsize=9)
        axes.set_ylabel("mel bin")
    bottom.set_xlabel("frame")
    figure.colorbar(images[0], ax=[top, bottom], label="log-mel")
    figure.suptitle(f"step {view.step} · {view.item_id} · mel L1 {view.mel_l1:.3f}", fontsize=10)
    return figure


def alignment_figure(view: ClipView) -> Figure:
    """Text symbols (up) x frames (across): the likelihood map, and MAS's path as a line over it."""
    figure = new_figure(ALIGNMENT_FIGSIZE)
    axes = figure.subplots(gridspec_kw=ALIGNMENT_MARGINS)
    shown = np.maximum(view.likelihood, LIKELIHOOD_FLOOR)
    image = axes.imshow(
        shown,
        origin="lower",
        aspect="auto",
        cmap="viridis",
        vmin=LIKELIHOOD_FLOOR,
        vmax=0.0,
        interpolation="nearest",
    )
    axes.plot(
        np.arange(view.path.shape[0]), view.path, color="red", linewidth=2.0, drawstyle="steps-mid"
    )
    tokens = len(view.symbols)
    if tokens <= MAX_SYMBOL_LABELS:
        axes.set_yticks(
            range(tokens), labels=[VISIBLE_SYMBOLS.get(s, s) for s in view.symbols], fontsize=6
        )
    axes.set_xlabel("frame")
    axes.set_ylabel("text symbol")
    figure.colorbar(image, ax=axes, label="log-likelihood vs best")
    text = view.text if len(view.text) <= 70 else view.text[:69] + "…"
    axes.set_title(f"step {view.step} · {view.item_id}: {text}", fontsize=9)
    return figure
