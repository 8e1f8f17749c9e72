"""The audio sections of a training profile: `[audio]` (decoding and mel features), `[sample]`
(evaluation samples), `[tts]` (text front end, losses, vocoder choice) and `[vocoder]` (the GAN
vocoder). Torch-free, like the rest of `trainer_core.contract.profile`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from trainer_core.contract.profile_section import Section


class AudioSection(Section):
    sample_rate: int = Field(
        default=22050,
        ge=8000,
        le=192000,
        description="Training sample rate; audio is resampled to it.",
    )
    n_fft: int = Field(default=1024, ge=64, le=16384, description="FFT size for mel spectrograms.")
    hop_length: int = Field(default=256, ge=16, le=8192, description="Samples between mel frames.")
    win_length: int = Field(
        default=1024, ge=16, le=16384, description="Window length; at most n_fft."
    )
    n_mels: int = Field(default=80, ge=8, le=512, description="Mel bands.")
    f_min: float = Field(default=0.0, ge=0.0, description="Lowest mel frequency in Hz.")
    f_max: float | None = Field(
        default=8000.0, gt=0.0, description="Highest mel frequency in Hz (default: Nyquist)."
    )
    log_floor: float = Field(
        default=1e-5, gt=0.0, description="Floor added before taking the log of mel power."
    )
    trim_silence: bool = Field(
        default=True, description="Trim leading and trailing silence before features."
    )
    trim_top_db: float = Field(
        default=40.0, gt=0.0, description="Silence threshold for trimming, dB below peak."
    )
    normalize: bool = Field(default=False, description="Peak-normalise each clip before features.")

    @model_validator(mode="after")
    def _window_fits(self) -> AudioSection:
        if self.win_length > self.n_fft:
            raise ValueError(f"win_length ({self.win_length}) must not exceed n_fft ({self.n_fft})")
        if self.f_max is not None and self.f_max > self.sample_rate / 2:
            raise ValueError(
                f"f_max ({self.f_max}) must not exceed half the sample_rate"
                f" ({self.sample_rate / 2})"
            )
        if self.f_max is not None and self.f_min >= self.f_max:
            raise ValueError(f"f_min ({self.f_min}) must be below f_max ({self.f_max})")
        return self


class SampleSection(Section):
    sentences: list[str] = Field(
        default_factory=lambda: [
            "The quick brown fox jumps over the lazy dog.",
            "Hello from Vega.",
        ],
        description="Fixed test sentences synthesised at each evaluation (TTS).",
    )
    prompts: list[str] = Field(
        default_factory=lambda: ["The ", "Once upon a time"],
        description="Prompts continued at each evaluation (LM).",
    )
    max_new_bytes: int = Field(
        default=200, ge=1, le=100000, description="LM samples: bytes generated per prompt."
    )
    temperature: float = Field(
        default=0.8, gt=0.0, le=10.0, description="LM samples: sampling temperature."
    )


class TtsSection(Section):
    text_units: Literal["chars", "phonemes", "auto"] = Field(
        default="chars",
        description=(
            "TTS input: chars, phonemes (IPA from espeak-ng), or auto (phonemes when an espeak-ng "
            "backend works, else chars)."
        ),
    )
    espeak_backend: Literal["auto", "library", "binary"] = Field(
        default="auto",
        description=(
            "Where phonemes come from: library (espeak-ng from the espeakng-loader wheel,"
            " in-process), binary (the espeak-ng program on PATH), or auto (the library when it"
            " loads, else the program)."
        ),
    )
    lowercase: bool = Field(
        default=True, description="Lowercase transcripts before encoding them (characters only)."
    )
    espeak_voice: str = Field(
        default="en-us",
        min_length=1,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_+\-]*$",
        description="espeak-ng voice for phonemes (e.g. en-us, de, fr).",
    )
    prior_loss_weight: float = Field(
        default=1.0, ge=0.0, description="Weight of the alignment (prior) loss in the total."
    )
    duration_loss_weight: float = Field(
        default=1.0, ge=0.0, description="Weight of the duration predictor loss in the total."
    )
    pitch_loss_weight: float = Field(
        default=1.0,
        ge=0.0,
        description="Weight of the pitch and voicing losses in the total (model.pitch only).",
    )
    griffin_lim_iters: int = Field(
        default=32,
        ge=1,
        le=1000,
        description="Griffin-Lim iterations when turning mels into audio.",
    )
    vocoder: str = Field(
        default="griffin-lim",
        description=(
            'What turns mels into audio for samples, free-running scores and synth: "griffin-lim",'
            " or a trained vocoder's run folder, checkpoint or export (trained on the same [audio]"
            " settings)."
        ),
    )
    length_scale: float = Field(
        default=1.0, gt=0.0, le=10.0, description="Speaking-rate factor for samples (>1 is slower)."
    )


class VocoderSection(Section):
    channels: int = Field(
        default=128, ge=8, le=4096, description="Generator width (ConvNeXt channels)."
    )
    blocks: int = Field(default=4, ge=1, le=64, description="Generator ConvNeXt blocks.")
    segment_frames: int = Field(
        default=32,
        ge=4,
        le=4096,
        description="Mel frames per training segment (segment_frames x hop_length samples).",
    )
    discriminator_channels: int = Field(
        default=16, ge=2, le=1024, description="Width of the first layer of every discriminator."
    )
    periods: list[int] = Field(
        default_factory=lambda: [2, 3, 5, 7, 11],
        description="Multi-period discriminator: one per period.",
    )
    resolutions: list[tuple[int, int, int]] = Field(
        default_factory=lambda: [(512, 128, 512), (1024, 256, 1024), (256, 64, 256)],
        description="Multi-resolution discriminator and STFT score: (n_fft, hop, window) of each.",
    )
    mel_weight: float = Field(
        default=45.0, ge=0.0, description="Weight of the mel L1 loss in the generator's loss."
    )
    feature_weight: float = Field(
        default=2.0, ge=0.0, description="Weight of the feature-matching loss."
    )
    adversarial_weight: float = Field(
        default=1.0,
        ge=0.0,
        description="Weight of the adversarial loss (0: a mel-loss-only baseline, no GAN).",
    )
    discriminator_lr: float | None = Field(
        default=None,
        gt=0.0,
        description="Discriminator learning rate (unset: train.lr); same schedule.",
    )
    betas: tuple[float, float] = Field(
        default=(0.8, 0.99), description="AdamW betas of both optimizers."
    )
    copy_items: int = Field(
        default=4,
        ge=0,
        le=64,
        description="Held-out clips copy-synthesised as samples at each evaluation.",
    )

    @model_validator(mode="after")
    def _resolutions_fit(self) -> VocoderSection:
        for n_fft, hop, window in self.resolutions:
            if not 0 < hop <= window <= n_fft:
                raise ValueError(
                    f"resolution ({n_fft}, {hop}, {window}) needs 0 < hop <= window <= n_fft"
                )
        if not self.periods or min(self.periods) < 1:
            raise ValueError(f"periods must be positive whole numbers, got {self.periods}")
        return self
