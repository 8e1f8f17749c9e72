"""The network and its picture: plain torch and matplotlib, nothing of Vega's."""

from pathlib import Path

import torch
from torch import nn


class Denoiser(nn.Module):
    """Estimates the noise in a waveform with dilated 1-D convolutions, and subtracts it."""

    def __init__(self, channels: int = 12) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv1d(1, channels, 9, padding=4)]
        for dilation in (1, 2, 4):
            conv = nn.Conv1d(channels, channels, 9, padding=4 * dilation, dilation=dilation)
            layers += [nn.GELU(), conv]
        self.net = nn.Sequential(*layers, nn.GELU(), nn.Conv1d(channels, 1, 1))

    def forward(self, noisy: torch.Tensor) -> torch.Tensor:
        return noisy - self.net(noisy[:, None])[:, 0]


def draw(path: Path, noisy: torch.Tensor, denoised: torch.Tensor) -> Path:
    """Both waveforms, one over the other, as a PNG."""
    from matplotlib.figure import Figure  # imported only when a picture is drawn

    figure = Figure(figsize=(6, 2))
    axes = figure.add_subplot()
    axes.plot(noisy.numpy(), color="0.7", linewidth=0.5)
    axes.plot(denoised.numpy(), color="tab:blue", linewidth=0.5)
    axes.set_axis_off()
    figure.savefig(path, dpi=80)
    return path
