"""Axis ticks for the training charts (`vega_tui.widgets.charts`): round step numbers, round
values, and the real values of a log10 axis. Pure functions.
"""

from __future__ import annotations

import math


def step_ticks(low: float, high: float, count: int = 5) -> list[int]:
    """About `count` round step numbers between low and high (1, 2 or 5 times a power of ten
    apart)."""
    if high <= low:
        return [int(low)]
    raw = (high - low) / max(1, count - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    spacing = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    spacing = max(1, int(spacing))
    first = math.ceil(low / spacing) * spacing
    return list(range(first, int(high) + 1, spacing))


def value_ticks(low: float, high: float, count: int = 6) -> tuple[list[float], list[str]]:
    """About `count` round values between low and high, and their labels."""
    if high <= low:
        return [low], [f"{low:.4g}"]
    raw = (high - low) / (count - 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    spacing = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    # A hair of tolerance: 3 * 0.0002 is a little above 0.0006; the top tick must stay.
    first, last = math.ceil(low / spacing - 1e-9), math.floor(high / spacing + 1e-9)
    ticks = [n * spacing for n in range(first, last + 1)]
    return ticks, [f"{tick:.4g}" for tick in ticks]


def log_ticks(low: float, high: float, count: int = 5) -> tuple[list[float], list[str]]:
    """Ticks for a log10-transformed axis, labelled with the real values."""
    if high <= low:
        return [low], [f"{10**low:.3g}"]
    ticks = [low + (high - low) * i / (count - 1) for i in range(count)]
    return ticks, [f"{10**tick:.3g}" for tick in ticks]
