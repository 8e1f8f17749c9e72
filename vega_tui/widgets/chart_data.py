"""What each training chart shows, as data: pure functions (`loss_chart`, `lr_chart`, ...)
that turn a `RunState` into a `ChartData` (lines, markers, scale). No Textual, no plotext:
tests check what a chart holds without parsing terminal art, and `vega_tui.widgets.charts`
only hands a `ChartData` to plotext.

Given a chart's width (`columns`), each series is read from the store's min/max levels
(`Series.envelope`), so building a chart costs O(width) however long the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import cycle
from typing import TYPE_CHECKING

from trainer_core.contract.units import format_number
from vega_tui.chart_specs import (
    CHARTS,
    FREE_RUNNING,
    FREE_RUNNING_ACOUSTIC,
    GROUP_LR,
    LOSS,
    LOSS_SMOOTH,
    LR,
    PARTS,
    VAL_LOSS,
    VAL_METRICS,
    ChartSpec,
    SeriesSpec,
    chart_spec,
)

if TYPE_CHECKING:
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
    "overtraining": ("O", "yellow", "overtraining"),
}
FAULT_KINDS = ("oom", "nonfinite")


@dataclass
class Line:
    """One plotted series; `scatter` draws points only (validation losses are sparse); `right` plots
    it against a y axis of its own on the right (a loss on another scale)."""

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


def finite_points(
    xs: Sequence[float], ys: Sequence[float], positive: bool = False
) -> tuple[list[float], list[float]]:
    """Drop NaN/inf values (a skipped step), and values <= 0 on a log axis,
    which plotext cannot place."""
    keep_x, keep_y = [], []
    for x, y in zip(xs, ys, strict=False):
        if y is None or not math.isfinite(y) or (positive and y <= 0):
            continue
        keep_x.append(x)
        keep_y.append(y)
    return keep_x, keep_y


def downsample_minmax(
    xs: Sequence[float], ys: Sequence[float], columns: int
) -> tuple[list[float], list[float]]:
    """At most two points per column: the lowest and the highest y of the x range that column
    covers, in x order. A plot one cell wide cannot show more, and a lone spike (a loss
    blow-up) is kept, not averaged."""
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
    xs: Sequence[float],
    ys: Sequence[float],
    low_i: int,
    high_i: int,
    out_x: list[float],
    out_y: list[float],
) -> None:
    for i in sorted({low_i, high_i}):
        out_x.append(xs[i])
        out_y.append(ys[i])


def series_line(
    state: RunState,
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
    """A `Line` from one store series (None when the series is missing or has no finite point); with
    `columns` > 0, the series' envelope for that width (O(columns)), else every stored point."""
    series: Series | None = state.series.get(key)
    if series is None or series.last is None:
        return None
    xs, ys = series.envelope(columns) if columns > 0 else (series.xs, series.ys)
    ys = ys if scale == 1.0 else [y / scale for y in ys]
    xs, ys = finite_points(xs, ys, positive)
    return Line(label, xs, ys, color, scatter, right) if xs else None


def flat_line(label: str, xs: Sequence[float], y: float, color: str) -> Line:
    """A horizontal line at `y` across the steps of `xs` (at least one step
    wide): a floor or a reference."""
    return Line(label, [xs[0], max(xs[-1], xs[0] + 1)], [y] * 2, color)


def declared_line(
    state: RunState,
    columns: int,
    series: SeriesSpec,
    *,
    positive: bool = False,
    scatter: bool = False,
) -> Line | None:
    """A `Line` of a declared series, with its declared label, colour and scale."""
    label, color, scale = series.label or series.key, series.color, series.scale
    line = series_line(state, columns, series.key, label, color, scale=scale, positive=positive)
    if line is not None:
        line.scatter = scatter
    return line


def declared_chart(spec: ChartSpec, state: RunState, columns: int = 0) -> ChartData:
    """A chart with no builder of its own: its declared series as lines (a family: one line per
    member), with its declared markers."""
    lines: list[Line | None] = []
    for series in spec.series:
        if not series.family:
            lines.append(declared_line(state, columns, series))
            continue
        for i, name in enumerate(series.members(state.series)):
            color = PART_COLORS[i % len(PART_COLORS)]
            key, scale = series.of(name), series.scale
            lines.append(series_line(state, columns, key, name, color, scale=scale))
    return ChartData(spec.title, _present(lines), declared_markers(state, spec))


def declared_markers(state: RunState, spec: ChartSpec) -> dict[str, list[int]]:
    """The steps of the marker kinds `spec` shows."""
    return {kind: steps for kind, steps in marker_steps(state).items() if kind in spec.markers}


def _present(lines: Iterable[Line | None]) -> list[Line]:
    return [line for line in lines if line is not None]


def marker_steps(state: RunState) -> dict[str, list[int]]:
    """Steps of every OOM, non-finite, checkpoint and best-model event, by kind."""
    steps: dict[str, list[int]] = {}
    for marker in state.markers:
        if marker.kind in MARKER_STYLES:
            steps.setdefault(marker.kind, []).append(marker.step)
    return steps


def loss_chart(state: RunState, log_y: bool = False, columns: int = 0) -> ChartData:
    """Training loss (raw and smoothed) and validation loss, with markers on the step axis."""
    if len(state.groups) > 1:
        return group_loss_chart(state, log_y, columns)
    lines = _present(
        (
            declared_line(state, columns, LOSS, positive=log_y),
            declared_line(state, columns, LOSS_SMOOTH, positive=log_y),
            declared_line(state, columns, VAL_LOSS, positive=log_y, scatter=True),
        )
    )
    markers = declared_markers(state, chart_spec("loss"))
    return ChartData(_loss_title(log_y), lines, markers, log_y=log_y)


def _loss_title(log_y: bool) -> str:
    title = chart_spec("loss").title
    return f"{title} (log scale)" if log_y else title


# Optimizer group colours, by the group's place in the update order (the same group, the
# same colour on every chart).
GROUP_COLORS = ("magenta", "green", "blue", "orange", "red")


def group_color(state: RunState, group: str) -> str:
    return GROUP_COLORS[state.groups.index(group) % len(GROUP_COLORS)]


def group_loss_chart(state: RunState, log_y: bool = False, columns: int = 0) -> ChartData:
    """Several optimizers (a GAN vocoder): the primary group's loss (`loss`, every step) raw and
    smoothed on the left axis, each other group's total on a right axis of its own (a
    discriminator's ~1 would lie flat under a generator's ~100). The validation loss measures
    something else there: it has the validation chart."""
    primary = state.primary_group
    lines = [
        series_line(state, columns, LOSS.key, primary or LOSS.label, LOSS.color, positive=log_y),
        declared_line(state, columns, LOSS_SMOOTH, positive=log_y),
    ]
    for group in state.groups:
        if group != primary:
            color = group_color(state, group)
            total = PARTS.of(f"{group}.total")
            line = series_line(state, columns, total, group, color, positive=log_y, right=True)
            lines.append(line)
    markers = declared_markers(state, chart_spec("loss"))
    return ChartData(_loss_title(log_y), _present(lines), markers, log_y=log_y)


PART_COLORS = ("cyan", "orange", "green", "magenta", "blue", "red", "gray")
METRIC_COLOR = "orange"  # the validation chart's metric


def parts_chart(state: RunState, columns: int = 0) -> ChartData:
    """Each named part of the loss (`part:<name>` series: mel, duration, ... for TTS)."""
    names = PARTS.members(state.series)
    if len(state.groups) > 1:
        return group_parts_chart(state, names, columns)
    lines = _present(
        series_line(state, columns, PARTS.of(name), name, PART_COLORS[i % len(PART_COLORS)])
        for i, name in enumerate(names)
    )
    return ChartData(chart_spec("parts").title, lines)


def group_parts_chart(state: RunState, parts: list[str], columns: int = 0) -> ChartData:
    """Several optimizers: the parts without the groups' totals (the loss chart has
    those), named without their group when only one group has parts (a GAN's
    generator: mel, adversarial, feature)."""
    totals = {f"{group}.total" for group in state.groups}
    names = [name for name in parts if name not in totals]
    owners = {name.partition(".")[0] for name in names}
    owner = owners.pop() if len(owners) == 1 and all("." in name for name in names) else None
    colors = [PART_COLORS[i % len(PART_COLORS)] for i in range(len(names))]
    lines = _present(
        series_line(state, columns, PARTS.of(name), name.removeprefix(f"{owner}."), color)
        for name, color in zip(names, colors, strict=True)
    )
    return ChartData(f"loss parts ({owner})" if owner else "loss parts", lines)


def lr_chart(state: RunState, columns: int = 0) -> ChartData:
    """The learning rate; with several optimizers, one line per group, labelled by its name."""
    title = chart_spec("lr").title
    lines = [(GROUP_LR.of(group), group, group_color(state, group)) for group in state.groups]
    groups = _present(series_line(state, columns, *line) for line in lines)
    if groups:
        return ChartData(title, groups)
    return ChartData(title, _present([declared_line(state, columns, LR)]))


def speech_chart(state: RunState, columns: int = 0) -> ChartData:
    """Free-running distance of held-out sentences (voice runs), with the
    vocoder's floor as a flat line."""
    distance = declared_line(state, columns, FREE_RUNNING)
    acoustic = declared_line(state, columns, FREE_RUNNING_ACOUSTIC)
    floor = state.free_running_floor
    reference = None
    if distance is not None and floor is not None:
        reference = flat_line("floor (vocoder)", distance.xs, floor, "green")
    spec = chart_spec("speech")
    markers = declared_markers(state, spec)
    return ChartData(spec.title, _present((distance, acoustic, reference)), markers)


def validation_chart(state: RunState, columns: int = 0) -> ChartData:
    """The validation metric (a vocoder's mel_l1; the validation loss when there is none) and, when
    the trainer measured one, the reference it should beat (Griffin-Lim copy synthesis) as a flat
    line labelled with its name, with best-model markers, one where the metric first beat the
    reference, one where overtraining was seen and one where early stopping ended the run."""
    name = state.metric_name
    metric = None
    if name:
        metric = series_line(state, columns, VAL_METRICS.of(name), name, METRIC_COLOR)
    if metric is None:
        name = None
        metric = series_line(state, columns, VAL_LOSS.key, "validation loss", METRIC_COLOR)
    reference = state.reference.get(name) if name else None
    label = state.reference_name or "reference"
    line = (
        flat_line(label, metric.xs, reference, "green")
        if metric is not None and reference is not None
        else None
    )
    title = _validation_title(state, name, reference)
    others = [] if reference is not None else _other_metrics(state, name, columns)
    markers = declared_markers(state, chart_spec("validation"))
    return ChartData(title, _present((metric, line, *others)), markers)


def _other_metrics(state: RunState, shown: str | None, columns: int) -> list[Line | None]:
    """A task's further validation metrics (its val_metrics beyond the first), on the
    right axis: each scale its own."""
    names = [name for name in VAL_METRICS.members(state.series) if name != shown]
    colors = [color for color in PART_COLORS if color != METRIC_COLOR]  # not the metric's colour
    return [
        series_line(state, columns, VAL_METRICS.of(name), name, color, right=True)
        for name, color in zip(names, cycle(colors), strict=False)
    ]


def _validation_title(state: RunState, name: str | None, reference: float | None) -> str:
    """`mel_l1 2.83 · griffin_lim 0.215`: the latest value and the line to
    beat (short: a compact chart)."""
    if name is None:
        return "validation loss"
    series = state.series.get(VAL_METRICS.of(name))
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


# The charts with a builder of their own; every other declared chart is drawn by `declared_chart`.
CUSTOM_BUILDERS: dict[str, Callable[..., ChartData]] = {
    "loss": loss_chart,
    "parts": parts_chart,
    "lr": lr_chart,
    "speech": speech_chart,
    "validation": validation_chart,
}
CHART_BUILDERS: dict[str, Callable[..., ChartData]] = {
    spec.id: CUSTOM_BUILDERS.get(spec.id, partial(declared_chart, spec)) for spec in CHARTS
}


def throughput_chart(state: RunState, columns: int = 0) -> ChartData:
    return CHART_BUILDERS["throughput"](state, columns=columns)


def memory_chart(state: RunState, columns: int = 0) -> ChartData:
    """Device and host memory in GiB, with OOM and memory-manager markers."""
    return CHART_BUILDERS["memory"](state, columns=columns)
