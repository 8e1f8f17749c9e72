"""Corpora as people have them: a Common Voice release folder, or a Hugging Face `datasets` folder.

`scan_corpus` asks each reader whether `data.path` is its kind of folder (`data.common_voice`,
`data.parquet_corpus`); a reader lists rows (a clip file on disk, its transcript, its speaker,
whether the corpus holds it out) and the problem rows it met, and `corpus_report` probes the clips
like any folder's (the data-scan cache included) and builds the `DataReport`. A problem row names
its table or shard, its line or row, what is wrong and what to do. None from `scan_corpus`: a plain
folder, scanned by `data.scan`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from trainer_core.contract.errors import DataError
from trainer_core.data.audio_probe import DurationLimits
from trainer_core.data.common_voice import list_common_voice
from trainer_core.data.corpus_rows import (
    FORMAT_NAMES,
    CorpusListing,
    CorpusOptions,
    CorpusRow,
    corpus_options,
)
from trainer_core.data.parquet_corpus import list_datasets_folder
from trainer_core.data.scan_cache import ScanCache
from trainer_core.data.scan_report import (
    DataReport,
    Problem,
    TextItem,
    VoiceItem,
    problem_breakdown,
)
from trainer_core.data.speakers import assign_speakers
from trainer_core.data.voice_probes import probe_all, voice_item, voice_summary

__all__ = ["CorpusOptions", "corpus_options", "corpus_report", "scan_corpus"]


def scan_corpus(
    root: Path, limits: DurationLimits, workers: int, cache: Path | None, options: CorpusOptions
) -> DataReport | None:
    """The report of a Common Voice or `datasets` folder; None when `root` is neither."""
    listing = list_common_voice(root, options) or list_datasets_folder(root, options)
    if listing is None:
        return None
    return corpus_report(root, listing, limits, workers, cache)


def _row_problem(row: CorpusRow, problem: Problem) -> Problem:
    return Problem(row.where, f"{row.label}: {problem.reason}", problem.kind)


def corpus_report(
    root: Path,
    listing: CorpusListing,
    limits: DurationLimits,
    workers: int,
    cache_folder: Path | None,
) -> DataReport:
    """Probe every listed clip and build the report; DataError when no clip is usable."""
    rows = listing.rows
    cache = ScanCache(cache_folder, root) if cache_folder is not None and rows else None
    probes = probe_all([(row.path, row.transcript) for row in rows], limits, workers, cache)
    items: list[VoiceItem] = []
    problems = list(listing.problems)
    for row, probe in zip(rows, probes, strict=True):
        if probe.problem is not None:
            problems.append(_row_problem(row, probe.problem))
            continue
        item = voice_item(probe, row.transcript, row.item_id)
        items.append(replace(item, held_out=row.held_out))
    items, speaker_problems = assign_speakers(listing.layout, items, root)
    problems += speaker_problems
    listed = len(rows) + sum(1 for p in listing.problems if p.kind != "metadata_row")
    kind = FORMAT_NAMES[listing.format]
    if not items:
        raise DataError(
            f"none of the {listed} clips listed in {root} ({kind}) is usable"
            f" ({problem_breakdown(problems)}); run `trainer-core check-data {root}` for every"
            " problem row"
        )
    summary = voice_summary(listed, 0, probes, items, listing.layout)
    summary.corpus_format, summary.corpus_note = listing.format, "; ".join(listing.notes)
    held = summary.held_out
    reason = (
        f"voice, read as {kind}: {len(items)} of {listed} listed clips are usable "
        f"({summary.hours_usable * 60:.1f} min), {len(items) - held} to train and {held} held out"
    )
    report_items: list[VoiceItem | TextItem] = list(items)
    return DataReport(root, "voice", reason, report_items, problems, voice=summary)
