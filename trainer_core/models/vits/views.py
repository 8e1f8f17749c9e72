"""Pictures of one held-out clip at each evaluation of a VITS voice: its mel and its alignment.

The same two pictures as a two-stage voice (`models.voice_views` draws them): `mel.png`, the
recording's log-mel above the mel of the clip re-made through the posterior and the decoder, and
`alignment.png`, text symbols x frames, each frame's log-likelihood under each symbol's prior (the
latent after the flow, as monotonic alignment search scores it, from the posterior mean so the
picture does not flicker with noise) with the search's path.
"""

from __future__ import annotations

from pathlib import Path

import torch

from trainer_core.contract.rundir import ALIGNMENT_VIEW, MEL_VIEW
from trainer_core.data.vits_dataset import VitsDataset
from trainer_core.models.alignment import monotonic_alignment_search
from trainer_core.models.base import SampleResult, batch_to
from trainer_core.models.vits.batch_audio import BatchAudio
from trainer_core.models.vits.symbols import SymbolTable
from trainer_core.models.vits.synthesizer import Synthesizer, prior_log_likelihood
from trainer_core.models.voice_task import samples_folder
from trainer_core.models.voice_views import (
    ClipView,
    alignment_figure,
    mel_figure,
    middle_clip,
    save,
)


class VitsViews:
    """Draws a VITS task's fixed clip; the clip is chosen once, on first use."""

    def __init__(self, dataset: VitsDataset, symbols: SymbolTable, audio: BatchAudio) -> None:
        self.dataset, self.symbols, self.audio = dataset, symbols, audio
        self._clip: int | None = None
        self._picked = False

    def clip(self) -> int | None:
        if not self._picked:
            self._clip = middle_clip(self.dataset.val_ids, self.dataset.lengths)
            self._picked = True
        return self._clip

    @torch.no_grad()
    def view(self, model: Synthesizer, step: int) -> ClipView | None:
        index = self.clip()
        if index is None:
            return None
        was_training = model.training
        model.eval()
        try:
            return self._view(model, index, step)
        finally:
            model.train(was_training)

    def _view(self, model: Synthesizer, index: int, step: int) -> ClipView:
        batch = batch_to(self.dataset.collate([index]), next(model.parameters()).device)
        length = batch["wave_lens"]
        spec, spec_lens = self.audio.spectrogram(batch["wave"][:, : int(length[0])], length)
        speaker = batch.get("speaker")
        g = model.speaker(speaker)
        text = model.enc_p(batch["text"], batch["text_lens"])
        posterior = model.enc_q.stats(spec, spec_lens, g=g)
        z_p = model.flow(posterior.m, posterior.mask, g=g)
        likelihood = prior_log_likelihood(z_p, text.m, text.logs)[0].transpose(0, 1).float()
        path = monotonic_alignment_search(likelihood[None], batch["text_lens"], spec_lens)[0]
        heard = model.reconstruct(spec, spec_lens, speaker)
        vocabulary = self.symbols.vocabulary()
        return ClipView(
            step=step,
            item_id=self.dataset.waves.item_ids[index],
            text=self.dataset.waves.texts[index],
            symbols=[vocabulary[i] or "?" for i in batch["text"][0].tolist()],
            target=self.audio.mel_of_spectrogram(spec)[0].float().cpu().numpy(),
            predicted=self.audio.mel(heard)[0].float().cpu().numpy()[:, : int(spec_lens[0])],
            likelihood=(likelihood - likelihood.max(dim=0, keepdim=True).values).cpu().numpy(),
            path=path.argmax(dim=0).cpu().numpy(),
        )

    def write(self, model: Synthesizer, out_dir: Path, step: int) -> list[SampleResult]:
        view = self.view(model, step)
        if view is None:
            return []
        folder = samples_folder(out_dir, step)
        folder.mkdir(parents=True, exist_ok=True)
        mel, alignment = folder / MEL_VIEW, folder / ALIGNMENT_VIEW
        save(mel_figure(view), mel)
        save(alignment_figure(view), alignment)
        frames, symbols = view.target.shape[1], len(view.symbols)
        return [
            SampleResult(
                "image",
                mel,
                f"{view.item_id}: recorded vs re-made mel (posterior and decoder), L1"
                f" {view.mel_l1:.3f}",
            ),
            SampleResult(
                "image",
                alignment,
                f"{view.item_id}: alignment of {symbols} symbols to {frames} frames",
            ),
        ]
