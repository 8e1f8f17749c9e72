"""A Common Voice release folder as `data.path`: its tab-separated tables and `clips/`.

The folder holds `validated.tsv`, `train.tsv`, `dev.tsv`, `test.tsv` (and tables that never train:
`other.tsv`, `invalidated.tsv`, ...), a header row naming the columns (client_id, path, sentence,
up_votes, ...), and the audio in `clips/`. Tables are read with quoting off, as Common Voice writes
them: a lone `"` in a sentence is text.

Split: every clip of dev.tsv and test.tsv is held out (Vega's validation set) and never trains,
also when validated.tsv or train.tsv lists it too. Training rows come from validated.tsv minus
those clips (data.common_voice_train = "validated", the default: all the validated data, as people
fine-tuning a voice use it), or from the release's own train.tsv ("train": a smaller table, at most
a few clips per sentence); a release without validated.tsv trains on train.tsv. data.min_up_votes
skips rows with fewer up-votes; data.speakers = "column" makes client_id the speaker. Every problem
row (bad row, empty sentence, missing clip, a clip listed twice) is named with its table and line
and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import soundfile as sf

from trainer_core.contract.confined_path import relative_problem
from trainer_core.contract.errors import DataError
from trainer_core.data.audio_probe import supported_suffixes
from trainer_core.data.corpus_rows import CorpusListing, CorpusOptions, CorpusRow, speaker_layout
from trainer_core.data.scan_report import Problem
from trainer_core.data.transcripts import UTF8_BOM, Transcript, clean_text

CLIPS = "clips"
VALIDATED, TRAIN, DEV, TEST = "validated.tsv", "train.tsv", "dev.tsv", "test.tsv"
HELD_OUT_TABLES = (DEV, TEST)
SPEAKER_COLUMN = "client_id"
Columns = dict[str, int]  # column name -> its index in a row


@dataclass(frozen=True)
class TableRow:
    line: int
    clip: str
    sentence: str
    client_id: str
    up_votes: str


def is_common_voice(root: Path) -> bool:
    return (root / CLIPS).is_dir() and any((root / name).is_file() for name in (VALIDATED, TRAIN))


def _columns(header: list[str], path: Path) -> Columns | Problem:
    index = {name.strip(): i for i, name in enumerate(header)}
    missing = [name for name in ("path", "sentence") if name not in index]
    if missing:
        reason = (
            f"line 1: the header has no {' or '.join(missing)} column ({len(header)} columns: "
            f"{', '.join(header[:12])}); not read. Restore the table from the release"
        )
        return Problem(path, reason, "metadata_row")
    return index


def read_table(path: Path) -> tuple[list[TableRow], list[Problem]]:
    """The rows of one table (tab-separated, quoting off, header first) and its bad rows."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return [], [Problem(path, f"cannot read: {exc.strerror or exc}", "metadata_row")]
    data = data[len(UTF8_BOM) :] if data.startswith(UTF8_BOM) else data
    lines = data.split(b"\n")
    header = lines[0].rstrip(b"\r").decode("utf-8", errors="replace").split("\t")
    columns = _columns(header, path)
    if isinstance(columns, Problem):
        return [], [columns]
    rows: list[TableRow] = []
    problems: list[Problem] = []
    for number, raw in enumerate(lines[1:], start=2):
        row = _table_row(raw.rstrip(b"\r"), number, columns, path)
        if isinstance(row, Problem):
            problems.append(row)
        elif row is not None:
            rows.append(row)
    return rows, problems


def _table_row(raw: bytes, number: int, columns: Columns, path: Path) -> TableRow | Problem | None:
    """One line as a row, the Problem that skips it, or None for a blank line."""
    if not raw.strip():
        return None
    try:
        fields = raw.decode("utf-8").split("\t")
    except UnicodeDecodeError as exc:
        reason = f"line {number}: not valid UTF-8 (byte {exc.start}); fix or remove the row"
        return Problem(path, reason, "metadata_row")
    if len(fields) != len(columns):
        found, width = len(fields), len(columns)
        reason = f"line {number}: {found} tab-separated fields where the header has {width}"
        return Problem(path, reason, "metadata_row")

    def field(name: str) -> str:
        return fields[columns[name]].strip() if name in columns else ""

    sentence, client, votes = field("sentence"), field(SPEAKER_COLUMN), field("up_votes")
    return TableRow(number, field("path"), sentence, client, votes)


class _Lister:
    """Turns table rows into corpus rows, naming every problem row; each clip is taken once."""

    def __init__(self, root: Path, options: CorpusOptions, listing: CorpusListing) -> None:
        self.root, self.options, self.listing = root, options, listing
        self.taken: dict[str, str] = {}
        self.low_votes = 0

    def add_table(self, name: str, held_out: bool, skip: frozenset[str] = frozenset()) -> int:
        table = self.root / name
        rows, problems = read_table(table)
        self.listing.problems.extend(problems)
        return sum(self._add_row(table, row, held_out) for row in rows if row.clip not in skip)

    def _votes_problem(self, row: TableRow) -> str | None:
        """Why the row falls to data.min_up_votes ("" when it has too few), None when it passes."""
        minimum = self.options.min_up_votes
        if minimum <= 0:
            return None
        try:
            return "" if int(row.up_votes) < minimum else None
        except ValueError:
            return f"up_votes {row.up_votes!r} is not a number (data.min_up_votes reads it)"

    def _problem(self, table: Path, row: TableRow) -> tuple[str, str] | None:
        """(kind, reason) that skips a row, or None when it is listed; the clip is taken anyway."""
        if not row.clip:
            return "metadata_row", "the path column is empty; fix the row"
        if row.clip in self.taken:
            return "duplicate", f"{row.clip} is listed again (first at {self.taken[row.clip]})"
        self.taken[row.clip] = f"{table.name} line {row.line}"
        votes = self._votes_problem(row)
        if votes is not None:
            self.low_votes += votes == ""
            return ("metadata_row", votes) if votes else ("", "")
        if not clean_text(row.sentence):
            return "empty_transcript", f"{row.clip} has an empty sentence; fill it in or drop it"
        escape = relative_problem(row.clip)  # "../x" or "/x": skipped, never read
        if escape is not None:
            return "metadata_row", f"the path {row.clip!r} {escape}; name a file in {CLIPS}/"
        if not (self.root / CLIPS / row.clip).is_file():
            return "missing_audio", f"{row.clip} is listed but not in {CLIPS}/; add it or drop it"
        return None

    def _add_row(self, table: Path, row: TableRow, held_out: bool) -> int:
        problem = self._problem(table, row)
        if problem is not None:
            kind, reason = problem
            if kind:  # a row under data.min_up_votes is counted, not listed
                self.listing.problems.append(Problem(table, f"line {row.line}: {reason}", kind))
            return 0
        clip = self.root / CLIPS / row.clip
        speaker = row.client_id if self.listing.layout.mode == "column" else ""
        label = f"{table.name} line {row.line}"
        transcript = Transcript(clean_text(row.sentence), f"{table}#{row.clip}", label, speaker)
        self.listing.rows.append(CorpusRow(clip, transcript, clip.stem, held_out, clip, label))
        return 1


def list_common_voice(root: Path, options: CorpusOptions) -> CorpusListing | None:
    """The clips of a Common Voice folder (see the module docstring); None when it is not one."""
    if not is_common_voice(root):
        return None
    choice = options.common_voice_train
    if choice not in ("validated", "train"):
        raise DataError(f'data.common_voice_train = {choice!r}: use "validated" or "train"')
    if ".mp3" not in supported_suffixes():
        raise DataError(
            f"{root} is a Common Voice release: its clips are MP3, which the installed libsndfile"
            f" ({sf.__libsndfile_version__}) cannot decode; pip install -U soundfile (libsndfile"
            " 1.1+)"
        )
    layout = speaker_layout(options.speakers, SPEAKER_COLUMN, "Common Voice")
    listing = CorpusListing("common_voice", layout=layout)
    lister = _Lister(root, options, listing)
    tables = [name for name in HELD_OUT_TABLES if (root / name).is_file()]
    held = {name: lister.add_table(name, True) for name in tables}
    validated = (root / VALIDATED).is_file()
    table = TRAIN if choice == "train" or not validated else VALIDATED
    if not (root / table).is_file():
        raise DataError(f'data.common_voice_train = "train" but {root / TRAIN} does not exist')
    trained = lister.add_table(table, False, frozenset(lister.taken))
    held_text = ", ".join(f"{name} {count}" for name, count in held.items()) or "none"
    minus = " not in dev/test" if table == VALIDATED else ""
    listing.notes.append(f"trains on {table} ({trained} rows{minus}); held out: {held_text}")
    if lister.low_votes:
        minimum = options.min_up_votes
        listing.notes.append(f"{lister.low_votes} rows under data.min_up_votes={minimum} skipped")
    return listing
