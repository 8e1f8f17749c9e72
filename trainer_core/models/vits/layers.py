"""Convolution stacks of VITS: channel layer norm, DDSConv, the WaveNet stack, residual blocks.

Tensors are (batch, channels, time) throughout, with a (batch, 1, time) mask that zeroes the
padding. Attribute names are Piper's (`convs_sep`, `norms_1`, `in_layers`, `res_skip_layers`,
`cond_layer`, `convs1`, ...), so Piper's weights load into these modules unchanged. Weight norm is
torch's parametrization: its tensors are `<conv>.parametrizations.weight.original0` (the gain) and
`original1` (the direction), which `piper_names` maps from Piper's `weight_g` and `weight_v`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import weight_norm

# Slope of the decoder's leaky ReLUs (HiFi-GAN's).
LEAK = 0.1


def same_padding(kernel_size: int, dilation: int = 1) -> int:
    """Padding that keeps the length of an odd-kernel convolution with this dilation."""
    return (kernel_size * dilation - dilation) // 2


class ChannelLayerNorm(nn.Module):
    """Layer norm over the channels of (B, C, T), with Piper's parameter names gamma and beta."""

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.channels = channels
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: Tensor) -> Tensor:
        moved = x.transpose(1, -1)
        normed = F.layer_norm(moved, (self.channels,), self.gamma, self.beta, self.eps)
        return normed.transpose(1, -1)


class DDSConv(nn.Module):
    """Dilated depth-separable convolutions with GELU, residual around each layer.

    Layer i dilates by kernel_size ** i, so three layers of kernel 3 see 27 steps.
    """

    def __init__(
        self,
        channels: int,
        kernel_size: int,
        n_layers: int,
        p_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.n_layers = n_layers
        self.drop = nn.Dropout(p_dropout)
        self.convs_sep = nn.ModuleList()
        self.convs_1x1 = nn.ModuleList()
        self.norms_1 = nn.ModuleList()
        self.norms_2 = nn.ModuleList()
        for layer in range(n_layers):
            dilation = kernel_size**layer
            self.convs_sep.append(
                nn.Conv1d(
                    channels,
                    channels,
                    kernel_size,
                    groups=channels,
                    dilation=dilation,
                    padding=same_padding(kernel_size, dilation),
                )
            )
            self.convs_1x1.append(nn.Conv1d(channels, channels, 1))
            self.norms_1.append(ChannelLayerNorm(channels))
            self.norms_2.append(ChannelLayerNorm(channels))

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> Tensor:
        """(B, C, T) -> (B, C, T); `g` (B, C, T or 1) is added to the input as conditioning."""
        if g is not None:
            x = x + g
        parts = zip(self.convs_sep, self.norms_1, self.convs_1x1, self.norms_2, strict=True)
        for depthwise, norm_a, pointwise, norm_b in parts:
            y = F.gelu(norm_a(depthwise(x * x_mask)))
            y = F.gelu(norm_b(pointwise(y)))
            x = x + self.drop(y)
        return x * x_mask


class WN(nn.Module):
    """WaveNet-style stack: gated dilated convolutions whose skip outputs are summed.

    Each layer's 1x1 output is split into a residual part (added to the running input) and a
    skip part (added to the output); the last layer has only a skip part. A speaker vector `g`,
    (B, gin, 1), is projected once by `cond_layer` into a slice per layer, added before the gate.
    """

    def __init__(
        self,
        hidden_channels: int,
        kernel_size: int,
        dilation_rate: int,
        n_layers: int,
        gin_channels: int = 0,
        p_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if kernel_size % 2 == 0:
            raise ValueError(f"WN needs an odd kernel_size, got {kernel_size}")
        self.hidden_channels = hidden_channels
        self.n_layers = n_layers
        self.in_layers = nn.ModuleList()
        self.res_skip_layers = nn.ModuleList()
        self.drop = nn.Dropout(p_dropout)
        if gin_channels:
            cond = nn.Conv1d(gin_channels, 2 * hidden_channels * n_layers, 1)
            self.cond_layer = weight_norm(cond)
        for layer in range(n_layers):
            dilation = dilation_rate**layer
            self.in_layers.append(
                weight_norm(
                    nn.Conv1d(
                        hidden_channels,
                        2 * hidden_channels,
                        kernel_size,
                        dilation=dilation,
                        padding=same_padding(kernel_size, dilation),
                    )
                )
            )
            out = 2 * hidden_channels if layer < n_layers - 1 else hidden_channels
            self.res_skip_layers.append(weight_norm(nn.Conv1d(hidden_channels, out, 1)))

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> Tensor:
        """(B, hidden, T) -> the summed skip outputs, (B, hidden, T), zero on padding."""
        width = self.hidden_channels
        conditioning = self.cond_layer(g) if g is not None else None
        output = torch.zeros_like(x)
        pairs = zip(self.in_layers, self.res_skip_layers, strict=True)
        for layer, (dilated, res_skip) in enumerate(pairs):
            pre_gate = dilated(x)
            if conditioning is not None:
                pre_gate = pre_gate + conditioning[:, layer * 2 * width : (layer + 1) * 2 * width]
            gated = torch.tanh(pre_gate[:, :width]) * torch.sigmoid(pre_gate[:, width:])
            mixed = res_skip(self.drop(gated))
            if layer < self.n_layers - 1:
                x = (x + mixed[:, :width]) * x_mask
                output = output + mixed[:, width:]
            else:
                output = output + mixed
        return output * x_mask


def _decoder_conv(channels: int, kernel_size: int, dilation: int) -> nn.Module:
    """Weight-normalised, length-keeping conv of a residual block."""
    conv = nn.Conv1d(
        channels,
        channels,
        kernel_size,
        dilation=dilation,
        padding=same_padding(kernel_size, dilation),
    )
    return weight_norm(conv)


class ResBlock1(nn.Module):
    """HiFi-GAN's heavy residual block: per dilation a dilated then a plain conv, residual."""

    def __init__(self, channels: int, kernel_size: int, dilation: Sequence[int]) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(_decoder_conv(channels, kernel_size, d) for d in dilation)
        self.convs2 = nn.ModuleList(_decoder_conv(channels, kernel_size, 1) for _ in dilation)

    def forward(self, x: Tensor) -> Tensor:
        for dilated, plain in zip(self.convs1, self.convs2, strict=True):
            y = dilated(F.leaky_relu(x, LEAK))
            x = plain(F.leaky_relu(y, LEAK)) + x
        return x


class ResBlock2(nn.Module):
    """HiFi-GAN's light residual block: one dilated conv per dilation, residual around each."""

    def __init__(self, channels: int, kernel_size: int, dilation: Sequence[int]) -> None:
        super().__init__()
        self.convs = nn.ModuleList(_decoder_conv(channels, kernel_size, d) for d in dilation)

    def forward(self, x: Tensor) -> Tensor:
        for conv in self.convs:
            x = conv(F.leaky_relu(x, LEAK)) + x
        return x
