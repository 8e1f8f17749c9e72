"""What a VITS run takes from the model it starts from before anything is
built: settings and symbols.

A Piper checkpoint (or a transformers VITS folder, such as an MMS voice: `adopt_hf`) decides the
model: its shape (`[vits]`), its audio front end (`[audio]`: the corpus is resampled to its sample
rate), its text front end (`[tts]`: espeak-ng voice, phonemes or characters) and a fine-tuning
learning rate (`train.finetune_lr`, else Piper's 2e-4). `adopt_piper` writes those into the profile
and says what changed, so the dry run, the launch screen and the frozen profile.toml all show the
model that will train. A resumed run keeps what it started with: the same sections are read back
from its own frozen profile (`adopt_frozen`), whether or not the resume names the start model again.
Torch-free: the plan calls it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from trainer_core.contract import rundir
from trainer_core.contract.errors import ProfileError
from trainer_core.contract.hf_voice import HfVoice, hub_repo, read_hf_voice
from trainer_core.contract.piper_voice import (
    PiperCheckpointFacts,
    PiperVoiceConfig,
    audio_settings,
)
from trainer_core.contract.profile import Profile, TrainSection
from trainer_core.contract.profile_audio import AudioSection, TtsSection
from trainer_core.contract.profile_vits import VitsSection, hop_problem
from trainer_core.models.vits.config import LAYOUT_FIELDS
from trainer_core.models.vits.hf_config import vits_config_from_hf
from trainer_core.models.vits.piper_hparams import vits_config_from_piper

# Steps a fresh discriminator trains alone before a pretrained generator meets it.
FRESH_DISCRIMINATOR_WARMUP = 200
# Piper's learning rate, the rate its published voices were fine-tuned with.
PIPER_LR = 2e-4
ADOPTED_SECTIONS = ("audio", "vits", "tts")
# Piper phoneme types Vega's front ends can make: espeak-ng phonemes, or characters ("text").
TEXT_UNITS = {"espeak": "phonemes", "text": "chars"}


def finetune_lr(profile: Profile, kind: str) -> float:
    """The learning rate of a run that starts from a trained model."""
    t = profile.train
    return t.finetune_lr if t.finetune_lr is not None else (PIPER_LR if kind == "vits" else t.lr)


def piper_sections(
    facts: PiperCheckpointFacts, voice: PiperVoiceConfig, profile: Profile
) -> dict[str, Any]:
    """The [audio], [vits] and [tts] values a Piper checkpoint decides, as profile sections."""
    config = vits_config_from_piper(facts.hyperparameters, voice)
    audio = audio_settings(facts.hyperparameters, voice)
    units = TEXT_UNITS.get(voice.phoneme_type)
    if units is None:
        raise ProfileError(
            f"{voice.path}: phoneme_type {voice.phoneme_type!r} needs Piper's own phonemizer; Vega"
            f" makes espeak-ng phonemes or characters ({', '.join(TEXT_UNITS)})"
        )
    vits = {
        **profile.vits.model_dump(),
        "quality": (
            voice.quality if voice.quality in ("x_low", "low", "medium", "high") else "custom"
        ),
        **{name: getattr(config, name) for name in _SHAPE_FIELDS},
        "duration_predictor": "stochastic" if config.use_sdp else "deterministic",
        "speaker_channels": config.gin_channels or profile.vits.speaker_channels,
    }
    return {
        "audio": {**profile.audio.model_dump(), **audio.audio_section()},
        "vits": vits,
        "tts": {
            **profile.tts.model_dump(),
            "espeak_voice": voice.espeak_voice,
            "text_units": units,
        },
    }


_SHAPE_FIELDS = (
    *LAYOUT_FIELDS,
    "posterior_layers",
    "flow_layers",
    "flow_count",
    "discriminator_channels",
)


def adopt_piper(
    profile: Profile, facts: PiperCheckpointFacts, voice: PiperVoiceConfig, where: str
) -> tuple[Profile, list[str]]:
    """The profile with a Piper checkpoint's settings and the fine-tuning rate, and what changed."""
    sections = piper_sections(facts, voice, profile)
    sections["train"] = {**profile.train.model_dump(), "lr": finetune_lr(profile, "vits")}
    return _replace(profile, sections, f"{where} (the checkpoint's settings)")


def hf_sections(voice: HfVoice, profile: Profile) -> dict[str, Any]:
    """The [audio] and [vits] values a transformers VITS folder decides (its text
    front end is its tokenizer's)."""
    config = vits_config_from_hf(voice.config, voice.describe())
    vits = {
        **profile.vits.model_dump(),
        "quality": "custom",
        **{
            name: getattr(config, name)
            for name in _SHAPE_FIELDS
            if name != "discriminator_channels"
        },
        "duration_predictor": "stochastic" if config.use_sdp else "deterministic",
        "speaker_channels": config.gin_channels or profile.vits.speaker_channels,
        # the model's own rows: the export keeps transformers' vocab_size
        "num_symbols": voice.num_symbols,
    }
    # no discriminator in the folder: one starts fresh
    if profile.vits.discriminator_warmup_steps is None:
        fresh = profile.train.init_discriminator is None
        vits["discriminator_warmup_steps"] = FRESH_DISCRIMINATOR_WARMUP if fresh else 0
    return {"audio": {**profile.audio.model_dump(), **voice.audio_section()}, "vits": vits}


def adopt_hf(profile: Profile, voice: HfVoice, where: str) -> tuple[Profile, list[str]]:
    """The profile with a transformers VITS's shape and audio settings and the
    fine-tuning rate, and what changed."""
    sections = hf_sections(voice, profile)
    sections["train"] = {**profile.train.model_dump(), "lr": finetune_lr(profile, "vits")}
    updated, changes = _replace(profile, sections, f"{where} (the model's config.json)")
    rate, warmup = updated.audio.sample_rate, updated.vits.discriminator_warmup_steps or 0
    if rate != profile.audio.sample_rate:
        changes.append(f"the corpus is resampled to {rate} Hz, the model's sample rate")
    if updated.train.init_discriminator is None:
        changes.append(
            f"the model holds no discriminator: a fresh one trains alone for the first {warmup}"
            " steps"
        )
    return updated, changes


def adopt_frozen(profile: Profile, run_dir: Path) -> tuple[Profile, list[str]]:
    """A resumed run started from another model: the shape, audio and text
    front end it started with."""
    path = run_dir / rundir.PROFILE
    frozen = _frozen(run_dir)
    sections: dict[str, Any] = {}
    for name in ADOPTED_SECTIONS:
        if isinstance(frozen.get(name), dict):
            sections[name] = {**getattr(profile, name).model_dump(), **frozen[name]}
    if isinstance(frozen.get("train"), dict) and "lr" in frozen["train"]:
        sections["train"] = {**profile.train.model_dump(), "lr": frozen["train"]["lr"]}
    return _replace(profile, sections, f"{path} (what the run started with)")


def _frozen(run_dir: Path) -> dict[str, Any]:
    """The run folder's frozen profile.toml as data ({} when it cannot be read)."""
    try:
        return tomllib.loads((run_dir / rundir.PROFILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _replace(profile: Profile, sections: dict[str, Any], where: str) -> tuple[Profile, list[str]]:
    kinds: dict[str, type[BaseModel]] = {
        "audio": AudioSection,
        "vits": VitsSection,
        "tts": TtsSection,
        "train": TrainSection,
    }
    try:
        built = {name: kinds[name].model_validate(values) for name, values in sections.items()}
    except ValidationError as exc:
        raise ProfileError(f"{where}: its settings do not make a valid profile: {exc}") from exc
    changes = [
        f"{name}.{key}: {_show(getattr(getattr(profile, name), key))} ->"
        f" {_show(getattr(section, key))}"
        for name, section in built.items()
        for key in type(section).model_fields
        if getattr(getattr(profile, name), key) != getattr(section, key)
    ]
    updated = profile.model_copy(update=built)
    problem = hop_problem(updated.vits, updated.audio.hop_length)
    if problem is not None:
        raise ProfileError(f"{where}: {problem}")
    return updated, changes


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


def adopt_start(
    profile: Profile, kind: str, resume: str | None, run_dir: Path
) -> tuple[Profile, list[str]]:
    """What the start model (`train.init_from`) decides for this run, and the
    changes, as `section.key` lines."""
    from trainer_core.contract.init_sources import resolve_source, resumes
    from trainer_core.contract.piper_voice import (
        find_voice_config,
        read_checkpoint_metadata,
        read_voice_config,
    )

    t = profile.train
    if resumes(resume, run_dir):
        started_from = _frozen(run_dir).get("train", {}).get("init_from")
        return adopt_frozen(profile, run_dir) if kind == "vits" and started_from else (profile, [])
    if t.init_from is None:
        return profile, []
    file = resolve_source(t.init_from)
    if file.form == "piper":
        if kind != "vits":
            raise ProfileError(
                f"train.init_from: {t.init_from} is a Piper voice, a vits model, but this run"
                f" trains a {kind!r} model; use a vits profile (vits-medium, vits-low, vits-x_low,"
                " vits-high)"
            )
        voice = read_voice_config(find_voice_config(file.path, t.init_config))
        return adopt_piper(profile, read_checkpoint_metadata(file.path), voice, str(t.init_from))
    if file.form == "hf":
        if kind != "vits":
            raise ProfileError(
                f"train.init_from: {t.init_from} is a transformers VITS, but this run trains a"
                f" {kind!r} model; use a vits profile (mms-finetune, vits-medium, ...)"
            )
        return adopt_hf(profile, read_hf_voice(file.path, hub_repo(file.given)), str(t.init_from))
    rate = finetune_lr(profile, kind)
    if rate == t.lr:
        return profile, []
    return _replace(profile, {"train": {**t.model_dump(), "lr": rate}}, "train.finetune_lr")
