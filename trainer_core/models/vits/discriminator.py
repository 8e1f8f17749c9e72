"""HiFi-GAN's discriminators as VITS trains with them: one on the raw wave (DiscriminatorS) and one
per period 2, 3, 5, 7, 11 on the wave folded into rows of that many samples (DiscriminatorP).

Each returns flattened logits and the feature map after every layer (for feature matching).
Widths scale with `channels` (Piper: 32): period ones c, 4c, 16c, 32c, 32c; the scale one c/2, 2c,
8c, 32c, 32c, 32c, its grouped convolutions with 4 input channels per group as Piper's (with 32:
groups 4, 16, 64, 256).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import weight_norm

from trainer_core.models.vits.layers import LEAK

PERIODS = (2, 3, 5, 7, 11)
# Input channels per group of the scale discriminator's grouped convolutions (Piper: 16 / 4 = 4).
CHANNELS_PER_GROUP = 4
Judgement = tuple[Tensor, list[Tensor]]


def _groups(c_in: int, c_out: int) -> int:
    """The most groups up to c_in / 4 that divide both widths (Piper's counts at its widths)."""
    groups = max(1, c_in // CHANNELS_PER_GROUP)
    while c_in % groups or c_out % groups:
        groups -= 1
    return groups


def _judge(convs: nn.ModuleList, conv_post: nn.Module, x: Tensor) -> Judgement:
    """Hidden convs with leaky ReLU, every output kept, then the logit conv (also kept)."""
    features = []
    for conv in convs:
        x = F.leaky_relu(conv(x), LEAK)
        features.append(x)
    x = conv_post(x)
    features.append(x)
    return torch.flatten(x, 1, -1), features


class DiscriminatorP(nn.Module):
    """Looks at the wave folded into rows of `period` samples: each column one phase of it."""

    def __init__(
        self,
        period: int,
        channels: int = 32,
        kernel_size: int = 5,
        stride: int = 3,
    ) -> None:
        super().__init__()
        self.period = period
        widths = [1, channels, 4 * channels, 16 * channels, 32 * channels, 32 * channels]
        padding = ((kernel_size - 1) // 2, 0)
        self.convs = nn.ModuleList()
        for layer, (c_in, c_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
            # The last layer keeps its length; the others stride along time.
            step = (stride, 1) if layer < len(widths) - 2 else 1
            conv = nn.Conv2d(c_in, c_out, (kernel_size, 1), step, padding=padding)
            self.convs.append(weight_norm(conv))
        self.conv_post = weight_norm(nn.Conv2d(widths[-1], 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, x: Tensor) -> Judgement:
        """(B, 1, S) -> logits (B, N) and feature maps."""
        batch, channels, samples = x.shape
        if samples % self.period:
            # Mirrored samples continue the signal to a whole number of periods.
            extra = self.period - samples % self.period
            x = F.pad(x, (0, extra), "reflect")
            samples += extra
        folded = x.view(batch, channels, samples // self.period, self.period)
        return _judge(self.convs, self.conv_post, folded)


class DiscriminatorS(nn.Module):
    """Looks at the raw wave with wide strided grouped convolutions."""

    def __init__(self, channels: int = 32) -> None:
        super().__init__()
        widths = [max(1, channels // 2), 2 * channels, 8 * channels, 32 * channels]
        top = 32 * channels
        convs = [nn.Conv1d(1, widths[0], 15, 1, padding=7)]
        for c_in, c_out in zip(widths[:-1], widths[1:], strict=True):
            groups = _groups(c_in, c_out)
            convs.append(nn.Conv1d(c_in, c_out, 41, 4, groups=groups, padding=20))
        convs.append(nn.Conv1d(top, top, 41, 4, groups=_groups(top, top), padding=20))
        convs.append(nn.Conv1d(top, top, 5, 1, padding=2))
        self.convs = nn.ModuleList(weight_norm(conv) for conv in convs)
        self.conv_post = weight_norm(nn.Conv1d(top, 1, 3, 1, padding=1))

    def forward(self, x: Tensor) -> Judgement:
        """(B, 1, S) -> logits (B, N) and feature maps."""
        return _judge(self.convs, self.conv_post, x)


class MultiPeriodDiscriminator(nn.Module):
    """The scale discriminator then one period discriminator per period, in Piper's order."""

    def __init__(self, channels: int = 32, periods: Sequence[int] = PERIODS) -> None:
        super().__init__()
        judges: list[nn.Module] = [DiscriminatorS(channels)]
        judges += [DiscriminatorP(period, channels) for period in periods]
        self.discriminators = nn.ModuleList(judges)

    def forward(
        self, y: Tensor, y_hat: Tensor
    ) -> tuple[list[Tensor], list[Tensor], list[list[Tensor]], list[list[Tensor]]]:
        """Real (B, 1, S) and generated (B, 1, S) waves -> real logits, generated logits, real
        feature maps, generated feature maps: one entry per discriminator."""
        if y.shape != y_hat.shape:
            shapes = f"{tuple(y.shape)} and {tuple(y_hat.shape)}"
            raise ValueError(f"real and generated waves must have one shape, got {shapes}")
        real_logits, fake_logits, real_maps, fake_maps = [], [], [], []
        for judge in self.discriminators:
            logits, maps = judge(y)
            real_logits.append(logits)
            real_maps.append(maps)
            logits, maps = judge(y_hat)
            fake_logits.append(logits)
            fake_maps.append(maps)
        return real_logits, fake_logits, real_maps, fake_maps
