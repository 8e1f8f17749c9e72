"""A VITS voice rebuilt from a checkpoint or an export, speaking into WAV
files and scored free-running.

`trainer-core synth` and `trainer-core evaluate` take a vits run's checkpoint or export as they take
a two-stage voice's; `VitsVoice` answers the same calls as `Synthesiser` (speak_to_wav, speaker_id,
speaker_names, encoder, audio, data) and speaks audio directly: there is no vocoder to choose.
"""

from __future__ import annotations

import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_core.contract.errors import VegaError

if TYPE_CHECKING:
    from trainer_core.contract.profile import DataSection
    from trainer_core.contract.profile_audio import AudioSection, TtsSection
    from trainer_core.models.free_running import FreeRunningResult, HeldOutSentence
    from trainer_core.models.vits.speech import VitsSpeaker
    from trainer_core.models.vits.symbols import SymbolTable
    from trainer_core.models.vits.synthesizer import Synthesizer

# Prefixes a wrapped model (DistributedDataParallel, torch.compile) adds to state dict names.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


@dataclass
class VitsVoice:
    """A rebuilt VITS generator with its symbol map, audio settings and speakers."""

    model: Synthesizer
    speaker: VitsSpeaker
    audio: AudioSection
    tts: TtsSection
    data: DataSection | None = None

    @property
    def encoder(self) -> SymbolTable:
        return self.speaker.symbols

    @property
    def model_device(self) -> str:
        return str(next(self.model.parameters()).device)

    @property
    def speaker_names(self) -> list[str]:
        return list(self.speaker.speaker_names)

    def speaker_id(self, name: str | None) -> int | None:
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
        """Speak `text` into `out` as `speaker` (a name; None: the first); `iters`
        is Griffin-Lim's, unused here."""
        from trainer_core.models.griffin_lim import write_wav

        speaker_id = self.speaker_id(speaker)
        if speaker_id is None and len(self.speaker_names) >= 2:
            speaker_id = 0
        wave = self.speaker.speak(self.model, text, speaker_id, length_scale)
        if wave.size == 0:
            raise VegaError(f"nothing to say: {text!r} has no symbol this voice knows")
        path = write_wav(out, wave, self.audio.sample_rate)
        rate = self.audio.sample_rate
        return {
            "out": str(path),
            "seconds": len(wave) / rate,
            "sample_rate": rate,
            "frames": len(wave) // self.audio.hop_length,
            "symbols": len(self.encoder.encode(text)),
            "speaker": self.speaker_names[speaker_id or 0] if self.speaker_names else None,
        }

    def free_running(self, sentences: list[HeldOutSentence]) -> FreeRunningResult:
        """`sentences` spoken from text and scored; the floor is each recording
        re-made through the posterior."""
        from trainer_core.data.audio import load_audio
        from trainer_core.models.free_running import FreeRunning, FreeRunningResult
        from trainer_core.models.vits.batch_audio import BatchAudio
        from trainer_core.models.vits.speech import reconstruct_wave

        started, a = time.perf_counter(), self.audio
        free = FreeRunning(sentences, a, self.tts, None, vocoder_name="vits")
        audio = BatchAudio(a, next(self.model.parameters()).device)

        def remake(sentence: HeldOutSentence) -> Any:
            import torch

            wave = load_audio(
                sentence.path, a.sample_rate, a.trim_silence, a.trim_top_db, a.normalize
            )
            return reconstruct_wave(self.model, torch.from_numpy(wave), audio, sentence.speaker)

        floor = free.floor_of(remake)
        scores = free.score_speech(
            lambda s: (self.speaker.speak(self.model, s.text, s.speaker), None)
        )
        return FreeRunningResult(scores, floor, "vits", time.perf_counter() - started)


def is_vits_config(config: dict[str, Any]) -> bool:
    return config.get("kind") == "vits"


def voice_from_config(
    config: dict[str, Any],
    weights: dict[str, Any],
    where: Path,
    device: str,
    data: DataSection | None = None,
) -> VitsVoice:
    """Rebuild a VITS voice from its model config (an export's config.json "model", a checkpoint's
    extra.model_config) and the generator's weights."""
    from pydantic import ValidationError

    from trainer_core.contract.profile import DataSection
    from trainer_core.contract.profile_audio import AudioSection, TtsSection
    from trainer_core.models.vits.config import VitsConfig
    from trainer_core.models.vits.speech import VitsSpeaker
    from trainer_core.models.vits.symbols import SymbolTable
    from trainer_core.models.vits.synthesizer import Synthesizer

    try:
        shape = VitsConfig.from_dict(config["vits"])
        symbols = SymbolTable.from_state(config["symbols"])
        audio = AudioSection(**config["audio"])
        held_out = config.get("held_out")
        data = data or (DataSection(**held_out) if isinstance(held_out, dict) else None)
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        raise VegaError(
            f"{where}: its vits model config is incomplete or damaged ({exc}); export it again"
        ) from exc
    names = [str(name) for name in config.get("speaker_names") or []]
    model = Synthesizer(shape)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        listed = ", ".join([*missing[:3], *unexpected[:3]])
        raise VegaError(
            f"{where}: its weights do not fit its vits config ({listed}); export it again"
        )
    scales = config.get("inference") or {
        "noise_scale": 0.667,
        "noise_scale_w": 0.8,
        "length_scale": 1.0,
    }
    speaker = VitsSpeaker(symbols, scales, names, audio.sample_rate)
    return VitsVoice(model.to(device).eval(), speaker, audio, TtsSection(), data)


def vits_from_checkpoint(state: dict[str, Any], path: Path, device: str) -> VitsVoice | None:
    """The voice a vits run's checkpoint holds (its generator), or None for
    any other kind of checkpoint."""
    from trainer_core.contract.profile_loader import load_profile_dict

    config = (state.get("extra") or {}).get("model_config") or {}
    if not is_vits_config(config):
        return None
    weights = {}
    for name, tensor in (state.get("model") or {}).items():
        for prefix in WRAPPER_PREFIXES:
            name = name.removeprefix(prefix)
        if name.startswith("model_g."):
            weights[name.removeprefix("model_g.")] = tensor
    try:
        profile = load_profile_dict(
            tomllib.loads(state.get("profile_toml") or ""), base_dir=path.parent
        )
        data = profile.data
    except (tomllib.TOMLDecodeError, VegaError):
        data = None
    return voice_from_config(config, weights, path, device, data)
