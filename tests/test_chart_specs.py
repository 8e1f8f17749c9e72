"""A chart is declared once (vega_tui/chart_specs.py), and every declared series is fed.

- Every feed names an event type of the protocol and a field its model has.
- Recorded trainer runs (tests/fixtures/events/*/events.jsonl) folded into the real store: each series
  a run's events carry a value for has points, and each series the store fills with code of its own
  (`derived`) is carried by some recorded run, so this test sees that code work.
- Negative controls: a series fed by a field that does not exist, and a derived series the store has no
  code for, each fail the check with a message naming the series.
- The grid lays out what is declared (tests/test_app_live.py: every chart on a roomy screen comes
  from a declaration).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from trainer_core.contract.eventlog import read_all
from trainer_core.contract.protocol import EVENT_MODELS, Event, StepEvent
from vega_tui.chart_specs import (
    CHARTS,
    ChartSpec,
    Feed,
    Place,
    SeriesSpec,
    chart_spec,
    declared_series,
    feed_problems,
)
from vega_tui.store import RunStore
from vega_tui.widgets.chart_data import CHART_BUILDERS, MARKER_STYLES
from vega_tui.widgets.chart_layout import SECONDARY, SWAPPED, chart_classes, grid_css, roomy_rows

RECORDED = Path(__file__).parent / "fixtures" / "events"


@functools.cache
def recorded_runs() -> dict[str, tuple[Event, ...]]:
    runs = {path.parent.name: tuple(read_all(path)) for path in sorted(RECORDED.glob("*/events.jsonl"))}
    assert len(runs) >= 5, f"expected the recorded runs in {RECORDED}"
    return runs


def carries(event: Event, feed: Feed) -> bool:
    """Whether `event` gives `feed` something to plot."""
    if type(event) is not feed.event:
        return False
    value: Any = getattr(event, feed.field, None)
    if isinstance(value, Mapping):
        return any(name not in feed.skip for name in value)
    return bool(value) if isinstance(value, list) else value is not None


def filled(series: SeriesSpec, store: RunStore) -> bool:
    keys = store.state.series
    names = [series.of(name) for name in series.members(keys)] if series.family else [series.key]
    return any(len(keys[name]) > 0 for name in names if name in keys)


def unfed_series(charts: Iterable[ChartSpec], runs: Mapping[str, tuple[Event, ...]]) -> list[str]:
    """Every declared series that nothing feeds, or that the store leaves empty, with why."""
    charts = tuple(charts)
    problems = feed_problems(charts)
    if problems:
        return problems  # the store refuses such declarations: nothing to fold
    stores = {}
    for name, events in runs.items():
        stores[name] = RunStore(charts=charts)
        stores[name].apply(events)
    for key, series in declared_series(charts).items():
        fields = " or ".join(f"{feed.event.__name__}.{feed.field}" for feed in series.feeds)
        carried = [
            name
            for name, events in runs.items()
            if any(carries(event, feed) for event in events for feed in series.feeds)
        ]
        if series.derived and not carried:
            problems.append(f"series {key!r} is filled by the store's own code, but no recorded run has {fields}")
        for name in carried:
            if not filled(series, stores[name]):
                problems.append(
                    f"series {key!r}: the recorded run {name} has {fields}, but the store filled nothing "
                    "(a derived series needs its code in vega_tui/store_progress.py)"
                )
    return problems


def test_every_declared_series_is_fed() -> None:
    assert unfed_series(CHARTS, recorded_runs()) == []
    keys = set(declared_series())
    assert {"loss", "val_loss", "lr", "lr:", "part:", "val_metric:", "free_running"} <= keys
    fed_by = {feed.event for series in declared_series().values() for feed in series.feeds}
    assert fed_by <= set(EVENT_MODELS)


def test_a_series_fed_by_a_missing_field_fails_the_check_naming_it() -> None:
    typo = SeriesSpec("grad_norm", (Feed(StepEvent, "grad_nrom"),), "grad norm")
    charts = (*CHARTS, ChartSpec("grad", "gradient norm", (typo,)))
    problems = unfed_series(charts, recorded_runs())
    assert problems == ["series 'grad_norm': 'step' events have no field 'grad_nrom'"]
    with pytest.raises(ValueError, match="grad_nrom"):
        RunStore(charts=charts)  # the store refuses it too, before any event


def test_a_derived_series_without_store_code_fails_the_check_naming_it() -> None:
    grad = SeriesSpec("grad_norm", (Feed(StepEvent, "grad_norm"),), "grad norm", derived=True)
    problems = unfed_series((*CHARTS, ChartSpec("grad", "gradient norm", (grad,))), recorded_runs())
    assert problems and all("'grad_norm'" in problem for problem in problems)
    assert "the recorded run lm_completed has StepEvent.grad_norm, but the store filled nothing" in problems[0]
    # Declared as a plain copy, the generic feeder fills it: no store code needed.
    plain = SeriesSpec("grad_norm", (Feed(StepEvent, "grad_norm"),), "grad norm")
    charts = (*CHARTS, ChartSpec("grad", "gradient norm", (plain,)))
    assert unfed_series(charts, recorded_runs()) == []
    store = RunStore(charts=charts)
    store.apply(recorded_runs()["lm_completed"])
    steps = [e.step for e in recorded_runs()["lm_completed"] if isinstance(e, StepEvent) and e.grad_norm is not None]
    assert store.state.series["grad_norm"].xs == steps


def test_declarations_are_consistent() -> None:
    ids = [spec.id for spec in CHARTS]
    assert len(ids) == len(set(ids))
    assert sorted(CHART_BUILDERS) == sorted(ids)  # a chart without a builder of its own is drawn generically
    assert [spec.id for spec in CHARTS if spec.place.role == "primary"] == ["loss"]
    assert all(set(spec.markers) <= set(MARKER_STYLES) for spec in CHARTS)
    assert all(spec.place.shares in (None, *ids) for spec in CHARTS)


def test_the_grid_lays_out_what_is_declared() -> None:
    """The roomy grid: a wide chart alone on its row, the others two a row; a shared cell counts once.
    (tests/test_app_live.py checks on a real roomy screen that every chart comes from a declaration.)"""
    assert roomy_rows(CHARTS) == [
        3,
        2,
        2,
        2,
    ]  # loss; lr, throughput; memory, parts; speech/validation
    assert "grid-size: 2 4; grid-rows: 3fr 2fr 2fr 2fr;" in grid_css(CHARTS)
    loss, lr, throughput, speech, validation = (chart_spec(name) for name in ("loss", *SECONDARY[:2], *SWAPPED))
    grad = ChartSpec("grad", "gradient norm", (), place=Place(weight=1))
    assert roomy_rows((loss, lr, throughput, grad, speech, validation)) == [3, 2, 1, 2]
    assert chart_classes(speech, "lr", "validation") == "secondary -wide"
    assert chart_classes(validation, "lr", "validation") == "secondary -wide -off"
    assert chart_classes(lr, "lr", "validation") == "secondary -current"
