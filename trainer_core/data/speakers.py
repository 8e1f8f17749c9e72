"""Speakers of a voice corpus: how they are read (`data.speakers`), and each clip's speaker.

Modes:
- "column": `metadata.csv` rows are `id|speaker|text` or
  `id|speaker|text|normalized`. A clip transcribed by a
  sidecar (`<stem>.txt`) has no speaker then and is skipped with a `missing_speaker` problem.
- "folders": one folder per speaker, `DATA/<speaker>/...` (a `metadata.csv` of its
  own, or sidecars): the speaker
  is the name of the clip's first folder below the data folder. A clip directly in the data folder
  is skipped.
- "none": one speaker; tables are read as LJSpeech's `id|text|normalized`.
- "auto" chooses, by two rules that keep LJSpeech-style corpora single-speaker:
  1. column, when every metadata.csv has a speaker column: at least half its rows have 3 or 4
     fields, the second field of each of those is a name (1-64 characters, no spaces), and the names
     repeat (at most half as many distinct names as rows) or some row has 4 fields. A transcript in
     the second field has spaces, so LJSpeech's `id|text|normalized` never passes.
  2. folders, when the data folder holds no metadata.csv and no audio of its own, and two or more
     folders directly below it hold audio, each with its own metadata.csv.
  Otherwise none.

Torch-free: part of the scan the dashboard runs through `trainer-core check-data`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from trainer_core.contract.errors import DataError, VegaError
from trainer_core.data.scan_report import Problem, SpeakerFigures, VoiceItem
from trainer_core.data.transcripts import MetadataTable, is_speaker_name

SPEAKER_MODES = ("auto", "column", "folders", "none")
SpeakerMode = Literal["column", "folders", "none"]


@dataclass(frozen=True)
class SpeakerLayout:
    """How this corpus's speakers are read, and why (shown by check-data and the plan)."""

    mode: SpeakerMode
    reason: str


def has_speaker_column(table: MetadataTable) -> bool:
    """Rule 1 of the module docstring, for one table."""
    wide = [columns for _, columns in table.lines if len(columns) in (3, 4)]
    if not wide or 2 * len(wide) < len(table.lines):
        return False
    names = [columns[1].strip() for columns in wide]
    if not all(is_speaker_name(name) for name in names):
        return False
    return any(len(columns) == 4 for columns in wide) or 2 * len(set(names)) <= len(names)


def first_folder(path: Path, root: Path) -> str | None:
    """The name of the folder directly below `root` that holds `path`; None
    for a file in `root` itself."""
    parts = path.relative_to(root).parts
    return parts[0] if len(parts) > 1 else None


def _speaker_folders(
    root: Path, tables: Sequence[MetadataTable], audio: Sequence[Path]
) -> list[str] | None:
    """Rule 2 of the module docstring: the speaker folders, or None when the
    layout is not one folder each."""
    folders_with_audio = {first_folder(path, root) for path in audio}
    if None in folders_with_audio or any(table.folder == root for table in tables):
        return None
    with_tables = {table.folder.name for table in tables if table.folder.parent == root}
    folders = sorted(name for name in folders_with_audio if name is not None)
    if len(folders) < 2 or not set(folders) <= with_tables:
        return None
    return folders


def _check_some_speaker(tables: Sequence[MetadataTable]) -> None:
    """data.speakers = "column" on tables none of whose rows names a speaker: the
    wrong setting, say so at once."""
    lines = [(table, line, columns) for table in tables for line, columns in table.lines]
    if not lines or any(
        len(columns) >= 3 and is_speaker_name(columns[1]) for _, _, columns in lines
    ):
        return
    table, line, columns = lines[0]
    second = columns[1].strip()[:40] if len(columns) > 1 else ""
    raise DataError(
        'data.speakers = "column" but no row of metadata.csv has a speaker name in its second'
        f" field ({table.path} line {line}: {second!r}); rows must be id|speaker|text[|normalized]."
        ' For LJSpeech-style id|text|normalized tables set data.speakers = "none" or "auto"'
    )


def decide_layout(
    requested: str, tables: Sequence[MetadataTable], root: Path, audio: Sequence[Path]
) -> SpeakerLayout:
    """The speaker mode for `requested` (data.speakers); "auto" follows the
    module docstring's rules."""
    if requested not in SPEAKER_MODES:
        raise DataError(
            f"unknown speaker mode {requested!r} (data.speakers); use one of:"
            f" {', '.join(SPEAKER_MODES)}"
        )
    if requested == "none":
        return SpeakerLayout("none", "data.speakers = none: one speaker")
    if requested == "column":
        _check_some_speaker(tables)
        return SpeakerLayout(
            "column", "data.speakers = column: the second field of metadata.csv names the speaker"
        )
    if requested == "folders":
        return SpeakerLayout(
            "folders", "data.speakers = folders: each folder below the data folder is a speaker"
        )
    read = [table for table in tables if table.lines]
    if read and all(has_speaker_column(table) for table in read):
        rows = sum(len(table.lines) for table in read)
        return SpeakerLayout(
            "column",
            f"auto: the second field of metadata.csv is a speaker name in {rows} rows"
            " (id|speaker|text)",
        )
    folders = _speaker_folders(root, tables, audio)
    if folders is not None:
        return SpeakerLayout(
            "folders",
            f"auto: {len(folders)} folders below the data folder, each with its own metadata.csv",
        )
    return SpeakerLayout("none", "auto: one speaker (no speaker column, no folder per speaker)")


def _missing_speaker(item: VoiceItem, mode: SpeakerMode) -> Problem:
    if mode == "column":
        reason = (
            f"no speaker: its transcript ({item.transcript_source}) has no speaker column; "
            'list it in a metadata.csv as id|speaker|text, or set data.speakers = "none"'
        )
    else:
        reason = (
            "no speaker: it is not in a speaker folder (DATA/<speaker>/...); move it or set"
            ' data.speakers = "none"'
        )
    return Problem(item.path, reason, "missing_speaker")


def assign_speakers(
    layout: SpeakerLayout, items: list[VoiceItem], root: Path
) -> tuple[list[VoiceItem], list[Problem]]:
    """Each item with its speaker (column: from its table row; folders: its first folder); items
    without one become problems. "none" leaves every speaker empty."""
    if layout.mode == "none":
        return items, []
    kept: list[VoiceItem] = []
    problems: list[Problem] = []
    for item in items:
        speaker = item.speaker if layout.mode == "column" else first_folder(item.path, root) or ""
        if not speaker:
            problems.append(_missing_speaker(item, layout.mode))
            continue
        kept.append(item if speaker == item.speaker else replace(item, speaker=speaker))
    return kept, problems


def speaker_figures(items: Sequence[VoiceItem]) -> dict[str, SpeakerFigures]:
    """Usable clips and hours per speaker, by name; empty when no item has a speaker."""
    figures: dict[str, SpeakerFigures] = {}
    for item in items:
        if item.speaker:
            entry = figures.setdefault(item.speaker, SpeakerFigures())
            entry.clips += 1
            entry.hours += item.duration_s / 3600.0
    return dict(sorted(figures.items()))


def speaker_names(speakers: Sequence[str]) -> list[str]:
    """The model's speakers, in id order: the distinct non-empty names, sorted (so
    ids do not depend on file order)."""
    return sorted({name for name in speakers if name})


def speaker_index(names: Sequence[str], name: str, voice: str) -> int:
    """The id of speaker `name` among a voice's `names` (id order); `voice`
    says which voice in the error."""
    if name in names:
        return list(names).index(name)
    if not names:
        raise VegaError(f"--speaker {name!r}: {voice} has one speaker and no speaker names")
    raise VegaError(
        f"--speaker {name!r}: {voice} knows {len(names)} speaker(s): {', '.join(names)}"
    )
