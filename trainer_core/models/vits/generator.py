"""The HiFi-GAN decoder (Kong et al., 2020) as VITS uses it: latent frames to audio, T * hop long.

A 7-tap conv widens the latent, then each upsampling (a weight-normalised transposed conv after a
leaky ReLU) multiplies the length by its rate and halves the width, followed by the mean of one
residual block per kernel size (multi-receptive-field fusion). A last 7-tap conv and tanh give the
wave.

Initialisation is Piper's effective one: torch's default for every conv. Piper calls a
normal(0, 0.01) initialiser on its weight-normalised convs after wrapping them, which writes into
a weight recomputed at the next forward and so changes nothing; a from-scratch Vega voice starts
where a from-scratch Piper voice starts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import weight_norm

from trainer_core.models.vits.layers import LEAK, ResBlock1, ResBlock2

# The slope of the leaky ReLU before the output conv: torch's default, as in HiFi-GAN.
FINAL_LEAK = 0.01


class Generator(nn.Module):
    """Latent (B, initial_channel, T) [+ speaker (B, gin, 1)] -> wave (B, 1, T * hop), where hop
    is the product of upsample_rates."""

    def __init__(
        self,
        initial_channel: int,
        resblock: str,
        resblock_kernel_sizes: Sequence[int],
        resblock_dilation_sizes: Sequence[Sequence[int]],
        upsample_rates: Sequence[int],
        upsample_initial_channel: int,
        upsample_kernel_sizes: Sequence[int],
        gin_channels: int = 0,
    ) -> None:
        super().__init__()
        self.num_kernels = len(resblock_kernel_sizes)
        self.conv_pre = nn.Conv1d(initial_channel, upsample_initial_channel, 7, 1, padding=3)
        block = ResBlock1 if resblock == "1" else ResBlock2
        self.ups = nn.ModuleList()
        for stage, (rate, kernel) in enumerate(
            zip(upsample_rates, upsample_kernel_sizes, strict=True),
        ):
            up = nn.ConvTranspose1d(
                upsample_initial_channel // 2**stage,
                upsample_initial_channel // 2 ** (stage + 1),
                kernel,
                rate,
                padding=(kernel - rate) // 2,
            )
            self.ups.append(weight_norm(up))
        self.resblocks = nn.ModuleList()
        channels = upsample_initial_channel
        for stage in range(len(self.ups)):
            channels = upsample_initial_channel // 2 ** (stage + 1)
            for kernel, dilation in zip(
                resblock_kernel_sizes,
                resblock_dilation_sizes,
                strict=True,
            ):
                self.resblocks.append(block(channels, kernel, dilation))
        self.conv_post = nn.Conv1d(channels, 1, 7, 1, padding=3, bias=False)
        if gin_channels:
            self.cond = nn.Conv1d(gin_channels, upsample_initial_channel, 1)

    def forward(self, x: Tensor, g: Tensor | None = None) -> Tensor:
        x = self.conv_pre(x)
        if g is not None:
            x = x + self.cond(g)
        for stage, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, LEAK))
            blocks = self.resblocks[stage * self.num_kernels : (stage + 1) * self.num_kernels]
            fused = blocks[0](x)
            for block in blocks[1:]:
                fused = fused + block(x)
            x = fused / self.num_kernels
        x = self.conv_post(F.leaky_relu(x, FINAL_LEAK))
        return torch.tanh(x)
