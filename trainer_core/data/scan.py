"""Scan a data folder: find audio with transcripts or text files, check
every file, choose the data mode.

`scan_data` is what `trainer-core check-data` prints and what the trainer plans from. Problem
files are listed and skipped, never fatal; a `DataError` is raised only when nothing usable
remains, and its message says what was found and what to do. Torch- and librosa-free: the
dashboard runs this via the CLI. A Common Voice release or a `datasets` folder is read by its own
reader (`data.corpus_layout`).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from trainer_core.contract.errors import DataError
from trainer_core.data.audio_probe import (
    AudioProbe,
    DurationLimits,
    all_audio_suffixes,
    supported_suffixes,
    unsupported_problem,
)
from trainer_core.data.corpus_layout import CorpusOptions, scan_corpus
from trainer_core.data.scan_cache import ScanCache
from trainer_core.data.scan_report import (
    DataReport,
    Problem,
    TextItem,
    TextSummary,
    VoiceItem,
    VoiceSummary,
    problem_breakdown,
)
from trainer_core.data.speakers import SpeakerLayout, assign_speakers, decide_layout
from trainer_core.data.text_probe import TEXT_SUFFIXES, TextProbe, probe_text
from trainer_core.data.transcripts import (
    METADATA_NAME,
    Transcript,
    TranscriptIndex,
    index_rows,
    read_metadata,
    sidecar_paths,
)
from trainer_core.data.voice_probes import (
    histogram,
    parallel_map,
    probe_all,
    voice_item,
    voice_summary,
)

MODES = ("auto", "voice", "text")
NO_EXTENSION = "(no extension)"
# Problems of a metadata.csv itself that leave its clips without transcripts.
TABLE_KINDS = frozenset({"unreadable", "metadata_row"})
# Folders that never hold training data: macOS resource forks, VCS and cache folders.
SKIPPED_DIRS = frozenset({"__MACOSX", "__pycache__"})


@dataclass
class Inventory:
    """Every file under the data folder, sorted into the roles the scan cares about."""

    root: Path
    audio: list[Path] = field(default_factory=list)
    unsupported_audio: list[Path] = field(default_factory=list)
    text_candidates: list[Path] = field(default_factory=list)
    metadata: list[Path] = field(default_factory=list)
    extensions: Counter[str] = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)  # folders that could not be listed

    @property
    def file_count(self) -> int:
        return sum(self.extensions.values())


@dataclass
class VoiceScan:
    items: list[VoiceItem]
    problems: list[Problem]
    summary: VoiceSummary


@dataclass
class TextScan:
    items: list[TextItem]
    problems: list[Problem]
    warnings: list[Problem]
    summary: TextSummary


def _walk_files(root: Path, problems: list[Problem]) -> Iterable[Path]:
    """Files under root in a stable order, skipping hidden files and folders (macOS `._x.wav`); a
    folder that cannot be listed is added to `problems` (os.walk would skip it silently)."""

    def unlisted(exc: OSError) -> None:
        reason = f"unreadable folder ({exc.strerror or exc}): the files in it were not scanned"
        reason += "; check its permissions"
        problems.append(Problem(Path(exc.filename or root), reason, "unreadable"))

    for folder, dirnames, filenames in os.walk(root, onerror=unlisted):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIPPED_DIRS)
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(folder) / name


def take_inventory(root: Path) -> Inventory:
    inventory = Inventory(root)
    voice_suffixes, known_audio = supported_suffixes(), all_audio_suffixes()
    for path in _walk_files(root, inventory.problems):
        suffix = path.suffix.lower()
        inventory.extensions[suffix or NO_EXTENSION] += 1
        if path.name.lower() == METADATA_NAME:
            inventory.metadata.append(path)
        elif suffix in voice_suffixes:
            inventory.audio.append(path)
        elif suffix in known_audio:
            inventory.unsupported_audio.append(path)
        elif suffix in TEXT_SUFFIXES:
            inventory.text_candidates.append(path)
    return inventory


def describe_found(extensions: Counter[str], limit: int = 8) -> str:
    """'3 .png, 1 .zip' — what a folder holds, most common kinds first."""
    parts = [f"{count} {ext}" for ext, count in extensions.most_common(limit)]
    rest = len(extensions) - limit
    if rest > 0:
        parts.append(f"and {rest} more kind(s)")
    return ", ".join(parts) if parts else "nothing"


def _check_folder(path: Path) -> Path:
    root = path.expanduser().resolve()
    if not root.exists():
        raise DataError(f"data folder {root} does not exist; check data.path (or the DIR argument)")
    if not root.is_dir():
        raise DataError(
            f"data path {root} is a file, not a folder; point data.path at the folder that holds it"
        )
    return root


def _check_arguments(mode: str, min_duration_s: float, max_duration_s: float) -> None:
    if mode not in MODES:
        raise DataError(f"unknown data mode {mode!r}; use one of: {', '.join(MODES)}")
    if not 0 <= min_duration_s < max_duration_s:
        raise DataError(
            f"min duration ({min_duration_s} s) must be at least 0 and below max duration"
            f" ({max_duration_s} s)"
        )


# -----------------------------------------------------------------------------------------------
# voice


def _select_items(
    probes: list[AudioProbe], transcripts: list[Transcript | None]
) -> tuple[list[VoiceItem], list[Problem]]:
    """Usable probes become items; a second file sharing one transcript
    (a.wav and a.flac) is a duplicate."""
    items: list[VoiceItem] = []
    problems: list[Problem] = []
    first_by_source: dict[str, Path] = {}
    for probe, transcript in zip(probes, transcripts, strict=True):
        if probe.problem is not None:
            problems.append(probe.problem)
            continue
        assert transcript is not None
        first = first_by_source.setdefault(transcript.source_key, probe.path)
        if first != probe.path:
            reason = (
                f"duplicate: its transcript ({transcript.source}) already belongs to {first.name};"
                " skipped"
            )
            problems.append(Problem(probe.path, reason, "duplicate"))
            continue
        items.append(voice_item(probe, transcript))
    return items, problems


def _transcript_index(inventory: Inventory, speakers: str) -> tuple[TranscriptIndex, SpeakerLayout]:
    """The transcript of every audio file; the tables' columns are read once
    the speaker layout is known."""
    suffixes = all_audio_suffixes()
    tables = [read_metadata(path) for path in inventory.metadata]
    layout = decide_layout(speakers, tables, inventory.root, inventory.audio)
    for table in tables:
        index_rows(table, suffixes, speaker_column=layout.mode == "column")
    index = TranscriptIndex(tables, inventory.root)
    for audio in inventory.audio + inventory.unsupported_audio:
        index.note_audio_stem(audio)
    return index, layout


def scan_voice(
    inventory: Inventory,
    limits: DurationLimits,
    workers: int,
    cache_folder: Path | None = None,
    speakers: str = "auto",
) -> VoiceScan:
    """Probe every audio file in parallel and pair usable ones with their transcripts and speakers.

    `cache_folder`: where the data-scan cache lives (data.scan_cache); None probes every file
    afresh. `speakers`: data.speakers (trainer_core.data.speakers).
    """
    index, layout = _transcript_index(inventory, speakers)
    transcripts = [index.lookup(audio) for audio in inventory.audio]
    cache = (
        ScanCache(cache_folder, inventory.root)
        if cache_folder is not None and inventory.audio
        else None
    )
    probes = probe_all(list(zip(inventory.audio, transcripts, strict=True)), limits, workers, cache)
    items, file_problems = _select_items(probes, transcripts)
    items, speaker_problems = assign_speakers(layout, items, inventory.root)
    problems = (
        index.table_problems()
        + [unsupported_problem(path) for path in inventory.unsupported_audio]
        + file_problems
        + speaker_problems
        + index.missing_audio_problems()
    )
    summary = voice_summary(
        len(inventory.audio), len(inventory.unsupported_audio), probes, items, layout
    )
    return VoiceScan(items, problems, summary)


# ------------------------------------------------------------------------------------------------
# text


def corpus_text_files(inventory: Inventory) -> list[Path]:
    """Text files that are corpus, not transcripts: sidecars of any audio file are excluded."""
    if not inventory.text_candidates:
        return []  # nothing to exclude from: skip building the sidecar set of a big voice corpus
    sidecars = {
        sidecar
        for audio in inventory.audio + inventory.unsupported_audio
        for sidecar in sidecar_paths(audio)
    }
    return [path for path in inventory.text_candidates if path not in sidecars]


def _text_summary(files: list[Path], probes: list[TextProbe], items: list[TextItem]) -> TextSummary:
    return TextSummary(
        files=len(files),
        usable=len(items),
        skipped=len(files) - len(items),
        bytes=sum(item.size_bytes for item in items),
        text_bytes=sum(item.text_bytes for item in items),
        lines=sum(item.lines for item in items),
        non_utf8_files=sum(1 for item in items if not item.utf8),
        jsonl_lines_without_text=sum(probe.lines_without_text for probe in probes),
        by_extension=histogram(path.suffix.lower() for path in files),
    )


def scan_text(inventory: Inventory, workers: int) -> TextScan:
    files = corpus_text_files(inventory)
    probes = parallel_map(probe_text, files, workers)
    items = [probe.item for probe in probes if probe.item is not None]
    problems = [probe.problem for probe in probes if probe.problem is not None]
    warnings = [warning for probe in probes for warning in probe.warnings]
    return TextScan(items, problems, warnings, _text_summary(files, probes, items))


# ------------------------------------------------------------------------------------
# mode and reasons


def _audio_file_problems(inventory: Inventory, voice: VoiceScan) -> list[Problem]:
    """Problems of supported audio files only (not metadata rows or unsupported formats)."""
    audio = set(inventory.audio)
    return [p for p in voice.problems if p.path in audio]


# What to do about the most common reason a voice folder has nothing usable.
VOICE_HINTS: dict[str, str] = {
    "missing_transcript": (
        "add a metadata.csv (id|text) or a <stem>.txt / <stem>.lab beside each audio file"
    ),
    "empty_transcript": "fill in the empty transcripts",
    "too_short": "lower data.min_duration_s (--min-duration) or use longer clips",
    "too_long": "raise data.max_duration_s (--max-duration) or split the recordings",
    "unreadable": "re-export the files as 16-bit WAV or FLAC",
    "empty": "re-export the files; they hold no audio",
    "silent": "check the recordings: they are silent",
    "clipped": "re-record or lower the gain: the recordings are clipped",
    "nonfinite": "re-export the files: they hold NaN or infinite samples",
    "truncated": "copy the files again: they end before their headers say",
    "bad_transcript": "save the transcripts as UTF-8 text",
    "transcript_too_long": "check that each transcript belongs to its clip",
    "missing_speaker": (
        "give every clip a speaker (id|speaker|text, or DATA/<speaker>/), or set data.speakers ="
        ' "none"'
    ),
}


def _no_usable_voice_message(inventory: Inventory, voice: VoiceScan) -> str:
    root = inventory.root
    if not inventory.audio:
        count = len(inventory.unsupported_audio)
        unsupported = f" ({count} in unsupported formats)" if count else ""
        return (
            f"voice mode needs audio (.wav .flac .ogg .mp3) but {root} has none{unsupported}: "
            f"found {describe_found(inventory.extensions)}"
        )
    file_problems = _audio_file_problems(inventory, voice)
    top_kind = Counter(p.kind for p in file_problems).most_common(1)
    hint = (
        VOICE_HINTS.get(top_kind[0][0], "see the problem list")
        if top_kind
        else "see the problem list"
    )
    tables = [p for p in voice.problems if p.path.name.lower() == METADATA_NAME]
    rows = [p for p in tables if p.kind in TABLE_KINDS]
    if rows and top_kind[0][0] == "missing_transcript":  # a table is there: not "add a table"
        more = f" (and {len(rows) - 1} more like it)" if len(rows) > 1 else ""
        hint = f"{rows[0].path}: {rows[0].reason}{more}"
    return (
        f"none of the {len(inventory.audio)} audio files in {root} is usable"
        f" ({problem_breakdown(file_problems)}): {hint}; run `trainer-core check-data {root}` for"
        " the full list"
    )


def _no_usable_data_message(inventory: Inventory, voice: VoiceScan | None, text: TextScan) -> str:
    root = inventory.root
    audio_note = ""
    if voice is not None and inventory.audio:
        audio_note = f" ({_no_usable_voice_message(inventory, voice)})"
    if text.summary.files:
        return (
            f"none of the {text.summary.files} text files in {root} is usable"
            f" ({problem_breakdown(text.problems)}); add text to them or point data.path"
            f" elsewhere{audio_note}"
        )
    return (
        f"no audio with transcripts and no .txt/.md/.jsonl files in {root}: "
        f"found {describe_found(inventory.extensions)}{audio_note}"
    )


def _voice_reason(requested: str, voice: VoiceScan, text_count: int) -> str:
    summary = voice.summary
    minutes = summary.hours_usable * 60.0
    if requested == "voice":
        lead = "voice mode was asked for"
    else:
        lead = "voice, because the folder has audio with transcripts"
    reason = (
        f"{lead}: {summary.usable} of {summary.audio_files} audio files are usable ({minutes:.1f}"
        " min)"
    )
    if requested == "auto" and text_count:
        reason += f"; {text_count} other text file(s) are ignored"
    return reason


def _text_reason(
    requested: str, inventory: Inventory, voice: VoiceScan | None, text: TextScan
) -> str:
    files = f"{text.summary.usable} of {text.summary.files} text files are usable"
    if requested == "text":
        ignored = f"; {len(inventory.audio)} audio file(s) ignored" if inventory.audio else ""
        return f"text mode was asked for: {files}{ignored}"
    if voice is not None and inventory.audio:
        return (
            f"text, because none of the {len(inventory.audio)} audio files is usable "
            f"({problem_breakdown(_audio_file_problems(inventory, voice))}): {files}"
        )
    return f"text, because the folder has no audio: {files}"


# ----------------------------------------------------------------------------------------------
# public


def _voice_report(root: Path, requested: str, inventory: Inventory, voice: VoiceScan) -> DataReport:
    text_count = len(corpus_text_files(inventory))
    return DataReport(
        path=root,
        mode="voice",
        reason=_voice_reason(requested, voice, text_count),
        items=list(voice.items),
        problems=inventory.problems + voice.problems,
        voice=voice.summary,
        found_extensions=dict(inventory.extensions.most_common()),
    )


def _text_report(
    root: Path, requested: str, inventory: Inventory, voice: VoiceScan | None, text: TextScan
) -> DataReport:
    return DataReport(
        path=root,
        mode="text",
        reason=_text_reason(requested, inventory, voice, text),
        items=list(text.items),
        problems=inventory.problems + (voice.problems if voice else []) + text.problems,
        warnings=text.warnings,
        voice=voice.summary if voice else VoiceSummary(),
        text=text.summary,
        found_extensions=dict(inventory.extensions.most_common()),
    )


def scan_data(
    path: str | os.PathLike[str],
    mode: str = "auto",
    min_duration_s: float = 0.3,
    max_duration_s: float = 20.0,
    workers: int = 2,
    cache_folder: Path | None = None,
    speakers: str = "auto",
    corpus: CorpusOptions | None = None,
) -> DataReport:
    """Scan a data folder and decide its mode (auto: voice if usable audio
    with transcripts, else text).

    `cache_folder`: the data-scan cache's folder (data.scan_cache.scan_cache_folder); None
    reads every file. `speakers`: how voice clips get their speakers (data.speakers: auto,
    column, folders or none). `corpus`: options of Common Voice and `datasets` folders, which
    have readers of their own. Raises DataError when the folder is missing or empty, or when
    nothing usable is found for the mode.
    """
    _check_arguments(mode, min_duration_s, max_duration_s)
    root = _check_folder(Path(path))
    limits = DurationLimits(min_duration_s, max_duration_s)
    options = corpus if corpus is not None else CorpusOptions(speakers=speakers)
    report = scan_corpus(root, limits, workers, cache_folder, options) if mode != "text" else None
    if report is not None:
        return report
    inventory = take_inventory(root)
    if inventory.file_count == 0:
        raise DataError(
            f"data folder {root} is empty: add audio with transcripts (metadata.csv or <stem>.txt) "
            "or .txt/.md/.jsonl text files"
        )
    voice: VoiceScan | None = None
    if mode != "text":
        voice = scan_voice(inventory, limits, workers, cache_folder, speakers)
        if voice.items:
            return _voice_report(root, mode, inventory, voice)
        if mode == "voice":
            raise DataError(_no_usable_voice_message(inventory, voice))
    text = scan_text(inventory, workers)
    if text.items:
        return _text_report(root, mode, inventory, voice, text)
    if mode == "text" and not text.summary.files:
        raise DataError(
            "text mode needs .txt/.md/.jsonl files (transcripts beside audio do not count) but"
            f" {root} has none: found {describe_found(inventory.extensions)}"
        )
    raise DataError(_no_usable_data_message(inventory, voice, text))


def estimate_preload_bytes(
    report: DataReport, sample_rate: int, hop_length: int, n_mels: int
) -> int:
    """RAM needed to hold the usable data decoded: float32 audio at
    `sample_rate`, float32 mels, text bytes."""
    total = 0
    for item in report.items:
        if isinstance(item, VoiceItem):
            samples = math.ceil(item.duration_s * sample_rate)
            frames = samples // hop_length + 1
            total += 4 * samples + 4 * n_mels * frames + len(item.text.encode("utf-8"))
        else:
            total += item.text_bytes
    return total
