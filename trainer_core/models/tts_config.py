"""The acoustic model's configuration: `TtsConfig` (everything needed to rebuild an
`AcousticModel`, also written to an export's config.json), built from a profile or, by
`config_from_dict`, from a config.json "model" entry checked field by field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainer_core.contract.errors import VegaError

if TYPE_CHECKING:
    from trainer_core.contract.profile import Profile


@dataclass(frozen=True)
class TtsConfig:
    """Everything needed to rebuild the acoustic model (also written to the
    export's config.json)."""

    vocab_size: int
    n_mels: int
    hidden: int
    encoder_layers: int
    decoder_layers: int
    heads: int
    ffn_mult: int
    dropout: float
    # Added later, with defaults that rebuild the models exported before them.
    postnet_layers: int = 0
    attention_dropout: float | None = None  # None: the same as dropout
    decoder: str = "transformer"
    pitch: bool = False
    # 2 or more: a speaker embedding, and every batch and synthesis names a speaker id
    speakers: int = 1
    # the name of each speaker id (data.speakers); () for unnamed single
    speaker_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.speakers < 1 or (self.speaker_names and len(self.speaker_names) != self.speakers):
            raise VegaError(
                f"TTS config: {self.speakers} speaker(s) but {len(self.speaker_names)} speaker"
                " name(s); re-export"
            )

    @classmethod
    def from_profile(
        cls, profile: Profile, vocab_size: int, speaker_names: Sequence[str] = ()
    ) -> TtsConfig:
        m = profile.model
        names = tuple(speaker_names)
        return cls(
            vocab_size,
            profile.audio.n_mels,
            m.hidden,
            m.encoder_layers,
            m.decoder_layers,
            m.heads,
            m.ffn_mult,
            m.dropout,
            m.postnet_layers,
            m.attention_dropout,
            m.decoder,
            m.pitch,
            max(1, len(names)),
            names,
        )


def config_from_dict(data: dict[str, Any]) -> TtsConfig:
    """TtsConfig from a config.json "model" entry (extra keys ignored,
    missing ones a clear error)."""
    fields = TtsConfig.__dataclass_fields__
    required = [name for name, f in fields.items() if f.default is dataclasses.MISSING]
    missing = [name for name in required if name not in data]
    if missing:
        raise VegaError(f"the TTS model config lacks {', '.join(missing)}; re-export the model")
    values = {name: data[name] for name in fields if name in data}
    for name, value in values.items():
        types, what = _JSON_TYPES.get(str(fields[name].type), ((object,), ""))
        if object not in types and (type(value) not in types or type(value) is int and value < 0):
            has = f"the TTS model config has {name} = {value!r}, where {what} belongs"
            raise VegaError(f"{has}; re-export the model")
    if "speaker_names" in values:  # a JSON list
        values["speaker_names"] = tuple(str(name) for name in values["speaker_names"] or ())
    return TtsConfig(**values)


# What JSON gives for each TtsConfig field type (a bool is no number here, though Python's is).
_JSON_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "int": ((int,), "a whole number of 0 or more"),
    "float": ((int, float), "a number"),
    "float | None": ((int, float, type(None)), "a number or null"),
    "str": ((str,), "text"),
    "bool": ((bool,), "true or false"),
}
