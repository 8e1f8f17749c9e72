"""Masks and windows along time: which steps of a padded batch are real; training windows.

VITS decodes one random window of each item per training step. The window starts are drawn as Piper
draws them (one `torch.rand` per item on the CPU generator, then moved), so a seeded step picks the
windows a seeded Piper step picks. A window that runs past the end of its item, or an item shorter
than a window, reads zeros there instead of failing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def sequence_mask(lengths: Tensor, steps: int | None = None) -> Tensor:
    """(B,) lengths -> (B, steps) bool, True where a step is inside its item."""
    steps = int(lengths.max()) if steps is None else steps
    positions = torch.arange(steps, dtype=lengths.dtype, device=lengths.device)
    return positions[None, :] < lengths[:, None]


def random_slice_starts(lengths: Tensor, size: int) -> Tensor:
    """A uniformly random start per item where `size` steps fit in its length (else 0)."""
    # The CPU generator, as Piper's draw: the same seed picks the same windows on any device.
    uniform = torch.rand([lengths.shape[0]]).to(device=lengths.device)
    room = lengths - size + 1
    return (uniform * room).to(dtype=torch.long).clamp(min=0)


def slice_segments(x: Tensor, starts: Tensor, size: int) -> Tensor:
    """`size` steps of each item of (B, C, T) from its own start: (B, C, size), zero-padded."""
    batch, channels, _ = x.shape
    padded = F.pad(x, (0, size))
    offsets = starts.to(device=x.device, dtype=torch.long).clamp(min=0)
    index = offsets[:, None] + torch.arange(size, device=x.device)[None, :]
    index = index.clamp(max=padded.shape[-1] - 1)
    return padded.gather(2, index[:, None, :].expand(batch, channels, size))
