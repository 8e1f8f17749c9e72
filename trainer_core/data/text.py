"""Text corpus for the byte-level language model: files in, deterministic byte windows out.

Reading: `.txt` and `.md` files are one document each; every line of a `.jsonl` file that is a JSON
object with a string "text" field is one document (other lines are counted and skipped). Files are
read as bytes; a file that is not valid UTF-8 is decoded with replacement characters, counted and
reported as a warning, never fatal, and re-encoded so that the model always sees UTF-8.

Split: whole documents go to validation, chosen by a hash of their name (path relative to the data
folder, plus line number for .jsonl), so the split does not depend on the seed, the file order or
the file contents, and adding a file never moves the others. A corpus of a single document is cut
into chunks first and the chunks are split the same way.

Validation windows are laid at a stride of `context_bytes` over the held-out documents; with
`val_max_items` set (0: no cap) at most that many are evaluated, spread evenly over the
held-out text (window k * total // cap), the same on every start. The windows left out stay
held out, unused: giving parts of held-out documents back to training would put text next to
the windows that are validated on.

Training items are windows of `context_bytes + 1` bytes (inputs plus next-byte targets) laid at a
stride of `context_bytes` over the concatenated training documents. Each epoch shifts that grid by
a random offset and visits the windows in a random order, both drawn from a torch.Generator seeded
by (run seed, epoch): the same seed and epoch always give the same items in the same order.
Everything lives in RAM as uint8 tensors; batches are int64 (B, T) "input" and "target".

Data-parallel training (`shard(rank, world)`): every rank walks the same epoch order in
global batches of `batch_size * world` items and takes items rank, rank + world, ... of each,
so the ranks' batches are disjoint and together make the global batch. The item count yielded
with each batch is the global batch's, so `start_item` keeps counting positions in the one
epoch order whatever the number of ranks. Validation batches are dealt out round-robin: rank
r takes batches r, r + world, ...
"""

from __future__ import annotations

import codecs
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from trainer_core.contract.errors import DataError
from trainer_core.data.sharding import check_shard

# Between documents in the training stream: a paragraph break, so samples
# never learn a control byte.
SEPARATOR = b"\n\n"
# A lone document is cut into chunks of at most this many training windows before splitting.
CHUNK_WINDOWS = 16
# ...and into at least this many chunks, so that a small validation fraction can still be met.
MIN_CHUNKS = 20


@dataclass(frozen=True)
class Document:
    """One unit of text: `key` names it stably (relative path, line or chunk
    number), `data` is UTF-8."""

    key: str
    data: bytes


@dataclass
class ReadStats:
    """What reading the files found, for the task's description and warnings."""

    files: int = 0
    documents: int = 0
    empty_documents: int = 0
    non_utf8_files: list[Path] = field(default_factory=list)
    jsonl_bad_lines: int = 0

    def warnings(self) -> list[str]:
        out: list[str] = []
        if self.non_utf8_files:
            names = ", ".join(str(p) for p in self.non_utf8_files[:5])
            more = (
                f" and {len(self.non_utf8_files) - 5} more" if len(self.non_utf8_files) > 5 else ""
            )
            out.append(
                f"{len(self.non_utf8_files)} file(s) are not valid UTF-8 and were decoded with"
                f" replacement characters: {names}{more}; re-save them as UTF-8 to keep those"
                " characters"
            )
        if self.jsonl_bad_lines:
            out.append(
                f'{self.jsonl_bad_lines} .jsonl line(s) are not JSON objects with a "text" string'
                " and were skipped"
            )
        return out


def to_utf8(raw: bytes) -> tuple[bytes, bool]:
    """`raw` as valid UTF-8 bytes (invalid sequences become U+FFFD) and
    whether it was valid already."""
    raw = raw.removeprefix(codecs.BOM_UTF8)
    try:
        raw.decode("utf-8")
        return raw, True
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace").encode("utf-8"), False


def _jsonl_record_text(line: bytes) -> str | None:
    """The "text" string of one .jsonl line, or None when the line is not such an object."""
    try:
        record = json.loads(line)
    except ValueError:  # JSONDecodeError, and UnicodeDecodeError for bytes that are not text at all
        return None
    value = record.get("text") if isinstance(record, dict) else None
    return value if isinstance(value, str) else None


def _read_jsonl(raw: bytes, key: str, stats: ReadStats) -> tuple[list[Document], bool]:
    """Documents from the lines of a .jsonl file, and whether every line was valid UTF-8."""
    docs: list[Document] = []
    all_utf8 = True
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        line, utf8 = to_utf8(line)
        all_utf8 = all_utf8 and utf8
        text = _jsonl_record_text(line)
        if text is None:
            stats.jsonl_bad_lines += 1
        else:
            # json.loads may yield lone surrogates (from \ud800 escapes): replace them too.
            docs.append(Document(f"{key}#{number}", text.encode("utf-8", errors="replace")))
    return docs, all_utf8


def relative_key(path: Path, root: Path) -> str:
    """A file's name for splitting and ordering: its path inside the data
    folder, with forward slashes."""
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.as_posix()


def read_documents(path: Path, root: Path, stats: ReadStats) -> list[Document]:
    """Documents of one file, keyed by its path relative to `root`; updates `stats`."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(
            f"cannot read text file {path}: {exc.strerror or exc}; fix its permissions or remove it"
        ) from exc
    key = relative_key(path, root)
    if path.suffix.lower() == ".jsonl":
        docs, utf8 = _read_jsonl(raw, key, stats)
    else:
        data, utf8 = to_utf8(raw)
        docs = [Document(key, data)]
    stats.files += 1
    if not utf8:
        stats.non_utf8_files.append(path)
    kept = [doc for doc in docs if doc.data.strip()]
    stats.empty_documents += len(docs) - len(kept)
    stats.documents += len(kept)
    return kept


def read_corpus(files: Sequence[Path], root: Path) -> tuple[list[Document], ReadStats]:
    """All documents of `files` in a stable order (files sorted by relative
    path, lines in file order)."""
    stats = ReadStats()
    ordered = sorted(files, key=lambda path: relative_key(path, root))
    docs = [doc for path in ordered for doc in read_documents(path, root, stats)]
    return docs, stats


def _split_key(doc: Document) -> bytes:
    return hashlib.sha256(doc.key.encode("utf-8")).digest()


def chunk_document(doc: Document, context_bytes: int) -> list[Document]:
    """Cut a lone document into chunks so that it can be split into training
    and validation parts."""
    size = max(
        context_bytes + 1, min(CHUNK_WINDOWS * (context_bytes + 1), len(doc.data) // MIN_CHUNKS)
    )
    return [
        Document(f"{doc.key}@{i // size}", doc.data[i : i + size])
        for i in range(0, len(doc.data), size)
    ]


def _pick_validation(units: list[Document], target_bytes: float) -> set[str]:
    """Keys of the units held out: in hash order, each unit that brings the
    held-out size closer to target."""
    chosen: set[str] = set()
    held = 0
    for unit in sorted(units, key=_split_key):
        if len(chosen) == len(units) - 1:
            break  # Training always keeps at least one unit.
        if held + len(unit.data) / 2 < target_bytes:
            chosen.add(unit.key)
            held += len(unit.data)
    if not chosen:
        # Every unit overshoots the target: hold out the smallest rather than nothing.
        chosen.add(min(units, key=lambda u: (len(u.data), _split_key(u))).key)
    return chosen


def split_documents(
    docs: list[Document], val_fraction: float, context_bytes: int
) -> tuple[list[Document], list[Document]]:
    """(train, validation) units in their original order; see the module docstring for the rule."""
    units = chunk_document(docs[0], context_bytes) if len(docs) == 1 else docs
    if val_fraction <= 0 or len(units) < 2:
        return units, []
    held = _pick_validation(units, val_fraction * sum(len(u.data) for u in units))
    return [u for u in units if u.key not in held], [u for u in units if u.key in held]


def join_documents(docs: list[Document]) -> torch.Tensor:
    """Documents concatenated with SEPARATOR between them, as a uint8 tensor."""
    stream = SEPARATOR.join(doc.data for doc in docs)
    return (
        torch.frombuffer(bytearray(stream), dtype=torch.uint8)
        if stream
        else torch.empty(0, dtype=torch.uint8)
    )


def epoch_seed(seed: int, epoch: int) -> int:
    """A 63-bit generator seed from (run seed, epoch), identical on every
    platform and Python version."""
    digest = hashlib.sha256(f"vega-text:{seed}:{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def windows_batch(
    data: torch.Tensor, starts: torch.Tensor, length: int, pin: bool = False
) -> dict[str, torch.Tensor]:
    """Gather windows of `length` + 1 bytes at `starts` into int64 "input"
    and "target" (B, length)."""
    index = starts.unsqueeze(1) + torch.arange(length + 1)
    rows = data[index].long()
    batch = {"input": rows[:, :-1].contiguous(), "target": rows[:, 1:].contiguous()}
    return {name: t.pin_memory() for name, t in batch.items()} if pin else batch


class TextCorpus:
    """Training and validation byte streams with deterministic, resumable epoch orders."""

    def __init__(
        self,
        train: torch.Tensor,
        val: torch.Tensor,
        context_bytes: int,
        seed: int,
        stats: ReadStats,
        root: Path,
        val_max_items: int = 0,
    ) -> None:
        self.val_max_items = val_max_items
        self.train = train
        self.val = val
        self.context_bytes = context_bytes
        self.seed = seed
        self.stats = stats
        self.root = root
        self.pin_memory = False  # Set by the task on CUDA so that non-blocking copies overlap.
        self.rank, self.world = 0, 1
        self._items = self._count_train_items()
        self._plan_cache: tuple[int, int, torch.Tensor] | None = None

    @classmethod
    def from_files(
        cls,
        files: Sequence[Path],
        root: Path,
        context_bytes: int,
        val_fraction: float,
        seed: int,
        val_max_items: int = 0,
    ) -> TextCorpus:
        """Read, split and pack `files` (paths under `root`, the data folder)."""
        docs, stats = read_corpus(files, root)
        if not docs:
            raise DataError(
                f"no text to train on in {root}: the {stats.files} .txt/.md/.jsonl file(s) read"
                " hold no text"
            )
        train_docs, val_docs = split_documents(docs, val_fraction, context_bytes)
        train, val = join_documents(train_docs), join_documents(val_docs)
        return cls(train, val, context_bytes, seed, stats, root, val_max_items)

    @classmethod
    def from_folder(
        cls, root: Path, context_bytes: int, val_fraction: float, seed: int, val_max_items: int = 0
    ) -> TextCorpus:
        """Find the text files of a folder with the data scan (same rules as
        `check-data`), then read them."""
        from trainer_core.data.scan import scan_data

        report = scan_data(root, "text")
        files = [item.path for item in report.items]
        return cls.from_files(files, report.path, context_bytes, val_fraction, seed, val_max_items)

    def _count_train_items(self) -> int:
        # One window less than fits leaves at least `context_bytes` of slack, so each epoch's grid
        # offset can take every phase while the item count stays the same for all epochs.
        fits = (len(self.train) - 1) // self.context_bytes
        if fits < 1:
            raise DataError(
                f"the training text from {self.root} is {len(self.train)} bytes, less than one"
                f" sequence of data.context_bytes + 1 = {self.context_bytes + 1} bytes: add text or"
                " lower data.context_bytes"
            )
        return max(1, fits - 1)

    def shard(self, rank: int, world: int) -> None:
        """Yield only rank `rank`'s slice of every batch from now on (see the module docstring)."""
        self.rank, self.world = check_shard(rank, world)

    def train_items(self) -> int:
        return self._items

    def val_windows(self) -> int:
        """Validation windows the held-out text holds, before the cap."""
        return max(0, (len(self.val) - 1) // self.context_bytes)

    def val_items(self) -> int:
        """Validation windows evaluated: all of them, or `val_max_items` when that is fewer."""
        windows = self.val_windows()
        return min(windows, self.val_max_items) if self.val_max_items > 0 else windows

    def val_starts(self) -> torch.Tensor:
        """Byte offsets of the evaluated windows in the validation text: every
        one, or an even spread of the cap."""
        windows, items = self.val_windows(), self.val_items()
        return (torch.arange(items) * windows // max(1, items)) * self.context_bytes

    def warnings(self) -> list[str]:
        out = self.stats.warnings()
        if len(self.val) and not self.val_windows():
            out.append(
                f"the validation text is {len(self.val)} bytes, shorter than one sequence of"
                f" {self.context_bytes + 1} bytes: validation is skipped; add text or lower"
                " data.context_bytes"
            )
        return out

    def epoch_plan(self, epoch: int) -> tuple[int, torch.Tensor]:
        """(grid offset, item order) for an epoch: a pure function of (seed, epoch)."""
        if self._plan_cache is None or self._plan_cache[0] != epoch:
            generator = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
            slack = len(self.train) - 1 - self._items * self.context_bytes
            offset = int(torch.randint(0, slack + 1, (1,), generator=generator))
            order = torch.randperm(self._items, generator=generator)
            self._plan_cache = (epoch, offset, order)
        return self._plan_cache[1], self._plan_cache[2]

    def train_batches(
        self, epoch: int, batch_size: int, start_item: int = 0
    ) -> Iterator[tuple[dict[str, torch.Tensor], int]]:
        """Yield (batch, items) for `epoch` from item `start_item` of its
        order; the last batch may be short.

        Sharded, `batch_size` is this rank's share and `items` counts the whole global batch.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if not 0 <= start_item <= self._items:
            raise ValueError(f"start_item must be within 0..{self._items}, got {start_item}")
        offset, order = self.epoch_plan(epoch)
        width = batch_size * self.world
        for first in range(start_item, self._items, width):
            picked = order[first : first + width]
            starts = offset + picked[self.rank :: self.world] * self.context_bytes
            yield (
                windows_batch(self.train, starts, self.context_bytes, self.pin_memory),
                len(picked),
            )

    def val_batches(self, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        """Yield non-overlapping validation windows in order (nothing when no text is held out)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        starts = self.val_starts()
        firsts = range(0, len(starts), batch_size)
        for first in firsts[self.rank :: self.world]:
            yield windows_batch(
                self.val, starts[first : first + batch_size], self.context_bytes, self.pin_memory
            )

    def describe(self) -> dict[str, object]:
        return {
            "files": self.stats.files,
            "documents": self.stats.documents,
            "train_bytes": len(self.train),
            "val_bytes": len(self.val),
            "train_items": self.train_items(),
            "val_items": self.val_items(),
            "val_capped": self.val_windows() - self.val_items(),
            "context_bytes": self.context_bytes,
            "non_utf8_files": len(self.stats.non_utf8_files),
            "jsonl_bad_lines": self.stats.jsonl_bad_lines,
        }
