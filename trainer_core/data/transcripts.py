"""Transcripts for voice data: LJSpeech `metadata.csv` tables and
`<stem>.txt` / `<stem>.lab` sidecars.

A `metadata.csv` row is `id|text` or `id|text|normalized`; the normalized column wins when it is
present and non-empty. A table with a speaker column (`trainer_core.data.speakers` decides, by
`data.speakers`) has rows `id|speaker|text` or `id|speaker|text|normalized`. Ids match audio files
by stem anywhere under the table's folder, so a corpus converted from WAV to FLAC keeps its table.
Problems (bad rows, duplicates, bad encoding) are collected with line numbers instead of raised: one
bad row must not hide a whole corpus.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trainer_core.data.scan_report import Problem

METADATA_NAME = "metadata.csv"
SIDECAR_SUFFIXES: tuple[str, ...] = (".txt", ".lab")
UTF8_BOM = b"\xef\xbb\xbf"
# A speaker name is a short token: longer or spaced second fields are transcripts.
MAX_SPEAKER_CHARS = 64


@dataclass(frozen=True)
class MetadataRow:
    """One usable row of a metadata table."""

    item_id: str
    text: str
    line: int
    speaker: str = ""


@dataclass
class MetadataTable:
    """A parsed `metadata.csv`: rows by id, plus the problems found while parsing it.

    `lines` holds every decoded non-blank line split at '|' (line number, fields): what the
    speaker-column rule looks at before `index_rows` reads the columns.
    """

    path: Path
    rows: dict[str, MetadataRow] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    lines: list[tuple[int, list[str]]] = field(default_factory=list)

    @property
    def folder(self) -> Path:
        return self.path.parent


@dataclass(frozen=True)
class Transcript:
    """The transcript chosen for one audio file and where it came from."""

    text: str
    # Identifies the source (a table row or a sidecar file): two audio files
    # sharing one are duplicates.
    source_key: str
    source: str
    # from a table's speaker column; "" when the table has none (or for a sidecar)
    speaker: str = ""


def normalise_id(raw: str, audio_suffixes: frozenset[str]) -> str:
    """Reduce `wavs/LJ001-0001.wav` style ids to the stem `LJ001-0001` that
    audio files are matched by."""
    name = raw.strip().replace("\\", "/").rsplit("/", 1)[-1]
    stem, dot, suffix = name.rpartition(".")
    if dot and f".{suffix.lower()}" in audio_suffixes:
        return stem
    return name


def is_speaker_name(value: str) -> bool:
    """1 to MAX_SPEAKER_CHARS characters without spaces: a speaker column's
    value, never a sentence."""
    name = value.strip()
    return 0 < len(name) <= MAX_SPEAKER_CHARS and not any(ch.isspace() for ch in name)


def clean_text(text: str) -> str:
    """Collapse runs of whitespace (newlines in sidecars, tabs in tables) to single spaces."""
    return " ".join(text.split())


def _decode_line(raw: bytes, line_no: int, path: Path) -> str | Problem:
    """The line's text, or the Problem saying why it is not valid UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = (
            f"line {line_no}: not valid UTF-8 ({exc.reason} at byte {exc.start}); save {path.name}"
            " as UTF-8"
        )
        return Problem(path, reason, "metadata_row")


def _column_problem(table: MetadataTable, line_no: int, count: int, speaker_column: bool) -> None:
    expected = (
        "id|speaker|text or id|speaker|text|normalized"
        if speaker_column
        else "id|text or id|text|normalized"
    )
    reason = f"line {line_no}: expected {expected}, found {count} column(s)"
    if speaker_column:
        reason += " (the table has a speaker column: see data.speakers)"
    table.problems.append(Problem(table.path, reason, "metadata_row"))


def _parse_row(
    columns: list[str],
    line_no: int,
    table: MetadataTable,
    audio_suffixes: frozenset[str],
    speaker_column: bool,
) -> None:
    # the column of the text; the normalized text follows it
    first_text = 2 if speaker_column else 1
    if not first_text + 1 <= len(columns) <= first_text + 2:
        _column_problem(table, line_no, len(columns), speaker_column)
        return
    item_id = normalise_id(columns[0], audio_suffixes)
    if not item_id:
        table.problems.append(
            Problem(table.path, f"line {line_no}: empty id before the first '|'", "metadata_row")
        )
        return
    speaker = columns[1].strip() if speaker_column else ""
    if speaker_column and not is_speaker_name(speaker):
        reason = (
            f"line {line_no}: second column {speaker[:40]!r} is not a speaker name"
            f" (1-{MAX_SPEAKER_CHARS} characters, no spaces); an id|text|normalized table needs"
            ' data.speakers = "none" or "auto"'
        )
        table.problems.append(Problem(table.path, reason, "metadata_row"))
        return
    if item_id in table.rows:
        first = table.rows[item_id].line
        reason = (
            f"line {line_no}: duplicate id '{item_id}' (first at line {first}); keeping the first"
        )
        table.problems.append(Problem(table.path, reason, "duplicate"))
        return
    normalized = clean_text(columns[first_text + 1]) if len(columns) == first_text + 2 else ""
    table.rows[item_id] = MetadataRow(
        item_id, normalized or clean_text(columns[first_text]), line_no, speaker
    )


def read_metadata(path: Path) -> MetadataTable:
    """Read one metadata.csv into `lines` (UTF-8, optional BOM, blank lines
    allowed, CRLF or LF line ends)."""
    table = MetadataTable(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        reason = f"cannot read it ({exc.strerror or exc}): its transcripts are missing"
        reason += "; check its permissions"
        table.problems.append(Problem(path, reason, "unreadable"))
        return table
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM) :]
    for line_no, raw in enumerate(data.split(b"\n"), start=1):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue
        decoded = _decode_line(raw, line_no, path)
        if isinstance(decoded, Problem):
            table.problems.append(decoded)
            continue
        table.lines.append((line_no, decoded.split("|")))
    return table


def index_rows(
    table: MetadataTable, audio_suffixes: frozenset[str], speaker_column: bool = False
) -> MetadataTable:
    """Read the columns of every line into `rows` (the second column is the
    speaker when `speaker_column`)."""
    for line_no, columns in table.lines:
        _parse_row(columns, line_no, table, audio_suffixes, speaker_column)
    return table


def parse_metadata(
    path: Path, audio_suffixes: frozenset[str], speaker_column: bool = False
) -> MetadataTable:
    """Parse one metadata.csv: its lines read, then their columns."""
    return index_rows(read_metadata(path), audio_suffixes, speaker_column)


def read_sidecar(path: Path) -> str:
    """Read a `.txt`/`.lab` transcript; stray bytes are replaced rather than failing the file."""
    data = path.read_bytes()
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM) :]
    return clean_text(data.decode("utf-8", errors="replace"))


def sidecar_paths(audio: Path) -> list[Path]:
    """Where a sidecar transcript for `audio` would be, in order of preference."""
    return [audio.with_suffix(suffix) for suffix in SIDECAR_SUFFIXES]


class TranscriptIndex:
    """Finds the transcript of each audio file: the nearest metadata.csv
    listing its stem, else a sidecar."""

    def __init__(self, tables: list[MetadataTable], root: Path) -> None:
        self.root = root
        self.tables: dict[Path, MetadataTable] = {table.folder: table for table in tables}
        # Stems seen under each table's folder, to report rows whose audio is missing.
        self.seen: dict[Path, set[str]] = {folder: set() for folder in self.tables}
        # Folders from an audio file's own up to the root, per parent folder: siblings share them.
        self._ancestor_lists: dict[Path, list[Path]] = {}

    def _ancestors(self, audio: Path) -> list[Path]:
        parent = audio.parent
        folders = self._ancestor_lists.get(parent)
        if folders is None:
            folders = []
            for folder in audio.parents:
                folders.append(folder)
                if folder == self.root:
                    break
            self._ancestor_lists[parent] = folders
        return folders

    def note_audio_stem(self, audio: Path) -> None:
        """Record an audio file (any format) so its metadata row is not reported as missing."""
        for folder in self._ancestors(audio):
            if folder in self.seen:
                self.seen[folder].add(audio.stem)

    def lookup(self, audio: Path) -> Transcript | None:
        for folder in self._ancestors(audio):
            table = self.tables.get(folder)
            if table is not None and audio.stem in table.rows:
                row = table.rows[audio.stem]
                source = f"{table.path.name} line {row.line}"
                return Transcript(row.text, f"{table.path}#{row.item_id}", source, row.speaker)
        for sidecar in sidecar_paths(audio):
            if sidecar.is_file():
                return self._sidecar_transcript(sidecar)
        return None

    def _sidecar_transcript(self, sidecar: Path) -> Transcript:
        try:
            text = read_sidecar(sidecar)
        except OSError:
            text = ""  # Reported as an empty transcript: the file exists but cannot be read.
        return Transcript(text, str(sidecar), sidecar.name)

    def missing_audio_problems(self) -> list[Problem]:
        """Rows whose id matches no audio file under the table's folder."""
        problems = []
        for folder, table in self.tables.items():
            for item_id, row in table.rows.items():
                if item_id not in self.seen[folder]:
                    reason = (
                        f"line {row.line}: '{item_id}' listed in metadata.csv but no audio file"
                        f" '{item_id}.*' found"
                    )
                    problems.append(Problem(table.path, reason, "missing_audio"))
        return problems

    def table_problems(self) -> list[Problem]:
        return [problem for table in self.tables.values() for problem in table.problems]
