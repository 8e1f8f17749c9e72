"""Duration predictors: how many frames each symbol lasts, from the (detached) text encoding.

`StochasticDurationPredictor` (VITS, Piper's default) is a normalising flow over durations.
Training returns a variational bound on -log p(d | text) per item, with a posterior flow that
dequantises the integer durations (d - u, u in (0, 1)); speaking samples log-durations by running
the flow backwards from Gaussian noise. `DurationPredictor` is the plain alternative: two conv
layers regressing log durations (trained with a squared error by the synthesizer).

Random numbers are drawn as Piper draws them: on the CPU generator, then moved to the input's
device, so that a seeded step draws Piper's numbers on any device.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer_core.models.vits.flows import ConvFlow, ElementwiseAffine, Flip, Flow, Log
from trainer_core.models.vits.layers import ChannelLayerNorm, DDSConv


def _noise(like: Tensor, channels: int) -> Tensor:
    """(B, channels, T) standard normal noise shaped after `like`, drawn on the CPU generator."""
    draw = torch.randn(like.shape[0], channels, like.shape[2])
    return draw.to(device=like.device, dtype=like.dtype)


def _flow_stack(channels: int, kernel_size: int, n_flows: int) -> nn.ModuleList:
    """ElementwiseAffine, then n_flows x (ConvFlow, Flip): the layout of both of Piper's stacks."""
    stack = nn.ModuleList([ElementwiseAffine(2)])
    for _ in range(n_flows):
        stack.append(ConvFlow(2, channels, kernel_size, n_layers=3))
        stack.append(Flip())
    return stack


class StochasticDurationPredictor(nn.Module):
    """A flow over (log-duration, auxiliary) pairs conditioned on the text; width = in_channels."""

    def __init__(
        self,
        in_channels: int,
        kernel_size: int,
        p_dropout: float,
        n_flows: int = 4,
        gin_channels: int = 0,
    ) -> None:
        super().__init__()
        width = in_channels
        self.log_flow = Log()
        self.flows = _flow_stack(width, kernel_size, n_flows)
        self.post_pre = nn.Conv1d(1, width, 1)
        self.post_proj = nn.Conv1d(width, width, 1)
        self.post_convs = DDSConv(width, kernel_size, n_layers=3, p_dropout=p_dropout)
        # Piper's posterior flow has four couplings whatever n_flows is.
        self.post_flows = _flow_stack(width, kernel_size, 4)
        self.pre = nn.Conv1d(in_channels, width, 1)
        self.proj = nn.Conv1d(width, width, 1)
        self.convs = DDSConv(width, kernel_size, n_layers=3, p_dropout=p_dropout)
        if gin_channels:
            self.cond = nn.Conv1d(gin_channels, width, 1)

    def _condition(self, x: Tensor, x_mask: Tensor, g: Tensor | None) -> Tensor:
        # Detached: the duration loss must not shape the text encoder.
        h = self.pre(torch.detach(x))
        if g is not None:
            h = h + self.cond(torch.detach(g))
        return self.proj(self.convs(h, x_mask)) * x_mask

    def forward(self, x: Tensor, x_mask: Tensor, w: Tensor, g: Tensor | None = None) -> Tensor:
        """Negative log-likelihood bound of durations `w` (B, 1, Tx) per item: (B,)."""
        h = self._condition(x, x_mask, g)
        h_w = self.post_proj(self.post_convs(self.post_pre(w), x_mask)) * x_mask
        noise = _noise(x, 2) * x_mask
        # Posterior q(u, nu | d): a flow from noise, conditioned on the text and the durations.
        z_q, log_det_q = noise, x.new_zeros(())
        for flow in self.post_flows:
            z_q, step_log_det = flow(z_q, x_mask, g=h + h_w)
            log_det_q = log_det_q + step_log_det
        z_u, z_1 = torch.split(z_q, [1, 1], 1)
        u = torch.sigmoid(z_u) * x_mask
        z_0 = (w - u) * x_mask
        log_det_q = log_det_q + torch.sum(
            (F.logsigmoid(z_u) + F.logsigmoid(-z_u)) * x_mask,
            [1, 2],
        )
        log_q = torch.sum(-0.5 * (math.log(2 * math.pi) + noise**2) * x_mask, [1, 2]) - log_det_q
        # Prior p(d - u, nu | text): the main flow to a standard normal.
        z_0, log_det = self.log_flow(z_0, x_mask)
        z = torch.cat([z_0, z_1], 1)
        for flow in self.flows:
            z, step_log_det = flow(z, x_mask, g=h)
            log_det = log_det + step_log_det
        nll = torch.sum(0.5 * (math.log(2 * math.pi) + z**2) * x_mask, [1, 2]) - log_det
        return nll + log_q

    def log_durations(
        self,
        x: Tensor,
        x_mask: Tensor,
        g: Tensor | None = None,
        noise_scale: float = 1.0,
    ) -> Tensor:
        """Sampled log-durations (B, 1, Tx) for speaking."""
        h = self._condition(x, x_mask, g)
        z = _noise(x, 2) * noise_scale
        inverse: list[Flow] = [flow for flow in reversed(self.flows) if isinstance(flow, Flow)]
        # As Piper (and VITS): the first ConvFlow is skipped when speaking; its weights still load.
        inverse = inverse[:-2] + inverse[-1:]
        for flow in inverse:
            z = flow.inverse(z, x_mask, g=h)
        return torch.split(z, [1, 1], 1)[0]


class DurationPredictor(nn.Module):
    """Deterministic log-duration regressor: two conv, ReLU, layer-norm layers (256 in Piper)."""

    def __init__(
        self,
        in_channels: int,
        filter_channels: int,
        kernel_size: int,
        p_dropout: float,
        gin_channels: int = 0,
    ) -> None:
        super().__init__()
        self.drop = nn.Dropout(p_dropout)
        padding = kernel_size // 2
        self.conv_1 = nn.Conv1d(in_channels, filter_channels, kernel_size, padding=padding)
        self.norm_1 = ChannelLayerNorm(filter_channels)
        self.conv_2 = nn.Conv1d(filter_channels, filter_channels, kernel_size, padding=padding)
        self.norm_2 = ChannelLayerNorm(filter_channels)
        self.proj = nn.Conv1d(filter_channels, 1, 1)
        if gin_channels:
            self.cond = nn.Conv1d(gin_channels, in_channels, 1)

    def forward(self, x: Tensor, x_mask: Tensor, g: Tensor | None = None) -> Tensor:
        """(B, C, Tx) -> log-durations (B, 1, Tx), zero on padding."""
        x = torch.detach(x)
        if g is not None:
            x = x + self.cond(torch.detach(g))
        x = self.drop(self.norm_1(torch.relu(self.conv_1(x * x_mask))))
        x = self.drop(self.norm_2(torch.relu(self.conv_2(x * x_mask))))
        return self.proj(x * x_mask) * x_mask
