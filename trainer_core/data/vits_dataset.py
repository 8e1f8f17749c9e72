"""VITS training data: token ids and whole recordings (samples), split and
batched like the voice task's.

The split, the length-bucketed epoch order, resuming at any item and sharding are
`voice_dataset.BucketedItems`, with each recording's sample count as its length, so a VITS voice
holds out the same recordings as an acoustic model or a vocoder trained on the same folder. The
linear spectrograms the model reads are not stored: the task computes them per batch on the device
from the "wave" tensor (a big corpus would need many gigabytes of them).

Batches: "text" (B, Lt) int64 ids padded with 0, "text_lens" (B,), "wave" (B, S) float32 zero-padded
to the longest item and at least `min_samples` (the decoder's training segment), "wave_lens" (B,);
with `speaker_ids` (several speakers) also "speaker" (B,) int64.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from trainer_core.contract.errors import DataError
from trainer_core.data.voice_dataset import TEXT_PAD_ID, Batch, BucketedItems
from trainer_core.data.wave_preload import Waves


class VitsDataset(BucketedItems):
    """Ids and samples of a `Waves`, split and batched deterministically."""

    def __init__(
        self,
        waves: Waves,
        encode: Callable[[str], list[int]],
        val_fraction: float,
        seed: int,
        min_samples: int,
        val_max_items: int = 0,
        speaker_ids: Sequence[int] | None = None,
        bucket_size: int = 32,
    ) -> None:
        if speaker_ids is not None and len(speaker_ids) != len(waves):
            raise ValueError(f"{len(speaker_ids)} speaker ids for {len(waves)} items")
        self.waves, self.min_samples = waves, min_samples
        self.speaker_ids = (
            torch.tensor(list(speaker_ids), dtype=torch.int64) if speaker_ids is not None else None
        )
        self.tokens = [torch.tensor(encode(text), dtype=torch.int64) for text in waves.texts]
        self.empty_text_ids = [
            waves.item_ids[i] for i, t in enumerate(self.tokens) if t.numel() == 0
        ]
        usable = [i for i, t in enumerate(self.tokens) if t.numel() > 0]
        if not usable:
            raise DataError(
                f"none of the {len(waves)} transcripts has a symbol the voice's symbol map knows"
            )
        super().__init__(
            waves.item_ids,
            waves.lengths,
            usable,
            val_fraction,
            seed,
            bucket_size,
            val_max_items,
            waves.held_out,
        )

    def collate(self, indices: Sequence[int]) -> Batch:
        texts = [self.tokens[i] for i in indices]
        waves = [self.waves.get(i) for i in indices]
        text_lens = torch.tensor([len(t) for t in texts], dtype=torch.int64)
        wave_lens = torch.tensor([w.shape[0] for w in waves], dtype=torch.int64)
        text = torch.full((len(texts), int(text_lens.max())), TEXT_PAD_ID, dtype=torch.int64)
        wave = torch.zeros(len(waves), max(int(wave_lens.max()), self.min_samples))
        for row, (tokens, samples) in enumerate(zip(texts, waves, strict=True)):
            text[row, : len(tokens)] = tokens
            wave[row, : samples.shape[0]] = samples
        batch = {"text": text, "text_lens": text_lens, "wave": wave, "wave_lens": wave_lens}
        if self.speaker_ids is not None:
            batch["speaker"] = self.speaker_ids[list(indices)]
        return self.pinned(batch)
