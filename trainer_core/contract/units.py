"""How sizes, durations and losses are printed: one spelling for every widget and CLI table.

Binary sizes (KiB, MiB, GiB: what RAM and GPU memory are counted in), durations as `45s`, `12m05s`,
`3h07m`, `2d04h`, and `—` wherever a value is unknown or not finite.
"""

from __future__ import annotations

import math

GIB = 1024**3
UNKNOWN = "—"
_SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def _known(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value >= 0


def format_bytes(n_bytes: float | None) -> str:
    """`512 B`, `1.5 KiB`, `3.2 GiB`; `—` when unknown."""
    if n_bytes is None or not _known(n_bytes):
        return UNKNOWN
    value = float(n_bytes)
    for unit in _SIZE_UNITS[:-1]:
        if value < 1024:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_SIZE_UNITS[-1]}"


def format_duration(seconds: float | None) -> str:
    """`45s`, `12m05s`, `3h07m`, `2d04h`; `—` when unknown."""
    if seconds is None or not _known(seconds):
        return UNKNOWN
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def format_number(value: float | None, digits: int = 4) -> str:
    """A loss or metric with `digits` significant digits, trailing zeros
    kept (`5.000`); `—` when unknown."""
    if value is None or not math.isfinite(value):
        return UNKNOWN
    text = f"{value:#.{digits}g}"
    return text[:-1] if text.endswith(".") else text
