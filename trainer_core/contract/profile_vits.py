"""The `[vits]` profile section: the shape and losses of an end-to-end VITS
voice (`model.kind = "vits"`).

The fields mirror the hyperparameters of Piper's VITS, with Piper's names where a checkpoint's
hyperparameters use them, so that a Piper checkpoint's shape can be written here field for field
(`trainer_core.plan` does, when `train.init_from` names one) and the profiles `vits-x_low` ...
`vits-high` are Piper's quality levels. The audio front end (sample rate, FFT, hop, window, mel
bands) is the profile's `[audio]` section. Torch-free.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Quality = Literal["x_low", "low", "medium", "high", "custom"]


class VitsSection(BaseModel):
    """Defaults: Piper's medium voice (22.05 kHz with [audio] at Piper's values)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    quality: Quality = Field(
        default="custom",
        description=(
            "The Piper quality level this shape is (x_low, low, medium, high), or custom; a label"
            " for exports, the shape is the fields below."
        ),
    )
    inter_channels: int = Field(
        default=192, ge=2, le=4096, description="Latent channels (prior and posterior)."
    )
    hidden_channels: int = Field(
        default=192, ge=2, le=4096, description="Text and posterior encoder width."
    )
    filter_channels: int = Field(
        default=768, ge=2, le=16384, description="Text encoder feed-forward width."
    )
    n_heads: int = Field(
        default=2, ge=1, le=64, description="Text encoder attention heads; must divide its width."
    )
    n_layers: int = Field(default=6, ge=1, le=64, description="Text encoder layers.")
    kernel_size: int = Field(
        default=3, ge=1, le=31, description="Text encoder feed-forward kernel size."
    )
    p_dropout: float = Field(default=0.1, ge=0.0, lt=1.0, description="Text encoder dropout.")
    resblock: Literal["1", "2"] = Field(
        default="2",
        description='Decoder residual blocks: "1" (three convolution pairs, Piper high) or "2".',
    )
    resblock_kernel_sizes: list[int] = Field(
        default_factory=lambda: [3, 5, 7],
        description="Decoder: kernel size of each residual block.",
    )
    resblock_dilation_sizes: list[list[int]] = Field(
        default_factory=lambda: [[1, 2], [2, 6], [3, 12]],
        description=(
            "Decoder: dilations of each residual block (3 per block for resblock 1, 2 for"
            " resblock 2)."
        ),
    )
    upsample_rates: list[int] = Field(
        default_factory=lambda: [8, 8, 4],
        description="Decoder upsampling factors; their product is audio.hop_length.",
    )
    upsample_initial_channel: int = Field(
        default=256, ge=2, le=8192, description="Decoder width before upsampling."
    )
    upsample_kernel_sizes: list[int] = Field(
        default_factory=lambda: [16, 16, 8],
        description="Decoder: kernel size of each upsampling layer.",
    )
    posterior_layers: int = Field(
        default=16, ge=1, le=64, description="Posterior encoder layers (WaveNet-style)."
    )
    flow_layers: int = Field(
        default=4, ge=1, le=64, description="Layers in each flow coupling's WaveNet."
    )
    flow_count: int = Field(
        default=4, ge=1, le=32, description="Coupling layers in the normalizing flow."
    )
    duration_predictor: Literal["stochastic", "deterministic"] = Field(
        default="stochastic",
        description=(
            "stochastic: a flow over durations (Piper and MMS); deterministic: a regressor of log"
            " durations."
        ),
    )
    speaker_channels: int = Field(
        default=512,
        ge=1,
        le=4096,
        description="Speaker embedding width (Piper's gin_channels); two speakers or more.",
    )
    discriminator_channels: int = Field(
        default=32,
        ge=1,
        le=1024,
        description=(
            "Width of the multi-period discriminator's first layer (Piper: 32, growing to 1024);"
            " every layer scales with it."
        ),
    )
    segment_size: int = Field(
        default=8192,
        ge=256,
        le=262144,
        description="Samples of each training item the decoder and discriminator see.",
    )
    num_symbols: int = Field(
        default=256,
        ge=8,
        le=65536,
        description="Text embedding rows of a new voice (more when its symbols need them).",
    )
    mel_weight: float = Field(
        default=45.0, ge=0.0, description="Weight of the mel L1 loss (Piper's c_mel)."
    )
    kl_weight: float = Field(
        default=1.0, ge=0.0, description="Weight of the KL divergence (Piper's c_kl)."
    )
    duration_weight: float = Field(
        default=1.0, ge=0.0, description="Weight of the duration predictor's loss."
    )
    adversarial_weight: float = Field(
        default=1.0, ge=0.0, description="Weight of the generator's adversarial loss."
    )
    feature_weight: float = Field(
        default=1.0, ge=0.0, description="Weight of the feature-matching loss (x2 inside)."
    )
    discriminator_warmup_steps: int | None = Field(
        default=None,
        ge=0,
        le=1_000_000,
        description=(
            "Steps at the start that train the discriminator alone, the generator resting (unset:"
            " 200 when a pretrained generator starts with a fresh discriminator, as from a"
            " transformers folder, else 0)."
        ),
    )
    discriminator_lr: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="Discriminator learning rate (unset: the generator's).",
    )
    betas: tuple[float, float] = Field(
        default=(0.8, 0.99), description="AdamW betas of both optimizers (Piper's)."
    )
    noise_scale: float = Field(
        default=0.667, ge=0.0, le=10.0, description="Samples and synth: latent noise scale."
    )
    noise_scale_w: float = Field(
        default=0.8, ge=0.0, le=10.0, description="Samples and synth: duration noise scale."
    )
    length_scale: float = Field(
        default=1.0, gt=0.0, le=10.0, description="Samples and synth: >1 speaks slower."
    )

    @model_validator(mode="after")
    def _shapes_agree(self) -> VitsSection:
        if self.hidden_channels % self.n_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must divide hidden_channels ({self.hidden_channels})"
            )
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            raise ValueError(
                f"resblock_kernel_sizes ({self.resblock_kernel_sizes}) and resblock_dilation_sizes "
                f"({self.resblock_dilation_sizes}) need one entry per residual block"
            )
        per_block = 3 if self.resblock == "1" else 2
        if any(len(d) != per_block for d in self.resblock_dilation_sizes):
            raise ValueError(
                f'resblock "{self.resblock}" takes {per_block} dilations per block, got'
                f" {self.resblock_dilation_sizes}"
            )
        if len(self.upsample_rates) != len(self.upsample_kernel_sizes):
            raise ValueError(
                f"upsample_rates ({self.upsample_rates}) and upsample_kernel_sizes"
                f" ({self.upsample_kernel_sizes}) need one entry per upsampling layer"
            )
        if self.upsample_initial_channel % 2 ** len(self.upsample_rates):
            raise ValueError(
                f"upsample_initial_channel ({self.upsample_initial_channel}) halves at each of the"
                f" {len(self.upsample_rates)} upsampling layers: make it a multiple of"
                f" {2 ** len(self.upsample_rates)}"
            )
        return self

    @property
    def hop(self) -> int:
        """The decoder's samples per frame: the product of the upsampling factors."""
        return math.prod(self.upsample_rates)


def hop_problem(vits: VitsSection, hop_length: int) -> str | None:
    """Why the decoder cannot make audio.hop_length samples per frame, or None when it can."""
    if vits.hop != hop_length:
        return (
            f"vits.upsample_rates {vits.upsample_rates} make {vits.hop} samples per frame but"
            f" audio.hop_length is {hop_length}: their product must equal the hop"
        )
    if vits.segment_size % hop_length:
        return (
            f"vits.segment_size ({vits.segment_size}) must be a multiple of audio.hop_length"
            f" ({hop_length})"
        )
    return None
