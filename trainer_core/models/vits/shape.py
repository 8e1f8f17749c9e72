"""A VITS model's shape from a profile: the `VitsConfig` a run builds, and its sizes for the plan.

`config_from_profile` turns `[vits]` and `[audio]` into the model's config once the
vocabulary and the speakers are known. `model_sizes` builds the model on torch's meta device
(no memory, no initialisation work) to count the generator's and the discriminator's
parameters and estimate a training step's memory, so the dry run and the launch screen can
say them without building the real thing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainer_core.models.vits.config import VitsConfig

if TYPE_CHECKING:
    from trainer_core.contract.profile import Profile

# AdamW keeps two moments per parameter, beside the weight and its gradient: 4 float32 copies.
BYTES_PER_PARAMETER = 16
# A step's activations grow with the batch, the segment and the decoder's width: peak RSS of Piper's
# medium shape on a CPU, 4.6 s clips, batches 2 and 4, gave about 130 bytes per segment sample and
# decoder channel per item, beside a fixed 0.75 GiB. An estimate to size a batch by, not a promise.
ACTIVATION_BYTES = 130
FIXED_BYTES = int(0.75 * 1024**3)


def config_from_profile(profile: Profile, n_vocab: int, n_speakers: int) -> VitsConfig:
    """The model config for a run: `[vits]` and `[audio]`, a vocabulary of
    `n_vocab` and `n_speakers`."""
    v, a = profile.vits, profile.audio
    return VitsConfig(
        n_vocab=n_vocab,
        spec_channels=a.n_fft // 2 + 1,
        segment_size=v.segment_size,
        hop_length=a.hop_length,
        inter_channels=v.inter_channels,
        hidden_channels=v.hidden_channels,
        filter_channels=v.filter_channels,
        n_heads=v.n_heads,
        n_layers=v.n_layers,
        kernel_size=v.kernel_size,
        p_dropout=v.p_dropout,
        resblock=v.resblock,
        resblock_kernel_sizes=tuple(v.resblock_kernel_sizes),
        resblock_dilation_sizes=tuple(tuple(d) for d in v.resblock_dilation_sizes),
        upsample_rates=tuple(v.upsample_rates),
        upsample_initial_channel=v.upsample_initial_channel,
        upsample_kernel_sizes=tuple(v.upsample_kernel_sizes),
        n_speakers=n_speakers,
        gin_channels=v.speaker_channels if n_speakers > 1 else 0,
        use_sdp=v.duration_predictor == "stochastic",
        posterior_layers=v.posterior_layers,
        flow_layers=v.flow_layers,
        flow_count=v.flow_count,
        discriminator_channels=v.discriminator_channels,
    )


def model_sizes(profile: Profile, n_speakers: int) -> dict[str, Any]:
    """Parameter counts of the generator and the discriminator and a
    training memory estimate (bytes)."""
    import torch

    from trainer_core.models.vits.model import VitsModel

    config = config_from_profile(profile, profile.vits.num_symbols, n_speakers)
    with torch.device("meta"):
        model = VitsModel(config)
    generator = sum(p.numel() for p in model.model_g.parameters())
    discriminator = sum(p.numel() for p in model.model_d.parameters())
    batch, segment = profile.train.batch_size, profile.vits.segment_size
    activations = ACTIVATION_BYTES * batch * segment * config.upsample_initial_channel + FIXED_BYTES
    return {
        "generator_parameters": generator,
        "discriminator_parameters": discriminator,
        "segment_size": segment,
        "segment_frames": config.segment_frames,
        "memory_estimate_bytes": BYTES_PER_PARAMETER * (generator + discriminator) + activations,
    }
