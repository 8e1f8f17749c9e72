"""Hugging Face `datasets` folders as `data.path`: parquet shards, or what `Dataset.save_to_disk`
writes.

Found: `*.parquet` files anywhere below the folder (`data/train-00000-of-00002.parquet`,
`train/0000.parquet`), or a `save_to_disk` folder (`dataset_info.json` + `state.json` +
`data-*.arrow` Arrow IPC streams; a `DatasetDict` has one such folder per split beside
`dataset_dict.json`). A file's split is the first name before '-' or '.' of its file name or of a
folder above it that is a split name: train trains; validation, valid, val, dev, test and eval are
held out (Vega's validation set); other, invalidated and the like are not used; a file naming no
split trains.

Columns: the audio column (data.audio_column, else `audio`, else the first struct with `bytes`)
holds a struct {bytes, path} as `datasets` writes it, raw bytes, or a path string (relative to the
shard's folder or the data folder); the text column is data.text_column, else the first of
sentence, normalized_text, text, transcription, transcript. Speakers (data.speakers = "column"):
speaker_id, client_id or speaker.

Audio bytes are written out once, as they are (no decoding), into the clips folder
(`<cache>/clips/<corpus>/`), one file per row, and from then on every part of the pipeline (probe,
data-scan cache, preload, feature cache) reads plain files; a shard whose size and mtime are
unchanged is not read again for its audio. pyarrow (the `hf` extra) reads the files; soundfile
decodes the audio (FLAC, WAV, OGG, MP3; no FFmpeg).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer_core.atomic import atomic_write_text
from trainer_core.contract.confined_path import relative_problem
from trainer_core.contract.errors import DataError
from trainer_core.data.cache_location import corpus_digest
from trainer_core.data.corpus_rows import (
    HELD_OUT_SPLITS,
    TRAIN_SPLITS,
    CorpusListing,
    CorpusOptions,
    CorpusRow,
    speaker_layout,
)
from trainer_core.data.scan_report import Problem
from trainer_core.data.transcripts import Transcript, clean_text

Names = tuple[str, ...]
Cells = tuple[str, str, str]  # a row's text column name, its text and its speaker
TEXT_COLUMNS = ("sentence", "normalized_text", "text", "transcription", "transcript")
SPEAKER_COLUMNS = ("speaker_id", "client_id", "speaker")
UNUSED_SPLITS = frozenset({"other", "invalidated", "unvalidated", "reported", "rejected"})
STORE_VERSION = 1
ROWS_PER_BATCH = 256


def _pyarrow(root: Path) -> Any:
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet  # noqa: F401  # the submodules are what the readers call
    except ImportError as exc:
        raise DataError(
            f"{root} is a Hugging Face datasets folder (parquet/Arrow files); reading it needs "
            "pyarrow: pip install 'vega[hf]'"
        ) from exc
    return pyarrow


def _arrow_files(folder: Path) -> list[Path] | None:
    """The Arrow files of a save_to_disk folder (state.json's list); None when it is not one."""
    state = folder / "state.json"
    if not (state.is_file() and (folder / "dataset_info.json").is_file()):
        return None
    try:
        files = json.loads(state.read_text(encoding="utf-8"))["_data_files"]
        names = [entry["filename"] for entry in files]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        why = f"{state} cannot be read ({exc}); save the dataset again with save_to_disk"
        raise DataError(why) from exc
    for name in names:  # files beside state.json: "../x" or "/x" is never read
        problem = relative_problem(name)
        if problem is not None:
            fix = "name a file in that folder (save the dataset again)"
            raise DataError(f"{state}: _data_files[].filename = {name!r} {problem}; {fix}")
    return [folder / name for name in names]


def find_shards(root: Path) -> list[Path]:
    """The parquet or Arrow files of a datasets folder in a stable order; [] when it is not one."""
    if (root / "dataset_dict.json").is_file():
        splits = [sub for sub in sorted(root.iterdir()) if sub.is_dir()]
        return [path for sub in splits for path in _arrow_files(sub) or []]
    arrow = _arrow_files(root)
    if arrow is not None:
        return arrow
    found = []
    for folder, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        found += [Path(folder) / name for name in sorted(filenames) if name.endswith(".parquet")]
    return found


def split_of(shard: Path, root: Path) -> str:
    """The split a shard belongs to (see the module docstring); "train" when nothing names one."""
    parts = shard.relative_to(root).parts
    names = [parts[-1].split("-")[0].split(".")[0]] + list(reversed(parts[:-1]))
    known = TRAIN_SPLITS | HELD_OUT_SPLITS | UNUSED_SPLITS
    return next((name for name in names if name.lower() in known), "train").lower()


def _saved_split(shard: Path) -> str | None:
    """The split a lone save_to_disk folder was saved from (state.json's `_split`), if it says."""
    if shard.suffix != ".arrow" or (shard.parent.parent / "dataset_dict.json").is_file():
        return None
    try:
        split = json.loads((shard.parent / "state.json").read_text(encoding="utf-8")).get("_split")
    except (OSError, ValueError, AttributeError):
        return None
    return str(split).lower() if split else None


def _pick(names: list[str], wanted: str | None, candidates: Names, what: str, shard: Path) -> str:
    """The column for `what`: `wanted` (the profile's), else the first of `candidates` there."""
    listed = ", ".join(names)
    if wanted is not None:
        if wanted not in names:
            raise DataError(f"{shard}: no column {wanted!r} ({what}); its columns are {listed}")
        return wanted
    found = next((name for name in candidates if name in names), None)
    if found is None:
        option = "data.text_column" if what == "text" else "data.audio_column"
        raise DataError(f"{shard}: no {what} column among {listed}; name it with {option}")
    return found


def pa_struct_with_bytes(kind: Any) -> bool:
    """An Arrow struct type with a `bytes` field: how `datasets` stores audio."""
    return hasattr(kind, "get_field_index") and kind.get_field_index("bytes") >= 0


def _audio_column(schema: Any, wanted: str | None, shard: Path) -> str:
    names = list(schema.names)
    structs = [f.name for f in schema if pa_struct_with_bytes(f.type)]
    return _pick(names, wanted, ("audio", *structs), "audio", shard)


def _batches(pa: Any, shard: Path, columns: list[str]) -> Iterator[dict[str, list[Any]]]:
    """The shard's rows, a batch at a time, as column lists."""
    if shard.suffix == ".parquet":
        batches = pa.parquet.ParquetFile(shard).iter_batches(ROWS_PER_BATCH, columns=columns)
        for batch in batches:
            yield batch.to_pydict()
        return
    with pa.memory_map(str(shard)) as source:
        for batch in pa.ipc.open_stream(source):
            yield batch.select(columns).to_pydict()


def _schema(pa: Any, shard: Path) -> Any:
    if shard.suffix == ".parquet":
        return pa.parquet.read_schema(shard)
    with pa.memory_map(str(shard)) as source:
        return pa.ipc.open_stream(source).schema


def sniff_suffix(data: bytes, name: str) -> str:
    """The container of audio `data` by its first bytes, else `name`'s suffix, else ".bin"."""
    if data[:4] == b"RIFF":
        return ".wav"
    if data[:4] == b"fLaC":
        return ".flac"
    if data[:4] == b"OggS":
        return ".ogg"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return ".mp3"
    return Path(name).suffix.lower() or ".bin"


class ClipStore:
    """Audio bytes of one corpus written out once, a file per row, with an index per shard."""

    def __init__(self, folder: Path, root: Path) -> None:
        self.base = folder / corpus_digest(root)
        self.root = root

    def _folder(self, shard: Path) -> Path:
        return self.base / "__".join(shard.relative_to(self.root).with_suffix("").parts)

    def _identity(self, shard: Path, column: str) -> list[object]:
        stat = shard.stat()
        return [STORE_VERSION, stat.st_size, stat.st_mtime_ns, column]

    def known(self, shard: Path, column: str) -> dict[int, str] | None:
        """Row -> file ("" for no audio) when this very shard's `column` was written out before."""
        try:
            index = json.loads((self._folder(shard) / "index.json").read_text(encoding="utf-8"))
            if index["identity"] == self._identity(shard, column):
                return {int(row): str(path) for row, path in index["rows"].items()}
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def write(self, shard: Path, row: int, data: bytes, name: str) -> Path:
        path = self._folder(shard) / f"{row:06d}{sniff_suffix(data, name)}"
        temporary = path.with_name(f".{path.name}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_bytes(data)
            os.replace(temporary, path)
        except OSError as exc:
            raise DataError(
                f"cannot write the audio of {shard} row {row} to {path.parent} "
                f"({exc.strerror or exc}); set data.cache_dir (check-data: --cache-dir) to a "
                "writable folder"
            ) from exc
        return path

    def commit(self, shard: Path, column: str, rows: dict[int, str]) -> None:
        index = {
            "identity": self._identity(shard, column),
            "rows": {str(row): path for row, path in rows.items()},
        }
        self._folder(shard).mkdir(parents=True, exist_ok=True)
        atomic_write_text(self._folder(shard) / "index.json", json.dumps(index))


def _audio_cell(value: Any) -> tuple[bytes | None, str]:
    """(bytes or None, the path it names) of an audio cell: {bytes, path}, bytes or a path."""
    if isinstance(value, dict):
        return value.get("bytes"), str(value.get("path") or "")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value), ""
    return None, str(value or "")


def _resolve(name: str, shard: Path, root: Path) -> Path | None:
    for base in (shard.parent, root):
        if name and (base / name).is_file():
            return base / name
    return None


def _rows(pa: Any, shard: Path, columns: list[str]) -> Iterator[dict[str, Any]]:
    """The shard's rows as {column: value}, read a batch at a time."""
    for batch in _batches(pa, shard, columns):
        for i in range(len(batch[columns[0]])):
            yield {name: values[i] for name, values in batch.items()}


@dataclass(frozen=True)
class _Columns:
    text: str
    audio: str
    speaker: str | None
    """Read only with data.speakers = "column"."""


class _ShardReader:
    """Lists the rows of the shards, writing out audio bytes the store does not hold yet."""

    def __init__(self, pa: Any, root: Path, options: CorpusOptions, out: CorpusListing) -> None:
        self.pa, self.root, self.options, self.listing = pa, root, options, out
        self.store = ClipStore(options.clips_folder(), root)

    def _columns(self, shard: Path) -> _Columns:
        schema = _schema(self.pa, shard)
        text = _pick(list(schema.names), self.options.text_column, TEXT_COLUMNS, "text", shard)
        audio = _audio_column(schema, self.options.audio_column, shard)
        if self.listing.layout.mode != "column":
            return _Columns(text, audio, None)
        speaker = next((name for name in SPEAKER_COLUMNS if name in schema.names), None)
        if speaker is None:
            names = "/".join(SPEAKER_COLUMNS)
            raise DataError(f'{shard}: data.speakers = "column" but it has no {names} column')
        return _Columns(text, audio, speaker)

    def read(self, shard: Path, held_out: bool) -> int:
        """List the shard's rows; the number listed."""
        columns = self._columns(shard)
        known = self.store.known(shard, columns.audio)
        wanted = [columns.text] + ([columns.speaker] if columns.speaker else [])
        files: dict[int, str] = {}
        added = 0
        audio = [columns.audio] if known is None else []  # a known shard's audio is not read
        for row, cells in enumerate(_rows(self.pa, shard, wanted + audio)):
            if known is None:
                files[row] = self._audio_file(shard, row, cells[columns.audio])
            path = known.get(row, "") if known is not None else files[row]
            speaker = str(cells[columns.speaker] or "") if columns.speaker else ""
            text = clean_text(str(cells[columns.text] or ""))
            added += self._add(shard, row, path, (columns.text, text, speaker), held_out)
        if known is None:
            self.store.commit(shard, columns.audio, files)
        return added

    def _audio_file(self, shard: Path, row: int, value: Any) -> str:
        """The file holding a row's audio; "" for none, "?NAME" for a path that is not a file."""
        data, name = _audio_cell(value)
        if data:
            return str(self.store.write(shard, row, data, name))
        resolved = _resolve(name, shard, self.root)
        return str(resolved) if resolved is not None else (f"?{name}" if name else "")

    def _problem(self, row: int, path: str, column: str, text: str) -> tuple[str, str] | None:
        if not path:
            return "missing_audio", "no audio (the cell has neither bytes nor a path); fix the row"
        if path.startswith("?"):
            where = "not a file beside the shard or in the data folder"
            return "missing_audio", f"no audio: the cell names {path[1:]!r}, {where}"
        if not Path(path).is_file():
            return "missing_audio", f"its audio file {path} is missing; restore it or drop the row"
        if not text:
            return "empty_transcript", f"empty text in column {column!r}; fill it in or drop it"
        return None

    def _add(self, shard: Path, row: int, path: str, cells: Cells, held_out: bool) -> int:
        """List one row (`cells`: the text column's name, the text, the speaker); 1 if listed."""
        column, text, speaker = cells
        problem = self._problem(row, path, column, text)
        if problem is not None:
            self.listing.problems.append(Problem(shard, f"row {row}: {problem[1]}", problem[0]))
            return 0
        item_id = f"{'-'.join(shard.relative_to(self.root).with_suffix('').parts)}#{row}"
        label = f"row {row}"
        transcript = Transcript(text, f"{shard}#{row}", f"{shard.name} {label}", speaker)
        listed = CorpusRow(Path(path), transcript, item_id, held_out, shard, label)
        self.listing.rows.append(listed)
        return 1


def list_datasets_folder(root: Path, options: CorpusOptions) -> CorpusListing | None:
    """The clips of a datasets folder (see the module docstring); None when `root` is not one."""
    shards = find_shards(root)
    if not shards:
        return None
    pa = _pyarrow(root)
    kind = "parquet" if shards[0].suffix == ".parquet" else "arrow"
    layout = speaker_layout(options.speakers, "/".join(SPEAKER_COLUMNS), f"{kind} dataset")
    listing = CorpusListing(kind, layout=layout)
    reader = _ShardReader(pa, root, options, listing)
    counts: dict[str, int] = {}
    unused: dict[str, int] = {}
    for shard in shards:
        split = _saved_split(shard) or split_of(shard, root)
        if split in UNUSED_SPLITS:
            unused[split] = unused.get(split, 0) + 1
            continue
        counts[split] = counts.get(split, 0) + reader.read(shard, split in HELD_OUT_SPLITS)
    per_split = ", ".join(f"{name} {count}" for name, count in counts.items())
    listing.notes.append(f"{len(shards)} {kind} file(s); rows listed per split: {per_split}")
    if unused:
        files = ", ".join(f"{name} {count}" for name, count in unused.items())
        listing.notes.append(f"files of splits that never train, not read: {files}")
    return listing
