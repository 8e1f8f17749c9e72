"""Probe one text-corpus file (.txt, .md, .jsonl): sizes, lines, UTF-8
validity, jsonl `text` fields.

Files are streamed, never loaded whole. Non-UTF-8 files stay usable (they are decoded with
replacement characters when training) and are reported as warnings; empty files are problems.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from pathlib import Path

from trainer_core.data.scan_report import Problem, TextItem

TEXT_SUFFIXES: frozenset[str] = frozenset({".txt", ".md", ".jsonl"})
CHUNK_BYTES = 1 << 20


@dataclass
class TextProbe:
    """Outcome for one text file: an item when usable, else a problem; warnings either way."""

    path: Path
    item: TextItem | None = None
    problem: Problem | None = None
    warnings: list[Problem] = field(default_factory=list)
    lines_without_text: int = 0


def _non_utf8_warning(path: Path) -> Problem:
    reason = (
        "not valid UTF-8: invalid bytes will be replaced with U+FFFD; re-save it as UTF-8 to keep"
        " them"
    )
    return Problem(path, reason, "non_utf8")


def _probe_plain(path: Path, size: int) -> TextProbe:
    decoder = codecs.getincrementaldecoder("utf-8")()
    utf8, has_content, lines = True, False, 0
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            lines += chunk.count(b"\n")
            has_content = has_content or bool(chunk.strip())
            if utf8:
                try:
                    decoder.decode(chunk)
                except UnicodeDecodeError:
                    utf8 = False
    if utf8:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            utf8 = False  # The file ends inside a multi-byte character.
    probe = TextProbe(path)
    if not has_content:
        probe.problem = Problem(path, "empty: no text, only whitespace", "empty")
        return probe
    probe.item = TextItem(path, size, size, lines, utf8, path.suffix.lower().lstrip("."))
    if not utf8:
        probe.warnings.append(_non_utf8_warning(path))
    return probe


def _jsonl_text(line: str) -> str | None:
    """The `text` field of one jsonl line, or None when the line is not an
    object with a string `text`."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    value = record.get("text") if isinstance(record, dict) else None
    return value if isinstance(value, str) else None


def _probe_jsonl(path: Path, size: int) -> TextProbe:
    utf8, lines, without_text, text_bytes = True, 0, 0, 0
    with path.open("rb") as handle:
        for raw in handle:
            if not raw.strip():
                continue
            lines += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                utf8, line = False, raw.decode("utf-8", errors="replace")
            text = _jsonl_text(line)
            if text is None:
                without_text += 1
            else:
                text_bytes += len(text.encode("utf-8"))
    return _jsonl_outcome(path, size, utf8, lines, without_text, text_bytes)


def _jsonl_outcome(
    path: Path, size: int, utf8: bool, lines: int, without_text: int, text_bytes: int
) -> TextProbe:
    probe = TextProbe(path, lines_without_text=without_text)
    if lines == without_text or text_bytes == 0:
        reason = (
            f'no text: none of its {lines} line(s) is a JSON object with a non-empty "text" string'
        )
        probe.problem = Problem(path, reason, "no_text")
        return probe
    probe.item = TextItem(path, size, text_bytes, lines, utf8, "jsonl")
    if without_text:
        reason = (
            f'{without_text} of {lines} lines have no "text" string field; those lines are skipped'
        )
        probe.warnings.append(Problem(path, reason, "jsonl_missing_text"))
    if not utf8:
        probe.warnings.append(_non_utf8_warning(path))
    return probe


def probe_text(path: Path) -> TextProbe:
    """Check one text file; read errors become problems, never exceptions."""
    try:
        size = path.stat().st_size
        if size == 0:
            return TextProbe(path, problem=Problem(path, "empty: the file is 0 bytes", "empty"))
        if path.suffix.lower() == ".jsonl":
            return _probe_jsonl(path, size)
        return _probe_plain(path, size)
    except OSError as exc:
        return TextProbe(
            path, problem=Problem(path, f"unreadable: {exc.strerror or exc}", "unreadable")
        )
