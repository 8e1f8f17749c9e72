"""A small GAN vocoder that turns log-mel frames into a waveform by predicting an STFT, Vocos-style.

Why this shape: classic neural vocoders grow the frame-rate mel into sample-rate audio with a
stack of transposed convolutions, so most of their compute runs at 22 kHz. Here every layer runs
at the mel frame rate instead. A ConvNeXt trunk (depthwise convolution over time, then a per-frame
MLP over channels) maps each normalised mel frame to one STFT column: n_fft // 2 + 1
log-magnitudes and as many phase angles. The inverse STFT, with the same hop as the mel features,
then does the upsampling exactly and for free. With a few hundred thousand parameters that learn
quickly this suits modest hardware.

Lengths: the project's mel frames are centred, so a clip of S samples has T = 1 + S //
hop frames. The generator always returns T * hop samples (at least S); the task trims
the result to the clip's length.

Training is a least-squares GAN. Period discriminators fold the wave into rows of p samples and
look for periodic structure; resolution discriminators look at magnitude spectrograms at several
STFT sizes. Each returns per-patch logits and its hidden feature maps, the latter for a
feature-matching loss. The multi-resolution STFT distance is both the reconstruction loss and the
validation score. Real and fake waves passed together to the discriminators must have the same
length (crop the target to the output).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import weight_norm

Resolution = tuple[int, int, int]
Features = list[list[Tensor]]
# Slope of every discriminator activation: negative inputs still pass a gradient.
LEAK = 0.1
# Largest predicted magnitude; clamped in the log domain so exp never overflows
# to inf (inf * 0 = NaN grads).
MAX_LOG_MAGNITUDE = math.log(100.0)
# Magnitudes are floored before the log so silent bins give a finite log and gradient.
MAGNITUDE_FLOOR = 1e-7
# Smallest stored mel standard deviation: a band that never changes must not divide by zero.
MIN_MEL_STD = 1e-5


@dataclass(frozen=True)
class VocoderConfig:
    """Sizes of the generator and the discriminators; the STFT fields must
    match the mel features."""

    n_mels: int = 80
    """Mel bands of the input log-mel spectrogram."""
    n_fft: int = 1024
    """FFT size of the inverse STFT that makes the wave."""
    hop_length: int = 256
    """Samples per mel frame, which is also the inverse STFT's hop."""
    win_length: int = 1024
    """Length of the Hann window of the inverse STFT (at most n_fft)."""
    channels: int = 128
    """Width of the generator's ConvNeXt trunk."""
    blocks: int = 4
    """Number of ConvNeXt blocks in the generator."""
    kernel: int = 7
    """Odd kernel size of the generator's embedding and depthwise convolutions."""
    intermediate: int = 384
    """Hidden width of each block's per-frame MLP (3 x channels at the defaults)."""
    discriminator_channels: int = 16
    """Base width of the discriminators; period ones grow to 16x this, resolution ones use 2x."""
    periods: tuple[int, ...] = (2, 3, 5, 7, 11)
    """One period discriminator per entry, folding the wave into rows of that many samples."""
    resolutions: tuple[Resolution, ...] = ((512, 128, 512), (1024, 256, 1024), (256, 64, 256))
    """(n_fft, hop, win) of each resolution discriminator and of each term
    of the MR-STFT distance."""

    def __post_init__(self) -> None:
        if self.win_length > self.n_fft:
            raise ValueError(f"win_length ({self.win_length}) must not exceed n_fft ({self.n_fft})")
        if self.kernel % 2 == 0 or self.blocks < 1:
            raise ValueError(
                f"kernel must be odd and blocks at least 1, got {self.kernel} and {self.blocks}"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values: the tuples become lists, so the dict equals
        its own JSON round trip."""
        values = asdict(self)
        values["periods"] = list(self.periods)
        values["resolutions"] = [list(r) for r in self.resolutions]
        return values

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VocoderConfig:
        """Inverse of to_dict (also accepts its JSON-loaded form); missing
        fields take their defaults."""
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown vocoder config fields: {', '.join(unknown)}")
        values = dict(data)
        if "periods" in values:
            values["periods"] = tuple(int(p) for p in values["periods"])
        if "resolutions" in values:
            values["resolutions"] = tuple(
                (int(n), int(h), int(w)) for n, h, w in values["resolutions"]
            )
        return cls(**values)


class ConvNeXtBlock(nn.Module):
    """Depthwise conv mixes neighbouring frames, a per-frame MLP mixes
    channels; a scaled residual."""

    def __init__(self, channels: int, intermediate: int, kernel: int, scale: float) -> None:
        super().__init__()
        self.depthwise = nn.Conv1d(channels, channels, kernel, padding=kernel // 2, groups=channels)
        self.norm = nn.LayerNorm(channels)
        self.up = nn.Linear(channels, intermediate)
        self.down = nn.Linear(intermediate, channels)
        # Small residual branches at the start keep the trunk near identity, which trains stably.
        self.scale = nn.Parameter(torch.full((channels,), scale))

    def forward(self, x: Tensor) -> Tensor:
        """(B, T, C) -> (B, T, C)."""
        y = self.depthwise(x.transpose(1, 2)).transpose(1, 2)
        y = self.down(F.gelu(self.up(self.norm(y))))
        return x + self.scale * y


class Generator(nn.Module):
    """Log-mel (B, n_mels, T) -> wave (B, T * hop_length); the task trims to the clip's S samples.

    T * hop_length >= S because centred frames give T = 1 + S // hop for a clip of S samples.
    `mel_mean` / `mel_std` (n_mels, 1) normalise the input; the task sets them from corpus
    statistics (`set_mel_statistics`) and they travel in the state_dict.
    """

    mel_mean: Tensor
    mel_std: Tensor
    window: Tensor

    def __init__(self, config: VocoderConfig) -> None:
        super().__init__()
        self.config = config
        width = config.channels
        self.register_buffer("mel_mean", torch.zeros(config.n_mels, 1))
        self.register_buffer("mel_std", torch.ones(config.n_mels, 1))
        # Rebuilt from the config, so not worth saving.
        self.register_buffer(
            "window", torch.hann_window(config.win_length, periodic=True), persistent=False
        )
        self.embed = nn.Conv1d(config.n_mels, width, config.kernel, padding=config.kernel // 2)
        self.embed_norm = nn.LayerNorm(width)
        scale = 1.0 / config.blocks
        self.blocks = nn.ModuleList(
            ConvNeXtBlock(width, config.intermediate, config.kernel, scale)
            for _ in range(config.blocks)
        )
        self.out_norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, config.n_fft + 2)

    @torch.no_grad()
    def set_mel_statistics(self, mean: Tensor, std: Tensor) -> None:
        """Store per-band corpus statistics, each (n_mels,) or (n_mels, 1)."""
        self.mel_mean.copy_(mean.reshape(-1, 1))
        self.mel_std.copy_(std.reshape(-1, 1).clamp(min=MIN_MEL_STD))

    def spectrum(self, mel: Tensor) -> Tensor:
        """(B, n_mels, T) log-mel -> (B, n_fft // 2 + 1, T) complex STFT."""
        magnitude, phase = self.magnitude_and_phase(mel)
        return torch.complex(magnitude * phase.cos(), magnitude * phase.sin())

    def magnitude_and_phase(self, mel: Tensor) -> tuple[Tensor, Tensor]:
        """(B, n_mels, T) log-mel -> the STFT's magnitude and phase, (B, n_fft // 2 +
        1, T) real float32 each (real tensors: the ONNX graph builds its wave from
        these without complex numbers)."""
        if mel.dim() != 3 or mel.shape[1] != self.config.n_mels:
            raise ValueError(
                f"expected a (batch, {self.config.n_mels}, frames) log-mel, got {tuple(mel.shape)}"
            )
        x = (mel - self.mel_mean) / self.mel_std
        x = self.embed_norm(self.embed(x).transpose(1, 2))
        for block in self.blocks:
            x = block(x)
        # float32 from here: under autocast the head is half precision, and
        # complex half is poorly supported.
        x = self.head(self.out_norm(x)).transpose(1, 2).float()
        log_magnitude, phase = x.chunk(2, dim=1)
        return log_magnitude.clamp(max=MAX_LOG_MAGNITUDE).exp(), phase

    def forward(self, mel: Tensor) -> Tensor:
        """(B, n_mels, T) log-mel -> (B, T * hop_length) float32 wave."""
        cfg = self.config
        return torch.istft(
            self.spectrum(mel),
            cfg.n_fft,
            cfg.hop_length,
            cfg.win_length,
            window=self.window,
            center=True,
            length=mel.shape[-1] * cfg.hop_length,
        )

    @torch.no_grad()
    def synthesise(self, mel: Tensor) -> Tensor:
        """Inference on one (n_mels, T) log-mel -> (T * hop_length,) wave, in eval mode."""
        was_training = self.training
        self.eval()
        try:
            return self(mel.to(self.mel_mean)[None])[0]
        finally:
            self.train(was_training)


def _conv2d(
    c_in: int, c_out: int, kernel: tuple[int, int], stride: tuple[int, int] = (1, 1)
) -> nn.Conv2d:
    """Weight-normalised 2-D conv with 'same' padding along both axes (before striding)."""
    padding = (kernel[0] // 2, kernel[1] // 2)
    return weight_norm(nn.Conv2d(c_in, c_out, kernel, stride, padding))


def _run_stack(layers: nn.ModuleList, final: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """Hidden convs with LeakyReLU, each output kept as a feature map, then
    the 1-channel logit conv."""
    features = []
    for layer in layers:
        x = F.leaky_relu(layer(x), LEAK)
        features.append(x)
    return final(x).flatten(1), features


def _magnitude(wave: Tensor, n_fft: int, hop: int, window: Tensor) -> Tensor:
    """(B, S) wave -> (B, n_fft // 2 + 1, frames) linear STFT magnitude, computed in float32."""
    spec = torch.stft(
        wave.float(),
        n_fft,
        hop,
        window.shape[0],
        window=window.float(),
        center=True,
        return_complex=True,
    )
    return spec.abs()


class PeriodDiscriminator(nn.Module):
    """Judges the wave folded into rows of `period` samples, so each column
    is one phase of the period."""

    def __init__(self, period: int, channels: int) -> None:
        super().__init__()
        self.period = period
        widths = [1, channels, 4 * channels, 16 * channels]
        self.layers = nn.ModuleList(
            _conv2d(c_in, c_out, (5, 1), (3, 1))
            for c_in, c_out in zip(widths[:-1], widths[1:], strict=True)
        )
        self.final = _conv2d(widths[-1], 1, (3, 1))

    def forward(self, wave: Tensor) -> tuple[Tensor, list[Tensor]]:
        """(B, S) -> (logits (B, N), feature maps)."""
        batch, samples = wave.shape
        pad = -samples % self.period
        if pad:
            # Mirrored samples continue the signal; zeros would add an edge
            # the real audio never has.
            wave = F.pad(wave[:, None], (0, pad), mode="reflect")[:, 0]
        return _run_stack(self.layers, self.final, wave.reshape(batch, 1, -1, self.period))


class ResolutionDiscriminator(nn.Module):
    """Judges one (frequency, frame) magnitude spectrogram; strides shrink the frequency axis."""

    window: Tensor

    def __init__(self, n_fft: int, hop: int, win: int, channels: int) -> None:
        super().__init__()
        self.n_fft = n_fft
        self.hop = hop
        self.register_buffer("window", torch.hann_window(win, periodic=True), persistent=False)
        width = 2 * channels
        self.layers = nn.ModuleList(
            [
                _conv2d(1, width, (3, 9)),
                _conv2d(width, width, (3, 9), (2, 1)),
                _conv2d(width, width, (3, 9), (2, 1)),
                _conv2d(width, width, (3, 3)),
            ]
        )
        self.final = _conv2d(width, 1, (3, 3))

    def forward(self, wave: Tensor) -> tuple[Tensor, list[Tensor]]:
        """(B, S) -> (logits (B, N), feature maps); S must exceed n_fft // 2 (reflect padding)."""
        magnitude = _magnitude(wave, self.n_fft, self.hop, self.window)
        return _run_stack(self.layers, self.final, magnitude[:, None])


class Discriminators(nn.Module):
    """All period discriminators, then all resolution discriminators, in config order."""

    def __init__(self, config: VocoderConfig) -> None:
        super().__init__()
        width = config.discriminator_channels
        self.discriminators = nn.ModuleList(
            [
                *(PeriodDiscriminator(period, width) for period in config.periods),
                *(
                    ResolutionDiscriminator(n_fft, hop, win, width)
                    for n_fft, hop, win in config.resolutions
                ),
            ]
        )

    def forward(
        self, real: Tensor, fake: Tensor
    ) -> tuple[list[Tensor], list[Tensor], Features, Features]:
        """(B, S) real and fake waves -> real logits, fake logits, real
        features, fake features (one per disc)."""
        if real.shape != fake.shape:
            raise ValueError(
                f"real and fake waves must have one shape, got {tuple(real.shape)},"
                f" {tuple(fake.shape)}"
            )
        batch = real.shape[0]
        # One pass over both halves: half the kernel launches, and identical
        # padding for real and fake.
        both = torch.cat([real.to(fake.dtype), fake])
        real_logits, fake_logits, real_features, fake_features = [], [], [], []
        for discriminator in self.discriminators:
            logits, features = discriminator(both)
            real_logits.append(logits[:batch])
            fake_logits.append(logits[batch:])
            real_features.append([f[:batch] for f in features])
            fake_features.append([f[batch:] for f in features])
        return real_logits, fake_logits, real_features, fake_features


class GanVocoder(nn.Module):
    """Generator and discriminators as separate sub-modules, so each can get its own optimizer."""

    def __init__(self, config: VocoderConfig | None = None) -> None:
        super().__init__()
        self.config = config or VocoderConfig()
        self.generator = Generator(self.config)
        self.discriminators = Discriminators(self.config)

    def forward(self, mel: Tensor) -> Tensor:
        """The generator alone: (B, n_mels, T) -> (B, T * hop_length)."""
        return self.generator(mel)


def discriminator_loss(real_logits: Sequence[Tensor], fake_logits: Sequence[Tensor]) -> Tensor:
    """LSGAN: mean over discriminators of mean((1 - real)^2) + mean(fake^2)."""
    terms = [
        (1 - r).square().mean() + f.square().mean()
        for r, f in zip(real_logits, fake_logits, strict=True)
    ]
    return torch.stack(terms).mean()


def adversarial_loss(fake_logits: Sequence[Tensor]) -> Tensor:
    """LSGAN generator loss: mean over discriminators of mean((1 - fake)^2)."""
    return torch.stack([(1 - f).square().mean() for f in fake_logits]).mean()


def feature_matching_loss(
    real_features: Sequence[Sequence[Tensor]], fake_features: Sequence[Sequence[Tensor]]
) -> Tensor:
    """Mean over every layer of every discriminator of L1(real, fake); real
    is detached (a fixed target)."""
    terms = [
        (r.detach() - f).abs().mean()
        for real_maps, fake_maps in zip(real_features, fake_features, strict=True)
        for r, f in zip(real_maps, fake_maps, strict=True)
    ]
    return torch.stack(terms).mean()


def _spectral_convergence(reference: Tensor, estimate: Tensor) -> Tensor:
    """||reference - estimate|| / ||reference|| per item, averaged: a quiet clip counts as much as
    a loud one."""
    error = (reference - estimate).flatten(1).norm(dim=1)
    scale = reference.flatten(1).norm(dim=1).clamp(min=MAGNITUDE_FLOOR)
    return (error / scale).mean()


def multi_resolution_stft_distance(
    wave_a: Tensor, wave_b: Tensor, resolutions: Sequence[Resolution]
) -> Tensor:
    """Mean over resolutions of spectral convergence + L1 of log magnitudes;
    wave_a is the reference.

    Takes (B, S) or (S,) waves of one shape; differentiable in both. Used as the reconstruction loss
    and as the validation score (0 for identical waves).
    """
    wave_a, wave_b = wave_a.reshape(-1, wave_a.shape[-1]), wave_b.reshape(-1, wave_b.shape[-1])
    terms = []
    for n_fft, hop, win in resolutions:
        window = torch.hann_window(win, periodic=True, device=wave_a.device)
        mag_a = _magnitude(wave_a, n_fft, hop, window).clamp(min=MAGNITUDE_FLOOR)
        mag_b = _magnitude(wave_b, n_fft, hop, window).clamp(min=MAGNITUDE_FLOOR)
        terms.append(_spectral_convergence(mag_a, mag_b) + (mag_a.log() - mag_b.log()).abs().mean())
    return torch.stack(terms).mean()
