"""Training charts: loss (raw, smoothed, validation, fault and checkpoint markers), loss parts, learning rate,
throughput, memory, free-running speech and validation metric (against a reference), drawn with plotext.

Runs with several optimizers (a GAN vocoder or a vits voice: discriminator, then generator) get
one learning-rate line per group, the other groups' losses on the loss chart's right axis, the
generator's parts (mel, adversarial, feature; kl and duration for vits) and the validation chart
in the speech chart's place.

What to draw is worked out by pure functions (`loss_chart`, `lr_chart`, ...) that turn a `RunState` into a
`ChartData`; `RunChart` only hands a `ChartData` to plotext. Keeping the two apart lets tests check what a
chart holds without parsing terminal art, and keeps plotting cheap: the screen calls `ChartGrid.redraw` on a
timer, only when the store changed; only charts that are on screen and whose data changed are rebuilt, one
per frame, never while a key press waits; each series is cut down to two points per column of the chart
(the lowest and highest, so spikes survive) before plotext sees it; a repaint reuses the last picture.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.text import Text
from textual.containers import Container
from textual.widget import Widget
from textual_plotext import PlotextPlot

from trainer_core.contract.units import GIB, format_number
from vega_tui.widgets.chart_ticks import log_ticks, step_ticks, value_ticks

if TYPE_CHECKING:
    from textual.app import App, ComposeResult
    from textual.timer import Timer

    from vega_tui.run_state import RunState, Series


# Marker kind -> (plotext marker character, colour, legend label). Faults also get a vertical line.
MARKER_STYLES: dict[str, tuple[str, str, str]] = {
    "checkpoint": ("c", "blue", "ckpt"),
    "best": ("*", "green", "best"),
    "oom": ("X", "red", "OOM"),
    "nonfinite": ("!", "magenta", "non-finite"),
    "passed": ("^", "green", "beats ref"),
    "early_stop": ("E", "yellow", "early stop"),
    "memory": ("M", "yellow", "memory"),
}
FAULT_KINDS = ("oom", "nonfinite")


@dataclass
class Line:
    """One plotted series; `scatter` draws points only (validation losses are sparse); `right` plots it
    against a y axis of its own on the right (a loss on another scale)."""

    label: str
    xs: list[float]
    ys: list[float]
    color: str
    scatter: bool = False
    right: bool = False


@dataclass
class ChartData:
    """Everything one chart shows. `markers` maps a marker kind to the steps where it happened."""

    title: str
    lines: list[Line] = field(default_factory=list)
    markers: dict[str, list[int]] = field(default_factory=dict)
    log_y: bool = False

    @property
    def points(self) -> int:
        return sum(len(line.xs) for line in self.lines)


def finite_points(xs: Sequence[float], ys: Sequence[float], positive: bool = False) -> tuple[list[float], list[float]]:
    """Drop NaN/inf values (a skipped step), and values <= 0 on a log axis, which plotext cannot place."""
    keep_x, keep_y = [], []
    for x, y in zip(xs, ys, strict=False):
        if y is None or not math.isfinite(y) or (positive and y <= 0):
            continue
        keep_x.append(x)
        keep_y.append(y)
    return keep_x, keep_y


def downsample_minmax(xs: Sequence[float], ys: Sequence[float], columns: int) -> tuple[list[float], list[float]]:
    """At most two points per column: the lowest and the highest y of the x range that column covers, in x
    order. A plot one cell wide cannot show more, and a lone spike (a loss blow-up) is kept, not averaged."""
    if columns < 1 or len(xs) <= 2 * columns:
        return list(xs), list(ys)
    first, last = xs[0], xs[-1]
    scale = columns / ((last - first) or 1.0)
    out_x: list[float] = []
    out_y: list[float] = []
    column, low_i, high_i = None, 0, 0
    for i, x in enumerate(xs):
        c = min(columns - 1, int((x - first) * scale))
        if c != column:
            if column is not None:
                _emit_extremes(xs, ys, low_i, high_i, out_x, out_y)
            column, low_i, high_i = c, i, i
        elif ys[i] < ys[low_i]:
            low_i = i
        elif ys[i] > ys[high_i]:
            high_i = i
    _emit_extremes(xs, ys, low_i, high_i, out_x, out_y)
    return out_x, out_y


def _emit_extremes(
    xs: Sequence[float], ys: Sequence[float], low_i: int, high_i: int, out_x: list[float], out_y: list[float]
) -> None:
    for i in sorted({low_i, high_i}):
        out_x.append(xs[i])
        out_y.append(ys[i])


def series_line(
    state: RunState,
    key: str,
    label: str,
    color: str,
    *,
    scale: float = 1.0,
    positive: bool = False,
    scatter: bool = False,
    right: bool = False,
) -> Line | None:
    """A `Line` from one store series (None when the series is missing or has no finite point)."""
    series: Series | None = state.series.get(key)
    if series is None or len(series) == 0:
        return None
    ys = series.ys if scale == 1.0 else [y / scale if y is not None else y for y in series.ys]
    xs, ys = finite_points(series.xs, ys, positive)
    return Line(label, xs, ys, color, scatter, right) if xs else None


def flat_line(label: str, xs: Sequence[float], y: float, color: str) -> Line:
    """A horizontal line at `y` across the steps of `xs` (at least one step wide): a floor or a reference."""
    return Line(label, [xs[0], max(xs[-1], xs[0] + 1)], [y] * 2, color)


def _present(lines: Iterable[Line | None]) -> list[Line]:
    return [line for line in lines if line is not None]


def marker_steps(state: RunState) -> dict[str, list[int]]:
    """Steps of every OOM, non-finite, checkpoint and best-model event, by kind."""
    steps: dict[str, list[int]] = {}
    for marker in state.markers:
        if marker.kind in MARKER_STYLES:
            steps.setdefault(marker.kind, []).append(marker.step)
    return steps


def loss_chart(state: RunState, log_y: bool = False) -> ChartData:
    """Training loss (raw and smoothed) and validation loss, with markers on the step axis."""
    if len(state.groups) > 1:
        return group_loss_chart(state, log_y)
    lines = _present(
        (
            series_line(state, "loss", "loss", "gray", positive=log_y),
            series_line(state, "loss_smooth", "smoothed", "cyan", positive=log_y),
            series_line(state, "val_loss", "validation", "orange", positive=log_y, scatter=True),
        )
    )
    title = "loss (log scale)" if log_y else "loss"
    return ChartData(title, lines, marker_steps(state), log_y=log_y)


# Optimizer group colours, by the group's place in the update order (the same group, the same colour on
# every chart).
GROUP_COLORS = ("magenta", "green", "blue", "orange", "red")


def group_color(state: RunState, group: str) -> str:
    return GROUP_COLORS[state.groups.index(group) % len(GROUP_COLORS)]


def group_loss_chart(state: RunState, log_y: bool = False) -> ChartData:
    """Several optimizers (a GAN vocoder): the primary group's loss (`loss`, every step) raw and smoothed on the
    left axis, each other group's total on a right axis of its own (a discriminator's ~1 would lie flat under a
    generator's ~100). The validation loss measures something else there: it has the validation chart."""
    primary = state.primary_group
    lines = [
        series_line(state, "loss", primary or "loss", "gray", positive=log_y),
        series_line(state, "loss_smooth", "smoothed", "cyan", positive=log_y),
    ]
    for group in state.groups:
        if group != primary:
            color = group_color(state, group)
            lines.append(series_line(state, f"part:{group}.total", group, color, positive=log_y, right=True))
    title = "loss (log scale)" if log_y else "loss"
    return ChartData(title, _present(lines), marker_steps(state), log_y=log_y)


PART_COLORS = ("cyan", "orange", "green", "magenta", "blue", "red", "gray")
METRIC_COLOR = "orange"  # the validation chart's metric


def parts_chart(state: RunState) -> ChartData:
    """Each named part of the loss (`part:<name>` series: mel, duration, ... for TTS)."""
    keys = sorted(key for key in state.series if key.startswith("part:"))
    if len(state.groups) > 1:
        return group_parts_chart(state, keys)
    lines = _present(
        series_line(state, key, key.removeprefix("part:"), PART_COLORS[i % len(PART_COLORS)])
        for i, key in enumerate(keys)
    )
    return ChartData("loss parts", lines)


def group_parts_chart(state: RunState, keys: list[str]) -> ChartData:
    """Several optimizers: the parts without the groups' totals (the loss chart has those), named without
    their group when only one group has parts (a GAN's generator: mel, adversarial, feature)."""
    totals = {f"part:{group}.total" for group in state.groups}
    names = [key.removeprefix("part:") for key in keys if key not in totals]
    owners = {name.partition(".")[0] for name in names}
    owner = owners.pop() if len(owners) == 1 and all("." in name for name in names) else None
    lines = _present(
        series_line(state, f"part:{name}", name.removeprefix(f"{owner}."), PART_COLORS[i % len(PART_COLORS)])
        for i, name in enumerate(names)
    )
    return ChartData(f"loss parts ({owner})" if owner else "loss parts", lines)


def lr_chart(state: RunState) -> ChartData:
    """The learning rate; with several optimizers, one line per group, labelled by its name."""
    groups = _present(series_line(state, f"lr:{group}", group, group_color(state, group)) for group in state.groups)
    if groups:
        return ChartData("learning rate", groups)
    return ChartData("learning rate", _present([series_line(state, "lr", "lr", "green")]))


def throughput_chart(state: RunState) -> ChartData:
    faults = {kind: steps for kind, steps in marker_steps(state).items() if kind in FAULT_KINDS}
    return ChartData("samples/s", _present([series_line(state, "samples_per_s", "samples/s", "orange+")]), faults)


def memory_chart(state: RunState) -> ChartData:
    """Device and host memory in GiB, with OOM and memory-manager markers (both can halve the batch)."""
    lines = _present(
        (
            series_line(state, "mem_device", "device", "magenta", scale=GIB),
            series_line(state, "mem_host", "host", "blue", scale=GIB),
        )
    )
    faults = {kind: steps for kind, steps in marker_steps(state).items() if kind in ("oom", "memory")}
    return ChartData("memory (GiB)", lines, faults)


def speech_chart(state: RunState) -> ChartData:
    """Free-running distance of held-out sentences (voice runs), with the vocoder's floor as a flat line."""
    distance = series_line(state, "free_running", "free-running", "cyan")
    acoustic = series_line(state, "free_running_acoustic", "before vocoder", "gray")
    floor = state.free_running_floor
    reference = None
    if distance is not None and floor is not None:
        reference = flat_line("floor (vocoder)", distance.xs, floor, "green")
    return ChartData("free-running distance (voice)", _present((distance, acoustic, reference)), _best_only(state))


def _best_only(state: RunState, also: tuple[str, ...] = ()) -> dict[str, list[int]]:
    return {kind: steps for kind, steps in marker_steps(state).items() if kind == "best" or kind in also}


def validation_chart(state: RunState) -> ChartData:
    """The validation metric (a vocoder's mel_l1; the validation loss when there is none) and, when the trainer
    measured one, the reference it should beat (Griffin-Lim copy synthesis) as a flat line labelled with its
    name, with best-model markers, one where the metric first beat the reference and one where early stopping
    ended the run."""
    name = state.metric_name
    metric = series_line(state, f"val_metric:{name}", name, METRIC_COLOR) if name else None
    if metric is None:
        name, metric = None, series_line(state, "val_loss", "validation loss", METRIC_COLOR)
    reference = state.reference.get(name) if name else None
    label = state.reference_name or "reference"
    line = flat_line(label, metric.xs, reference, "green") if metric is not None and reference is not None else None
    title = _validation_title(state, name, reference)
    others = [] if reference is not None else _other_metrics(state, name)
    return ChartData(title, _present((metric, line, *others)), _best_only(state, ("passed", "early_stop")))


def _other_metrics(state: RunState, shown: str | None) -> list[Line | None]:
    """A task's further validation metrics (its val_metrics beyond the first), on the right axis: each scale its own."""
    keys = sorted(key for key in state.series if key.startswith("val_metric:") and key != f"val_metric:{shown}")
    colors = [color for color in PART_COLORS if color != METRIC_COLOR]  # not the metric's colour
    return [
        series_line(state, key, key.removeprefix("val_metric:"), colors[i % len(colors)], right=True)
        for i, key in enumerate(keys)
    ]


def _validation_title(state: RunState, name: str | None, reference: float | None) -> str:
    """`mel_l1 2.83 · griffin_lim 0.215`: the latest value and the line to beat (short: a compact chart)."""
    if name is None:
        return "validation loss"
    series = state.series.get(f"val_metric:{name}")
    last = series.last if series is not None else None
    title = f"{name} {format_number(last, 3)}" if last is not None else f"validation {name}"
    label = state.reference_name or "reference"
    return title + (f" · {label} {format_number(reference, 3)}" if reference is not None else "")


def validation_wanted(state: RunState) -> bool:
    """Whether the validation chart takes the speech chart's place: the run is scored against a
    reference, or trains several optimizers (a GAN vocoder or a vits voice: its loss is not what
    validation measures), or its task says it does not speak (a model of one's own, an LM: its
    metrics are charted there)."""
    speaks = state.task.get("speaks") if state.task is not None else None
    return bool(state.reference) or len(state.groups) > 1 or speaks is False


# Rows of a chart that are not plot: title, top and bottom frame, step labels.
PLOT_FRAME_ROWS = 4


def _step_range(data: ChartData) -> tuple[float, float] | None:
    xs = [x for line in data.lines for x in (line.xs[0], line.xs[-1]) if line.xs]
    xs += [x for steps in data.markers.values() for x in steps]
    return (min(xs), max(xs)) if xs else None


def marker_bands(plotted: list[float]) -> dict[str, float] | None:
    """The plotted y of each marker kind: bands just below the lowest value, so markers never hide the
    curve nor sit under the legend (top left). Checkpoints in one band, faults in the next one down."""
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
        "oom": fault_y,
        "nonfinite": fault_y,
        "memory": fault_y,
    }


class RunChart(PlotextPlot):
    """A plotext chart that draws a `ChartData`; `data` keeps what was drawn last (tests read it).

    A log axis is drawn by plotting log10(y) on a linear axis with relabelled ticks: plotext's own log
    scale rewrites its data while rendering, so a second render of the same figure (any repaint) fails.
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
        self._columns = 0  # the width the figure was downsampled for
        self._rows = 0  # the height its value ticks were chosen for
        self._picture: tuple[tuple, Text] | None = None  # (what it shows, the picture): repaints reuse it

    def needs_draw(self, data: ChartData) -> bool:
        """Whether `data` differs from what is drawn, or the chart was resized since."""
        return data != self.data or self.size.width != self._columns or self.size.height != self._rows

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
            draw(xs, ys, label=line.label, color=line.color, marker=marker, yside="right" if line.right else None)
        plotted += self._draw_markers(data, marker_bands(plotted))
        self._set_ticks(data, plotted, right)
        self._picture = None
        self.refresh()

    def _draw_markers(self, data: ChartData, bands: dict[str, float] | None) -> list[float]:
        """Draw the markers; returns the y values they use (the axis must reach them)."""
        used: list[float] = []
        if bands is None:
            return used  # nothing to anchor markers against yet
        for kind, (char, color, label) in MARKER_STYLES.items():  # best after checkpoint: drawn on top
            steps = data.markers.get(kind)
            if not steps:
                continue
            if kind in FAULT_KINDS:
                for step in steps:
                    self.plt.vline(step, color)
            self.plt.scatter(steps, [bands[kind]] * len(steps), marker=char, color=color, label=label)
            used.append(bands[kind])
        return used

    def _set_ticks(self, data: ChartData, plotted: Sequence[float], right: Sequence[float] = ()) -> None:
        """Explicit ticks on both axes: whole step numbers, and round values (or real values on a log axis).
        Always set, never reset: plotext's reset to automatic ticks does not work once ticks were set."""
        span = _step_range(data)
        if span is not None:
            ticks = step_ticks(*span)
            positions: list[float] = list(ticks)  # plotext's stubs want floats; the values stay whole numbers
            self.plt.xticks(positions, [str(tick) for tick in ticks])
        # No more ticks than about one per two plot rows: a short chart would print two on one row.
        count = max(2, min(6, (self._rows - PLOT_FRAME_ROWS) // 2))
        for values, side in ((plotted, 1), (right, 2)):  # plotext's y sides: 1 left, 2 right
            if values:
                low, high = min(values), max(values)
                ticks_labels = log_ticks(low, high, min(count, 5)) if data.log_y else value_ticks(low, high, count)
                self.plt.yticks(*ticks_labels, yside=side)

    def render(self) -> Text:
        key = (self.size, self.app.theme, self.theme)
        if self._picture is not None and self._picture[0] == key:
            return self._picture[1]  # a repaint (another widget moved, a tab came back): same picture
        try:
            picture = super().render()
            assert isinstance(picture, Text)
            self.renders += 1
            self._picture = (key, picture)
            return picture
        except Exception as exc:  # noqa: BLE001 - a plotting-library failure must not take the dashboard down
            return Text(f"{self.data.title if self.data else 'chart'}: cannot draw ({exc!r})", style="red")


CHART_BUILDERS: dict[str, Callable[[RunState], ChartData]] = {
    "loss": loss_chart,
    "parts": parts_chart,
    "lr": lr_chart,
    "throughput": throughput_chart,
    "memory": memory_chart,
    "speech": speech_chart,
    "validation": validation_chart,
}
# The secondary charts, in the order `c` cycles them on a small terminal. "validation" takes the place of
# "speech" for the runs that want it (see `validation_wanted`); only one of them is shown.
SECONDARY = ("lr", "throughput", "memory", "parts", "speech", "validation")
SWAPPED = ("speech", "validation")


class ChartGrid(Container):
    """The loss chart and the secondary charts. Compact terminals show one secondary chart at a time
    (class `-current`, cycled by `cycle()`); roomy ones show them all (see run.tcss). Of the speech and the
    validation chart only one is shown (the other has class `-off`), as `validation_wanted` says."""

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
        yield RunChart("loss", id="chart-loss", classes="primary")
        for name in SECONDARY:
            classes = "secondary -current" if name == self.current else "secondary"
            off = name == self._swapped_out()
            yield RunChart(name, id=f"chart-{name}", classes=f"{classes} -off" if off else classes)

    def charts(self) -> list[RunChart]:
        return list(self.query(RunChart))

    def chart(self, name: str) -> RunChart:
        return self.query_one(f"#chart-{name}", RunChart)

    def redraw(self, state: RunState, only_visible: bool = True, force: bool = False) -> None:
        """Rebuild the charts whose data changed; hidden charts wait until they are shown, secondary ones
        until SECONDARY_INTERVAL_S passed since their last draw (unless `force`). The first one is drawn
        now, the others one per frame after it (see `_draw_next`)."""
        now, self._state = time.monotonic(), state
        self._swap_validation(validation_wanted(state))
        for chart in self.charts():
            if only_visible and not _on_screen(chart):
                continue
            wait = 0.0 if force or chart.build_name == "loss" else chart.drawn_at + SECONDARY_INTERVAL_S - now
            if wait > 0:
                self._catch_up_in(wait)  # so the last change is drawn even if the run then goes quiet
                continue
            builder = CHART_BUILDERS[chart.build_name]
            data = loss_chart(state, self.log_y) if chart.build_name == "loss" else builder(state)
            if chart.needs_draw(data):
                self._pending[chart.build_name] = (chart, data)
        if self._pending and not self._draw_scheduled:
            self._draw_next()

    def _swap_validation(self, wanted: bool) -> None:
        """Show the validation chart instead of the speech chart (or back); the chart swapped in is on screen
        only after the next layout, so it is drawn then."""
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
        """The secondary charts `c` cycles through (the speech or the validation chart, not both)."""
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
        """Draw one pending chart; the rest wait for the next frame, and all wait while a key is queued:
        a plotext build takes tens of milliseconds, and a key must not queue behind several of them."""
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
SECONDARY_INTERVAL_S = 1.0  # learning rate, throughput, memory, parts: 1 Hz is plenty, and saves CPU
MAX_DEFERRALS = 4  # then draw anyway: a stream of input must not freeze the charts


def input_pending(app: App) -> bool:
    """Whether the app has events queued (key presses arrive there from the terminal driver)."""
    queue = getattr(app, "_message_queue", None)  # Textual keeps it private; no queue reads as "none waiting"
    return queue is not None and not queue.empty()


def _on_screen(widget: Widget) -> bool:
    """Displayed and inside the visible part of the screen (False in a hidden tab)."""
    return widget.display and widget.is_mounted and widget.region.area > 0
