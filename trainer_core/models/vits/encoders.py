"""The two encoders: text to the prior's per-symbol Gaussians, spectrogram to the posterior latent.

Both return a mean `m` and a log standard deviation `logs` of `out_channels` each, with the mask of
their input; the posterior also samples z = m + exp(logs) * noise (Piper's `randn_like`, in its
order).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor, nn

from trainer_core.models.vits.attention import Encoder
from trainer_core.models.vits.layers import WN
from trainer_core.models.vits.segments import sequence_mask


class TextEncoding(NamedTuple):
    """The text encoder's outputs, (B, C, Tx) each but the mask (B, 1, Tx)."""

    hidden: Tensor
    m: Tensor
    logs: Tensor
    mask: Tensor


class PosteriorStats(NamedTuple):
    """The posterior's Gaussian over the latent, (B, C, Ty), and the frames' mask (B, 1, Ty)."""

    m: Tensor
    logs: Tensor
    mask: Tensor


class TextEncoder(nn.Module):
    """Symbol ids -> hidden states and the prior's mean and log-std per symbol."""

    def __init__(
        self,
        n_vocab: int,
        out_channels: int,
        hidden_channels: int,
        filter_channels: int,
        n_heads: int,
        n_layers: int,
        kernel_size: int,
        p_dropout: float,
    ) -> None:
        super().__init__()
        self.out_channels = out_channels
        self.hidden_channels = hidden_channels
        self.emb = nn.Embedding(n_vocab, hidden_channels)
        # Scaled by sqrt(hidden) in forward: unit-variance inputs to the first attention layer.
        nn.init.normal_(self.emb.weight, 0.0, hidden_channels**-0.5)
        self.encoder = Encoder(
            hidden_channels,
            filter_channels,
            n_heads,
            n_layers,
            kernel_size,
            p_dropout,
        )
        self.proj = nn.Conv1d(hidden_channels, out_channels * 2, 1)

    def forward(self, x: Tensor, x_lengths: Tensor) -> TextEncoding:
        """(B, Tx) int64 ids and (B,) lengths."""
        embedded = self.emb(x) * math.sqrt(self.hidden_channels)
        embedded = torch.transpose(embedded, 1, -1)
        mask = sequence_mask(x_lengths, embedded.shape[2]).unsqueeze(1).to(embedded.dtype)
        hidden = self.encoder(embedded * mask, mask)
        stats = self.proj(hidden) * mask
        m, logs = torch.split(stats, self.out_channels, dim=1)
        return TextEncoding(hidden, m, logs, mask)


class PosteriorEncoder(nn.Module):
    """Linear spectrogram -> the posterior's mean and log-std per frame (a WaveNet stack)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int,
        kernel_size: int,
        dilation_rate: int,
        n_layers: int,
        gin_channels: int = 0,
    ) -> None:
        super().__init__()
        self.out_channels = out_channels
        self.pre = nn.Conv1d(in_channels, hidden_channels, 1)
        self.enc = WN(hidden_channels, kernel_size, dilation_rate, n_layers, gin_channels)
        self.proj = nn.Conv1d(hidden_channels, out_channels * 2, 1)

    def stats(self, y: Tensor, y_lengths: Tensor, g: Tensor | None = None) -> PosteriorStats:
        """(B, spec_channels, Ty) and (B,) frame counts -> mean and log-std, no sampling."""
        mask = sequence_mask(y_lengths, y.shape[2]).unsqueeze(1).to(y.dtype)
        hidden = self.enc(self.pre(y) * mask, mask, g=g)
        stats = self.proj(hidden) * mask
        m, logs = torch.split(stats, self.out_channels, dim=1)
        return PosteriorStats(m, logs, mask)

    def forward(
        self,
        y: Tensor,
        y_lengths: Tensor,
        g: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(z, m, logs, mask): z drawn from the posterior (zero on padding)."""
        m, logs, mask = self.stats(y, y_lengths, g)
        z = (m + torch.randn_like(m) * torch.exp(logs)) * mask
        return z, m, logs, mask
