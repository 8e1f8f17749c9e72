"""A TTS model rebuilt from a checkpoint or an export, and speaking one sentence into a WAV file.

Used by `trainer-core synth` (one line or `--text-file`) and by benchmarks; only what speaking needs
is imported, so a cold call is quick.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_core.contract.errors import VegaError

if TYPE_CHECKING:
    from trainer_core.cli.vits_voice import VitsVoice
    from trainer_core.contract.profile import DataSection
    from trainer_core.contract.profile_audio import AudioSection, TtsSection
    from trainer_core.models.mel_vocoders import MelVocoder
    from trainer_core.models.text_frontend import TextEncoder, TextUnits
    from trainer_core.models.tts import AcousticModel

# Prefixes a wrapped model (DistributedDataParallel, torch.compile) adds to state dict names.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


@dataclass
class Synthesiser:
    """A rebuilt TTS model with what it needs to turn text into a WAV file."""

    model: AcousticModel
    encoder: TextEncoder
    audio: AudioSection
    tts: TtsSection
    data: DataSection | None = None  # the run's data settings; an export does not carry them
    vocoder: MelVocoder | None = None  # None: Griffin-Lim with the profile's iterations

    @property
    def model_device(self) -> str:
        return str(next(self.model.parameters()).device)

    @property
    def speaker_names(self) -> list[str]:
        """The voice's speakers in id order (empty for a single-speaker voice without a name)."""
        return list(self.model.config.speaker_names)

    def speaker_id(self, name: str | None) -> int | None:
        """The id of speaker `name` (None: the voice's first speaker); a clear
        error for a name it does not know."""
        from trainer_core.data.speakers import speaker_index

        return None if name is None else speaker_index(self.speaker_names, name, "this voice")

    def speak_to_wav(
        self,
        text: str,
        out: Path,
        length_scale: float | None = None,
        iters: int | None = None,
        speaker: str | None = None,
    ) -> dict[str, Any]:
        """Speak `text` into `out` as `speaker` (a name; None: the first);
        return what was written."""
        return synthesise_to_wav(self, text, out, length_scale, iters, speaker)


def _strip_wrappers(state: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in state.items():
        for prefix in WRAPPER_PREFIXES:
            name = name.removeprefix(prefix)
        out[name] = value
    return out


def _profile_from_checkpoint(state: dict[str, Any], path: Path):
    from trainer_core.contract.profile_loader import load_profile_dict

    text = state.get("profile_toml") or ""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise VegaError(
            f"checkpoint {path}: its profile TOML does not parse ({exc}); use another checkpoint"
        ) from exc
    return load_profile_dict(data, base_dir=path.parent, source=f"{path} (profile_toml)")


def _checkpoint_speaker_names(
    state: dict[str, Any], weights: dict[str, Any], path: Path
) -> list[str]:
    """The speaker names a checkpoint's model config holds
    (extra["model_config"]["speaker_names"])."""
    config = (state.get("extra") or {}).get("model_config") or {}
    names = [str(name) for name in config.get("speaker_names") or []]
    if "speaker_embedding.weight" in weights and len(names) != len(
        weights["speaker_embedding.weight"]
    ):
        raise VegaError(
            f"checkpoint {path} has a speaker embedding but {len(names)} speaker name(s) for its"
            f" {len(weights['speaker_embedding.weight'])} rows; use another checkpoint or the run's"
            " export"
        )
    return names


def load_from_checkpoint(path: Path, device: str = "cpu") -> Synthesiser | VitsVoice:
    """Rebuild the model and text encoder from a training checkpoint (loaded weights-only); a vits
    run's checkpoint gives a VitsVoice."""
    from trainer_core.cli.vits_voice import vits_from_checkpoint
    from trainer_core.engine.checkpoint_compat import check_model_compatible
    from trainer_core.engine.checkpoint_manager import load_checkpoint
    from trainer_core.models.text_frontend import TextEncoder
    from trainer_core.models.tts import AcousticModel
    from trainer_core.models.tts_config import TtsConfig

    state = load_checkpoint(path)
    voice = vits_from_checkpoint(state, path, device)
    if voice is not None:
        return voice
    weights = _strip_wrappers(state.get("model") or {})
    if "text_symbols" not in weights:
        raise VegaError(
            f"checkpoint {path} is not a TTS model (no text vocabulary in it); synth, evaluate and"
            " export --onnx need a voice run"
        )
    profile = _profile_from_checkpoint(state, path)
    names = _checkpoint_speaker_names(state, weights, path)
    codes = [int(c) for c in weights["text_symbols"].tolist()]
    phonemes = "text_phonemes" in weights and int(weights["text_phonemes"]) == 1
    t = profile.tts
    units: TextUnits = "phonemes" if phonemes else "chars"
    encoder = TextEncoder.from_symbol_codes(
        codes, units, t.lowercase, t.espeak_voice, t.espeak_backend
    )
    model = AcousticModel(TtsConfig.from_profile(profile, len(codes), names), codes, phonemes)
    check_model_compatible(model, weights)
    model.load_state_dict(weights)
    return Synthesiser(model.to(device).eval(), encoder, profile.audio, profile.tts, profile.data)


def load_from_export(folder: Path, device: str = "cpu") -> Synthesiser | VitsVoice:
    """Rebuild the model and text encoder from an export folder (safetensors weights + config.json);
    a vits export gives a VitsVoice."""
    from pydantic import ValidationError

    from trainer_core.cli.vits_voice import is_vits_config, voice_from_config
    from trainer_core.contract.event_lines import describe_validation_error
    from trainer_core.contract.profile import DataSection
    from trainer_core.contract.profile_audio import AudioSection, TtsSection
    from trainer_core.engine.checkpoint_compat import check_model_compatible
    from trainer_core.engine.export import load_exported
    from trainer_core.models.text_frontend import TextEncoder
    from trainer_core.models.tts import AcousticModel
    from trainer_core.models.tts_config import config_from_dict

    weights, document = load_exported(folder)
    config = document.get("model")
    if not isinstance(config, dict):
        what = 'has no "model" entry (the settings of the voice)'
        raise VegaError(f"{folder}/config.json {what}; export it again")
    if is_vits_config(config):
        return voice_from_config(config, weights, folder, device)
    if config.get("kind") != "tts":
        kind = config.get("kind", "unknown")
        raise VegaError(
            f"{folder} holds a {kind!r} model, not a TTS voice; synth, evaluate and export --onnx"
            " need one"
        )
    try:
        encoder = TextEncoder.from_state(config.get("text") or {})
        phonemes = encoder.units == "phonemes"
        model = AcousticModel(config_from_dict(config), encoder.symbol_codes(), phonemes)
    except VegaError as exc:
        raise VegaError(f"{folder}/config.json: {exc}") from exc
    check_model_compatible(model, weights)
    model.load_state_dict(weights)
    try:
        audio, tts = AudioSection(**config.get("audio", {})), TtsSection(**config.get("tts", {}))
        held_out = config.get("held_out")
        data = DataSection(**held_out) if isinstance(held_out, dict) else None
    except (ValidationError, TypeError) as exc:
        why = describe_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
        bad = f"{folder}/config.json has bad audio or tts settings ({why})"
        raise VegaError(f"{bad}; re-export the model") from exc
    return Synthesiser(model.to(device).eval(), encoder, audio, tts, data)


def synthesise_to_wav(
    synth: Synthesiser,
    text: str,
    out: Path,
    length_scale: float | None = None,
    iters: int | None = None,
    speaker: str | None = None,
) -> dict[str, Any]:
    """Speak `text` into `out` (in the voice of `speaker`, a name; None: the
    first); return what was written."""
    from trainer_core.models.griffin_lim import mel_to_audio, write_wav

    ids = synth.encoder.encode(text)
    if not ids:
        raise VegaError(f"nothing to say: {text!r} has no symbols after normalisation")
    speaker_id = synth.speaker_id(speaker)
    mel = synth.model.synthesise(ids, length_scale or synth.tts.length_scale, speaker_id)
    if synth.vocoder is not None:
        wave = synth.vocoder(mel)
    else:
        wave = mel_to_audio(mel, synth.audio, iters or synth.tts.griffin_lim_iters)
    path = write_wav(out, wave, synth.audio.sample_rate)
    rate = synth.audio.sample_rate
    return {
        "out": str(path),
        "seconds": len(wave) / rate,
        "sample_rate": rate,
        "frames": int(mel.shape[1]),
        "symbols": len(ids),
        "speaker": synth.speaker_names[speaker_id or 0] if synth.speaker_names else None,
    }
