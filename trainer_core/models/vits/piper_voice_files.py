"""What `trainer-core export --piper` names its files and writes in the voice config (torch-free).

Files: `<lang>_<REGION>-<name>-<quality>.onnx` and the same + `.json`, as Piper's voices are named.
- lang and REGION from the espeak-ng voice: "en-us" -> en_US, "pt-br" -> pt_BR, "en-gb-x-rp" ->
  en_GB. A voice without a region takes its language's usual country (`REGION_OF`: "en", which is
  British English in espeak-ng, -> en_GB; "cs" -> cs_CZ; "sv" -> sv_SE), else the code in capitals
  ("es" -> es_ES, "de" -> de_DE).
- name: the run's name (or `--name`), lowercased, each run of characters other than a-z and 0-9
  made one "_" (a "-" would split Piper's name).
- quality: the profile's Piper level (x_low, low, medium, high); a custom shape (Vega's vits-small)
  takes the nearest: 16 kHz with at most 96 hidden channels x_low, other 16 kHz voices low, others
  high with the heavy decoder (resblock "1"), else medium.

The config holds every key Piper's runtime reads (audio.sample_rate, espeak.voice, phoneme_type,
num_symbols, num_speakers, speaker_id_map, phoneme_id_map, inference, hop_length), what published
voices carry beside them (audio.quality, language, dataset), the licence and the voice's origin.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer_core.contract.confined_path import component_problem
from trainer_core.contract.errors import VegaError
from trainer_core.models.vits.config import VitsConfig

LEVELS = ("x_low", "low", "medium", "high")
UNKNOWN_LICENSE = "unknown: the source voice's licence was not recorded; check it before sharing"
# Widest x_low voice: Piper's x_low has 96 hidden channels.
X_LOW_WIDTH = 96
LOW_RATE = 16000
# The country of a regionless espeak-ng voice, where it is not its language code in capitals.
REGION_OF = {
    "en": "GB",
    "cs": "CZ",
    "da": "DK",
    "el": "GR",
    "sv": "SE",
    "uk": "UA",
    "vi": "VN",
    "ja": "JP",
    "ko": "KR",
    "zh": "CN",
    "cmn": "CN",
    "yue": "HK",
    "ca": "ES",
    "eu": "ES",
    "gl": "ES",
    "fa": "IR",
    "ka": "GE",
    "kk": "KZ",
    "sr": "RS",
    "sl": "SI",
    "sw": "CD",
    "he": "IL",
    "hi": "IN",
    "ar": "JO",
    "ne": "NP",
    "lb": "LU",
    "cy": "GB",
    "ga": "IE",
    "ur": "PK",
    "bn": "BD",
    "ta": "IN",
    "te": "IN",
    "ml": "IN",
    "ms": "MY",
    "nb": "NO",
    "et": "EE",
}
_NAME_RUNS = re.compile(r"[^a-z0-9]+")


class PiperExportError(VegaError):
    """The voice cannot be written as a Piper voice, or its graph does not speak as torch does."""


@dataclass(frozen=True)
class Language:
    code: str
    """"en_US": the file name's first part."""
    family: str
    region: str

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "family": self.family, "region": self.region}


def language_of(espeak_voice: str) -> Language:
    """The language and region an espeak-ng voice name stands for (see the module docstring)."""
    parts = [part for part in espeak_voice.strip().lower().replace("_", "-").split("-") if part]
    if not parts or not parts[0].isalpha():
        fix = "set tts.espeak_voice (such as en-us)"
        raise PiperExportError(f"espeak voice {espeak_voice!r} names no language: {fix}")
    family = parts[0]
    given = parts[1] if len(parts) > 1 and parts[1] != "x" else None
    named = given is not None and (len(given) == 2 or given.isdigit())
    region = given.upper() if named and given else REGION_OF.get(family, family.upper())
    return Language(f"{family}_{region}", family, region)


def voice_name(name: str) -> str:
    """A run's name as the middle of a Piper file name ("vits-small" -> "vits_small")."""
    cleaned = _NAME_RUNS.sub("_", name.lower()).strip("_")
    if not cleaned:
        problem = "give a name with letters or digits (it goes in the file name)"
        raise PiperExportError(f"--name {name!r}: {problem}")
    return cleaned


def quality_of(label: str | None, config: VitsConfig, sample_rate: int) -> str:
    """The Piper quality level of the file name: the profile's, else the nearest to the shape."""
    if label in LEVELS:
        return str(label)
    if sample_rate <= LOW_RATE:
        return "x_low" if config.hidden_channels <= X_LOW_WIDTH else "low"
    return "high" if config.resblock == "1" else "medium"


def file_stem(language: Language, name: str, quality: str) -> str:
    """`en_US-name-medium`, refused unless one file name (the language is the checkpoint's)."""
    stem = f"{language.code}-{voice_name(name)}-{quality}"
    problem = component_problem(stem)
    if problem is not None:
        fix = "set tts.espeak_voice to a plain voice name (such as en-us) and export again"
        raise PiperExportError(f"the Piper voice's file name {stem!r} {problem}; {fix}")
    return stem


@dataclass
class VoiceFacts:
    """What the voice config says beyond the model: where the voice came from, what it may do."""

    name: str
    quality_label: str | None = None
    dataset: str | None = None
    license: str | None = None
    source: str | None = None
    step: int | None = None
    base: dict[str, Any] = field(default_factory=dict)
    """The voice the run started from (a Piper voice's dataset and language, a transformers id)."""


def phoneme_id_map(
    id_map: Mapping[str, list[int]],
    units: str,
    lowercase: bool,
) -> dict[str, list[int]]:
    """The symbol map for Piper; a character voice that lowercases its text also maps each capital
    to its lowercase letter's ids (Piper's runtime passes characters as they are)."""
    out = {symbol: list(ids) for symbol, ids in id_map.items()}
    if units == "chars" and lowercase:
        for symbol, ids in id_map.items():
            upper = symbol.upper()
            if len(upper) == 1 and upper != symbol and upper not in out:
                out[upper] = list(ids)
    return out


def speaker_id_map(names: list[str], speakers: int) -> dict[str, int]:
    """Speaker name -> id (`-s` of Piper's command line); a one-speaker voice has none."""
    if speakers <= 1:
        return {}
    named = {name: index for index, name in enumerate(names[:speakers])}
    return named | {f"speaker_{index}": index for index in range(len(named), speakers)}


def voice_config(
    *,
    config: VitsConfig,
    symbols: Mapping[str, Any],
    speaker_names: list[str],
    sample_rate: int,
    scales: Mapping[str, float],
    facts: VoiceFacts,
    vega_version: str,
    tolerance: Mapping[str, Any],
) -> dict[str, Any]:
    """The `.onnx.json` Piper's runtime reads (`symbols` is a SymbolTable's state_dict)."""
    units = str(symbols["units"])
    language = language_of(str(symbols["espeak_voice"]))
    quality = quality_of(facts.quality_label, config, sample_rate)
    document: dict[str, Any] = {
        "audio": {"sample_rate": sample_rate, "quality": quality},
        "espeak": {"voice": str(symbols["espeak_voice"])},
        "language": language.as_dict(),
        "phoneme_type": "text" if units == "chars" else "espeak",
        "num_symbols": config.n_vocab,
        "num_speakers": config.n_speakers,
        "speaker_id_map": speaker_id_map(speaker_names, config.n_speakers),
        "inference": {
            "noise_scale": float(scales["noise_scale"]),
            "length_scale": float(scales["length_scale"]),
            "noise_w": float(scales["noise_scale_w"]),
        },
        "hop_length": config.hop_length,
        "phoneme_id_map": phoneme_id_map(symbols["id_map"], units, bool(symbols["lowercase"])),
        "dataset": facts.dataset or voice_name(facts.name),
        "license": facts.license or UNKNOWN_LICENSE,
        "vega_version": vega_version,
        "vega": {
            "source": facts.source,
            "step": facts.step,
            "started_from": facts.base or None,
            "tolerance": dict(tolerance),
        },
    }
    return document
