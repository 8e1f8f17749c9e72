"""The text encoder's transformer: self-attention with relative positions (Shaw et al., 2018), a
convolutional feed-forward block, post-norm residuals.

Relative positions: a learned key vector and a learned value vector for each offset -w..w
between query and key (w = 4, shared by the heads); offsets beyond the window get none. The key
vectors add q . r_k[j - i] to the score of query i for key j; the value vectors add
sum_j p[i, j] r_v[j - i] to its output. Both go through a (T, 2T - 1) table of offsets, turned
into (T, T) and back by indexing.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer_core.models.vits.layers import ChannelLayerNorm

# Masked scores: large and negative but finite, so a fully masked row is uniform rather than NaN.
MASKED_SCORE = -1e4
WINDOW = 4


def _offset_index(length: int, device: torch.device) -> Tensor:
    """(T, T) column of each (query i, key j) pair in a (T, 2T - 1) table of offsets j - i."""
    positions = torch.arange(length, device=device)
    return positions[None, :] - positions[:, None] + (length - 1)


class RelativeSelfAttention(nn.Module):
    """Multi-head self-attention over (B, C, T) with window-limited relative position vectors.

    Parameter names are Piper's: conv_q, conv_k, conv_v, conv_o, emb_rel_k, emb_rel_v.
    """

    def __init__(
        self,
        channels: int,
        out_channels: int,
        n_heads: int,
        p_dropout: float = 0.0,
        window_size: int = WINDOW,
    ) -> None:
        super().__init__()
        if channels % n_heads:
            raise ValueError(f"n_heads ({n_heads}) must divide the channels ({channels})")
        self.n_heads = n_heads
        self.window_size = window_size
        self.k_channels = channels // n_heads
        self.conv_q = nn.Conv1d(channels, channels, 1)
        self.conv_k = nn.Conv1d(channels, channels, 1)
        self.conv_v = nn.Conv1d(channels, channels, 1)
        self.conv_o = nn.Conv1d(channels, out_channels, 1)
        self.drop = nn.Dropout(p_dropout)
        spread = self.k_channels**-0.5
        offsets = 2 * window_size + 1
        self.emb_rel_k = nn.Parameter(torch.randn(1, offsets, self.k_channels) * spread)
        self.emb_rel_v = nn.Parameter(torch.randn(1, offsets, self.k_channels) * spread)
        for conv in (self.conv_q, self.conv_k, self.conv_v):
            nn.init.xavier_uniform_(conv.weight)

    def _offset_table(self, table: Tensor, length: int) -> Tensor:
        """(1, 2w + 1, d) -> (1, 2T - 1, d): a vector per offset -(T-1)..T-1, zero beyond w."""
        room = length - 1 - self.window_size
        if room > 0:
            table = F.pad(table, (0, 0, room, room))
        start = max(-room, 0)
        return table[:, start : start + 2 * length - 1]

    def forward(self, x: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """(B, C, T) -> (B, out_channels, T); attn_mask (B, 1, T, T): 1 where a pair attends."""
        batch, channels, length = x.shape
        heads, width = self.n_heads, self.k_channels

        def split_heads(t: Tensor) -> Tensor:
            return t.view(batch, heads, width, length).transpose(2, 3)

        query = split_heads(self.conv_q(x)) / math.sqrt(width)
        key, value = split_heads(self.conv_k(x)), split_heads(self.conv_v(x))
        index = _offset_index(length, x.device).expand(batch, heads, length, length)

        scores = torch.matmul(query, key.transpose(-2, -1))
        key_offsets = self._offset_table(self.emb_rel_k, length)
        by_offset = torch.matmul(query, key_offsets.unsqueeze(0).transpose(-2, -1))
        scores = scores + by_offset.gather(-1, index)
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask == 0, MASKED_SCORE)
        weights = self.drop(F.softmax(scores, dim=-1))

        output = torch.matmul(weights, value)
        weights_by_offset = weights.new_zeros(batch, heads, length, 2 * length - 1)
        weights_by_offset = weights_by_offset.scatter(-1, index, weights)
        value_offsets = self._offset_table(self.emb_rel_v, length)
        output = output + torch.matmul(weights_by_offset, value_offsets.unsqueeze(0))
        merged = output.transpose(2, 3).contiguous().view(batch, channels, length)
        return self.conv_o(merged)


class FFN(nn.Module):
    """Two convolutions with ReLU between, 'same' padding, the mask applied before each."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        filter_channels: int,
        kernel_size: int,
        p_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        # Left (k - 1) // 2 and right k // 2: the output keeps the input's length for any kernel.
        self.padding = ((kernel_size - 1) // 2, kernel_size // 2)
        self.conv_1 = nn.Conv1d(in_channels, filter_channels, kernel_size)
        self.conv_2 = nn.Conv1d(filter_channels, out_channels, kernel_size)
        self.drop = nn.Dropout(p_dropout)

    def forward(self, x: Tensor, x_mask: Tensor) -> Tensor:
        x = torch.relu(self.conv_1(F.pad(x * x_mask, self.padding)))
        x = self.conv_2(F.pad(self.drop(x) * x_mask, self.padding))
        return x * x_mask


class Encoder(nn.Module):
    """`n_layers` of attention then feed-forward, each residual and layer-normed after the sum."""

    def __init__(
        self,
        hidden_channels: int,
        filter_channels: int,
        n_heads: int,
        n_layers: int,
        kernel_size: int = 1,
        p_dropout: float = 0.0,
        window_size: int = WINDOW,
    ) -> None:
        super().__init__()
        self.drop = nn.Dropout(p_dropout)
        self.attn_layers = nn.ModuleList()
        self.norm_layers_1 = nn.ModuleList()
        self.ffn_layers = nn.ModuleList()
        self.norm_layers_2 = nn.ModuleList()
        for _ in range(n_layers):
            self.attn_layers.append(
                RelativeSelfAttention(
                    hidden_channels,
                    hidden_channels,
                    n_heads,
                    p_dropout=p_dropout,
                    window_size=window_size,
                )
            )
            self.norm_layers_1.append(ChannelLayerNorm(hidden_channels))
            self.ffn_layers.append(
                FFN(hidden_channels, hidden_channels, filter_channels, kernel_size, p_dropout),
            )
            self.norm_layers_2.append(ChannelLayerNorm(hidden_channels))

    def forward(self, x: Tensor, x_mask: Tensor) -> Tensor:
        """(B, C, T) with a (B, 1, T) mask -> (B, C, T)."""
        pair_mask = x_mask.unsqueeze(2) * x_mask.unsqueeze(-1)
        x = x * x_mask
        layers = zip(
            self.attn_layers,
            self.norm_layers_1,
            self.ffn_layers,
            self.norm_layers_2,
            strict=True,
        )
        for attention, norm_1, feed_forward, norm_2 in layers:
            x = norm_1(x + self.drop(attention(x, pair_mask)))
            x = norm_2(x + self.drop(feed_forward(x, x_mask)))
        return x * x_mask
