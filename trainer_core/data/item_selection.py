"""The items a run trains and validates on: the scan with the profile's settings, its held-out cap
and `data.max_items` applied before anything is decoded.

`scan_for_training` is what the plan and the task registry call. On top of `scan_data`:
- a corpus with its own held-out split (Common Voice dev/test, a datasets validation split) keeps
  at most data.val_max_items of it, the first by the split's hash ranking
  (`validation_split.split_rank`); the others are neither validated on nor trained on, so they are
  not decoded;
- data.max_items (0: all) keeps that many training items, the first by a hash of (run.seed, item
  id): a fixed choice that every start and resume of the same data repeats, whatever the file
  order. A corpus without its own split is first split as the datasets would split it
  (`voice_dataset.split_items`' rule, over every usable item), and those held-out items are marked,
  so the subset never moves the validation set. Torch-free: the plan runs it before anything is
  loaded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from trainer_core.atomic import atomic_write_text
from trainer_core.data.corpus_layout import corpus_options
from trainer_core.data.scan import scan_data
from trainer_core.data.scan_cache import scan_cache_folder
from trainer_core.data.scan_report import DataReport, VoiceItem
from trainer_core.data.speakers import speaker_figures
from trainer_core.data.validation_split import held_out_count, split_rank

if TYPE_CHECKING:
    from trainer_core.contract.profile import DataSection


def subset_rank(seed: int, item_id: str) -> bytes:
    """An item's place in the run's subset: a hash of (run.seed, item id)."""
    text = f"vega-subset:{seed}:{item_id}"
    return hashlib.sha256(text.encode("utf-8", errors="surrogateescape")).digest()


def _first(items: list[VoiceItem], count: int, rank: Callable[[str], bytes]) -> set[str]:
    """The ids of the first `count` items by `rank` of their ids."""
    return {item.item_id for item in sorted(items, key=lambda item: rank(item.item_id))[:count]}


def _mark_hash_split(items: list[VoiceItem], data: DataSection) -> list[VoiceItem]:
    """The items the fraction split holds out (over all of them), marked held out."""
    ranked = sorted(range(len(items)), key=lambda i: (split_rank(items[i].item_id), i))
    held = set(ranked[: held_out_count(len(items), data.val_fraction, data.val_max_items)])
    return [replace(item, held_out=True) if i in held else item for i, item in enumerate(items)]


def select_items(report: DataReport, data: DataSection, seed: int) -> DataReport:
    """`report` with the held-out cap and data.max_items applied (see the module docstring)."""
    if report.mode != "voice":
        return report
    items = [item for item in report.items if isinstance(item, VoiceItem)]
    notes: list[str] = []
    held = [item for item in items if item.held_out]
    if held and 0 < data.val_max_items < len(held):
        cap = data.val_max_items
        keep = _first(held, cap, split_rank)
        unused = len(held) - len(keep)
        notes.append(f"{unused} held-out clips past data.val_max_items={cap} unused")
        items = [item for item in items if not item.held_out or item.item_id in keep]
    elif not held and data.max_items and len(items) > data.max_items:
        items = _mark_hash_split(items, data)
    train = [item for item in items if not item.held_out]
    if data.max_items and len(train) > data.max_items:
        keep = _first(train, data.max_items, lambda item_id: subset_rank(seed, item_id))
        count = data.max_items
        notes.append(f"data.max_items={count}: {count} of {len(train)} training clips (run.seed)")
        items = [item for item in items if item.held_out or item.item_id in keep]
    if not notes:
        return report
    hours = sum(item.duration_s for item in items) / 3600.0
    voice = replace(
        report.voice,
        usable=len(items),
        hours_usable=hours,
        held_out=sum(1 for item in items if item.held_out),
        speakers=speaker_figures(items),
        corpus_note="; ".join(filter(None, [report.voice.corpus_note, *notes])),
    )
    reason = f"{report.reason}; {'; '.join(notes)}"
    return replace(report, items=list(items), voice=voice, reason=reason)


def scan_for_training(data: DataSection, seed: int, path: Path | None = None) -> DataReport:
    """The profile's data folder (or `path`) scanned with its settings; the run's items chosen."""
    report = scan_data(
        path if path is not None else data.path or Path("."),
        data.mode,
        data.min_duration_s,
        data.max_duration_s,
        workers=max(1, data.num_workers),
        cache_folder=scan_cache_folder(data.cache_dir),
        speakers=data.speakers,
        corpus=corpus_options(data),
    )
    return select_items(report, data, seed)


def item_record(report: DataReport) -> str:
    """The run's voice items as JSON lines, `{"id", "path", "held_out"}` each, in scan order."""
    items = [item for item in report.items if isinstance(item, VoiceItem)]
    rows = ({"id": i.item_id, "path": str(i.path), "held_out": i.held_out} for i in items)
    return "".join(f"{json.dumps(row)}\n" for row in rows)


def record_items(path: Path, report: DataReport) -> str | None:
    """Write the run's items to `path` at its first start; later, say how they differ."""
    record = item_record(report)
    if not record:
        return None
    try:
        before = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        atomic_write_text(path, record)
        return None
    if before == record:
        return None
    old, new = set(before.splitlines()), set(record.splitlines())
    return (
        f"the data changed since this run began: {len(new - old)} item(s) new or changed, "
        f"{len(old - new)} gone ({path.name} keeps the first start's items)"
    )
