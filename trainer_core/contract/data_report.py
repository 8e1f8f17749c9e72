"""`trainer-core check-data --json` as a typed document: the scan's figures, problems and items.

`trainer_core.data.scan_report.DataReport.to_report()` builds it; the launch screen reads it with
`read_report(CheckDataReport, text, ...)`. Keys are the scan dataclasses' fields; paths are strings.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from trainer_core.contract.report_model import ReportModel


class ProblemEntry(ReportModel):
    """A skipped file (or a row of one): `kind` is a stable code, `reason` a sentence."""

    path: str
    reason: str
    kind: str


class SpeakerFigures(ReportModel):
    """One speaker's usable clips and hours."""

    clips: int
    hours: float


class VoiceFigures(ReportModel):
    """Figures over the audio found (`data.scan_report.VoiceSummary`)."""

    audio_files: int
    usable: int
    skipped: int
    unsupported_files: int
    hours_usable: float
    hours_all: float
    audio_bytes: int
    usable_bytes: int
    duration_min_s: float | None
    duration_max_s: float | None
    duration_mean_s: float | None
    formats: dict[str, int]
    sample_rates: dict[str, int]
    channels: dict[str, int]
    transcript_chars: int
    charset: str
    speaker_mode: str
    speaker_reason: str
    speakers: dict[str, SpeakerFigures]
    held_out: int
    corpus_format: str
    corpus_note: str


class TextFigures(ReportModel):
    """Figures over the text files found (`data.scan_report.TextSummary`)."""

    files: int
    usable: int
    skipped: int
    bytes: int
    text_bytes: int
    lines: int
    non_utf8_files: int
    jsonl_lines_without_text: int
    by_extension: dict[str, int]


class DataSummary(ReportModel):
    """Counts over the whole folder; `problem_counts` is per kind label, most frequent first."""

    usable: int
    problems: int
    problem_counts: dict[str, int]
    warnings: int
    voice: VoiceFigures
    text: TextFigures
    found_extensions: dict[str, int]


class VoiceItemEntry(ReportModel):
    """One usable recording (`--items`)."""

    path: str
    text: str
    duration_s: float
    sample_rate: int
    channels: int
    format: str
    subtype: str
    size_bytes: int
    item_id: str
    transcript_source: str
    speaker: str
    held_out: bool


class TextItemEntry(ReportModel):
    """One usable text file (`--items`)."""

    path: str
    size_bytes: int
    text_bytes: int
    lines: int
    utf8: bool
    kind: str


class TokenizerDrops(ReportModel):
    """`--tokenizer`: the characters a VITS voice's text front end drops from the transcripts."""

    folder: str
    corpus: str
    transcripts: int
    transcripts_with_drops: int
    characters_dropped: int
    dropped: dict[str, int]


class CheckDataReport(ReportModel):
    """What `trainer-core check-data --json` prints (`items`: --items; `tokenizer`: --tokenizer)."""

    command: ClassVar[str] = "trainer-core check-data --json"

    path: str
    mode: Literal["voice", "text"]
    reason: str
    summary: DataSummary
    problems: list[ProblemEntry]
    warnings: list[ProblemEntry]
    items: list[VoiceItemEntry | TextItemEntry] | None = None
    tokenizer: TokenizerDrops | None = None
