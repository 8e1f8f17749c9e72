"""The symbol map a VITS run keeps, known before it builds anything, and
what maps from its start model.

A new voice builds its map from its corpus. A run that starts from a trained VITS keeps that model's
map (a Piper voice's `phoneme_id_map`, a Vega voice's own), so every symbol keeps its embedding row
and only the corpus's new symbols get new rows. A resumed run keeps the map its own checkpoints
hold. All read without torch: the voice config, an export's config.json, or a checkpoint's pickled
model config (tensors unread).

`plan_voice_start` also says, for the dry run and the launch screen, how the start model fits this
corpus: how many of the corpus's symbols (in a sample of its transcripts) the map holds and which
are new, and which of its speakers the source knows. A transformers VITS folder (an MMS voice,
form "hf") gives its own vocabulary and text front end (`contract.mms_tokenizer`,
`vits.mms_symbols`): its symbols never grow, so the plan says instead which characters of the
corpus its front end drops, and how often.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer_core.contract.checkpoint_peek import read_model_config
from trainer_core.contract.errors import ProfileError
from trainer_core.contract.hf_voice import read_hf_voice
from trainer_core.contract.init_sources import (
    EXPORT_CONFIG,
    SourceFile,
    VoiceStart,
    checkpoint_files,
    read_export_config,
    resolve_source,
    resumes,
)
from trainer_core.contract.mms_tokenizer import MmsTokenizer, read_tokenizer_folder
from trainer_core.contract.piper_voice import (
    find_voice_config,
    read_checkpoint_metadata,
    read_voice_config,
)
from trainer_core.contract.profile import Profile
from trainer_core.data.scan_report import DataReport, VoiceItem
from trainer_core.models.vits.mms_symbols import dropped_characters
from trainer_core.models.vits.symbols import SymbolTable, mms_id_map

# Transcripts phonemized to tell how the start model's symbols cover the
# corpus (the plan stays quick).
SAMPLE_TRANSCRIPTS = 100
TEXT_TABLE = "model_g.enc_p.emb.weight"
LISTED = 12


def plan_voice_start(
    profile: Profile, report: DataReport, resume: str | None, run_dir: Path
) -> tuple[VoiceStart | None, dict[str, Any] | None]:
    """(the map to keep, or None for a new one; how the start model maps
    onto this corpus, or None)."""
    if resumes(resume, run_dir):
        return _own_map(run_dir), None
    given = profile.train.init_from
    if given is None:
        return None, None
    file = resolve_source(given)
    start, speakers = _source_map(file, profile)
    return start, _mapping(start, speakers, report, profile)


def _own_map(run_dir: Path) -> VoiceStart | None:
    for path in checkpoint_files(run_dir):
        start = _from_model_config(read_model_config(path), path)
        if start is not None:
            return start
    return None


def _source_map(file: SourceFile, profile: Profile) -> tuple[VoiceStart, list[str]]:
    if file.form == "piper":
        voice = read_voice_config(find_voice_config(file.path, profile.train.init_config))
        facts = read_checkpoint_metadata(file.path)
        table = facts.tensors.get(TEXT_TABLE)
        rows = max(voice.num_symbols, table.shape[0] if table is not None else 0)
        speakers = sorted(voice.speaker_id_map, key=lambda name: voice.speaker_id_map[name])
        return VoiceStart(voice.phoneme_id_map, rows), speakers
    if file.form == "hf":
        return _transformers_map(file), read_hf_voice(file.path).speaker_names
    config = (read_export_config(file.path).get("model") or {}) if file.form == "export" else None
    if config is None:
        config = read_model_config(file.path) or {}
    start = _from_model_config(config, file.path)
    if start is None:
        raise ProfileError(
            f"train.init_from: {file.given} holds no vits symbol map (is it a vits run?); start a"
            " vits run from a vits run, checkpoint or export, or a Piper checkpoint"
        )
    return start, [str(name) for name in config.get("speaker_names") or []]


def _transformers_map(file: SourceFile) -> VoiceStart:
    """A transformers VITS folder's vocabulary and tokenizer; rows: its
    config's vocab_size, at least."""
    tokenizer = read_tokenizer_folder(file.path, str(file.given))
    try:
        rows = int(
            json.loads((file.path / EXPORT_CONFIG).read_text(encoding="utf-8")).get("vocab_size")
            or 0
        )
    except (OSError, ValueError, TypeError, AttributeError):
        rows = 0  # the model's own loading names a damaged config.json
    return VoiceStart(mms_id_map(tokenizer), max(rows, tokenizer.rows()), tokenizer)


def _from_model_config(config: Mapping[str, Any] | None, where: Path) -> VoiceStart | None:
    symbols = (config or {}).get("symbols")
    if not isinstance(symbols, Mapping):
        return None
    try:
        id_map = {str(s): [int(i) for i in ids] for s, ids in dict(symbols["id_map"]).items()}
        mms = MmsTokenizer.from_state(symbols["mms"]) if symbols.get("mms") else None
        return VoiceStart(id_map, int(symbols["num_symbols"]), mms)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(
            f"{where}: its symbol map is damaged ({exc}); use another checkpoint"
        ) from exc


def _mapping(
    start: VoiceStart, speakers: list[str], report: DataReport, profile: Profile
) -> dict[str, Any]:
    items = [item for item in report.items if isinstance(item, VoiceItem)]
    texts = [item.text for item in items[:SAMPLE_TRANSCRIPTS]]
    table, added = SymbolTable.build(
        texts, profile.tts, start.num_symbols, start.id_map, start.tokenizer
    )
    seen = {symbol for text in texts for symbol in table.symbols_of(text)}
    dropped = _dropped(table, texts)
    corpus_speakers = sorted({item.speaker for item in items if item.speaker})
    known = [name for name in corpus_speakers if name in speakers]
    width = profile.vits.speaker_channels  # a one-speaker source's new speaker table is this wide
    said = _mapping_text(len(seen), added, len(texts), speakers, corpus_speakers, known, width)
    return {
        "symbols_seen": len(seen),
        "symbols_known": len(seen) - len(added),
        "symbols_new": added[:LISTED],
        "symbols_new_count": len(added),
        "transcripts_sampled": len(texts),
        "source_speakers": len(speakers),
        "corpus_speakers": len(corpus_speakers),
        "speakers_known": known[:LISTED],
        "text": said + dropped["text"],
    } | ({"dropped": dropped["counts"]} if start.tokenizer is not None else {})


def _dropped(table: SymbolTable, texts: list[str]) -> dict[str, Any]:
    """An MMS voice's front end drops what its vocabulary lacks: which
    characters, how often (else nothing)."""
    if table.mms is None:
        return {"counts": {}, "text": ""}
    counts = dropped_characters(table.mms, texts)
    listed = ", ".join(f"{char!r} x{count}" for char, count in counts.most_common(LISTED))
    more = f" and {len(counts) - LISTED} more" if len(counts) > LISTED else ""
    said = (
        f"; dropped by its text front end (not in its vocabulary): {listed}{more}" if counts else ""
    )
    return {"counts": dict(counts.most_common()), "text": said}


def _mapping_text(
    seen: int,
    added: list[str],
    sampled: int,
    speakers: list[str],
    corpus: list[str],
    known: list[str],
    width: int,
) -> str:
    more = f" and {len(added) - LISTED} more" if len(added) > LISTED else ""
    new = f"; new rows for {' '.join(added[:LISTED])}{more}" if added else ""
    symbols = f"{seen - len(added)} of {seen} symbols (in {sampled} transcripts) in its map{new}"
    if len(corpus) >= 2 and len(speakers) >= 2:
        who = f"{len(known)} of {len(corpus)} speakers known by name, the rest new"
    elif len(corpus) >= 2:
        who = (
            f"new speaker layers for {len(corpus)} speakers (width vits.speaker_channels ="
            f" {width}), zero-initialised: each starts as its one voice"
        )
    elif len(speakers) >= 2:
        who = f"one of its {len(speakers)} speakers kept (train.init_speaker)"
    else:
        who = "one speaker"
    return f"{symbols}; {who}"
