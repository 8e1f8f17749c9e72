"""Every training chart, declared once: what it plots, which events feed it, its axis, its place.

`CHARTS` is the one list to edit to add a chart (docs/architecture.md, "Where to change it").
From it: the store's generic feeder (`vega_tui.store_feed`) copies each declared event field
into its series, the chart grid (`vega_tui.widgets.charts`) composes one chart per
declaration and lays them out (`vega_tui.widgets.chart_layout`), and a chart without a
builder of its own in `chart_data` draws its declared series as lines.
tests/test_chart_specs.py fails when a declared series is never fed.

Series keys are the `SeriesSpec` constants below, never strings matched by convention; a family
(`PARTS`, `VAL_METRICS`, `GROUP_LR`) is one series per key of a dict field (`part:mel`, ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from trainer_core.contract.protocol import Event, FreeRunningEvent, StepEvent, ValidationEvent
from trainer_core.contract.units import GIB


@dataclass(frozen=True)
class Feed:
    """An event field that feeds a series; x is the event's `x` field (the step)."""

    event: type[Event]
    field: str
    x: str = "step"
    skip: tuple[str, ...] = ()  # a family's dict keys left out (the `total` of the loss parts)


@dataclass(frozen=True)
class SeriesSpec:
    """One store series (or, with `family`, one per key of the fed dict, keyed `<key>:<name>`).

    `derived`: the store's own code fills it (windows of steps, smoothing, the primary optimizer
    group); the feeds then say what it is made from. Otherwise the generic feeder copies the field.
    """

    key: str
    feeds: tuple[Feed, ...]
    label: str = ""
    color: str = "cyan"
    scale: float = 1.0  # plotted as value / scale (bytes shown in GiB)
    family: bool = False
    derived: bool = False

    def of(self, member: str) -> str:
        """The store key of one member of a family."""
        return f"{self.key}:{member}"

    def members(self, keys: Iterable[str]) -> list[str]:
        """The names of this family's series among `keys`, sorted."""
        prefix = f"{self.key}:"
        return sorted(key.removeprefix(prefix) for key in keys if key.startswith(prefix))


@dataclass(frozen=True)
class Axis:
    x: Literal["step", "time"] = "step"
    y: Literal["linear", "log"] = "linear"
    unit: str = ""
    log_toggle: bool = False  # `l` switches this chart between a linear and a log y axis


@dataclass(frozen=True)
class Place:
    """Where a chart sits. The primary chart is always shown; compact terminals show one secondary
    chart beside it (`c` cycles them, in declaration order), roomy ones lay out all of them, two a
    row (`wide`: a row of its own; `weight`: the row's share of the height). A chart that `shares`
    another's cell takes it in turns with it (chart_data's `validation_wanted` says which)."""

    role: Literal["primary", "secondary"] = "secondary"
    wide: bool = False
    weight: int = 2
    shares: str | None = None


@dataclass(frozen=True)
class ChartSpec:
    """One chart: `id` (widget `#chart-<id>`), title, the series it plots, the marker kinds it
    shows (see chart_data.MARKER_STYLES), its axis and place."""

    id: str
    title: str
    series: tuple[SeriesSpec, ...]
    axis: Axis = Axis()
    place: Place = Place()
    markers: tuple[str, ...] = ()


# -- series ----------------------------------------------------------------------------------


def fed(event: type[Event], *fields: str, skip: tuple[str, ...] = ()) -> tuple[Feed, ...]:
    """Feeds from `fields` of one event type."""
    return tuple(Feed(event, name, skip=skip) for name in fields)


STEP, VALIDATION, FREE = StepEvent, ValidationEvent, FreeRunningEvent
LOSS = SeriesSpec("loss", fed(STEP, "loss_series", "loss"), "loss", "gray", derived=True)
LOSS_SMOOTH = SeriesSpec("loss_smooth", LOSS.feeds, "smoothed", "cyan", derived=True)
VAL_LOSS = SeriesSpec("val_loss", fed(VALIDATION, "loss"), "validation", "orange")
LR = SeriesSpec("lr", fed(STEP, "lr_series", "lr"), "lr", "green", derived=True)
GROUP_LR = SeriesSpec("lr", fed(STEP, "lrs"), family=True, derived=True)
SAMPLES_PER_S = SeriesSpec("samples_per_s", fed(STEP, "samples_per_s"), "samples/s", "orange+")
MEM_DEVICE = SeriesSpec("mem_device", fed(STEP, "mem_device_bytes"), "device", "magenta", GIB)
MEM_HOST = SeriesSpec("mem_host", fed(STEP, "mem_host_bytes"), "host", "blue", GIB)
PARTS = SeriesSpec("part", fed(STEP, "losses", skip=("total",)), family=True)
FREE_RUNNING = SeriesSpec("free_running", fed(FREE, "distance"), "free-running", "cyan")
ACOUSTIC = fed(FREE, "acoustic_distance")
FREE_RUNNING_ACOUSTIC = SeriesSpec("free_running_acoustic", ACOUSTIC, "before vocoder", "gray")
VAL_METRICS = SeriesSpec("val_metric", fed(VALIDATION, "metrics"), family=True)

# -- charts, in the order they are laid out and cycled --------------------------------------

FAULTS = ("oom", "nonfinite")
MEMORY_MARKERS = ("oom", "memory")  # both can halve the batch
GIB_AXIS = Axis(unit="GiB")
EVERY_MARKER: tuple[str, ...] = ("checkpoint", "best", "oom", "nonfinite", "passed")
EVERY_MARKER += ("early_stop", "memory", "overtraining")
VALIDATION_MARKERS = ("best", "passed", "early_stop", "overtraining")
# Several optimizers: the loss chart has each other group's total (part `<group>.total`).
LOSS_SERIES = (LOSS, LOSS_SMOOTH, VAL_LOSS, PARTS)
PRIMARY = Place("primary", wide=True, weight=3)

CHARTS: tuple[ChartSpec, ...] = (
    ChartSpec("loss", "loss", LOSS_SERIES, Axis(log_toggle=True), PRIMARY, EVERY_MARKER),
    ChartSpec("lr", "learning rate", (LR, GROUP_LR)),
    ChartSpec("throughput", "samples/s", (SAMPLES_PER_S,), Axis(unit="samples/s"), markers=FAULTS),
    ChartSpec("memory", "memory (GiB)", (MEM_DEVICE, MEM_HOST), GIB_AXIS, markers=MEMORY_MARKERS),
    ChartSpec("parts", "loss parts", (PARTS,)),
    ChartSpec(
        "speech",
        "free-running distance (voice)",
        (FREE_RUNNING, FREE_RUNNING_ACOUSTIC),
        place=Place(wide=True),
        markers=("best",),
    ),
    ChartSpec(
        "validation",
        "validation loss",
        (VAL_METRICS, VAL_LOSS),
        place=Place(wide=True, shares="speech"),
        markers=VALIDATION_MARKERS,
    ),
)


def chart_spec(chart_id: str, charts: Iterable[ChartSpec] = CHARTS) -> ChartSpec:
    for spec in charts:
        if spec.id == chart_id:
            return spec
    raise KeyError(f"no chart {chart_id!r} is declared in vega_tui/chart_specs.py")


def declared_series(charts: Iterable[ChartSpec] = CHARTS) -> dict[str, SeriesSpec]:
    """Every series some chart plots, by store key (a family by its prefix), each once."""
    found: dict[str, SeriesSpec] = {}
    for spec in charts:
        for series in spec.series:
            found.setdefault(f"{series.key}:" if series.family else series.key, series)
    return found


def feed_problems(
    charts: Iterable[ChartSpec] = CHARTS,
    events: Mapping[str, type[Event]] | None = None,
) -> list[str]:
    """What is wrong with the declared feeds: an event type the protocol does not have, or a field
    (or x field) its model lacks. Empty when every feed names a real field."""
    from trainer_core.contract.protocol import EVENT_TYPES

    known = set((events if events is not None else EVENT_TYPES).values())
    problems = []
    for key, series in declared_series(charts).items():
        if not series.feeds:
            problems.append(f"series {key!r} has no feed")
        for feed in series.feeds:
            if feed.event not in known:
                problems.append(f"series {key!r}: {feed.event.__name__} is not a protocol event")
                continue
            for name in (feed.field, feed.x):
                if name not in feed.event.model_fields:
                    event_type = feed.event.model_fields["type"].default
                    missing = f"{event_type!r} events have no field {name!r}"
                    problems.append(f"series {key!r}: {missing}")
    return problems
