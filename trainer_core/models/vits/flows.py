"""Invertible layers for the prior flow and the stochastic duration predictor.

Every flow maps (B, C, T) to (B, C, T) under a (B, 1, T) mask. `forward` is the direction used in
training and also returns the log-determinant of its Jacobian per item, (B,); `inverse` undoes it
and is what speaking runs. Coupling layers transform the second half of the channels with
parameters computed from the first half, so they invert exactly; `Flip` reverses the channel order
so that the next coupling transforms the other half.
"""

from __future__ import annotations

import math
from typing import cast

import torch
from torch import Tensor, nn

from trainer_core.models.vits.layers import WN, DDSConv
from trainer_core.models.vits.spline import rational_quadratic_spline

# Piper's floor before the log of durations: a zero-frame symbol still gets a finite log.
LOG_FLOOR = 1e-5


def _zero_init(conv: nn.Conv1d) -> None:
    """Zero a projection, as Piper does: its flow starts from fixed, even parameters."""
    nn.init.zeros_(conv.weight)
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)


class Flow(nn.Module):
    """An invertible map of (B, C, T) under a mask, optionally conditioned on `g`."""

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def inverse(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> Tensor:
        raise NotImplementedError


class Log(Flow):
    """y = log(x) elementwise (x floored at 1e-5): positive durations to the real line."""

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> tuple[Tensor, Tensor]:
        y = torch.log(torch.clamp_min(x, LOG_FLOOR)) * x_mask
        return y, torch.sum(-y, [1, 2])

    def inverse(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> Tensor:
        return torch.exp(x) * x_mask


class Flip(Flow):
    """Reverse the channel order; volume-preserving."""

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return torch.flip(x, [1]), x.new_zeros(x.shape[0])

    def inverse(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> Tensor:
        return torch.flip(x, [1])


class ElementwiseAffine(Flow):
    """y = m + exp(logs) * x per channel, learned m and logs (Piper's names), zero at the start."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.m = nn.Parameter(torch.zeros(channels, 1))
        self.logs = nn.Parameter(torch.zeros(channels, 1))

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> tuple[Tensor, Tensor]:
        y = (self.m + torch.exp(self.logs) * x) * x_mask
        return y, torch.sum(self.logs * x_mask, [1, 2])

    def inverse(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> Tensor:
        return (x - self.m) * torch.exp(-self.logs) * x_mask


class ResidualCouplingLayer(Flow):
    """Affine coupling: the second half shifted (and scaled unless mean_only) by a WN of the first.

    `post` starts at zero, so a new layer is the identity.
    """

    def __init__(
        self,
        channels: int,
        hidden_channels: int,
        kernel_size: int,
        dilation_rate: int,
        n_layers: int,
        p_dropout: float = 0.0,
        gin_channels: int = 0,
        mean_only: bool = False,
    ) -> None:
        super().__init__()
        if channels % 2:
            raise ValueError(f"a coupling layer splits its channels in two, got {channels}")
        self.half_channels = channels // 2
        self.mean_only = mean_only
        self.pre = nn.Conv1d(self.half_channels, hidden_channels, 1)
        self.enc = WN(
            hidden_channels,
            kernel_size,
            dilation_rate,
            n_layers,
            gin_channels=gin_channels,
            p_dropout=p_dropout,
        )
        self.post = nn.Conv1d(hidden_channels, self.half_channels * (1 if mean_only else 2), 1)
        _zero_init(self.post)

    def _shift_and_log_scale(
        self,
        kept: Tensor,
        x_mask: Tensor,
        g: Tensor | None,
    ) -> tuple[Tensor, Tensor | None]:
        hidden = self.enc(self.pre(kept) * x_mask, x_mask, g=g)
        stats = self.post(hidden) * x_mask
        if self.mean_only:
            return stats, None
        shift, log_scale = torch.split(stats, [self.half_channels] * 2, 1)
        return shift, log_scale

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> tuple[Tensor, Tensor]:
        kept, moved = torch.split(x, [self.half_channels] * 2, 1)
        shift, log_scale = self._shift_and_log_scale(kept, x_mask, g)
        if log_scale is None:
            moved = shift + moved * x_mask
            logdet = x.new_zeros(x.shape[0])
        else:
            moved = shift + moved * torch.exp(log_scale) * x_mask
            logdet = torch.sum(log_scale, [1, 2])
        return torch.cat([kept, moved], 1), logdet

    def inverse(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> Tensor:
        kept, moved = torch.split(x, [self.half_channels] * 2, 1)
        shift, log_scale = self._shift_and_log_scale(kept, x_mask, g)
        moved = moved - shift
        if log_scale is not None:
            moved = moved * torch.exp(-log_scale)
        return torch.cat([kept, moved * x_mask], 1)


class ConvFlow(Flow):
    """Spline coupling: the second half through a rational-quadratic spline whose bins come from a
    DDSConv of the first half (plus `g`); `proj` starts at zero (equal bins, knots in place)."""

    def __init__(
        self,
        in_channels: int,
        filter_channels: int,
        kernel_size: int,
        n_layers: int,
        num_bins: int = 10,
        tail_bound: float = 5.0,
    ) -> None:
        super().__init__()
        self.filter_channels = filter_channels
        self.num_bins = num_bins
        self.tail_bound = tail_bound
        self.half_channels = in_channels // 2
        self.pre = nn.Conv1d(self.half_channels, filter_channels, 1)
        self.convs = DDSConv(filter_channels, kernel_size, n_layers, p_dropout=0.0)
        # Per bin a width and a height, and a derivative at each inner knot.
        self.proj = nn.Conv1d(filter_channels, self.half_channels * (num_bins * 3 - 1), 1)
        _zero_init(self.proj)

    def _transform(
        self,
        x: Tensor,
        x_mask: Tensor,
        g: Tensor | None,
        inverse: bool,
    ) -> tuple[Tensor, Tensor]:
        kept, moved = torch.split(x, [self.half_channels] * 2, 1)
        hidden = self.convs(self.pre(kept), x_mask, g=g)
        params = self.proj(hidden) * x_mask
        batch, channels, steps = kept.shape
        # (B, C * P, T) -> (B, C, T, P): the spline parameters last.
        params = params.reshape(batch, channels, -1, steps).permute(0, 1, 3, 2)
        bins = self.num_bins
        scale = math.sqrt(self.filter_channels)
        moved, log_jacobian = rational_quadratic_spline(
            moved,
            params[..., :bins] / scale,
            params[..., bins : 2 * bins] / scale,
            params[..., 2 * bins :],
            inverse=inverse,
            tail_bound=self.tail_bound,
        )
        out = torch.cat([kept, moved], 1) * x_mask
        return out, torch.sum(log_jacobian * x_mask, [1, 2])

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> tuple[Tensor, Tensor]:
        return self._transform(x, x_mask, g, inverse=False)

    def inverse(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> Tensor:
        return self._transform(x, x_mask, g, inverse=True)[0]


class ResidualCouplingBlock(nn.Module):
    """The prior flow (Piper's layout): `n_flows` mean-only couplings, each followed by a Flip."""

    def __init__(
        self,
        channels: int,
        hidden_channels: int,
        kernel_size: int,
        dilation_rate: int,
        n_layers: int,
        n_flows: int = 4,
        gin_channels: int = 0,
    ) -> None:
        super().__init__()
        self.flows = nn.ModuleList()
        for _ in range(n_flows):
            self.flows.append(
                ResidualCouplingLayer(
                    channels,
                    hidden_channels,
                    kernel_size,
                    dilation_rate,
                    n_layers,
                    gin_channels=gin_channels,
                    mean_only=True,
                )
            )
            self.flows.append(Flip())

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> Tensor:
        """Posterior latent z -> prior-space z_p (training)."""
        for flow in self.flows:
            x, _ = flow(x, x_mask, g=g)
        return x

    def inverse(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> Tensor:
        """Prior-space z_p -> latent z (speaking)."""
        for flow in reversed(self.flows):
            x = cast(Flow, flow).inverse(x, x_mask, g=g)
        return x
