"""`check-data --tokenizer FOLDER|hf:ORG/NAME`: what an MMS voice's text
front end drops from a corpus.

A transformers VITS voice keeps only the characters of its vocabulary (after lowercasing, and
romanising when its tokenizer says so); the rest are dropped without a word at training time. This
counts them, per character, and the transcripts they come from, so a practitioner sees before
training what the voice will not say.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

from trainer_core.contract.data_report import TokenizerDrops
from trainer_core.contract.hf_voice import HUB_PREFIX, hub_folder
from trainer_core.contract.mms_tokenizer import read_tokenizer_folder
from trainer_core.models.vits.mms_symbols import MmsText

if TYPE_CHECKING:
    from rich.console import Console

    from trainer_core.data.scan_report import DataReport

# Characters listed in the table; all of them are in --json.
LISTED = 30


def load_front_end(given: str) -> MmsText:
    """The text front end of the voice in folder `given` or hub id `hf:ORG/NAME` (from
    huggingface_hub's cache), checked before the corpus is scanned (uroman when needed)."""
    hub = given.startswith(HUB_PREFIX)
    encoder = MmsText(
        read_tokenizer_folder(hub_folder(given) if hub else Path(given), given if hub else None)
    )
    encoder.check_ready()
    return encoder


def tokenizer_report(encoder: MmsText, report: DataReport) -> TokenizerDrops:
    """The characters `encoder` drops from the report's transcripts, most frequent first."""
    from trainer_core.data.scan_report import VoiceItem

    texts = [item.text for item in report.items if isinstance(item, VoiceItem)]
    touched = 0
    for text in texts:
        before = encoder.missing.total()
        encoder.encode(text)
        touched += encoder.missing.total() > before
    return TokenizerDrops(
        folder=encoder.tokenizer.name,
        corpus=str(report.path),
        transcripts=len(texts),
        transcripts_with_drops=touched,
        characters_dropped=encoder.missing.total(),
        dropped=dict(encoder.missing.most_common()),
    )


def show_tokenizer_report(found: TokenizerDrops, console: Console) -> None:
    console.print(
        f"[bold]Dropped by the tokenizer of[/bold] {found.folder}: {found.characters_dropped}"
        f" characters in {found.transcripts_with_drops} of {found.transcripts} transcripts of"
        f" {found.corpus}",
        soft_wrap=True,
    )
    if not found.dropped:
        return
    table = Table()
    for column in ("character", "name", "count"):
        table.add_column(column)
    dropped = list(found.dropped.items())
    for char, count in dropped[:LISTED]:
        table.add_row(repr(char), unicodedata.name(char, f"U+{ord(char):04X}"), str(count))
    if len(dropped) > LISTED:
        table.add_row(f"… and {len(dropped) - LISTED} more", "see --json for the full list", "")
    console.print(table)
