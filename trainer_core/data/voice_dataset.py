"""Voice training data: a stable train/validation split and length-bucketed, resumable batches.

Split: items are ranked by a sha256 of their item id, and the first round(N * val_fraction) of that
ranking (at least one when val_fraction > 0 and there are two items or more, never all), at most
`val_max_items` of them (0: no cap), are held out. The split depends on neither the seed nor the
file order, so it is the same in every run and every resume. Items the cap leaves out of validation
train: they were never validated on, so nothing the model is judged on leaks into training, and a
big corpus keeps all its data (see `trainer_core.data.validation_split`).

Epoch order, a pure function of (seed, epoch) and fixed whatever the batch size: a seeded
permutation of the training items is cut into chunks of bucket_size * 8 items; each chunk is sorted
by mel length and cut into groups of bucket_size, and the groups are shuffled. Neighbours in the
order therefore have similar lengths (little padding) while the epoch still visits the data in a
random order. `train_batches` yields consecutive runs of batch_size from
`epoch_order(epoch)[start_item:]`, so a resumed run, or one that halved its batch size after an
out-of-memory error, continues at the exact item where it stopped, skipping and repeating nothing.

Batches: "text" (B, Lt) int64 token ids padded with 0 (so `encode` must not use 0 for a symbol),
"text_lens" (B,), "mel" (B, n_mels, Tm) float32 padded with log(log_floor) (the log-mel of silence),
"mel_lens" (B,); with pitch features also "f0" (B, Tm) float32, log F0 in Hz, 0 on
unvoiced and padded frames; with `speaker_ids` (several speakers) also "speaker" (B,)
int64, each item's speaker id.

Data-parallel training (`shard(rank, world)`): every rank walks the same epoch order in global
batches of `batch_size * world` items and collates items rank, rank + world, ... of each
(neighbours in the bucketed order, so each rank's batch stays length-homogeneous). The item count
yielded is the global batch's, so `start_item` keeps its meaning whatever the number of ranks.
Validation batches go round-robin to the ranks.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from trainer_core.contract.errors import DataError
from trainer_core.data.preload import VoiceFeatures
from trainer_core.data.sharding import check_shard
from trainer_core.data.validation_split import capped_away, held_out_count, split_rank

Batch = dict[str, torch.Tensor]
TEXT_PAD_ID = 0
# Items per sorted chunk, in buckets: wide enough to find similar lengths,
# narrow enough to stay random.
CHUNK_BUCKETS = 8


def epoch_seed(seed: int, epoch: int) -> int:
    """A 63-bit generator seed from (run seed, epoch), identical on every
    platform and Python version."""
    digest = hashlib.sha256(f"vega-voice:{seed}:{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def split_items(
    item_ids: Sequence[str],
    val_fraction: float,
    max_items: int = 0,
    held_out: Sequence[bool] | None = None,
) -> tuple[list[int], list[int]]:
    """(train, validation) indices, each in ascending order; see the module docstring for the rule.

    `held_out`: the corpus's own split (Common Voice dev/test, a validation split), a flag per
    item; when any is set, those items are validated on (at most `max_items`, by the same
    ranking) and never train.
    """
    if held_out is not None and any(held_out):
        fixed = [i for i in range(len(item_ids)) if held_out[i]]
        ranked = sorted(fixed, key=lambda i: (split_rank(item_ids[i]), i))
        kept = ranked[:max_items] if max_items > 0 else ranked
        return [i for i in range(len(item_ids)) if not held_out[i]], sorted(kept)
    ranked = sorted(range(len(item_ids)), key=lambda i: (split_rank(item_ids[i]), i))
    held = set(ranked[: held_out_count(len(item_ids), val_fraction, max_items)])
    return [i for i in range(len(item_ids)) if i not in held], sorted(held)


def padding_fraction_of(order: Sequence[int], frames: Sequence[int], batch_size: int) -> float:
    """Share of padded mel frames when `order` is cut into consecutive batches of `batch_size`."""
    padded = real = 0
    for first in range(0, len(order), batch_size):
        lengths = [frames[i] for i in order[first : first + batch_size]]
        padded += max(lengths) * len(lengths)
        real += sum(lengths)
    return 0.0 if padded == 0 else (padded - real) / padded


class BucketedItems:
    """Items with lengths, split and ordered as the module docstring says;
    subclasses collate batches."""

    def __init__(
        self,
        item_ids: Sequence[str],
        lengths: Sequence[int],
        usable: Sequence[int],
        val_fraction: float,
        seed: int,
        bucket_size: int = 32,
        val_max_items: int = 0,
        held_out: Sequence[bool] | None = None,
    ) -> None:
        if bucket_size < 1:
            raise ValueError(f"bucket_size must be at least 1, got {bucket_size}")
        self.lengths = lengths
        self.seed = seed
        self.bucket_size = bucket_size
        self.pin_memory = False  # Set by the task on CUDA so that non-blocking copies overlap.
        self.rank, self.world = 0, 1
        flags = [held_out[i] for i in usable] if held_out is not None else None
        train, val = split_items([item_ids[i] for i in usable], val_fraction, val_max_items, flags)
        # Items the fraction would hold out that the cap sent to training
        # (none with a corpus split).
        fixed = flags is not None and any(flags)
        self.val_capped = 0 if fixed else capped_away(len(usable), val_fraction, val_max_items)
        self.train_ids = [usable[i] for i in train]
        self.val_ids = [usable[i] for i in val]
        self._order_cache: tuple[int, list[int]] | None = None

    def collate(self, indices: Sequence[int]) -> Batch:
        raise NotImplementedError

    def shard(self, rank: int, world: int) -> None:
        """Collate only rank `rank`'s slice of every batch from now on (see
        the module docstring)."""
        self.rank, self.world = check_shard(rank, world)

    def train_items(self) -> int:
        return len(self.train_ids)

    def val_items(self) -> int:
        return len(self.val_ids)

    def _bucketed(self, chunk: list[int], generator: torch.Generator) -> list[int]:
        """`chunk` sorted by length, cut into groups of bucket_size, the
        groups in a seeded order."""
        lengths = self.lengths
        ranked = sorted(chunk, key=lambda i: (lengths[i], i))
        groups = [ranked[k : k + self.bucket_size] for k in range(0, len(ranked), self.bucket_size)]
        shuffled = torch.randperm(len(groups), generator=generator).tolist()
        return [i for g in shuffled for i in groups[g]]

    def epoch_order(self, epoch: int) -> list[int]:
        """Indices of the training items in the order epoch `epoch` visits them."""
        if self._order_cache is not None and self._order_cache[0] == epoch:
            return self._order_cache[1]
        generator = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
        permuted = [
            self.train_ids[j]
            for j in torch.randperm(len(self.train_ids), generator=generator).tolist()
        ]
        width = self.bucket_size * CHUNK_BUCKETS
        order = [
            i
            for k in range(0, len(permuted), width)
            for i in self._bucketed(permuted[k : k + width], generator)
        ]
        self._order_cache = (epoch, order)
        return order

    def pinned(self, batch: Batch) -> Batch:
        return {name: t.pin_memory() for name, t in batch.items()} if self.pin_memory else batch

    def train_batches(
        self, epoch: int, batch_size: int, start_item: int = 0
    ) -> Iterator[tuple[Batch, int]]:
        """Yield (batch, items) of `epoch` from item `start_item` of its
        order; the last batch may be short.

        Sharded, `batch_size` is this rank's share and `items` counts the whole global batch.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if not 0 <= start_item <= self.train_items():
            raise ValueError(f"start_item must be within 0..{self.train_items()}, got {start_item}")
        order = self.epoch_order(epoch)
        width = batch_size * self.world
        for first in range(start_item, len(order), width):
            picked = order[first : first + width]
            yield self.collate(picked[self.rank :: self.world]), len(picked)

    def val_order(self) -> list[int]:
        """Validation indices, shortest first (ties by index): a fixed order with little padding."""
        return sorted(self.val_ids, key=lambda i: (self.lengths[i], i))

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        """Yield the validation items in `val_order`, batch_size at a time
        (nothing when none is held out)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        order = self.val_order()
        firsts = range(0, len(order), batch_size)
        for first in firsts[self.rank :: self.world]:
            yield self.collate(order[first : first + batch_size])

    def padding_fraction(self, batch_size: int, epoch: int = 0) -> float:
        """Share of frames (or samples) in an epoch's training batches that are padding."""
        return padding_fraction_of(self.epoch_order(epoch), self.lengths, batch_size)

    def unbucketed_padding_fraction(self, batch_size: int, epoch: int = 0) -> float:
        """The same share for a plain shuffled order: what bucketing saves, for the report."""
        generator = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
        order = [
            self.train_ids[j]
            for j in torch.randperm(len(self.train_ids), generator=generator).tolist()
        ]
        return padding_fraction_of(order, self.lengths, batch_size)


class VoiceDataset(BucketedItems):
    """Token ids and mels of a VoiceFeatures, split and batched deterministically."""

    def __init__(
        self,
        features: VoiceFeatures,
        encode: Callable[[str], list[int]],
        val_fraction: float,
        seed: int,
        bucket_size: int = 32,
        val_max_items: int = 0,
        speaker_ids: Sequence[int] | None = None,
    ) -> None:
        if speaker_ids is not None and len(speaker_ids) != len(features):
            raise ValueError(f"{len(speaker_ids)} speaker ids for {len(features)} items")
        # Several speakers: each item's id, batched as "speaker"; None keeps
        # single-speaker batches as they were.
        self.speaker_ids = (
            torch.tensor(list(speaker_ids), dtype=torch.int64) if speaker_ids is not None else None
        )
        self.features = features
        self.tokens = [torch.tensor(encode(text), dtype=torch.int64) for text in features.texts]
        self.empty_text_ids = [
            features.item_ids[i] for i, t in enumerate(self.tokens) if t.numel() == 0
        ]
        usable = [i for i, t in enumerate(self.tokens) if t.numel() > 0]
        if not usable:
            raise DataError(
                f"none of the {len(features)} transcripts has a symbol the text encoder knows"
            )
        super().__init__(
            features.item_ids,
            features.frames,
            usable,
            val_fraction,
            seed,
            bucket_size,
            val_max_items,
            features.held_out,
        )

    def collate(self, indices: Sequence[int]) -> Batch:
        """The padded batch of the given feature indices (see the module
        docstring for its tensors)."""
        texts = [self.tokens[i] for i in indices]
        mels = [self.features.get_mel(i) for i in indices]
        text_lens = torch.tensor([len(t) for t in texts], dtype=torch.int64)
        mel_lens = torch.tensor([m.shape[1] for m in mels], dtype=torch.int64)
        text = torch.full((len(texts), int(text_lens.max())), TEXT_PAD_ID, dtype=torch.int64)
        mel = torch.full(
            (len(mels), self.features.n_mels, int(mel_lens.max())),
            math.log(self.features.log_floor),
        )
        for row, (tokens, spectrum) in enumerate(zip(texts, mels, strict=True)):
            text[row, : len(tokens)] = tokens
            mel[row, :, : spectrum.shape[1]] = spectrum
        batch = {"text": text, "text_lens": text_lens, "mel": mel, "mel_lens": mel_lens}
        if self.features.has_pitch:
            batch["f0"] = self._pitch_rows(indices, int(mel_lens.max()))
        if self.speaker_ids is not None:
            batch["speaker"] = self.speaker_ids[list(indices)]
        return self.pinned(batch)

    def _pitch_rows(self, indices: Sequence[int], frames: int) -> torch.Tensor:
        """(B, frames) log F0, 0 on unvoiced and padded frames."""
        rows = torch.zeros(len(indices), frames)
        for row, index in enumerate(indices):
            track = self.features.get_pitch(index)
            rows[row, : track.shape[0]] = track
        return rows

    def describe(self, batch_size: int) -> dict[str, Any]:
        """JSON-ready summary: split sizes and padding with and without bucketing."""
        return {
            "train_items": self.train_items(),
            "val_items": self.val_items(),
            "val_capped": self.val_capped,
            "bucket_size": self.bucket_size,
            "padding_fraction": self.padding_fraction(batch_size),
            "padding_fraction_unbucketed": self.unbucketed_padding_fraction(batch_size),
            "empty_text_items": len(self.empty_text_ids),
        }
