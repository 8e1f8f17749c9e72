"""Training charts: loss (raw, smoothed, validation, fault and checkpoint markers), loss parts,
learning rate, throughput, memory, free-running speech and validation metric (against a
reference), drawn with plotext.

Runs with several optimizers (a GAN vocoder or a vits voice: discriminator, then generator) get
one learning-rate line per group, the other groups' losses on the loss chart's right axis, the
generator's parts (mel, adversarial, feature; kl and duration for vits) and the validation chart
in the speech chart's place.

What to draw is worked out by pure functions (`loss_chart`, `lr_chart`, ... in `chart_data`) that
turn a `RunState` into a `ChartData`; `RunChart` only hands a `ChartData` to plotext. Keeping the
two apart lets tests check what a chart holds without parsing terminal art, and keeps plotting
cheap: the screen calls `ChartGrid.redraw` on a timer, only when the store changed; only charts that
are on screen and whose store moved are rebuilt, one per frame, never while a key press waits; each
series is read at the chart's width from the store's min/max levels (`Series.envelope`: O(width),
however long the run), then cut down to two points per column (the lowest and highest, so spikes
survive) before plotext sees it; a repaint reuses the last picture.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual.containers import Container
from textual.widget import Widget
from textual_plotext import PlotextPlot

from vega_tui.chart_specs import CHARTS, chart_spec
from vega_tui.widgets.chart_data import (
    CHART_BUILDERS,
    FAULT_KINDS,
    GROUP_COLORS,
    MARKER_STYLES,
    METRIC_COLOR,
    PART_COLORS,
    ChartData,
    Line,
    downsample_minmax,
    finite_points,
    flat_line,
    group_color,
    group_loss_chart,
    group_parts_chart,
    loss_chart,
    lr_chart,
    marker_steps,
    memory_chart,
    parts_chart,
    series_line,
    speech_chart,
    throughput_chart,
    validation_chart,
    validation_wanted,
)
from vega_tui.widgets.chart_layout import SECONDARY, SWAPPED, chart_classes, grid_css
from vega_tui.widgets.chart_ticks import log_ticks, step_ticks, value_ticks

if TYPE_CHECKING:
    from textual.app import App, ComposeResult
    from textual.timer import Timer

    from vega_tui.run_state import RunState

# Re-exported: the chart data builders lived here before `chart_data` (tests
# and screens import them here).
__all__ = [
    "CHART_BUILDERS",
    "FAULT_KINDS",
    "GROUP_COLORS",
    "MARKER_STYLES",
    "METRIC_COLOR",
    "PART_COLORS",
    "ChartData",
    "ChartGrid",
    "Line",
    "RunChart",
    "downsample_minmax",
    "finite_points",
    "flat_line",
    "group_color",
    "group_loss_chart",
    "group_parts_chart",
    "loss_chart",
    "lr_chart",
    "marker_bands",
    "marker_steps",
    "memory_chart",
    "parts_chart",
    "series_line",
    "speech_chart",
    "throughput_chart",
    "validation_chart",
    "validation_wanted",
]


# Rows of a chart that are not plot: title, top and bottom frame, step labels.
PLOT_FRAME_ROWS = 4


def _step_range(data: ChartData) -> tuple[float, float] | None:
    xs = [x for line in data.lines for x in (line.xs[0], line.xs[-1]) if line.xs]
    xs += [x for steps in data.markers.values() for x in steps]
    return (min(xs), max(xs)) if xs else None


def marker_bands(plotted: list[float]) -> dict[str, float] | None:
    """The plotted y of each marker kind: bands just below the lowest value, so
    markers never hide the curve nor sit under the legend (top left). Checkpoints in
    one band, faults in the next one down."""
    if not plotted:
        return None
    low, high = min(plotted), max(plotted)
    span = (high - low) or abs(low) * 0.1 or 1.0
    checkpoint_y, fault_y = low - 0.06 * span, low - 0.12 * span
    return {
        "checkpoint": checkpoint_y,
        "best": checkpoint_y,
        "passed": checkpoint_y,
        "early_stop": checkpoint_y,
        "overtraining": checkpoint_y,
        "oom": fault_y,
        "nonfinite": fault_y,
        "memory": fault_y,
    }


class RunChart(PlotextPlot):
    """A plotext chart that draws a `ChartData`; `data` keeps what was drawn last (tests read it).

    A log axis is drawn by plotting log10(y) on a linear axis with relabelled ticks:
    plotext's own log scale rewrites its data while rendering, so a second render of the
    same figure (any repaint) fails.
    """

    DEFAULT_CSS = """
    RunChart { height: 1fr; min-height: 6; }
    """

    def __init__(self, build: str, *, id: str, classes: str = "") -> None:
        super().__init__(id=id, classes=classes)
        self.build_name = build  # which ChartData builder feeds this chart, see CHART_BUILDERS
        self.data: ChartData | None = None
        self.drawn_at = -math.inf  # time.monotonic() of the last draw
        self.draws = 0  # figures built so far (tests check that unchanged data is not drawn again)
        self.renders = 0  # pictures built by plotext so far
        self.render_s = 0.0  # what building the last picture took: what the next redraw will cost
        # ChartData built for it so far (tests check a hidden or unchanged chart is not built)
        self.builds = 0
        # (state, version, log scale, size) last built
        self.built_for: tuple[object, ...] | None = None
        self._columns = 0  # the width the figure was downsampled for
        self._rows = 0  # the height its value ticks were chosen for
        # (what it shows, the picture): repaints reuse it
        self._picture: tuple[tuple, Text] | None = None

    def needs_draw(self, data: ChartData) -> bool:
        """Whether `data` differs from what is drawn, or the chart was resized since."""
        return (
            data != self.data or self.size.width != self._columns or self.size.height != self._rows
        )

    def draw(self, data: ChartData) -> None:
        self.data, self._columns, self._rows = data, self.size.width, self.size.height
        self.draws += 1
        self.drawn_at = time.monotonic()
        plt = self.plt
        plt.clear_data()
        plt.title(data.title if data.points else f"{data.title}: no data yet")
        plotted: list[float] = []
        right: list[float] = []  # values on the right y axis: ticks of their own, no markers
        for line in data.lines:
            xs, ys = downsample_minmax(line.xs, line.ys, self._columns)
            ys = [math.log10(y) for y in ys] if data.log_y else ys
            if line.right:
                right += ys
            else:
                plotted += ys
            draw = plt.scatter if line.scatter else plt.plot
            marker = "o" if line.scatter else "braille"
            draw(
                xs,
                ys,
                label=line.label,
                color=line.color,
                marker=marker,
                yside="right" if line.right else None,
            )
        plotted += self._draw_markers(data, marker_bands(plotted))
        self._set_ticks(data, plotted, right)
        self._picture = None
        self.refresh()

    def _draw_markers(self, data: ChartData, bands: dict[str, float] | None) -> list[float]:
        """Draw the markers; returns the y values they use (the axis must reach them)."""
        used: list[float] = []
        if bands is None:
            return used  # nothing to anchor markers against yet
        # best after checkpoint: drawn on top
        for kind, (char, color, label) in MARKER_STYLES.items():
            steps = data.markers.get(kind)
            if not steps:
                continue
            if kind in FAULT_KINDS:
                for step in steps:
                    self.plt.vline(step, color)
            self.plt.scatter(
                steps, [bands[kind]] * len(steps), marker=char, color=color, label=label
            )
            used.append(bands[kind])
        return used

    def _set_ticks(
        self, data: ChartData, plotted: Sequence[float], right: Sequence[float] = ()
    ) -> None:
        """Explicit ticks on both axes: whole step numbers, and round values (or real
        values on a log axis). Always set, never reset: plotext's reset to automatic ticks
        does not work once ticks were set."""
        span = _step_range(data)
        if span is not None:
            ticks = step_ticks(*span)
            # plotext's stubs want floats; the values stay whole numbers
            positions: list[float] = list(ticks)
            self.plt.xticks(positions, [str(tick) for tick in ticks])
        # No more ticks than about one per two plot rows: a short chart would print two on one row.
        count = max(2, min(6, (self._rows - PLOT_FRAME_ROWS) // 2))
        for values, side in ((plotted, 1), (right, 2)):  # plotext's y sides: 1 left, 2 right
            if values:
                low, high = min(values), max(values)
                ticks_labels = (
                    log_ticks(low, high, min(count, 5))
                    if data.log_y
                    else value_ticks(low, high, count)
                )
                self.plt.yticks(*ticks_labels, yside=side)

    def render(self) -> Text:
        key = (self.size, self.app.theme, self.theme)
        if self._picture is not None and self._picture[0] == key:
            # a repaint (another widget moved, a tab came back): same picture
            return self._picture[1]
        try:
            started = time.perf_counter()
            picture = super().render()
            assert isinstance(picture, Text)
            self.render_s = time.perf_counter() - started
            self.renders += 1
            self._picture = (key, picture)
            return picture
        except Exception as exc:  # noqa: BLE001 - a plotting-library failure must not take the dashboard down
            return Text(
                f"{self.data.title if self.data else 'chart'}: cannot draw ({exc!r})", style="red"
            )


class ChartGrid(Container):
    """One chart per declaration in vega_tui/chart_specs.py: the loss chart and the secondary
    charts. Compact terminals show one secondary chart at a time (class `-current`, cycled by
    `cycle()`); roomy ones show them all (see chart_layout and run.tcss). Of the speech and the
    validation chart only one is shown (the other has class `-off`), as `validation_wanted` says."""

    SCOPED_CSS = False  # its rules name the screen (RunScreen.-roomy ChartGrid)
    DEFAULT_CSS = grid_css()

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.log_y = False
        self.current = SECONDARY[0]
        self.validation_shown = False
        self._pending: dict[str, tuple[RunChart, ChartData]] = {}  # charts to draw, one per frame
        self._draw_scheduled = False
        self._deferred = 0  # redraws put off in a row for queued input
        self._state: RunState | None = None  # the state of the last redraw (a catch-up draws it)
        self._catch_up: Timer | None = None

    def compose(self) -> ComposeResult:
        for spec in CHARTS:
            classes = chart_classes(spec, self.current, self._swapped_out())
            yield RunChart(spec.id, id=f"chart-{spec.id}", classes=classes)

    def charts(self) -> list[RunChart]:
        return list(self.query(RunChart))

    def chart(self, name: str) -> RunChart:
        return self.query_one(f"#chart-{name}", RunChart)

    def redraw(self, state: RunState, only_visible: bool = True, force: bool = False) -> int:
        """Rebuild the charts whose data changed; hidden charts wait until they are shown, secondary
        ones until SECONDARY_INTERVAL_S passed since their last draw (unless `force`). The first one
        is drawn now, the others one per frame after it (see `_draw_next`). Returns how many charts
        were on screen."""
        now, self._state = time.monotonic(), state
        self._swap_validation(validation_wanted(state))
        shown = [chart for chart in self.charts() if not only_visible or _on_screen(chart)]
        for chart in shown:
            wait = 0.0 if force else chart.drawn_at + redraw_gap(chart, len(shown)) - now
            if wait > 0:
                # so the last change is drawn even if the run then goes quiet
                self._catch_up_in(wait)
                continue
            # Nothing moved since this chart's last build (same state, scale
            # and size): skip the build too.
            built_for = (id(state), state.version, self.log_y, chart.size)
            if chart.built_for == built_for:
                continue
            chart.built_for, chart.builds = built_for, chart.builds + 1
            builder, columns = CHART_BUILDERS[chart.build_name], chart.size.width
            if chart_spec(chart.build_name).axis.log_toggle:
                data = builder(state, self.log_y, columns)
            else:
                data = builder(state, columns=columns)
            if chart.needs_draw(data):
                self._pending[chart.build_name] = (chart, data)
        if self._pending and not self._draw_scheduled:
            self._draw_next()
        return len(shown)

    def _swap_validation(self, wanted: bool) -> None:
        """Show the validation chart instead of the speech chart (or back); the chart swapped in is
        on screen only after the next layout, so it is drawn then."""
        if wanted == self.validation_shown:
            return
        self.validation_shown = wanted
        speech, validation = SWAPPED
        self.chart(speech).set_class(wanted, "-off")
        self.chart(validation).set_class(not wanted, "-off")
        if self.current in SWAPPED:
            self._show_current(validation if wanted else speech)
        self.call_after_refresh(self._catch_up_now)

    def shown_secondary(self) -> list[str]:
        """The secondary charts `c` cycles through (the speech or the
        validation chart, not both)."""
        return [name for name in SECONDARY if name != self._swapped_out()]

    def _swapped_out(self) -> str:
        speech, validation = SWAPPED
        return speech if self.validation_shown else validation

    def _show_current(self, name: str) -> None:
        self.current = name
        for other in SECONDARY:
            self.chart(other).set_class(other == name, "-current")

    def _catch_up_in(self, delay: float) -> None:
        if self._catch_up is None:
            self._catch_up = self.set_timer(delay, self._catch_up_now)

    def _catch_up_now(self) -> None:
        self._catch_up = None
        if self._state is not None:
            self.redraw(self._state)

    def _draw_next(self) -> None:
        """Draw one pending chart; the rest wait for the next frame, and all wait
        while a key is queued: a plotext build takes tens of milliseconds, and a key
        must not queue behind several of them."""
        self._draw_scheduled = False
        if not self._pending:
            return
        if input_pending(self.app) and self._deferred < MAX_DEFERRALS:
            self._deferred += 1
            self._draw_scheduled = True
            self.set_timer(INPUT_BACKOFF_S, self._draw_next)
            return
        self._deferred = 0
        name = next(iter(self._pending))
        chart, data = self._pending.pop(name)
        chart.draw(data)
        if self._pending:
            self._draw_scheduled = True
            self.call_after_refresh(self._draw_next)

    def draw_all_now(self, state: RunState) -> None:
        """Draw every visible chart at once (a user asked for a change: log scale, next chart)."""
        self.redraw(state, force=True)
        while self._pending:
            chart, data = self._pending.pop(next(iter(self._pending)))
            chart.draw(data)

    def cycle(self) -> str:
        """Show the next secondary chart in compact layouts; returns its name."""
        shown = self.shown_secondary()
        self._show_current(shown[(shown.index(self.current) + 1) % len(shown)])
        return self.current


INPUT_BACKOFF_S = 0.05  # how long a chart redraw steps aside for queued input
# learning rate, throughput, memory, parts: 1 Hz is plenty, and saves CPU
SECONDARY_INTERVAL_S = 1.0
MAX_DEFERRALS = 4  # then draw anyway: a stream of input must not freeze the charts
CHART_SHARE = 0.06  # of one core, for all charts on screen while a run streams in
MAX_GAP_S = 5.0  # however slow a picture is, a chart shows what happened within this long


def redraw_gap(chart: RunChart, shown: int) -> float:
    """Seconds between two draws of `chart`: the shown charts together take at most
    CHART_SHARE of a core (a fast run redraws less often, a slow one as before), the
    secondary ones at most once a second."""
    primary = chart_spec(chart.build_name).place.role == "primary"
    base = 0.0 if primary else SECONDARY_INTERVAL_S
    return min(MAX_GAP_S, max(base, chart.render_s * shown / CHART_SHARE))


def input_pending(app: App) -> bool:
    """Whether the app has events queued (key presses arrive there from the terminal driver)."""
    # Textual keeps it private; no queue reads as "none waiting"
    queue = getattr(app, "_message_queue", None)
    return queue is not None and not queue.empty()


def _on_screen(widget: Widget) -> bool:
    """Displayed and inside the visible part of the screen (False in a hidden tab)."""
    return widget.display and widget.is_mounted and widget.region.area > 0
