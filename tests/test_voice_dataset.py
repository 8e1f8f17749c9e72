"""Voice batches: a stable split, a fixed bucketed order per epoch, exact resumption, padding and layout."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from trainer_core.contract.errors import DataError
from trainer_core.contract.profile import Profile
from trainer_core.contract.profile_audio import AudioSection
from trainer_core.data.preload import VoiceFeatures, preload_voice
from trainer_core.data.scan import scan_data
from trainer_core.data.voice_dataset import VoiceDataset, split_items

TEST_VOICE = Path(__file__).parent / "fixtures" / "voice"
N_MELS = 8


def encode(text: str) -> list[int]:
    return [ord(c) + 1 for c in text if c != "#"]


def features_of_lengths(lengths: list[int], texts: list[str] | None = None) -> VoiceFeatures:
    """RAM features whose mel for item i is filled with the value i, so a batch row tells which item it is."""
    audio = AudioSection(n_mels=N_MELS)
    return VoiceFeatures(
        texts=texts or [f"utterance {i} " + "x" * (n // 40) for i, n in enumerate(lengths)],
        frames=list(lengths),
        item_ids=[f"clip_{i:04d}" for i in range(len(lengths))],
        paths=[Path(f"/nonexistent/clip_{i:04d}.wav") for i in range(len(lengths))],
        where="ram",
        n_mels=N_MELS,
        log_floor=audio.log_floor,
        audio=audio,
        mels=[torch.full((N_MELS, n), float(i)) for i, n in enumerate(lengths)],
    )


def varied_lengths(count: int = 300) -> list[int]:
    generator = torch.Generator().manual_seed(11)
    return torch.randint(40, 900, (count,), generator=generator).tolist()


def batch_items(batch: dict[str, torch.Tensor]) -> list[int]:
    return batch["mel"][:, 0, 0].long().tolist()


def consumed(dataset: VoiceDataset, epoch: int, batch_size: int, start_item: int = 0) -> list[int]:
    return [i for batch, _ in dataset.train_batches(epoch, batch_size, start_item) for i in batch_items(batch)]


@pytest.fixture
def dataset() -> VoiceDataset:
    return VoiceDataset(features_of_lengths(varied_lengths()), encode, val_fraction=0.1, seed=5, bucket_size=16)


def test_split_is_stable_across_seeds_and_item_order() -> None:
    ids = [f"clip_{i:04d}" for i in range(50)]
    train, val = split_items(ids, 0.1)
    assert len(val) == 5 and sorted(train + val) == list(range(50))
    reversed_train, reversed_val = split_items(ids[::-1], 0.1)
    assert {ids[::-1][i] for i in reversed_val} == {ids[i] for i in val}
    a = VoiceDataset(features_of_lengths([100] * 50), encode, 0.1, seed=1)
    b = VoiceDataset(features_of_lengths([100] * 50), encode, 0.1, seed=2)
    assert a.val_ids == b.val_ids == val
    assert split_items(ids, 0.0)[1] == [] and split_items(ids[:1], 0.5) == ([0], [])
    assert len(split_items(ids[:3], 0.01)[1]) == 1 and len(split_items(ids[:2], 0.5)[0]) == 1


def test_epoch_order_is_a_seeded_permutation_fixed_per_epoch(dataset: VoiceDataset) -> None:
    order = dataset.epoch_order(0)
    assert sorted(order) == sorted(dataset.train_ids) and len(order) == dataset.train_items() == 270
    twin = VoiceDataset(features_of_lengths(varied_lengths()), encode, val_fraction=0.1, seed=5, bucket_size=16)
    assert twin.epoch_order(0) == order and twin.epoch_order(3) == dataset.epoch_order(3)
    assert dataset.epoch_order(1) != order
    other_seed = VoiceDataset(features_of_lengths(varied_lengths()), encode, val_fraction=0.1, seed=6, bucket_size=16)
    assert other_seed.epoch_order(0) != order


def test_batches_follow_the_order_and_resume_at_any_item(dataset: VoiceDataset) -> None:
    order = dataset.epoch_order(2)
    assert consumed(dataset, 2, 16) == order
    assert [n for _, n in dataset.train_batches(2, 16)] == [16] * 16 + [14]
    for start in (1, 37, 269, 270):
        assert consumed(dataset, 2, 16, start) == order[start:]


def test_halving_the_batch_size_mid_epoch_loses_and_repeats_nothing(dataset: VoiceDataset) -> None:
    taken: list[int] = []
    batches = dataset.train_batches(4, 16)
    for _ in range(3):
        batch, n = next(batches)
        taken += batch_items(batch)
    # An out-of-memory error here: the engine calls again with half the batch size and the items consumed.
    taken += consumed(dataset, 4, 8, start_item=len(taken))
    assert taken == dataset.epoch_order(4)


def test_bucketing_cuts_padding_versus_a_random_order(dataset: VoiceDataset) -> None:
    bucketed, shuffled = dataset.padding_fraction(16), dataset.unbucketed_padding_fraction(16)
    # Uniform lengths in 40..900: ~13 % padding bucketed (a 128-item chunk per 8 buckets), ~45 % shuffled.
    assert bucketed < 0.2 and bucketed < shuffled / 3
    report = dataset.describe(16)
    assert report["padding_fraction"] == bucketed and report["padding_fraction_unbucketed"] == shuffled
    # Neighbouring batches differ in length: the order is not one long sort.
    first_lengths = [dataset.features.frames[i] for i in dataset.epoch_order(0)[:64]]
    assert first_lengths != sorted(first_lengths)


def test_batch_layout_and_padding_values() -> None:
    features = features_of_lengths([30, 50, 20], texts=["ab", "abcde", "a"])
    data = VoiceDataset(features, encode, val_fraction=0.0, seed=0, bucket_size=4)
    batch = data.collate([0, 1, 2])
    assert {k: (tuple(v.shape), v.dtype) for k, v in batch.items()} == {
        "text": ((3, 5), torch.int64),
        "text_lens": ((3,), torch.int64),
        "mel": ((3, N_MELS, 50), torch.float32),
        "mel_lens": ((3,), torch.int64),
    }
    assert batch["text"].tolist() == [[98, 99, 0, 0, 0], [98, 99, 100, 101, 102], [98, 0, 0, 0, 0]]
    assert batch["text_lens"].tolist() == [2, 5, 1] and batch["mel_lens"].tolist() == [30, 50, 20]
    assert torch.all(batch["mel"][0, :, :30] == 0) and torch.all(batch["mel"][2, :, :20] == 2)
    silence = math.log(features.log_floor)
    assert torch.all(batch["mel"][0, :, 30:] == silence) and torch.all(batch["mel"][2, :, 20:] == silence)


def test_validation_batches_are_sorted_by_length_and_cover_the_held_out_items(dataset: VoiceDataset) -> None:
    seen = [i for batch in dataset.val_batches(7) for i in batch_items(batch)]
    assert sorted(seen) == dataset.val_ids and len(seen) == dataset.val_items() == 30
    lengths = [dataset.features.frames[i] for i in seen]
    assert lengths == sorted(lengths)
    assert [i for batch in dataset.val_batches(4) for i in batch_items(batch)] == seen


def test_demo_corpus_batches_hold_the_real_mels_and_texts(tmp_path: Path) -> None:
    profile = Profile()
    profile.data.cache_dir = tmp_path / "cache"
    features = preload_voice(scan_data(TEST_VOICE, "voice"), profile, "cpu", "ram")
    data = VoiceDataset(features, encode, profile.data.val_fraction, profile.run.seed, bucket_size=8)
    assert (data.train_items(), data.val_items()) == (38, 2)
    order = data.epoch_order(0)
    batch, n = next(data.train_batches(0, 8))
    assert n == 8
    for row, index in enumerate(order[:8]):
        frames = features.frames[index]
        assert batch["mel_lens"][row] == frames
        torch.testing.assert_close(batch["mel"][row, :, :frames], features.get_mel(index), rtol=0, atol=0)
        assert batch["text"][row, : batch["text_lens"][row]].tolist() == encode(features.texts[index])
    assert data.padding_fraction(8) < data.unbucketed_padding_fraction(8)


def test_transcripts_the_encoder_drops_entirely_are_left_out() -> None:
    features = features_of_lengths([10, 20, 30], texts=["ok", "###", "fine"])
    data = VoiceDataset(features, encode, val_fraction=0.0, seed=0)
    assert data.empty_text_ids == ["clip_0001"] and sorted(data.epoch_order(0)) == [0, 2]
    with pytest.raises(DataError, match="none of the 2 transcripts"):
        VoiceDataset(features_of_lengths([10, 20], texts=["#", "##"]), encode, val_fraction=0.0, seed=0)


def test_bad_batch_arguments_are_refused(dataset: VoiceDataset) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        next(dataset.train_batches(0, 0))
    with pytest.raises(ValueError, match="start_item"):
        next(dataset.train_batches(0, 8, start_item=271))
    with pytest.raises(ValueError, match="bucket_size"):
        VoiceDataset(dataset.features, encode, 0.1, seed=0, bucket_size=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_pinned_batches_on_cuda(dataset: VoiceDataset) -> None:
    dataset.pin_memory = True
    batch, _ = next(dataset.train_batches(0, 8))
    assert all(tensor.is_pinned() for tensor in batch.values())
