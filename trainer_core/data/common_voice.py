"""A Common Voice release folder as `data.path`: its tab-separated tables and `clips/`.

The folder holds `validated.tsv`, `train.tsv`, `dev.tsv`, `test.tsv` (and tables that never train: `other.tsv`,
`invalidated.tsv`, ...), a header row naming the columns (client_id, path, sentence, up_votes, ...), and the audio
in `clips/`. Tables are read with quoting off, as Common Voice writes them: a lone `"` in a sentence is text.

Split: every clip of dev.tsv and test.tsv is held out (Vega's validation set) and never trains, also when
validated.tsv or train.tsv lists it too. Training rows come from validated.tsv minus those clips
(data.common_voice_train = "validated", the default: all the validated data, as people fine-tuning a voice use
it), or from the release's own train.tsv ("train": a smaller table, at most a few clips per sentence); a release
without validated.tsv trains on train.tsv. data.min_up_votes skips rows with fewer up-votes; data.speakers =
"column" makes client_id the speaker. Every problem row (bad row, empty sentence, missing clip, a clip listed
twice) is named with its table and line and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainer_core.contract.errors import DataError
from trainer_core.data.corpus_rows import CorpusListing, CorpusOptions, CorpusRow, speaker_layout
from trainer_core.data.scan_report import Problem
from trainer_core.data.transcripts import UTF8_BOM, Transcript, clean_text

CLIPS = "clips"
VALIDATED, TRAIN, DEV, TEST = "validated.tsv", "train.tsv", "dev.tsv", "test.tsv"
HELD_OUT_TABLES = (DEV, TEST)
SPEAKER_COLUMN = "client_id"


@dataclass(frozen=True)
class TableRow:
    line: int
    clip: str
    sentence: str
    client_id: str
    up_votes: str


def is_common_voice(root: Path) -> bool:
    return (root / CLIPS).is_dir() and any((root / name).is_file() for name in (VALIDATED, TRAIN))


def _columns(header: list[str], path: Path) -> dict[str, int] | Problem:
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
    """The rows of one Common Voice table (quoting off, tab-separated, header first) and its bad rows."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return [], [Problem(path, f"cannot read: {exc.strerror or exc}", "metadata_row")]
    data = data[len(UTF8_BOM) :] if data.startswith(UTF8_BOM) else data
    lines = data.split(b"\n")
    columns = _columns(lines[0].rstrip(b"\r").decode("utf-8", errors="replace").split("\t"), path)
    if isinstance(columns, Problem):
        return [], [columns]
    width = len(columns)
    rows: list[TableRow] = []
    problems: list[Problem] = []
    for number, raw in enumerate(lines[1:], start=2):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue
        try:
            fields = raw.decode("utf-8").split("\t")
        except UnicodeDecodeError as exc:
            reason = f"line {number}: not valid UTF-8 (byte {exc.start}); fix or remove the row"
            problems.append(Problem(path, reason, "metadata_row"))
            continue
        if len(fields) != width:
            reason = f"line {number}: {len(fields)} tab-separated fields where the header has {width}; fix the row"
            problems.append(Problem(path, reason, "metadata_row"))
            continue

        def field(name: str, row: list[str] = fields) -> str:
            return row[columns[name]].strip() if name in columns else ""

        rows.append(TableRow(number, field("path"), field("sentence"), field(SPEAKER_COLUMN), field("up_votes")))
    return rows, problems


def _too_few_votes(row: TableRow, minimum: int, table: Path, problems: list[Problem]) -> bool:
    if minimum <= 0:
        return False
    try:
        return int(row.up_votes) < minimum
    except ValueError:
        reason = f"line {row.line}: up_votes {row.up_votes!r} is not a number (data.min_up_votes needs it)"
        problems.append(Problem(table, reason, "metadata_row"))
        return True


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
        added = 0
        for row in rows:
            if row.clip in skip:
                continue
            added += self._add_row(table, row, held_out)
        return added

    def _add_row(self, table: Path, row: TableRow, held_out: bool) -> int:
        problems = self.listing.problems
        where = f"line {row.line}"
        if not row.clip:
            problems.append(Problem(table, f"{where}: the path column is empty; fix the row", "metadata_row"))
            return 0
        if row.clip in self.taken:
            first = self.taken[row.clip]
            reason = f"{where}: {row.clip} is listed again (first at {first}); keeping the first"
            problems.append(Problem(table, reason, "duplicate"))
            return 0
        self.taken[row.clip] = f"{table.name} {where}"
        if _too_few_votes(row, self.options.min_up_votes, table, problems):
            self.low_votes += 1
            return 0
        sentence = clean_text(row.sentence)
        if not sentence:
            reason = f"{where}: {row.clip} has an empty sentence; fill it in or leave the row out"
            problems.append(Problem(table, reason, "empty_transcript"))
            return 0
        clip = self.root / CLIPS / row.clip
        if not clip.is_file():
            reason = f"{where}: {row.clip} is listed but not in {CLIPS}/; copy it there or remove the row"
            problems.append(Problem(table, reason, "missing_audio"))
            return 0
        speaker = row.client_id if self.listing.layout.mode == "column" else ""
        transcript = Transcript(sentence, f"{table}#{row.clip}", f"{table.name} line {row.line}", speaker)
        label = f"{table.name} line {row.line}"
        self.listing.rows.append(CorpusRow(clip, transcript, clip.stem, held_out, clip, label))
        return 1


def list_common_voice(root: Path, options: CorpusOptions) -> CorpusListing | None:
    """The clips of a Common Voice folder (see the module docstring); None when `root` is not one."""
    if not is_common_voice(root):
        return None
    if options.common_voice_train not in ("validated", "train"):
        raise DataError(f'data.common_voice_train = {options.common_voice_train!r}: use "validated" or "train"')
    listing = CorpusListing("common_voice", layout=speaker_layout(options.speakers, SPEAKER_COLUMN, "Common Voice"))
    lister = _Lister(root, options, listing)
    held = {name: lister.add_table(name, True) for name in HELD_OUT_TABLES if (root / name).is_file()}
    table = TRAIN if options.common_voice_train == "train" or not (root / VALIDATED).is_file() else VALIDATED
    if not (root / table).is_file():
        raise DataError(f'data.common_voice_train = "train" but {root / TRAIN} does not exist; use "validated"')
    trained = lister.add_table(table, False, frozenset(lister.taken))
    held_text = ", ".join(f"{name} {count}" for name, count in held.items()) or "no dev.tsv or test.tsv"
    minus = " not in dev/test" if table == VALIDATED else ""
    listing.notes.append(f"trains on {table} ({trained} rows{minus}); held out: {held_text}")
    if lister.low_votes:
        listing.notes.append(f"{lister.low_votes} rows under data.min_up_votes = {options.min_up_votes} skipped")
    return listing
