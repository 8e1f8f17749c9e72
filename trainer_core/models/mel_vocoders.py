"""The vocoders that turn log-mels into audio for samples, `synth`, `evaluate` and `vocode`.

`tts.vocoder` (and `--vocoder`) names one: "griffin-lim" (phase reconstruction, nothing to train),
or a trained GAN vocoder given as a run folder (its export, else its best, else its newest
checkpoint), a checkpoint file or an export folder. A trained vocoder only fits mels made with the
audio features it was trained on: any difference in sample rate, n_fft, hop, window, n_mels, f_min
or f_max is one error naming each field with both values. Checkpoints are read weights-only; the
discriminators in them are dropped.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer_core.contract.errors import VegaError
from trainer_core.contract.init_sources import best_checkpoint
from trainer_core.contract.profile import Profile
from trainer_core.contract.profile_audio import AudioSection
from trainer_core.models.gan_vocoder import Generator, VocoderConfig

GRIFFIN_LIM = "griffin-lim"
GRIFFIN_LIM_NAMES = ("griffin-lim", "griffin_lim", "griffinlim", "")
# The audio settings a mel's numbers depend on (win_length is the window).
FEATURES = ("sample_rate", "n_fft", "hop_length", "win_length", "n_mels", "f_min", "f_max")
GENERATOR_PREFIX = "generator."


@dataclass
class MelVocoder:
    """Log-mel (n_mels, frames) -> float32 mono audio at `audio.sample_rate`."""

    name: str
    """"griffin-lim", or where the trained vocoder came from."""
    audio: AudioSection
    generator: Generator | None = None
    griffin_lim_iters: int = 32

    @property
    def trained(self) -> bool:
        return self.generator is not None

    def __call__(self, mel: torch.Tensor | np.ndarray) -> np.ndarray:
        tensor = (
            mel
            if isinstance(mel, torch.Tensor)
            else torch.from_numpy(np.asarray(mel, dtype=np.float32))
        )
        if self.generator is None:
            from trainer_core.models.griffin_lim import mel_to_audio

            return mel_to_audio(tensor, self.audio, self.griffin_lim_iters)
        device = next(self.generator.parameters()).device
        wave = self.generator.synthesise(tensor.detach().float().to(device))
        return wave.cpu().numpy().astype(np.float32)


def feature_differences(vocoder: AudioSection, mels: AudioSection) -> list[str]:
    """'field: mels A, vocoder B' for every audio feature that differs."""
    return [
        f"{name}: the mels have {getattr(mels, name)}, the vocoder {getattr(vocoder, name)}"
        for name in FEATURES
        if getattr(mels, name) != getattr(vocoder, name)
    ]


def check_features(vocoder: MelVocoder, mels: AudioSection, mels_from: str) -> None:
    """VegaError naming every mismatched feature when `vocoder` was trained
    on other features than `mels`."""
    differences = feature_differences(vocoder.audio, mels) if vocoder.trained else []
    if differences:
        raise VegaError(
            f"the vocoder {vocoder.name} does not fit the mels of {mels_from}:"
            f" {'; '.join(differences)}. Train the vocoder with the same [audio] settings, or use"
            ' tts.vocoder = "griffin-lim"'
        )


def load_vocoder(
    spec: str | Path | None, audio: AudioSection, device: str = "cpu", griffin_lim_iters: int = 32
) -> MelVocoder:
    """The vocoder `spec` names, checked to fit mels made with `audio` (Griffin-Lim fits any)."""
    vocoder = open_vocoder(spec, audio, device, griffin_lim_iters)
    check_features(vocoder, audio, "this voice")
    return vocoder


def open_vocoder(
    spec: str | Path | None, audio: AudioSection, device: str = "cpu", griffin_lim_iters: int = 32
) -> MelVocoder:
    """The vocoder `spec` names, unchecked; a trained one brings its own audio
    features, Griffin-Lim takes `audio`."""
    text = str(spec or "").strip()
    if text.lower() in GRIFFIN_LIM_NAMES:
        return MelVocoder(GRIFFIN_LIM, audio, None, griffin_lim_iters)
    path = Path(text).expanduser()
    if not path.exists():
        raise VegaError(
            f"vocoder {text!r} does not exist: name a vocoder run folder, checkpoint or export"
            " folder, "
            f'or "{GRIFFIN_LIM}"'
        )
    config, trained_audio, weights = _read_vocoder(_resolve(path))
    generator = Generator(config)
    try:
        generator.load_state_dict(weights)
    except RuntimeError as exc:
        raise VegaError(
            f"vocoder {path}: its weights do not fit its own config ({exc}); export it again"
        ) from exc
    return MelVocoder(str(path), trained_audio, generator.to(device).eval(), griffin_lim_iters)


def _resolve(path: Path) -> Path:
    """A run folder stands for its export, else its best checkpoint, else its newest one."""
    if path.is_file() or (path / "config.json").is_file():
        return path
    if (path / "export" / "config.json").is_file():
        return path / "export"
    checkpoints = path / "checkpoints"
    best = best_checkpoint(path)  # best.json's name, refused unless it lies in checkpoints/
    if best is not None:
        return best
    found = sorted(checkpoints.glob("step-*.pt")) if checkpoints.is_dir() else []
    if not found:
        raise VegaError(
            f"{path} holds no vocoder: no export/, no checkpoints; train one with a vocoder profile"
        )
    return found[-1]


def _read_vocoder(path: Path) -> tuple[VocoderConfig, AudioSection, dict[str, torch.Tensor]]:
    return _read_checkpoint(path) if path.is_file() else _read_export(path)


def _read_export(folder: Path) -> tuple[VocoderConfig, AudioSection, dict[str, torch.Tensor]]:
    from safetensors.torch import load_file

    try:
        document = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        weights = load_file(str(folder / "model.safetensors"), device="cpu")
    except (OSError, ValueError) as exc:
        raise VegaError(f"{folder} is not a readable vocoder export ({exc})") from exc
    model = document.get("model") or {}
    if model.get("kind") != "vocoder":
        raise VegaError(f"{folder} holds a {model.get('kind', 'unknown')!r} model, not a vocoder")
    return _config(model["vocoder"], folder), _audio(model.get("audio", {}), folder), weights


def _read_checkpoint(path: Path) -> tuple[VocoderConfig, AudioSection, dict[str, torch.Tensor]]:
    from trainer_core.contract.profile_loader import load_profile_dict

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        profile = load_profile_dict(
            tomllib.loads(state.get("profile_toml") or ""), base_dir=path.parent, source=str(path)
        )
    except Exception as exc:  # unreadable, unsafe or not a Vega checkpoint: say which file
        raise VegaError(f"{path} is not a readable Vega checkpoint ({exc})") from exc
    if profile.model.kind != "vocoder":
        raise VegaError(f"{path} is a {profile.model.kind!r} checkpoint, not a vocoder")
    model = state.get("model") or {}
    weights = {
        k.removeprefix("module.")[len(GENERATOR_PREFIX) :]: v
        for k, v in model.items()
        if k.removeprefix("module.").startswith(GENERATOR_PREFIX)
    }
    return vocoder_config(profile), profile.audio, weights


def vocoder_config(profile: Profile) -> VocoderConfig:
    """The GAN vocoder a profile's [audio] and [vocoder] sections describe."""
    a, v = profile.audio, profile.vocoder
    return VocoderConfig(
        n_mels=a.n_mels,
        n_fft=a.n_fft,
        hop_length=a.hop_length,
        win_length=a.win_length,
        channels=v.channels,
        blocks=v.blocks,
        intermediate=3 * v.channels,
        discriminator_channels=v.discriminator_channels,
        periods=tuple(v.periods),
        resolutions=tuple((n_fft, hop, window) for n_fft, hop, window in v.resolutions),
    )


def _config(data: dict[str, Any], source: Path) -> VocoderConfig:
    try:
        return VocoderConfig.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise VegaError(f"{source}: bad vocoder config ({exc}); export it again") from exc


def _audio(data: dict[str, Any], source: Path) -> AudioSection:
    try:
        return AudioSection(**data)
    except Exception as exc:  # pydantic's ValidationError: the export's audio block is damaged
        raise VegaError(
            f"{source}: bad audio settings in config.json ({exc}); export it again"
        ) from exc
