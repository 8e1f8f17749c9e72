"""A Piper checkpoint's hyperparameters as a `VitsConfig` (torch-free, so the plan can use it).

Piper's Lightning module saves its constructor arguments as `hyper_parameters`. Those it does not
save are constants in Piper's code (posterior and flow depths, discriminator width) and take
VitsConfig's defaults, which are Piper's. A missing architecture field falls back to the voice
config's quality preset (`audio.quality`), then to Piper's medium.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from trainer_core.contract.piper_voice import PiperCheckpointError, PiperVoiceConfig
from trainer_core.models.vits.config import LAYOUT_FIELDS, QUALITY_PRESETS, VitsConfig

# Piper's width of the speaker embedding when a multi-speaker voice names none.
PIPER_SPEAKER_CHANNELS = 512
# VitsConfig field -> Piper hyperparameter, where the names differ.
_RENAMED = {"n_vocab": "num_symbols", "n_speakers": "num_speakers"}
_SAME_NAME = ("segment_size", "hop_length", *LAYOUT_FIELDS, "gin_channels", "use_sdp")


def _literal(value: Any) -> Any:
    """Piper accepts tuples given as strings on its command line ("(8, 8, 4)"); so do we."""
    if isinstance(value, str) and value[:1] in "([":
        return ast.literal_eval(value)
    return value


def vits_config_from_piper(
    hyperparameters: Mapping[str, Any],
    voice: PiperVoiceConfig,
    n_vocab: int | None = None,
    n_speakers: int | None = None,
) -> VitsConfig:
    """The VitsConfig of the model a Piper checkpoint holds; `n_vocab` / `n_speakers` override."""
    preset = QUALITY_PRESETS.get(voice.quality or "", {})
    values: dict[str, Any] = {}
    for name in _SAME_NAME:
        if hyperparameters.get(name) is not None:
            values[name] = _literal(hyperparameters[name])
        elif name in preset:
            values[name] = preset[name]
    for ours, theirs in _RENAMED.items():
        if hyperparameters.get(theirs) is not None:
            values[ours] = int(hyperparameters[theirs])
    values.setdefault("n_vocab", voice.num_symbols)
    values.setdefault("n_speakers", voice.num_speakers)
    if n_vocab is not None:
        values["n_vocab"] = n_vocab
    if n_speakers is not None:
        values["n_speakers"] = n_speakers
    if values["n_speakers"] > 1 and int(values.get("gin_channels") or 0) <= 0:
        values["gin_channels"] = PIPER_SPEAKER_CHANNELS
    filter_length = hyperparameters.get("filter_length")
    if filter_length is not None:
        values["spec_channels"] = int(filter_length) // 2 + 1
    try:
        return VitsConfig.from_dict(values)
    except (TypeError, ValueError) as exc:
        raise PiperCheckpointError(
            f"the hyperparameters of this Piper checkpoint do not make a VITS model: {exc}"
        ) from exc
