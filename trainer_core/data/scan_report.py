"""The result of a data scan: usable items, problem files and summary figures, JSON-ready.

The trainer uses `DataReport.items` directly; `trainer-core check-data --json` prints
`DataReport.to_report()` (`trainer_core.contract.data_report.CheckDataReport`), which the dashboard
reads. Paths are absolute; numbers are numbers, never preformatted strings.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainer_core.contract.data_report import (
    CheckDataReport,
    DataSummary,
    ProblemEntry,
    TextFigures,
    TextItemEntry,
    TokenizerDrops,
    VoiceFigures,
    VoiceItemEntry,
)

ScanMode = Literal["voice", "text"]

# Short labels for problem kinds, used when counting problems in sentences and tables.
PROBLEM_LABELS: dict[str, str] = {
    "unreadable": "unreadable",
    "empty": "empty",
    "too_short": "too short",
    "too_long": "too long",
    "silent": "silent",
    "clipped": "clipped",
    "nonfinite": "non-finite samples",
    "truncated": "truncated",
    "missing_transcript": "missing transcript",
    "empty_transcript": "empty transcript",
    "bad_transcript": "bad transcript",
    "transcript_too_long": "transcript too long",
    "unsupported_format": "unsupported format",
    "duplicate": "duplicate",
    "metadata_row": "bad metadata row",
    "missing_audio": "listed but no audio",
    "no_text": "no text",
    "missing_speaker": "no speaker",
}


def problem_breakdown(problems: list[Problem]) -> str:
    """'3 unreadable, 1 too short': problems counted by kind, most frequent first."""
    counts = Counter(PROBLEM_LABELS.get(p.kind, p.kind) for p in problems)
    return ", ".join(f"{count} {label}" for label, count in counts.most_common())


@dataclass(frozen=True)
class Problem:
    """A file (or a row of one) that is skipped, and why. `kind` is a stable
    code, `reason` a sentence."""

    path: Path
    reason: str
    kind: str

    def to_dict(self) -> dict[str, str]:
        return {"path": str(self.path), "reason": self.reason, "kind": self.kind}

    def to_entry(self) -> ProblemEntry:
        return ProblemEntry(path=str(self.path), reason=self.reason, kind=self.kind)


@dataclass(frozen=True)
class VoiceItem:
    """One usable recording with its transcript."""

    path: Path
    text: str
    duration_s: float
    sample_rate: int
    channels: int
    format: str
    subtype: str
    size_bytes: int
    item_id: str
    transcript_source: str
    speaker: str = ""  # "" for single-speaker data (data.speakers resolved to "none")
    held_out: bool = False  # the corpus holds it out (Common Voice dev/test, a validation split)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["path"] = str(self.path)
        return out


@dataclass(frozen=True)
class TextItem:
    """One usable text file; `text_bytes` counts the bytes a model trains on
    (the text fields of .jsonl)."""

    path: Path
    size_bytes: int
    text_bytes: int
    lines: int
    utf8: bool
    kind: str

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["path"] = str(self.path)
        return out


@dataclass
class SpeakerFigures:
    """One speaker's usable clips and hours."""

    clips: int = 0
    hours: float = 0.0


@dataclass
class VoiceSummary:
    """Figures over the audio found. Histograms cover every file whose header could be read.

    `speaker_mode` is how speakers were read (column, folders or none: trainer_core.data.speakers)
    and why; `speakers` holds each speaker's usable clips and hours (empty for single-speaker data).
    """

    audio_files: int = 0
    usable: int = 0
    skipped: int = 0
    unsupported_files: int = 0
    hours_usable: float = 0.0
    hours_all: float = 0.0
    audio_bytes: int = 0
    usable_bytes: int = 0
    duration_min_s: float | None = None
    duration_max_s: float | None = None
    duration_mean_s: float | None = None
    formats: dict[str, int] = field(default_factory=dict)
    sample_rates: dict[str, int] = field(default_factory=dict)
    channels: dict[str, int] = field(default_factory=dict)
    transcript_chars: int = 0
    charset: str = ""
    speaker_mode: str = "none"
    speaker_reason: str = ""
    speakers: dict[str, SpeakerFigures] = field(default_factory=dict)
    held_out: int = 0
    """Usable clips the corpus itself holds out (0: the split is Vega's, data.val_fraction)."""
    corpus_format: str = "folder"
    """folder (metadata.csv or sidecars), common_voice, parquet or arrow (data.corpus_layout)."""
    corpus_note: str = ""
    """What the corpus reader chose and filtered (the table that trains, rows under a minimum)."""


@dataclass
class TextSummary:
    """Figures over the text files found (text mode)."""

    files: int = 0
    usable: int = 0
    skipped: int = 0
    bytes: int = 0
    text_bytes: int = 0
    lines: int = 0
    non_utf8_files: int = 0
    jsonl_lines_without_text: int = 0
    by_extension: dict[str, int] = field(default_factory=dict)


@dataclass
class DataReport:
    """What `scan_data` found in a data folder and which mode it chose."""

    path: Path
    mode: ScanMode
    reason: str
    items: list[VoiceItem | TextItem] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    voice: VoiceSummary = field(default_factory=VoiceSummary)
    text: TextSummary = field(default_factory=TextSummary)
    found_extensions: dict[str, int] = field(default_factory=dict)

    @property
    def usable_count(self) -> int:
        return len(self.items)

    def problem_counts(self) -> dict[str, int]:
        """Problems per kind label, most frequent first."""
        counts = Counter(PROBLEM_LABELS.get(p.kind, p.kind) for p in self.problems)
        return dict(counts.most_common())

    def to_dict(self, include_items: bool = True) -> dict[str, Any]:
        """JSON-ready form (`to_report`'s); `include_items=False` keeps it small."""
        return self.to_report(include_items).model_dump(mode="json", exclude_unset=True)

    def to_report(
        self,
        include_items: bool = True,
        tokenizer: TokenizerDrops | None = None,
    ) -> CheckDataReport:
        """The document `trainer-core check-data --json` prints (`tokenizer`: its figures)."""
        summary = DataSummary(
            usable=self.usable_count,
            problems=len(self.problems),
            problem_counts=self.problem_counts(),
            warnings=len(self.warnings),
            voice=VoiceFigures.model_validate(asdict(self.voice)),
            text=TextFigures.model_validate(asdict(self.text)),
            found_extensions=dict(self.found_extensions),
        )
        report = CheckDataReport(
            path=str(self.path),
            mode=self.mode,
            reason=self.reason,
            summary=summary,
            problems=[p.to_entry() for p in self.problems],
            warnings=[w.to_entry() for w in self.warnings],
        )
        extra: dict[str, Any] = {}
        if include_items:
            extra["items"] = [_item_entry(item) for item in self.items]
        if tokenizer is not None:
            extra["tokenizer"] = tokenizer
        # Only the parts asked for are set, so `to_json` leaves the others out.
        return report.model_copy(update=extra) if extra else report


def _item_entry(item: VoiceItem | TextItem) -> VoiceItemEntry | TextItemEntry:
    if isinstance(item, VoiceItem):
        return VoiceItemEntry.model_validate(item.to_dict())
    return TextItemEntry.model_validate(item.to_dict())
