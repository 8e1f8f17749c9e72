"""`trainer-core synth --text-file FILE --out-dir DIR`: many lines, one
loaded model, one wav per line.

Files are named by their line number in FILE (`0007.wav` is line 7), so editing one line of a script
replaces one file. `index.json` and `index.csv` list every non-empty line: its file, text
and seconds, or the error that kept it from being spoken (the other lines are still
written; the exit status is then 1).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer_core.atomic import atomic_write_text
from trainer_core.contract.errors import VegaError

if TYPE_CHECKING:
    from trainer_core.cli.synthesiser import Synthesiser
    from trainer_core.cli.vits_voice import VitsVoice
    from trainer_core.models.onnx_voice import OnnxVoice

INDEX_FIELDS = ("line", "file", "text", "seconds", "error")


def read_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every non-empty line; a clear error for a
    missing, unreadable or empty file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise VegaError(f"--text-file {path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise VegaError(
            f"--text-file {path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as"
            " UTF-8"
        ) from None
    except OSError as exc:
        raise VegaError(f"--text-file {path}: cannot be read ({exc.strerror or exc})") from None
    lines = [
        (number, line.strip())
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip()
    ]
    if not lines:
        raise VegaError(f"--text-file {path}: has no non-empty line to speak")
    return lines


def prepare_out_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise VegaError(
            f"--out-dir {path} is a file, not a folder; name a folder (it is created when missing)"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VegaError(f"--out-dir {path}: cannot be created ({exc.strerror or exc})") from None


def speak_lines(
    synth: Synthesiser | VitsVoice | OnnxVoice,
    lines: list[tuple[int, str]],
    args: argparse.Namespace,
) -> list[dict[str, Any]]:
    """Speak each line into the out folder; one index row per line (with
    `error` set where it failed)."""
    width = max(4, len(str(lines[-1][0])))
    speaker = getattr(args, "speaker", None)  # callers other than the CLI may leave it out
    rows = []
    for number, text in lines:
        name = f"{number:0{width}d}.wav"
        row: dict[str, Any] = {
            "line": number,
            "file": name,
            "text": text,
            "seconds": None,
            "error": None,
        }
        try:
            done = synth.speak_to_wav(
                text, args.out_dir / name, args.length_scale, args.griffin_lim_iters, speaker
            )
            row["seconds"] = round(done["seconds"], 4)
        except VegaError as exc:
            row["file"], row["error"] = None, str(exc)
        rows.append(row)
    return rows


def write_index(folder: Path, rows: list[dict[str, Any]]) -> None:
    """index.json and index.csv, each written atomically."""
    atomic_write_text(folder / "index.json", json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=INDEX_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    atomic_write_text(folder / "index.csv", buffer.getvalue())
