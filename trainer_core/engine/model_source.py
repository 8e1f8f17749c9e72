"""A trained model to start from, read weights-only: its tensors and what they were trained on.

`load_model_source(PATH)` takes a run folder (its export, else its best checkpoint, else its
newest one), a checkpoint file or an export folder (`contract.init_sources.resolve_source` picks
the file). Checkpoints are read with `torch.load(weights_only=True)`
(`engine.checkpoint_manager.load_checkpoint`), exports with safetensors: nothing in either can
run code. Besides the state dict it returns the model kind, the audio features, the text
vocabulary (one code point per id, -1 for the special symbols) and the speaker names, from the
checkpoint's own profile TOML or the export's config.json, and the source's mel statistics (which
a new run recomputes on its own data).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer_core.contract.init_sources import (
    FIELD,
    InitSourceError,
    SourceFile,
    audio_features,
    profile_kind,
    resolve_source,
    run_data_mode,
)
from trainer_core.engine.checkpoint_manager import load_checkpoint
from trainer_core.engine.export import load_exported

# Prefixes a wrapped model (DistributedDataParallel, torch.compile) adds to state dict names.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


@dataclass
class ModelSource:
    """A source's weights (on the CPU) and what they were trained on (None
    where the source does not say)."""

    file: SourceFile
    weights: dict[str, torch.Tensor]
    kind: str
    audio: dict[str, Any] | None
    """The audio features (`contract.init_sources.AUDIO_FEATURES`); None for a text model."""
    symbols: list[int] | None
    """The text vocabulary, one code point per id (-1: pad, unk and other
    specials); None without one."""
    phonemes: bool
    speaker_names: list[str] | None
    mel_mean: torch.Tensor | None
    mel_std: torch.Tensor | None
    step: int | None
    vocabulary: list[str | None] | None = None
    """VITS: the symbol each text embedding row stands for (None: a row no symbol uses)."""
    default_speaker: str | None = None
    """A multi-speaker source's default voice (a Piper voice config's default_speaker_id)."""

    def describe(self) -> str:
        return self.file.describe()


def strip_wrappers(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The state dict without DDP / torch.compile name prefixes, tensors only."""
    out = {}
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            continue
        for prefix in WRAPPER_PREFIXES:
            name = name.removeprefix(prefix)
        out[name] = value
    return out


def load_model_source(
    given: Path | str, init_config: Path | None = None, init_discriminator: Path | None = None
) -> ModelSource:
    """Resolve and read a source; InitSourceError (or CheckpointError / ExportError) naming the file
    when it cannot be used. `init_config`: a Piper checkpoint's voice config when it is not beside
    it; `init_discriminator`: the discriminator of a transformers folder, which holds none."""
    file = resolve_source(given)
    if init_discriminator is not None and file.form != "hf":
        raise InitSourceError(
            f"train.init_discriminator: {file.describe()} brings its own discriminator (or none is"
            " used); init_discriminator goes with a transformers VITS folder"
        )
    if file.form == "piper":
        return _from_piper(file, init_config)
    if file.form == "hf":
        return _from_hf(file, init_discriminator)
    source = _from_export(file) if file.form == "export" else _from_checkpoint(file)
    if source.kind == "vits":
        source.vocabulary = _vits_vocabulary(file)
    return source


def _from_piper(file: SourceFile, init_config: Path | None) -> ModelSource:
    """A Piper checkpoint: its generator and discriminator in Vega's names, its voice config's
    symbols and speakers (models.vits.piper_checkpoint); tensors the model has no place for are
    kept, so a strict start names them."""
    from trainer_core.contract.piper_voice import read_checkpoint_metadata
    from trainer_core.models.vits.piper_checkpoint import load_piper_checkpoint

    ckpt = load_piper_checkpoint(file.path, init_config)
    voice, audio = ckpt.voice, ckpt.audio
    rows = (
        ckpt.weights["model_g.enc_p.emb.weight"].shape[0]
        if "model_g.enc_p.emb.weight" in ckpt.weights
        else 0
    )
    vocabulary: list[str | None] = [None] * max(rows, voice.num_symbols)
    for symbol, ids in voice.phoneme_id_map.items():
        for index in ids:
            if index < len(vocabulary):
                vocabulary[index] = symbol
    speakers = sorted(voice.speaker_id_map, key=lambda name: voice.speaker_id_map[name])
    by_id = {index: name for name, index in voice.speaker_id_map.items()}
    step = read_checkpoint_metadata(file.path).extra.get("global_step")
    features = audio_features(audio.audio_section())
    return ModelSource(
        file=file,
        weights={**ckpt.weights, **ckpt.unused},
        kind="vits",
        audio=features,
        symbols=None,
        phonemes=voice.phoneme_type == "espeak",
        speaker_names=speakers or None,
        mel_mean=None,
        mel_std=None,
        step=step if isinstance(step, int) else None,
        vocabulary=vocabulary,
        default_speaker=by_id.get(voice.default_speaker_id) if speakers else None,
    )


def _from_hf(file: SourceFile, init_discriminator: Path | None = None) -> ModelSource:
    """A transformers VITS folder (an MMS voice): every generator tensor in Vega's names, mapped
    strictly against the generator its config.json describes (models.vits.hf_folder); its vocabulary
    from vocab.json. It holds no discriminator."""
    from trainer_core.contract.hf_voice import read_hf_voice
    from trainer_core.models.vits.hf_config import vits_config_from_hf
    from trainer_core.models.vits.hf_folder import read_hf_weights, vega_weights
    from trainer_core.models.vits.synthesizer import Synthesizer

    voice = read_hf_voice(file.path)
    where = voice.describe()
    # Names and shapes only; built on the CPU, which for a tiny model is quicker than
    # the meta device's first use.
    shape = Synthesizer(
        vits_config_from_hf(voice.config, where, n_vocab=voice.num_symbols)
    ).state_dict()
    weights = vega_weights(read_hf_weights(voice), shape, where)
    if init_discriminator is not None:
        from trainer_core.models.vits.hf_discriminator import read_discriminator

        weights.update(read_discriminator(init_discriminator))
    vocabulary: list[str | None] = [None] * voice.num_symbols
    for symbol, index in voice.vocab.items():
        vocabulary[index] = symbol
    return ModelSource(
        file=file,
        weights=weights,
        kind="vits",
        audio=audio_features(voice.audio_section()),
        symbols=None,
        phonemes=bool(voice.tokenizer.get("phonemize", False)),
        # their ids: a corpus's speaker "2" starts as speaker 2
        speaker_names=voice.speaker_names or None,
        mel_mean=None,
        mel_std=None,
        step=None,
        vocabulary=vocabulary,
    )


def _vits_vocabulary(file: SourceFile) -> list[str | None] | None:
    """A Vega vits source's symbol per embedding row, from its model config
    (export or checkpoint)."""
    from trainer_core.contract.checkpoint_peek import read_model_config
    from trainer_core.contract.init_sources import read_export_config

    config = (read_export_config(file.path).get("model") or {}) if file.form == "export" else None
    if config is None:
        config = read_model_config(file.path) or {}
    symbols = config.get("symbols") or {}
    if not isinstance(symbols, dict) or "id_map" not in symbols:
        return None
    rows: list[str | None] = [None] * int(symbols.get("num_symbols", 0))
    for symbol, ids in symbols["id_map"].items():
        for index in ids:
            if 0 <= int(index) < len(rows):
                rows[int(index)] = str(symbol)
    return rows


def _from_export(file: SourceFile) -> ModelSource:
    weights, document = load_exported(file.path)
    model = document.get("model") or {}
    if not model.get("kind"):
        raise InitSourceError(
            f"{FIELD}: {file.path}/config.json does not say its model kind; export it again"
        )
    audio = model.get("audio")
    names = model.get("speaker_names")
    step = model.get("step")
    return _source(
        file,
        weights,
        str(model["kind"]),
        audio_features(audio) if isinstance(audio, dict) else None,
        [str(name) for name in names] if isinstance(names, list) else None,
        step if isinstance(step, int) else None,
    )


def _from_checkpoint(file: SourceFile) -> ModelSource:
    state = load_checkpoint(file.path)
    weights = strip_wrappers(state.get("model") or {})
    if not weights:
        raise InitSourceError(
            f"{FIELD}: checkpoint {file.path} holds no model weights; pick another checkpoint"
        )
    try:
        profile = tomllib.loads(state.get("profile_toml") or "")
    except tomllib.TOMLDecodeError as exc:
        raise InitSourceError(
            f"{FIELD}: checkpoint {file.path}: its profile TOML does not parse ({exc})"
        ) from exc
    data_mode = run_data_mode(file.run_dir) if file.run_dir is not None else None
    kind = profile_kind(profile, data_mode) or _kind_from_weights(weights)
    audio = profile.get("audio")
    extra = state.get("extra") or {}
    model_config = extra.get("model_config") if isinstance(extra, dict) else None
    names = model_config.get("speaker_names") if isinstance(model_config, dict) else None
    return _source(
        file,
        weights,
        kind,
        audio_features(audio) if isinstance(audio, dict) else None,
        [str(name) for name in names] if isinstance(names, list) else None,
        int(state.get("step", 0)),
    )


def _kind_from_weights(weights: dict[str, torch.Tensor]) -> str:
    """An "auto" profile without a recorded data mode: a TTS model carries its
    vocabulary, a vocoder its GAN."""
    if "text_symbols" in weights:
        return "tts"
    if any(name.startswith("generator.") for name in weights):
        return "vocoder"
    return "lm"


def _source(
    file: SourceFile,
    weights: dict[str, torch.Tensor],
    kind: str,
    audio: dict[str, Any] | None,
    speaker_names: list[str] | None,
    step: int | None,
) -> ModelSource:
    symbols = weights.get("text_symbols")
    phonemes = weights.get("text_phonemes")
    return ModelSource(
        file=file,
        weights=weights,
        kind=kind,
        audio=audio if kind != "lm" else None,
        symbols=[int(code) for code in symbols.tolist()] if symbols is not None else None,
        phonemes=bool(phonemes is not None and int(phonemes) == 1),
        speaker_names=speaker_names,
        mel_mean=weights.get("mel_mean"),
        mel_std=weights.get("mel_std"),
        step=step,
    )
