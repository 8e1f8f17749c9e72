"""One model to start a run from (`train --init-from PATH`), as the launch screen's "Start from"
list shows it.

Plain data, shared by the runs-folder scan (`vega_tui.start_points`) and the Piper voices under
the machine file's `[voices] dirs` (`vega_tui.piper_voices`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StartPoint:
    """One model to start from: `path` is what `--init-from` gets."""

    path: Path
    label: str
    detail: str
    modified: float
