"""The shape of a VITS voice (`VitsConfig`) and Piper's four quality levels (`QUALITY_PRESETS`).

Torch-free, so that the plan can check a shape without importing torch. The defaults are Piper's
medium voice; the names are Piper's hyperparameters where it has them (`posterior_layers`,
`flow_layers`, `flow_count` and `discriminator_channels` are constants in Piper: 16, 4, 4 and 32).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

IntPairs = tuple[tuple[int, ...], ...]

# Piper's decoders: "2" is the light one (x_low, low, medium), "1" the heavy one (high).
_LIGHT_DECODER: dict[str, Any] = {
    "resblock": "2",
    "resblock_kernel_sizes": (3, 5, 7),
    "resblock_dilation_sizes": ((1, 2), (2, 6), (3, 12)),
    "upsample_rates": (8, 8, 4),
    "upsample_initial_channel": 256,
    "upsample_kernel_sizes": (16, 16, 8),
}
_HEAVY_DECODER: dict[str, Any] = {
    "resblock": "1",
    "resblock_kernel_sizes": (3, 7, 11),
    "resblock_dilation_sizes": ((1, 3, 5), (1, 3, 5), (1, 3, 5)),
    "upsample_rates": (8, 8, 2, 2),
    "upsample_initial_channel": 512,
    "upsample_kernel_sizes": (16, 16, 4, 4),
}
_WIDE = {"hidden_channels": 192, "inter_channels": 192, "filter_channels": 768}
_NARROW = {"hidden_channels": 96, "inter_channels": 96, "filter_channels": 384}

QUALITY_PRESETS: dict[str, dict[str, Any]] = {
    "x_low": {"sample_rate": 16000, **_NARROW, **_LIGHT_DECODER},
    "low": {"sample_rate": 16000, **_WIDE, **_LIGHT_DECODER},
    "medium": {"sample_rate": 22050, **_WIDE, **_LIGHT_DECODER},
    "high": {"sample_rate": 22050, **_WIDE, **_HEAVY_DECODER},
}
"""Piper's quality levels: the sample rate and the architecture fields each one sets."""

# Dilations per residual block of each kind (Piper's ResBlock1 and ResBlock2).
DILATIONS_PER_BLOCK = {"1": 3, "2": 2}


@dataclass(frozen=True)
class VitsConfig:
    """Every size a VITS generator and discriminator is built from; defaults: Piper medium."""

    n_vocab: int = 256
    """Rows of the text embedding (symbol ids are below this)."""
    spec_channels: int = 513
    """Bins of the linear spectrogram the posterior encoder reads (n_fft // 2 + 1)."""
    segment_size: int = 8192
    """Samples of each item the decoder makes in training (a multiple of hop_length)."""
    hop_length: int = 256
    """Samples per spectrogram frame; the product of upsample_rates."""
    inter_channels: int = 192
    """Channels of the latent z (prior, posterior, flow)."""
    hidden_channels: int = 192
    """Width of the text encoder, posterior encoder, flow and duration predictor."""
    filter_channels: int = 768
    """Feed-forward width of the text encoder."""
    n_heads: int = 2
    """Attention heads of the text encoder."""
    n_layers: int = 6
    """Layers of the text encoder."""
    kernel_size: int = 3
    """Kernel of the text encoder's feed-forward convolutions."""
    p_dropout: float = 0.1
    """Dropout of the text encoder."""
    resblock: str = "2"
    """Decoder residual block: "1" (pairs of convolutions) or "2" (single convolutions)."""
    resblock_kernel_sizes: tuple[int, ...] = (3, 5, 7)
    """Kernel of each parallel residual block after every upsampling."""
    resblock_dilation_sizes: IntPairs = ((1, 2), (2, 6), (3, 12))
    """Dilations of each residual block (3 each for resblock "1", 2 for "2")."""
    upsample_rates: tuple[int, ...] = (8, 8, 4)
    """Factor of each transposed convolution of the decoder."""
    upsample_initial_channel: int = 256
    """Decoder width before the first upsampling; halved by each one."""
    upsample_kernel_sizes: tuple[int, ...] = (16, 16, 8)
    """Kernel of each transposed convolution."""
    n_speakers: int = 1
    """Speakers; more than one adds a speaker embedding of gin_channels."""
    gin_channels: int = 0
    """Width of the speaker embedding that conditions every part (0: one speaker)."""
    use_sdp: bool = True
    """Stochastic duration predictor (a flow) rather than a deterministic regressor."""
    posterior_layers: int = 16
    """WaveNet layers of the posterior encoder."""
    flow_layers: int = 4
    """WaveNet layers in each coupling layer of the flow."""
    flow_count: int = 4
    """Coupling layers of the flow."""
    discriminator_channels: int = 32
    """Width of the first period-discriminator layer (Piper: 32); every layer scales with it."""

    def __post_init__(self) -> None:
        for name in _POSITIVE_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not 0.0 <= self.p_dropout < 1.0:
            raise ValueError(f"p_dropout must be in [0, 1), got {self.p_dropout}")
        heads, width = self.n_heads, self.hidden_channels
        if width % heads:
            raise ValueError(f"n_heads ({heads}) must divide hidden_channels ({width})")
        if self.inter_channels % 2:
            latent = self.inter_channels
            raise ValueError(f"inter_channels must be even (the flow halves it), got {latent}")
        self._check_decoder()
        segment, hop = self.segment_size, self.hop_length
        if segment % hop:
            raise ValueError(f"segment_size ({segment}) must be a multiple of hop_length ({hop})")
        if self.gin_channels < 0:
            raise ValueError(f"gin_channels must not be negative, got {self.gin_channels}")
        if self.n_speakers > 1 and self.gin_channels <= 0:
            raise ValueError(
                f"n_speakers is {self.n_speakers}: gin_channels must be positive "
                "(the speaker embedding's width; Piper uses 512)"
            )

    def _check_decoder(self) -> None:
        kernels, dilations = self.resblock_kernel_sizes, self.resblock_dilation_sizes
        rates, up_kernels = self.upsample_rates, self.upsample_kernel_sizes
        if self.resblock not in DILATIONS_PER_BLOCK:
            raise ValueError(f'resblock must be "1" or "2", got {self.resblock!r}')
        if len(kernels) != len(dilations):
            raise ValueError(
                f"resblock_kernel_sizes {kernels} and resblock_dilation_sizes {dilations} "
                "need one entry per residual block"
            )
        per_block = DILATIONS_PER_BLOCK[self.resblock]
        if not kernels or any(len(d) != per_block for d in dilations):
            raise ValueError(
                f'resblock "{self.resblock}" takes {per_block} dilations per block, '
                f"got resblock_dilation_sizes {dilations}"
            )
        if any(k % 2 == 0 for k in kernels):
            raise ValueError(f"resblock_kernel_sizes must be odd, got {kernels}")
        if not rates or len(rates) != len(up_kernels):
            counts = f"upsample_rates {rates} and upsample_kernel_sizes {up_kernels}"
            raise ValueError(f"{counts} need one entry per upsampling layer")
        if math.prod(rates) != self.hop_length:
            product, hop = math.prod(rates), self.hop_length
            made = f"upsample_rates {rates} make {product} samples per frame"
            raise ValueError(f"{made}, but hop_length is {hop}")
        # An even excess of kernel over rate keeps each upsampling exactly `rate` times longer.
        if any(k < r or (k - r) % 2 for r, k in zip(rates, up_kernels, strict=True)):
            raise ValueError(
                f"upsample_kernel_sizes {up_kernels}: each kernel must be at least its rate "
                f"in upsample_rates {rates} and differ from it by an even number"
            )
        halvings = 2 ** len(rates)
        if self.upsample_initial_channel % halvings:
            raise ValueError(
                f"upsample_initial_channel ({self.upsample_initial_channel}) is halved at each "
                f"of the {len(rates)} upsamplings: make it a multiple of {halvings}"
            )

    @property
    def segment_frames(self) -> int:
        """Spectrogram frames of a training segment."""
        return self.segment_size // self.hop_length

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (tuples as lists): the dict equals its own JSON round trip."""
        values = asdict(self)
        for name in _TUPLE_FIELDS:
            values[name] = list(values[name])
        values["resblock_dilation_sizes"] = [list(d) for d in self.resblock_dilation_sizes]
        return values

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VitsConfig:
        """Inverse of to_dict (also its JSON-loaded form); missing fields take their defaults."""
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown vits config fields: {', '.join(unknown)}")
        values = dict(data)
        for name in _TUPLE_FIELDS:
            if name in values:
                values[name] = tuple(int(v) for v in values[name])
        if "resblock_dilation_sizes" in values:
            values["resblock_dilation_sizes"] = tuple(
                tuple(int(v) for v in d) for d in values["resblock_dilation_sizes"]
            )
        if "resblock" in values:
            values["resblock"] = str(values["resblock"])
        return cls(**values)


# The layout fields Piper's hyperparameters and the profile's [vits] section
# name as VitsConfig does.
LAYOUT_FIELDS = (
    "inter_channels",
    "hidden_channels",
    "filter_channels",
    "n_heads",
    "n_layers",
    "kernel_size",
    "p_dropout",
    "resblock",
    "resblock_kernel_sizes",
    "resblock_dilation_sizes",
    "upsample_rates",
    "upsample_initial_channel",
    "upsample_kernel_sizes",
)

_POSITIVE_FIELDS = (
    "n_vocab",
    "spec_channels",
    "segment_size",
    "hop_length",
    "inter_channels",
    "hidden_channels",
    "filter_channels",
    "n_heads",
    "n_layers",
    "kernel_size",
    "upsample_initial_channel",
    "n_speakers",
    "posterior_layers",
    "flow_layers",
    "flow_count",
    "discriminator_channels",
)
_TUPLE_FIELDS = ("resblock_kernel_sizes", "upsample_rates", "upsample_kernel_sizes")
