"""Monotonic alignment search: known cases, structural guarantees, padding, and agreement with brute force."""

from __future__ import annotations

import itertools

import pytest
import torch

from trainer_core.models.alignment import durations_to_path, monotonic_alignment_search


def _brute_force(value: torch.Tensor) -> tuple[float, list[int]]:
    """Best (score, durations) over every split of the frames into len(tokens) non-empty consecutive runs."""
    tokens, frames = value.shape
    best: tuple[float, list[int]] | None = None
    for cuts in itertools.combinations(range(1, frames), tokens - 1):
        bounds = (0, *cuts, frames)
        score = sum(float(value[i, bounds[i] : bounds[i + 1]].sum()) for i in range(tokens))
        if best is None or score > best[0]:
            best = (score, [bounds[i + 1] - bounds[i] for i in range(tokens)])
    assert best is not None
    return best


def _random_batch(seed: int, batch: int, tokens: int, frames: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    value = torch.randn(batch, tokens, frames, generator=g)
    text_lengths = torch.randint(1, tokens + 1, (batch,), generator=g)
    mel_lengths = torch.stack([torch.randint(int(t), frames + 1, (1,), generator=g)[0] for t in text_lengths])
    return value, text_lengths, mel_lengths


def test_equal_lengths_give_the_diagonal() -> None:
    value = torch.randn(1, 5, 5)
    path = monotonic_alignment_search(value, torch.tensor([5]), torch.tensor([5]))
    assert torch.equal(path[0], torch.eye(5))


def test_a_clear_likelihood_is_followed() -> None:
    durations = [3, 1, 4, 2]
    frames = sum(durations)
    owner = torch.repeat_interleave(torch.arange(4), torch.tensor(durations))
    # Each frame is far likelier under its own token than under any other.
    value = torch.full((1, 4, frames), -10.0)
    value[0, owner, torch.arange(frames)] = 0.0
    path = monotonic_alignment_search(value, torch.tensor([4]), torch.tensor([frames]))
    assert path[0].sum(dim=1).tolist() == durations
    assert torch.equal(path, durations_to_path(torch.tensor([durations]), frames))


def test_paths_are_monotonic_cover_every_frame_once_and_give_every_token_a_frame() -> None:
    value, text_lengths, mel_lengths = _random_batch(seed=3, batch=6, tokens=7, frames=15)
    path = monotonic_alignment_search(value, text_lengths, mel_lengths)
    assert path.shape == value.shape and path.dtype == torch.float32
    for b in range(6):
        t, m = int(text_lengths[b]), int(mel_lengths[b])
        real = path[b, :t, :m]
        assert torch.equal(real.sum(dim=0), torch.ones(m)), "each real frame belongs to exactly one token"
        assert (real.sum(dim=1) >= 1).all(), "every token gets at least one frame when frames >= tokens"
        owners = real.argmax(dim=0)
        steps = owners[1:] - owners[:-1]
        assert owners[0] == 0 and owners[-1] == t - 1
        assert ((steps == 0) | (steps == 1)).all(), "the token index never falls and never skips"
        assert path[b, t:].sum() == 0 and path[b, :, m:].sum() == 0, "padding stays empty"


@pytest.mark.parametrize("seed", range(6))
def test_agrees_with_brute_force_dynamic_programming(seed: int) -> None:
    value, text_lengths, mel_lengths = _random_batch(seed, batch=4, tokens=4, frames=9)
    path = monotonic_alignment_search(value, text_lengths, mel_lengths)
    for b in range(4):
        t, m = int(text_lengths[b]), int(mel_lengths[b])
        score, durations = _brute_force(value[b, :t, :m])
        assert path[b, :t].sum(dim=1).tolist() == durations
        assert float((path[b] * value[b]).sum()) == pytest.approx(score, abs=1e-4)


def test_items_do_not_influence_each_other() -> None:
    value, text_lengths, mel_lengths = _random_batch(seed=9, batch=5, tokens=6, frames=12)
    together = monotonic_alignment_search(value, text_lengths, mel_lengths)
    for b in range(5):
        t, m = int(text_lengths[b]), int(mel_lengths[b])
        alone = monotonic_alignment_search(value[b : b + 1, :t, :m], text_lengths[b : b + 1], mel_lengths[b : b + 1])
        assert torch.equal(together[b, :t, :m], alone[0])


def test_fewer_frames_than_tokens_still_assigns_every_frame() -> None:
    path = monotonic_alignment_search(torch.randn(1, 6, 4), torch.tensor([6]), torch.tensor([4]))
    assert torch.equal(path[0].sum(dim=0), torch.ones(4))
    assert torch.isfinite(path).all()


def test_no_gradient_flows_through_the_search() -> None:
    value = torch.randn(2, 3, 6, requires_grad=True)
    path = monotonic_alignment_search(value, torch.tensor([3, 2]), torch.tensor([6, 5]))
    assert not path.requires_grad


def test_durations_to_path_round_trips_and_pads() -> None:
    durations = torch.tensor([[2, 1, 3], [1, 1, 0]])
    path = durations_to_path(durations)
    assert path.shape == (2, 3, 6)
    assert torch.equal(path.sum(dim=2), durations.float())
    assert path[1, :, 2:].sum() == 0, "frames past an item's total are empty"
    assert torch.equal(durations_to_path(durations, frames=8)[:, :, :6], path)
