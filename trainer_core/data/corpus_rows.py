"""What a corpus reader hands over: its options, the rows it lists and their problems.

Shared by the readers that list (`data.common_voice`, `data.parquet_corpus`) and
`data.corpus_layout`, which builds the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trainer_core.contract.errors import DataError
from trainer_core.data.cache_location import cache_folder
from trainer_core.data.scan_report import Problem
from trainer_core.data.speakers import SpeakerLayout
from trainer_core.data.transcripts import Transcript

if TYPE_CHECKING:
    from trainer_core.contract.profile import DataSection

# Split names of `datasets` folders: training, or held out (Vega's validation set).
TRAIN_SPLITS = frozenset({"train"})
HELD_OUT_SPLITS = frozenset({"validation", "valid", "val", "dev", "test", "eval"})
# How check-data names each corpus format.
FORMAT_NAMES = {
    "common_voice": "a Common Voice release",
    "parquet": "a datasets folder (parquet)",
    "arrow": "a datasets folder (save_to_disk)",
}


@dataclass(frozen=True)
class CorpusOptions:
    """The profile's settings for corpus readers (data.*); the defaults suit most corpora."""

    speakers: str = "auto"
    """data.speakers: "column" reads the speaker column (Common Voice's client_id); else one."""
    min_up_votes: int = 0
    common_voice_train: str = "validated"
    """validated: validated.tsv minus dev and test (most data); train: the release's train.tsv."""
    text_column: str | None = None
    audio_column: str | None = None
    clips_dir: Path | None = None
    """Where audio inside parquet/Arrow files is written out once (None: the cache's clips/)."""

    def clips_folder(self) -> Path:
        return self.clips_dir if self.clips_dir is not None else cache_folder(None) / "clips"


def corpus_options(data: DataSection) -> CorpusOptions:
    """The corpus readers' options from a profile's [data] section."""
    return CorpusOptions(
        speakers=data.speakers,
        min_up_votes=data.min_up_votes,
        common_voice_train=data.common_voice_train,
        text_column=data.text_column,
        audio_column=data.audio_column,
        clips_dir=cache_folder(data.cache_dir) / "clips",
    )


@dataclass(frozen=True)
class CorpusRow:
    """One listed clip: its file, transcript and split, and where it is listed (for problems)."""

    path: Path
    transcript: Transcript
    item_id: str
    held_out: bool
    where: Path
    """The table, shard or clip a problem with this row is reported on."""
    label: str
    """'dev.tsv line 4' or 'row 7': prefixed to the reason of a problem with this clip."""


@dataclass
class CorpusListing:
    """What a reader found: rows to probe, problem rows, what it chose (check-data shows it)."""

    format: str
    rows: list[CorpusRow] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    layout: SpeakerLayout = SpeakerLayout("none", "one speaker")


def speaker_layout(requested: str, column: str | None, corpus: str) -> SpeakerLayout:
    """data.speakers for a corpus: "column" reads `column` (None: none, an error); else one."""
    setting = 'data.speakers = "column"'
    if requested == "column":
        if column is None:
            raise DataError(f'{setting} but this {corpus} has no speaker column; set "none"')
        return SpeakerLayout("column", f"{setting}: the {column} column names the speaker")
    if requested == "folders":
        raise DataError(f'data.speakers = "folders" does not apply to {corpus}: use "column"')
    other = f'; data.speakers = "column" reads {column}' if column else ""
    return SpeakerLayout("none", f"one speaker{other}")
