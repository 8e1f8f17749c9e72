"""Vocoder training data: one fixed-length audio segment of every training
recording per epoch, resumable.

Split: the voice split (`voice_dataset.split_items`, by a hash of each item id), so a vocoder and
an acoustic model trained on the same folder hold out the same recordings. Epoch order: a seeded
permutation of the training recordings, a pure function of (seed, epoch). Each recording's
segment starts at an offset drawn from a hash of (seed, epoch, item id): no generator state to
save, so a resumed run, or one that halved its batch after an out-of-memory error, cuts the same
segments from item `start_item` on. Recordings shorter than a segment are zero-padded. Batches:
"wave" (B, segment_samples) float32.

Validation: each held-out recording whole, one per batch (copy synthesis scores whole clips),
round-robin over ranks under DDP. Data-parallel training works as in `voice_dataset`: every rank
walks the same order in global batches and takes items rank, rank + world, ... of each.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import torch

from trainer_core.data.sharding import check_shard
from trainer_core.data.voice_dataset import epoch_seed, split_items
from trainer_core.data.wave_preload import Waves

Batch = dict[str, torch.Tensor]


def segment_offset(seed: int, epoch: int, item_id: str, room: int) -> int:
    """Where an epoch's segment of a recording starts, in [0, room]: stable
    across runs and platforms."""
    if room <= 0:
        return 0
    digest = hashlib.sha256(
        f"vega-segment:{seed}:{epoch}:{item_id}".encode("utf-8", "surrogateescape")
    ).digest()
    return int.from_bytes(digest[:8], "little") % (room + 1)


class SegmentDataset:
    """Random fixed-length segments of the training recordings, and the
    held-out recordings whole."""

    def __init__(
        self, waves: Waves, segment: int, val_fraction: float, seed: int, val_max_items: int = 0
    ) -> None:
        if segment < 1:
            raise ValueError(f"segment must be at least one sample, got {segment}")
        self.waves, self.segment, self.seed = waves, segment, seed
        ids, held_out = waves.item_ids, waves.held_out
        self.train_ids, self.val_ids = split_items(ids, val_fraction, val_max_items, held_out)
        self.rank, self.world = 0, 1

    def shard(self, rank: int, world: int) -> None:
        self.rank, self.world = check_shard(rank, world)

    def train_items(self) -> int:
        return len(self.train_ids)

    def epoch_order(self, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
        return [
            self.train_ids[k]
            for k in torch.randperm(len(self.train_ids), generator=generator).tolist()
        ]

    def cut(self, epoch: int, index: int) -> torch.Tensor:
        """The `segment` samples of recording `index` this epoch trains on."""
        room = self.waves.lengths[index] - self.segment
        start = segment_offset(self.seed, epoch, self.waves.item_ids[index], room)
        return self.waves.segment(index, start, self.segment)

    def train_batches(
        self, epoch: int, batch_size: int, start_item: int = 0
    ) -> Iterator[tuple[Batch, int]]:
        """(batch, items in the global batch) of `epoch` from item `start_item` of its order."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        order = self.epoch_order(epoch)
        width = batch_size * self.world
        for first in range(start_item, len(order), width):
            picked = order[first : first + width]
            mine = picked[self.rank :: self.world]
            yield {"wave": torch.stack([self.cut(epoch, i) for i in mine])}, len(picked)

    def val_batches(self) -> Iterator[Batch]:
        """Each held-out recording whole, (1, samples), this rank's share."""
        for index in self.val_ids[self.rank :: self.world]:
            yield {"wave": self.waves.get(index)[None]}
