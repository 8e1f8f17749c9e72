"""Building blocks of the TTS acoustic model: masked attention,
convolutional feed-forward, FFT blocks.

All sequence tensors are (batch, time, channels) with a boolean `mask` (batch, time) that is True
on real positions. Padded positions are zeroed before every convolution, so padding never leaks
into real frames, and attention uses the mask as a key padding mask.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from trainer_core.data.pitch import HIGHEST_PITCH_HZ, LOWEST_PITCH_HZ

# Width of the first feed-forward convolution: a few neighbours of context
# per layer (FastSpeech-style).
FFN_KERNEL = 5
DURATION_KERNEL = 3
POSTNET_KERNEL = 5
CONV_KERNEL = 5
PITCH_BINS = 256  # voiced pitch bins of the pitch embedding: about 13 cents each over 60-400 Hz


def length_mask(lengths: torch.Tensor, max_length: int) -> torch.Tensor:
    """(B, max_length) bool, True where the position is inside the item's length."""
    return torch.arange(max_length, device=lengths.device)[None, :] < lengths[:, None]


def sinusoidal_positions(length: int, channels: int, device: torch.device) -> torch.Tensor:
    """(length, channels) fixed sine/cosine position codes (no learned table: any length works)."""
    positions = torch.arange(length, device=device, dtype=torch.float32)[:, None]
    even = torch.arange(0, channels, 2, device=device, dtype=torch.float32)
    rates = torch.exp(even * (-math.log(10000.0) / channels))
    table = torch.zeros(length, channels, device=device)
    table[:, 0::2] = torch.sin(positions * rates)
    table[:, 1::2] = torch.cos(positions * rates[: channels // 2])
    return table


class MaskedSelfAttention(nn.Module):
    """Multi-head self-attention in which padded positions are never attended to."""

    def __init__(self, hidden: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        q, k, v = self.qkv(x).split(hidden, dim=2)
        q, k, v = (
            t.view(batch, length, self.heads, hidden // self.heads).transpose(1, 2)
            for t in (q, k, v)
        )
        drop = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask[:, None, None, :], dropout_p=drop
        )
        return self.proj(y.transpose(1, 2).reshape(batch, length, hidden))


class ConvFeedForward(nn.Module):
    """Feed-forward with a temporal convolution first: each layer also mixes
    neighbouring positions."""

    def __init__(self, hidden: int, ffn_mult: int, dropout: float) -> None:
        super().__init__()
        inner = hidden * ffn_mult
        self.up = nn.Conv1d(hidden, inner, FFN_KERNEL, padding=FFN_KERNEL // 2)
        self.down = nn.Conv1d(inner, hidden, 1)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask[:, None, :].to(x.dtype)
        y = F.relu(self.up(x.transpose(1, 2) * keep))
        return self.drop(self.down(self.drop(y)) * keep).transpose(1, 2)


class FFTBlock(nn.Module):
    """Pre-LayerNorm transformer block with a convolutional feed-forward (a
    FastSpeech "FFT" block)."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        ffn_mult: int,
        dropout: float,
        attention_dropout: float | None = None,
    ) -> None:
        super().__init__()
        self.ln_attn = nn.LayerNorm(hidden)
        self.attn = MaskedSelfAttention(
            hidden, heads, dropout if attention_dropout is None else attention_dropout
        )
        self.drop = nn.Dropout(dropout)
        self.ln_ffn = nn.LayerNorm(hidden)
        self.ffn = ConvFeedForward(hidden, ffn_mult, dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln_attn(x), mask))
        return x + self.ffn(self.ln_ffn(x), mask)


class FFTStack(nn.Module):
    """Positions added once, then `layers` FFT blocks and a final LayerNorm;
    padding is zero on output."""

    def __init__(
        self,
        layers: int,
        hidden: int,
        heads: int,
        ffn_mult: int,
        dropout: float,
        attention_dropout: float | None = None,
    ) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)
        blocks = (
            FFTBlock(hidden, heads, ffn_mult, dropout, attention_dropout) for _ in range(layers)
        )
        self.blocks = nn.ModuleList(blocks)
        self.ln_out = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.drop(x + sinusoidal_positions(x.shape[1], x.shape[2], x.device).to(x.dtype))
        for block in self.blocks:
            x = block(x, mask)
        return self.ln_out(x) * mask[:, :, None].to(x.dtype)


class ConvStack(nn.Module):
    """Residual blocks of dilated convolutions (dilations 1, 2, 4, then again): a frame
    decoder without attention, whose receptive field grows with depth. Positions are not
    needed: convolutions see order."""

    def __init__(self, layers: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv1d(
                hidden,
                hidden,
                CONV_KERNEL,
                padding=(CONV_KERNEL // 2) * 2 ** (i % 3),
                dilation=2 ** (i % 3),
            )
            for i in range(layers)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(layers))
        self.drop = nn.Dropout(dropout)
        self.ln_out = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = mask[:, :, None].to(x.dtype)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            y = conv((norm(x) * keep).transpose(1, 2)).transpose(1, 2)
            x = x + self.drop(F.gelu(y))
        return self.ln_out(x) * keep


class DurationPredictor(nn.Module):
    """Two convolution layers and a projection: log frames per token, from the encoder's
    output (with outputs > 1, that many values per position: the pitch predictor's log
    F0 and voicing logit per frame)."""

    def __init__(self, hidden: int, dropout: float, outputs: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(hidden, hidden, DURATION_KERNEL, padding=DURATION_KERNEL // 2)
        self.ln1 = nn.LayerNorm(hidden)
        self.conv2 = nn.Conv1d(hidden, hidden, DURATION_KERNEL, padding=DURATION_KERNEL // 2)
        self.ln2 = nn.LayerNorm(hidden)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(hidden, outputs)

    def _conv(
        self, conv: nn.Conv1d, norm: nn.LayerNorm, x: torch.Tensor, keep: torch.Tensor
    ) -> torch.Tensor:
        y = F.relu(conv((x * keep).transpose(1, 2))).transpose(1, 2)
        return self.drop(norm(y))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, Lt, H), (B, Lt) -> (B, Lt) predicted log durations (zero on padding)."""
        return self.predict(x, mask)[..., 0]

    def predict(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, L, H), (B, L) -> (B, L, outputs), zero on padding."""
        keep = mask[:, :, None].to(x.dtype)
        y = self._conv(self.conv1, self.ln1, x, keep)
        y = self._conv(self.conv2, self.ln2, y, keep)
        return self.out(y * keep) * keep.to(y.dtype)


class PitchEmbedding(nn.Module):
    """Log F0 per frame -> a learned vector: unvoiced frames share row 0, voiced ones fall
    into PITCH_BINS bins evenly spaced in log F0 over the pitch tracker's range (FastSpeech
    2's quantised pitch embedding)."""

    boundaries: torch.Tensor

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.table = nn.Embedding(PITCH_BINS + 1, hidden)
        nn.init.normal_(self.table.weight, mean=0.0, std=hidden**-0.5)
        edges = torch.linspace(
            math.log(LOWEST_PITCH_HZ), math.log(HIGHEST_PITCH_HZ), PITCH_BINS - 1
        )
        self.register_buffer("boundaries", edges, persistent=False)

    def forward(self, log_f0: torch.Tensor, voiced: torch.Tensor) -> torch.Tensor:
        """(B, T) log F0 and (B, T) bool -> (B, T, hidden)."""
        bins = torch.bucketize(log_f0.float().contiguous(), self.boundaries) + 1
        return self.table(torch.where(voiced, bins, torch.zeros_like(bins)))


class PostNet(nn.Module):
    """A residual stack of convolutions over the mel (Tacotron 2's post-net, with LayerNorm):
    sharpens detail the frame-wise decoder smooths away."""

    def __init__(self, n_mels: int, channels: int, layers: int, dropout: float) -> None:
        super().__init__()
        widths = [n_mels] + [channels] * (layers - 1) + [n_mels]
        convs = [
            nn.Conv1d(widths[i], widths[i + 1], POSTNET_KERNEL, padding=POSTNET_KERNEL // 2)
            for i in range(layers)
        ]
        # Starts as the identity: the decoder's mel passes through unchanged
        # until the post-net has learned.
        for tensor in (convs[-1].weight, convs[-1].bias):
            if tensor is not None:
                nn.init.zeros_(tensor)
        self.convs = nn.ModuleList(convs)
        self.norms = nn.ModuleList(nn.LayerNorm(widths[i + 1]) for i in range(layers - 1))
        self.drop = nn.Dropout(dropout)

    def forward(self, mel: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, n_mels, Tm) standardised mel, (B, Tm) mask -> the correction
        to add (zero on padding)."""
        keep = mask[:, None, :].to(mel.dtype)
        x = mel
        for conv, norm in zip(self.convs[:-1], self.norms, strict=True):
            x = torch.tanh(norm(conv(x * keep).transpose(1, 2)).transpose(1, 2))
            x = self.drop(x)
        return self.convs[-1](x * keep) * keep
