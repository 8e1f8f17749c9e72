"""Benchmark 5b: a chart redraw costs the same whatever the run's length.

The real `ChartGrid` (every chart on screen, 160x48, headless under Textual's `run_test`) follows
two stores fed with 1,000 real `step` events each: one holding 1,000 loss points (a step an
event), one holding 1,000,000 (--tiny: 10,000; a window of steps an event, as a fast trainer
coalesces them), so the once-an-event series (throughput, memory, loss parts) are alike. Each
redraw follows one more step event, as in a live run, and times what the dashboard does for it:
build every chart's data, draw it with plotext and render the picture. The figure is the median
redraw time at the long run over the one at the short run (target < 1.5): the charts read each
series' min/max levels at their width.

Negative control: the same redraws with the full-history path (every raw point handed
to the chart and downsampled there, as before the envelope), switched on here only;
its ratio must miss the target.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import common
from textual.app import App, ComposeResult

from trainer_core.contract.event_lines import parse_event
from trainer_core.contract.protocol import Event
from vega_tui import store_base as store_module  # where the store makes new series
from vega_tui.run_state import Series
from vega_tui.store import RunStore
from vega_tui.widgets import chart_data
from vega_tui.widgets.chart_data import Line, finite_points
from vega_tui.widgets.charts import ChartGrid, RunChart

# step events in either history: the per-event series (throughput, memory, parts) alike
EVENTS = 1000
SHORT = 1000
SIZE = (160, 48)
TARGET = 1.5
# Every chart on screen, two per row (the roomy layout), the one of
# speech/validation not wanted hidden.
GRID_CSS = """
ChartGrid { layout: grid; grid-size: 2 4; }
ChartGrid RunChart.-off { display: none; }
"""


class GridApp(App[None]):
    CSS = GRID_CSS

    def compose(self) -> ComposeResult:
        yield ChartGrid(id="charts")


def step_event(seq: int, first: int, count: int, rng: random.Random) -> Event:
    """A real `step` event covering `count` steps from `first`: a falling
    noisy loss with rare spikes."""
    steps = list(range(first, first + count))
    losses = [
        2.0
        + 3.0 / (1.0 + s * 1e-4)
        + rng.uniform(-0.05, 0.05)
        + (5.0 if rng.random() < 1e-4 else 0.0)
        for s in steps
    ]
    last = steps[-1]
    return parse_event(
        {
            "v": 1,
            "seq": seq,
            "t": 1000.0 + last * 0.001,
            "type": "step",
            "step": last,
            "epoch": 0,
            "loss": losses[-1],
            "losses": {"total": losses[-1], "ce": losses[-1]},
            "lr": 3e-4,
            "grad_norm": 1.0,
            "loss_scale": None,
            "samples_per_s": 500.0 + rng.uniform(-5, 5),
            "data_wait_frac": 0.0,
            "micro_batch": 16,
            "grad_accum": 1,
            "mem_device_bytes": None,
            "mem_host_bytes": 2**30 + rng.randrange(2**20),
            "eta_s": 100.0,
            "steps_in_window": count,
            "step_series": steps,
            "loss_series": losses,
            "lr_series": [3e-4 * (1.0 - s * 1e-7) for s in steps],
        }
    )


class RecordingSeries(Series):
    """A store series that also keeps every raw point: the negative
    control's full history (bench only)."""

    def __init__(self, max_points: int = 2000) -> None:
        super().__init__(max_points)
        self.raw_x, self.raw_y = array("d"), array("d")

    def append(self, x: float, y: float | None) -> bool:
        stored = super().append(x, y)
        if stored:
            self.raw_x.append(x)
            self.raw_y.append(y)  # type: ignore[arg-type]
        return stored


def full_history_line(
    state: Any,
    columns: int,
    key: str,
    label: str,
    color: str,
    *,
    scale: float = 1.0,
    positive: bool = False,
    scatter: bool = False,
    right: bool = False,
) -> Line | None:
    """The old path: every raw point of the run goes to the chart, which
    downsamples it at each draw."""
    series = state.series.get(key)
    if not isinstance(series, RecordingSeries) or not series.raw_x:
        return None
    ys = series.raw_y if scale == 1.0 else [y / scale for y in series.raw_y]
    xs, ys = finite_points(series.raw_x, ys, positive)
    return Line(label, xs, ys, color, scatter, right) if xs else None


@contextmanager
def full_history(on: bool) -> Iterator[None]:
    """Switch the charts (and new store series) to the full-history path for
    the negative control."""
    if not on:
        yield
        return
    saved_line, saved_series = chart_data.series_line, store_module.Series
    chart_data.series_line, store_module.Series = full_history_line, RecordingSeries  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        chart_data.series_line, store_module.Series = saved_line, saved_series  # type: ignore[misc]


def filled_store(points: int, control: bool, rng: random.Random) -> RunStore:
    """A store holding `points` loss points from real step events (recording
    raw points for the control)."""
    store = RunStore()
    if control:
        store.state.series = {key: RecordingSeries(store.max_points) for key in store.state.series}
    seq, step = 0, 1
    while step <= points:
        count = min(max(1, points // EVENTS), points - step + 1)
        store.apply([step_event(seq, step, count, rng)])
        seq, step = seq + 1, step + count
    return store


def redraw_once(grid: ChartGrid, store: RunStore, rng: random.Random) -> float:
    """One more step event, then the whole redraw it causes (build, plotext
    draw, render); seconds."""
    state = store.state
    store.apply([step_event(state.events_seen, state.step + 1, 1, rng)])
    started = time.perf_counter()
    grid.draw_all_now(state)
    for chart in grid.query(RunChart):
        if chart.display and chart.region.area > 0:
            chart.render()
    return time.perf_counter() - started


async def measure(long: int, repeats: int, control: bool) -> dict[str, list[float]]:
    """Redraw times at SHORT and at `long` points, interleaved so that load hits both alike."""
    rng = random.Random(31)
    times: dict[str, list[float]] = {"short": [], "long": []}
    with full_history(control):
        stores = {
            "short": filled_store(SHORT, control, rng),
            "long": filled_store(long, control, rng),
        }
        async with GridApp().run_test(size=SIZE) as pilot:
            grid = pilot.app.query_one(ChartGrid)
            await pilot.pause()
            for name in stores:  # warm-up: plotext's first figure of each chart costs more
                redraw_once(grid, stores[name], rng)
            for _ in range(repeats):
                for name, store in stores.items():
                    times[name].append(redraw_once(grid, store, rng))
                await pilot.pause()
    return times


def report(
    result: common.Result, label: str, times: dict[str, list[float]], long: int, control: bool
) -> None:
    short_s, long_s = statistics.median(times["short"]), statistics.median(times["long"])
    ratio = long_s / short_s
    count = len(times["long"])
    detail = (
        f"median of {count}: {long_s * 1e3:.1f} ms at {long:,} points, {short_s * 1e3:.1f} ms at"
        f" {SHORT:,}"
    )
    if control:
        result.add(label, ratio, "x", f">= {TARGET} (must miss)", ratio >= TARGET, detail)
    else:
        result.add(label, ratio, "x", f"< {TARGET}", ratio < TARGET, detail)
        result.add(f"redraw at {long:,} points", long_s * 1e3, "ms", "", None, detail)


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--points", type=int, default=None, help="loss points of the long run (default 1,000,000)"
    )
    args = parser.parse_args()
    long = args.points or (10_000 if args.tiny else 1_000_000)
    repeats = args.repeats or (2 if args.tiny else 15)
    started = time.monotonic()
    result = common.start_result(
        "redraw_ratio",
        "5b. Chart redraw cost against run length",
        {
            "short_points": SHORT,
            "long_points": long,
            "repeats": repeats,
            "size": list(SIZE),
            "events": EVENTS,
        },
    )
    times = asyncio.run(measure(long, repeats, control=False))
    report(result, f"redraw time, {long:,} points / {SHORT:,} points", times, long, control=False)
    control = asyncio.run(measure(long, repeats, control=True))
    report(
        result,
        "negative control (full-history downsampling): same ratio",
        control,
        long,
        control=True,
    )
    result.notes.append(
        "each redraw follows one new step event and covers every chart: data build, plotext draw,"
        " render"
    )
    if args.tiny:
        result.notes.append(
            "--tiny: 10,000 points, 2 repeats: checks the script runs, measures nothing"
        )
    common.finish_result(result, started, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
