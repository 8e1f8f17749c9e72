"""The store's generic feeder: copies the event fields that `vega_tui.chart_specs` declares into
their series, so a new chart needs no store code (series marked `derived` are the store's own)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Any

from trainer_core.contract.protocol import Event
from vega_tui.chart_specs import CHARTS, ChartSpec, Feed, declared_series, feed_problems
from vega_tui.run_state import Series

# What one event type feeds, flattened for speed (a step event arrives many times a second):
# a getter of (x, value) for each feed in one call, and each feed's (series key, family, dict keys
# left out).
Entry = tuple[str, bool, frozenset[str]]
Plan = tuple[Callable[[Event], tuple[Any, ...]], tuple[Entry, ...]]
FeedTable = dict[type[Event], Plan]


def feed_table(charts: Iterable[ChartSpec] = CHARTS) -> FeedTable:
    """Event class -> what it feeds; refuses feeds naming no event field."""
    charts = tuple(charts)
    problems = feed_problems(charts)
    if problems:
        raise ValueError("vega_tui/chart_specs.py: " + "; ".join(problems))
    table: dict[type[Event], list[Feed]] = {}
    entries: dict[type[Event], list[Entry]] = {}
    for series in declared_series(charts).values():
        if not series.derived:
            for source in series.feeds:
                table.setdefault(source.event, []).append(source)
                entry = (series.key, series.family, frozenset(source.skip))
                entries.setdefault(source.event, []).append(entry)
    plans: FeedTable = {}
    for event, sources in table.items():
        names = [name for source in sources for name in (source.x, source.field)]
        plans[event] = (attrgetter(*names), tuple(entries[event]))  # two names or more: a tuple
    return plans


FEEDS = feed_table()


Make = Callable[[str], Series]


def feed(event: Event, plan: Plan, series: dict[str, Series], make: Make) -> None:
    """Append `event`'s declared fields to their series (`make` adds a family's new member)."""
    getter, entries = plan
    values = getter(event)
    for (key, family, skip), x, value in zip(entries, values[::2], values[1::2], strict=True):
        if value is None:
            continue  # not measured (no device memory on a CPU run): no point
        if not family:
            target = series.get(key)
            (make(key) if target is None else target).append(x, value)
            continue
        for name, member in value.items():
            if name not in skip:
                member_key = f"{key}:{name}"
                target = series.get(member_key)
                (make(member_key) if target is None else target).append(x, member)
