"""`trainer-core check-data DIR`: scan a data folder, show what is usable, what is skipped and why.

Exit 0 when usable data exists (problem files are listed, not fatal); exit 2 with `error: ...` when
nothing is usable. `--json` prints the report for the dashboard
(`trainer_core.contract.data_report.CheckDataReport`); `--items` adds every usable item.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from trainer_core.cli.commands import SUMMARIES
from trainer_core.contract.units import format_bytes

if TYPE_CHECKING:
    from trainer_core.data.scan_report import DataReport, Problem, SpeakerFigures

# Rows shown in the problems table; the rest are counted (all of them are in --json).
MAX_PROBLEM_ROWS = 50


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "check-data",
        help=SUMMARIES["check-data"],
        description=(
            "Scan a data folder (audio with transcripts, or text files) and report what training"
            " would use."
        ),
    )
    parser.add_argument("path", metavar="DIR", type=Path, help="the data folder")
    parser.add_argument(
        "--data-mode",
        "--mode",
        dest="data_mode",
        choices=["auto", "voice", "text"],
        default="auto",
        help="data mode (default: auto); --mode is the older spelling",
    )
    parser.add_argument(
        "--speakers",
        choices=["auto", "column", "folders", "none"],
        default="auto",
        help="how clips get their speaker, as data.speakers (default: auto)",
    )
    corpus = parser.add_argument_group("Common Voice and datasets folders")
    corpus.add_argument(
        "--min-up-votes", type=int, default=0, metavar="N", help="data.min_up_votes"
    )
    corpus.add_argument(
        "--common-voice-train",
        choices=["validated", "train"],
        default="validated",
        help="data.common_voice_train: validated (minus dev/test, the default) or train",
    )
    corpus.add_argument("--text-column", metavar="NAME", help="the text column (data.text_column)")
    corpus.add_argument(
        "--audio-column", metavar="NAME", help="the audio column (data.audio_column)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--items", action="store_true", help="with --json: include every usable item"
    )
    parser.add_argument(
        "--min-duration", type=float, default=0.3, metavar="S", help="shortest usable clip (s)"
    )
    parser.add_argument(
        "--max-duration", type=float, default=20.0, metavar="S", help="longest usable clip (s)"
    )
    parser.add_argument(
        "--workers", type=int, default=2, metavar="N", help="parallel file probes (default: 2)"
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help=(
            "cache folder, as data.cache_dir (default: the user cache folder); unchanged files are"
            " not read again"
        ),
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="read every file, neither using nor writing the cache",
    )
    parser.add_argument(
        "--tokenizer",
        metavar="FOLDER|hf:ORG/NAME",
        help=(
            "a transformers VITS voice folder (vocab.json, tokenizer_config.json; e.g. an MMS"
            " voice) or hub id: count the transcript characters its text front end drops"
        ),
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: every sub-command's parser is built at start-up, and only
    # this one needs numpy/soundfile.
    from trainer_core.cli.tokenizer_report import (
        load_front_end,
        show_tokenizer_report,
        tokenizer_report,
    )
    from trainer_core.data.cache_location import cache_folder
    from trainer_core.data.corpus_layout import CorpusOptions
    from trainer_core.data.scan import scan_data
    from trainer_core.data.scan_cache import scan_cache_folder

    front_end = load_front_end(args.tokenizer) if args.tokenizer is not None else None
    cache = None if args.no_cache else scan_cache_folder(args.cache_dir)
    corpus = CorpusOptions(
        args.speakers,
        args.min_up_votes,
        args.common_voice_train,
        args.text_column,
        args.audio_column,
        cache_folder(args.cache_dir) / "clips",
    )
    report = scan_data(
        args.path,
        args.data_mode,
        args.min_duration,
        args.max_duration,
        workers=args.workers,
        cache_folder=cache,
        speakers=args.speakers,
        corpus=corpus,
    )
    dropped = tokenizer_report(front_end, report) if front_end is not None else None
    if args.json:
        print(report.to_report(include_items=args.items, tokenizer=dropped).to_json())
        return 0
    console = Console(highlight=False)
    show_report(report, console)
    if dropped is not None:
        show_tokenizer_report(dropped, console)
    return 0


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _histogram_text(histogram: dict[str, int], unit: str = "") -> str:
    return ", ".join(f"{key}{unit} × {count}" for key, count in histogram.items()) or "-"


def _voice_rows(report: DataReport) -> list[tuple[str, str]]:
    v = report.voice
    durations = "-"
    if v.duration_min_s is not None:
        durations = f"{v.duration_min_s:.2f} / {v.duration_mean_s:.2f} / {v.duration_max_s:.2f} s"
    return [
        ("audio files", f"{v.audio_files} ({v.usable} usable, {v.skipped} skipped)"),
        ("unsupported audio", str(v.unsupported_files)),
        ("hours usable / all", f"{v.hours_usable:.3f} / {v.hours_all:.3f} h"),
        ("clip length min / mean / max", durations),
        ("audio size", f"{format_bytes(v.usable_bytes)} usable of {format_bytes(v.audio_bytes)}"),
        ("formats", _histogram_text(v.formats)),
        ("sample rates", _histogram_text(v.sample_rates, " Hz")),
        ("channels", _histogram_text(v.channels)),
        ("transcript characters", f"{v.transcript_chars} ({len(v.charset)} distinct)"),
        ("speakers", speakers_text(v.speakers, v.speaker_reason)),
    ] + _corpus_rows(report)


def _corpus_rows(report: DataReport) -> list[tuple[str, str]]:
    """A Common Voice or datasets folder: what it was read as, what trains and what is held out."""
    v = report.voice
    if v.corpus_format == "folder":
        return []
    held = f"{v.held_out} clips (the corpus's own split; they never train)"
    return [("corpus", f"{v.corpus_format}: {v.corpus_note}"), ("held out", held)]


def speakers_text(speakers: dict[str, SpeakerFigures], reason: str) -> str:
    """'2 — alice 20 clips, 0.4 min · bob …' (and how they were read), or
    'one' for single-speaker data."""
    if not speakers:
        return f"one ({reason})" if reason else "one"
    listing = " · ".join(
        f"{name} {f.clips} clips, {f.hours * 60:.1f} min" for name, f in speakers.items()
    )
    return f"{len(speakers)} — {listing} ({reason})"


def _text_rows(report: DataReport) -> list[tuple[str, str]]:
    t = report.text
    return [
        ("text files", f"{t.files} ({t.usable} usable, {t.skipped} skipped)"),
        ("by extension", _histogram_text(t.by_extension)),
        ("size", f"{format_bytes(t.bytes)} ({t.text_bytes} bytes of text)"),
        ("lines", str(t.lines)),
        ("non-UTF-8 files", str(t.non_utf8_files)),
        ("jsonl lines without text", str(t.jsonl_lines_without_text)),
    ]


def _summary_table(report: DataReport) -> Table:
    table = Table(title="Summary", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    rows = _voice_rows(report) if report.mode == "voice" else _text_rows(report)
    for label, value in rows + [("problems", _histogram_text(report.problem_counts()))]:
        table.add_row(label, value)
    return table


def _problem_table(title: str, problems: list[Problem], root: Path) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("file", overflow="fold")
    table.add_column("reason", overflow="fold")
    for problem in problems[:MAX_PROBLEM_ROWS]:
        table.add_row(_relative(problem.path, root), problem.reason)
    hidden = len(problems) - MAX_PROBLEM_ROWS
    if hidden > 0:
        table.add_row(f"… and {hidden} more", "see --json for the full list")
    return table


def show_report(report: DataReport, console: Console) -> None:
    """Human-readable report: folder, the mode decision and why, summary, problems, warnings."""
    console.print(f"[bold]Data folder[/bold] {report.path}", soft_wrap=True)
    console.print(f"[bold]Mode[/bold] {report.mode} — {report.reason}", soft_wrap=True)
    console.print(_summary_table(report))
    if report.problems:
        console.print(
            _problem_table(f"Skipped ({len(report.problems)})", report.problems, report.path)
        )
    if report.warnings:
        console.print(
            _problem_table(f"Warnings ({len(report.warnings)})", report.warnings, report.path)
        )
    noun = "recordings" if report.mode == "voice" else "text files"
    console.print(
        f"[green]OK[/green]: {report.usable_count} usable {noun}; {len(report.problems)} skipped."
    )
