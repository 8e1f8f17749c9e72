"""Monotonic alignment search (MAS, as in Glow-TTS): the best hard text-to-mel alignment.

Given a log-likelihood `value[b, i, j]` of mel frame j under text token i, MAS finds the path that
maximises the summed log-likelihood subject to: every frame belongs to exactly one token, the first
frame to the first token, the last frame to the last token, and the token index never decreases and
grows by at most one per frame. Dynamic programming over frames:

    score[i, j] = value[i, j] + max(score[i, j - 1], score[i - 1, j - 1])

then a backtrack from (last token, last frame). The forward pass loops over mel frames with vector
operations over the batch and text positions; items of different lengths share the loop, each one
backtracking from its own last frame. No gradient flows through the search.

Durations are `path.sum(-1)`: frames per token. With at least as many frames as tokens every token
gets one frame or more; with fewer frames no monotonic path exists, and the result keeps every frame
assigned (to the last tokens it can reach) so that training never crashes on an odd item.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def _best_predecessors(value: torch.Tensor) -> torch.Tensor:
    """Forward DP over frames of a (Tm, B, Lt) tensor: True where the best
    way in came from token i - 1."""
    frames, batch, tokens = value.shape
    came_from_previous = torch.zeros(frames, batch, tokens, dtype=torch.bool, device=value.device)
    score = torch.full((batch, tokens), float("-inf"), dtype=value.dtype, device=value.device)
    score[:, 0] = value[0, :, 0]
    for j in range(1, frames):
        advance = F.pad(score[:, :-1], (1, 0), value=float("-inf"))
        moved = advance > score  # ties stay on the current token
        came_from_previous[j] = moved
        score = torch.where(moved, advance, score) + value[j]
    return came_from_previous


def _backtrack(
    came_from_previous: torch.Tensor, text_lengths: torch.Tensor, mel_lengths: torch.Tensor
) -> torch.Tensor:
    """Walk back from each item's (last token, last frame); returns the path
    as (Tm, B, Lt) 0/1 float32."""
    frames, batch, tokens = came_from_previous.shape
    path = torch.zeros(frames, batch, tokens, dtype=torch.float32, device=came_from_previous.device)
    rows = torch.arange(batch, device=came_from_previous.device)
    index = (text_lengths - 1).clamp(min=0)
    for j in range(frames - 1, -1, -1):
        active = j < mel_lengths
        path[j, rows, index] = active.float()
        step_back = came_from_previous[j, rows, index] & active & (index > 0)
        index = index - step_back.long()
    return path


def _outside_compiled_graphs(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """`torch.compiler.disable`, applied when first needed: decorating at import loads torch._dynamo
    (~2 s), and a compile can only be under way once torch._dynamo is imported."""
    disabled: list[Callable[..., torch.Tensor]] = []

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> torch.Tensor:
        if "torch._dynamo" not in sys.modules:
            return fn(*args, **kwargs)
        if not disabled:
            disabled.append(torch.compiler.disable(fn))
        return disabled[0](*args, **kwargs)

    return call


# Kept out of torch.compile graphs: a Python loop over a data-dependent number of
# frames would recompile per length.
@_outside_compiled_graphs
@torch.no_grad()
def monotonic_alignment_search(
    log_likelihood: torch.Tensor, text_lengths: torch.Tensor, mel_lengths: torch.Tensor
) -> torch.Tensor:
    """Most likely monotonic hard alignment for (B, Lt, Tm) log-likelihoods:
    a (B, Lt, Tm) 0/1 float32 path.

    Padding (tokens at or beyond `text_lengths[b]`, frames at or beyond
    `mel_lengths[b]`) is all zeros.
    """
    if log_likelihood.dim() != 3:
        raise ValueError(
            "log_likelihood must be (batch, tokens, frames), got shape"
            f" {tuple(log_likelihood.shape)}"
        )
    text_lengths = text_lengths.to(log_likelihood.device).long()
    mel_lengths = mel_lengths.to(log_likelihood.device).long()
    # Frames first and contiguous: each DP step then reads one dense (B, Lt) slice.
    value = log_likelihood.detach().float().permute(2, 0, 1).contiguous()
    came_from_previous = _best_predecessors(value)
    path = _backtrack(came_from_previous, text_lengths, mel_lengths)
    token_mask = torch.arange(value.shape[2], device=value.device)[None, :] < text_lengths[:, None]
    return path.permute(1, 2, 0) * token_mask[:, :, None]


def durations_to_path(durations: torch.Tensor, frames: int | None = None) -> torch.Tensor:
    """The hard alignment that gives token i `durations[b, i]` consecutive
    frames: (B, Lt, T) 0/1 float32.

    `frames` defaults to the longest total duration in the batch; frames
    past an item's total are zero.
    """
    durations = durations.long().clamp(min=0)
    ends = durations.cumsum(dim=1)
    starts = ends - durations
    total = int(ends[:, -1].max().item()) if frames is None and durations.numel() else (frames or 0)
    positions = torch.arange(total, device=durations.device)[None, None, :]
    return ((positions >= starts[..., None]) & (positions < ends[..., None])).float()
