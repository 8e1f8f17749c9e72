"""A dashboard whose cost does not grow with the run: each series' min/max levels (`Series.envelope`) give a
chart exactly the full history's min and max per chunk at O(width), and a chart hidden or unchanged is not
built again. Real recorded trainer events; real widgets and the real app under `run_test`."""

from __future__ import annotations

import functools
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from textual.app import App, ComposeResult

from dash_pilot import DashApp, copy_fixture, settled, wait_until
from trainer_core.contract.event_lines import parse_event
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.protocol import Event, StepEvent
from vega_tui.run_state import Series
from vega_tui.store import RunStore
from vega_tui.widgets.charts import (
    CHART_SHARE,
    MAX_GAP_S,
    SECONDARY_INTERVAL_S,
    ChartGrid,
    RunChart,
    _on_screen,
    downsample_minmax,
    loss_chart,
    redraw_gap,
)

pytestmark = pytest.mark.anyio
FIXTURES = Path(__file__).parent / "fixtures" / "events"
SPIKE = 1e6  # a blow-up (and, negated, a dip) far from the end of the run


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def long_stream(name: str, points: int) -> list[Event]:
    """A recorded run's step events replayed one after another (steps shifted on) up to `points` steps,
    with one loss spike and one dip far from the end: a long real event stream."""
    recorded = [e for e in read_all(FIXTURES / name / "events.jsonl") if isinstance(e, StepEvent)]
    events: list[Event] = []
    offset, seq = 0, 0
    while offset < points:
        for event in recorded:
            data = event.model_dump(mode="json")
            steps = [s + offset for s in data["step_series"]]
            losses = list(data["loss_series"])
            for i, step in enumerate(steps):
                losses[i] = {points // 3: SPIKE, points // 2: -SPIKE}.get(step, losses[i])
            data.update(seq=seq, step=steps[-1], step_series=steps, loss_series=losses)
            events.append(parse_event(data))
            seq += 1
        offset += recorded[-1].step
    return events


def raw_loss(events: list[Event]) -> list[tuple[float, float]]:
    steps = [e for e in events if isinstance(e, StepEvent)]
    return [(x, y) for e in steps for x, y in zip(e.step_series, e.loss_series, strict=True) if math.isfinite(y)]


def chunk_points(raw: list[tuple[float, float]], sizes: list[int]) -> list[tuple[float, float]]:
    """Each consecutive chunk's first lowest and first highest point, in x order: a full-history downsample."""
    out, start = [], 0
    for size in sizes:
        chunk = raw[start : start + size]
        low = min(chunk, key=lambda p: p[1])
        high = max(chunk, key=lambda p: p[1])
        out += [low] if low == high else sorted((low, high))
        start += size
    return out


def expected_at_level(series: Series, raw: list[tuple[float, float]], level: int) -> list[tuple[float, float]]:
    """Chunks of span * 2**level raw points, then the ones a binary count of sealed buckets leaves over."""
    span, sealed = series.span, len(raw) // series.span
    sizes = [span << level] * (sealed >> level)
    sizes += [span << j for j in range(level - 1, -1, -1) if (sealed >> j) & 1]
    sizes += [len(raw) % span] if len(raw) % span else []
    return chunk_points(raw, sizes)


@pytest.mark.parametrize("fixture", ["lm_completed", "vocoder_completed"])
def test_the_envelope_is_the_full_histories_min_and_max_per_chunk(fixture: str) -> None:
    events = long_stream(fixture, 12_000)
    store = RunStore()
    store.apply(events)
    series, raw = store.state.series["loss"], raw_loss(events)
    assert series.span > 1  # the store merged buckets: the envelope reads its coarser levels
    for columns in (1, 7, 40, 80, 300, 5000):
        xs, ys = series.envelope(columns)
        got = list(zip(xs, ys, strict=True))
        levels = [expected_at_level(series, raw, level) for level in range(20)]
        assert got in levels, f"{columns} columns: not a full downsample at any level"
        assert len(got) <= 2 * (2 * columns + 20)  # O(width), however long the run
        assert max(ys) == SPIKE and min(ys) == -SPIKE  # the spike and the dip survive
    # What the chart draws: two points per column, the same extremes as a downsample of every raw point.
    line = loss_chart(store.state, columns=80).lines[0]
    drawn = downsample_minmax(line.xs, line.ys, 80)
    full = downsample_minmax([x for x, _ in raw], [y for _, y in raw], 80)
    assert (min(drawn[1]), max(drawn[1])) == (min(full[1]), max(full[1])) == (-SPIKE, SPIKE)


def test_the_envelope_follows_a_series_point_by_point() -> None:
    """Every append keeps the levels right, through many bucket merges and an odd bucket count."""
    series, raw = Series(max_points=14), []  # 7 buckets when full: an odd count left over at each merge
    for i in range(3000):
        y = float((i * 7919) % 1013) - (500.0 if i == 1777 else 0.0)
        series.append(i, y)
        raw.append((float(i), y))
        if i % 97 == 0 or i == 2999:
            xs, ys = series.envelope(3)
            assert min(ys) == min(y for _, y in raw) and max(ys) == max(y for _, y in raw)
            assert xs == sorted(xs) and xs[-1] <= i
            assert set(zip(xs, ys, strict=True)) <= set(raw)


class GridApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ChartGrid(id="charts")


@functools.cache
def recorded_step() -> dict[str, Any]:
    first = next(e for e in read_all(FIXTURES / "lm_completed" / "events.jsonl") if isinstance(e, StepEvent))
    return first.model_dump(mode="json")


def step(seq: int, at: int, loss: float) -> Event:
    data = dict(recorded_step())
    data.update(seq=seq, step=at, loss=loss, step_series=[at], loss_series=[loss], lr_series=[data["lr"]])
    return parse_event(data)


async def test_a_hidden_or_unchanged_chart_is_not_rebuilt() -> None:
    store = RunStore()
    store.apply([step(i, i, 5.0 - i * 0.01) for i in range(1, 200)])
    async with GridApp().run_test(size=(100, 40)) as pilot:
        grid = pilot.app.query_one(ChartGrid)
        loss, lr = grid.chart("loss"), grid.chart("lr")
        grid.draw_all_now(store.state)
        await pilot.pause()
        built = (loss.builds, lr.builds)
        assert built[0] >= 1 and built[1] >= 1
        grid.draw_all_now(store.state)  # nothing new: not even the chart data is built again
        assert (loss.builds, lr.builds) == built
        lr.display = False
        await pilot.pause()
        store.apply([step(200, 200, 9.0)])
        grid.draw_all_now(store.state)
        assert loss.builds == built[0] + 1 and lr.builds == built[1]  # hidden: left alone
        assert 9.0 in loss.data.lines[0].ys
        lr.display = True
        await pilot.pause()
        grid.draw_all_now(store.state)
        assert lr.builds == built[1] + 1 and lr.data.lines[0].xs[-1] == 200


async def test_the_app_builds_no_chart_while_the_logs_tab_shows(tmp_path: Path) -> None:
    run_dir = copy_fixture("lm_completed", tmp_path)
    async with DashApp(run_dir).run_test(size=(80, 24)) as pilot:
        screen = await settled(pilot)
        loss = screen.query_one(ChartGrid).chart("loss")
        await pilot.press("2")
        await wait_until(pilot, lambda: not _on_screen(loss), "the Logs tab")
        builds = loss.builds
        append_step(run_dir, 61, 9.5)
        await wait_until(pilot, lambda: screen.state.step == 61, "the new step read")
        await pilot.pause(0.6)  # several redraw ticks with the charts hidden
        assert loss.builds == builds
        await pilot.press("1")
        await wait_until(pilot, lambda: loss.builds > builds and 61 in loss.data.lines[0].xs, "the chart rebuilt")


def append_step(run_dir: Path, step: int, loss: float) -> None:
    """One more step event at the end of the run's log, numbered after its last line."""
    lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    events = [json.loads(line) for line in lines]
    last = next(e for e in reversed(events) if e.get("type") == "step")
    new = {**last, "seq": events[-1]["seq"] + 1, "t": time.time(), "step": step, "loss": loss}
    new.update(steps_in_window=1, step_series=[step], loss_series=[loss], lr_series=[0.0])
    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(new) + "\n")


async def test_charts_with_none_on_screen_at_a_tick_are_drawn_at_a_later_one(tmp_path: Path) -> None:
    """A tick that finds no chart on screen (the tab not laid out yet) must not count the data as
    drawn: a finished run has no later change to draw it."""
    run_dir = copy_fixture("lm_completed", tmp_path)
    async with DashApp(run_dir).run_test(size=(80, 24)) as pilot:
        screen = await settled(pilot)
        grid = screen.query_one(ChartGrid)
        loss = grid.chart("loss")
        grid.display = False
        append_step(run_dir, 61, 9.5)
        await wait_until(pilot, lambda: screen.state.step == 61, "the new step read")
        await pilot.pause(0.6)  # several ticks with no chart on screen
        assert 61 not in loss.data.lines[0].xs
        grid.display = True
        await wait_until(pilot, lambda: 61 in loss.data.lines[0].xs, "the chart drawn", timeout=10)


def test_a_chart_whose_picture_is_costly_is_redrawn_less_often() -> None:
    loss, lr = RunChart("loss", id="loss"), RunChart("lr", id="lr")
    assert redraw_gap(loss, 5) == 0.0 and redraw_gap(lr, 5) == SECONDARY_INTERVAL_S  # nothing measured yet
    loss.render_s = lr.render_s = 0.03
    # Five charts of 30 ms each, drawn at these gaps, take CHART_SHARE of a core together.
    assert redraw_gap(loss, 5) == pytest.approx(0.03 * 5 / CHART_SHARE)
    assert sum(chart.render_s / redraw_gap(chart, 5) for chart in [loss, lr, lr, lr, lr]) <= CHART_SHARE + 1e-9
    loss.render_s = 10.0
    assert redraw_gap(loss, 5) == MAX_GAP_S  # a chart still shows what happened within MAX_GAP_S
