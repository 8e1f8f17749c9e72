"""Chart drawing costs: min/max downsampling to the chart's width keeps every spike, and a chart is drawn
again only when what it shows changed (its picture is reused on repaints). Real widgets under `run_test`."""

from __future__ import annotations

import math

import pytest
from textual.app import App, ComposeResult

from trainer_core.contract.event_lines import parse_event
from vega_tui.store import RunStore
from vega_tui.widgets.charts import ChartGrid, downsample_minmax

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_downsampling_keeps_the_extremes_of_every_column() -> None:
    xs = list(range(10_000))
    ys = [math.sin(x / 300) for x in xs]
    ys[1234], ys[7777] = 100.0, -100.0  # a blow-up and a dip, one step each
    out_x, out_y = downsample_minmax(xs, ys, 80)
    assert len(out_x) == len(out_y) <= 160
    assert max(out_y) == 100.0 and min(out_y) == -100.0
    assert out_x[out_y.index(100.0)] == 1234 and out_x[out_y.index(-100.0)] == 7777
    assert out_x == sorted(set(out_x))  # x order, no point twice
    assert out_x[0] == 0 and out_x[-1] == 9999
    for column in range(80):  # every column still shows its own lowest and highest value
        lo, hi = column * 125, (column + 1) * 125
        kept = [y for x, y in zip(out_x, out_y, strict=True) if lo <= x < hi]
        assert min(kept) == min(ys[lo:hi]) and max(kept) == max(ys[lo:hi])


def test_short_series_are_left_alone() -> None:
    assert downsample_minmax([1, 2, 3], [3.0, 1.0, 2.0], 80) == ([1, 2, 3], [3.0, 1.0, 2.0])


def step_event(seq: int, step: int, loss: float):
    return parse_event(
        {
            "v": 1,
            "seq": seq,
            "t": 1000.0 + step,
            "type": "step",
            "step": step,
            "epoch": 0,
            "loss": loss,
            "losses": {"total": loss},
            "lr": 0.001,
            "grad_norm": 1.0,
            "loss_scale": None,
            "samples_per_s": 100.0,
            "data_wait_frac": 0.0,
            "micro_batch": 8,
            "grad_accum": 1,
            "mem_device_bytes": None,
            "mem_host_bytes": None,
            "eta_s": 10.0,
            "steps_in_window": 1,
            "step_series": [step],
            "loss_series": [loss],
            "lr_series": [0.001],
        }
    )


class GridApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ChartGrid(id="charts")


async def test_a_chart_is_drawn_again_only_when_its_data_changed() -> None:
    store = RunStore()
    store.apply([step_event(i, i, 5.0 - i * 0.001) for i in range(3000)])
    async with GridApp().run_test(size=(100, 30)) as pilot:
        grid = pilot.app.query_one(ChartGrid)
        loss = grid.chart("loss")
        grid.draw_all_now(store.state)
        await pilot.pause()
        draws, renders = loss.draws, loss.renders
        assert draws == 1 and renders >= 1
        assert loss.data is not None and loss.data.lines[0].xs[-1] == 2999
        grid.redraw(store.state)  # same data
        loss.refresh()  # a repaint
        await pilot.pause()
        assert (loss.draws, loss.renders) == (draws, renders)
        store.apply([step_event(3000, 3000, 9.0)])
        grid.redraw(store.state)
        for _ in range(200):  # at once, or by a catch-up when the last picture's cost spaces redraws
            if loss.draws > draws:
                break
            await pilot.pause(0.05)
        await pilot.pause()
        assert loss.draws == draws + 1 and loss.renders > renders
        assert 9.0 in loss.data.lines[0].ys


async def test_secondary_charts_redraw_at_most_once_a_second_and_catch_up() -> None:
    store = RunStore()
    store.apply([step_event(i, i, 5.0) for i in range(100)])
    async with GridApp().run_test(size=(100, 40)) as pilot:
        grid = pilot.app.query_one(ChartGrid)
        lr = grid.chart("lr")
        assert lr.region.area > 0
        grid.draw_all_now(store.state)
        await pilot.pause()
        draws = lr.draws
        store.apply([step_event(100, 100, 5.0)])
        grid.redraw(store.state)
        await pilot.pause()
        assert lr.draws == draws  # too soon after the last draw
        for _ in range(200):  # then a catch-up draws it, with nothing else calling redraw
            if lr.draws > draws:
                break
            await pilot.pause(0.05)
        assert lr.draws == draws + 1 and lr.data.lines[0].xs[-1] == 100
