"""What the dashboard knows about one run (`RunState`) and the bounded pieces it is made of.

`Series` keeps at most `max_points` points by merging neighbours into min/max buckets (so a spike
survives downsampling); the rows (markers, log lines, checkpoints, samples) are plain records.
`vega_tui.store` fills a RunState from events. Pure Python: no Textual, no torch.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer_core.contract.units import format_number
from vega_tui.chart_specs import declared_series

STATUSES = (
    "starting",
    "preloading",
    "training",
    "paused",
    "evaluating",
    "finished",
    "stopped",
    "failed",
    "crashed",
)
# finished-event status -> dashboard status
FINISHED_STATUS = {"completed": "finished", "stopped": "stopped", "failed": "failed"}
ENDED = frozenset({"finished", "stopped", "failed", "crashed"})
# The series every run has from the start (a family's members appear as they are fed): the
# declared ones, see vega_tui/chart_specs.py.
SERIES_KEYS = tuple(key for key, series in declared_series().items() if not series.family)
# Weight of the past in the smoothed loss (TensorBoard-style, with start-up bias correction).
EMA_WEIGHT = 0.9
MAX_MARKERS = 2000
MAX_SAMPLES = 200
MAX_CHECKPOINTS = 1000
MAX_LOG_MESSAGE = 2000


# --------------------------------------------------------------------------------------------------
# Bounded series


class Series:
    """An x/y series of at most `max_points` points that keeps its extremes when it downsamples.

    Points are grouped into buckets; each bucket stores its lowest and its highest point. While
    there is room every bucket holds one point. When the buckets fill up, neighbouring pairs merge
    (halving their number and doubling how many raw points a bucket spans), and new points gather
    into a bucket of the current span before it is sealed. The global min and max of y therefore
    always remain in `ys`. Non-finite y is skipped.

    Coarser levels (pairs of buckets, pairs of pairs, ...) are kept up to date as buckets seal
    (amortised O(1) a point), so `envelope(columns)` reads at most about 2 * `columns` buckets: a
    chart's cost follows its width, not the length of the run.
    """

    __slots__ = (
        "max_points",
        "span",
        "version",
        "_buckets",
        "_upper",
        "_cap",
        "_open",
        "_n",
        "_last_x",
        "_last_y",
        "_min",
        "_max",
    )

    def __init__(self, max_points: int = 2000) -> None:
        if max_points < 4:
            raise ValueError(f"Series max_points must be at least 4, got {max_points}")
        self.max_points = max_points
        self.span = 1  # raw points per bucket
        self.version = 0  # points stored so far (a cheap "did it move" for readers)
        # Sealed buckets: [x_of_min, min_y, x_of_max, max_y]; the open bucket adds up to 2 points.
        self._buckets: list[list[float]] = []
        # _upper[j]: buckets of 2**(j+1) sealed buckets each, merged pairwise from the level below.
        self._upper: list[list[list[float]]] = []
        self._cap = max_points // 2 - 1
        self._open: list[float] | None = None
        self._n = 0  # raw points in the open bucket
        self._last_x: float | None = None
        self._last_y: float | None = None
        self._min = math.inf
        self._max = -math.inf

    def append(self, x: float, y: float | None) -> bool:
        """Add one point; False (and nothing stored) when y is None, NaN or infinite."""
        if y is None or not math.isfinite(y):
            return False
        self.version += 1
        self._last_x, self._last_y = x, y
        if y < self._min:
            self._min = y
        if y > self._max:
            self._max = y
        bucket = self._open
        if bucket is None:
            self._open = [x, y, x, y]
        else:
            if y < bucket[1]:
                bucket[0], bucket[1] = x, y
            if y > bucket[3]:
                bucket[2], bucket[3] = x, y
        self._n += 1
        if self._n >= self.span:
            self._seal()
        return True

    def _seal(self) -> None:
        self._buckets.append(self._open)  # type: ignore[arg-type]
        self._open, self._n = None, 0
        self._lift(self._buckets, 0)
        if len(self._buckets) > self._cap:
            self._merge_pairs()

    def _lift(self, below: list[list[float]], level: int) -> None:
        """A level that just got an even count passes its last pair up, and
        so on (a binary counter)."""
        upper = self._upper
        while len(below) % 2 == 0:
            if level == len(upper):
                upper.append([])
            above = upper[level]
            above.append(_merge_two(below[-2], below[-1]))
            below, level = above, level + 1

    def _merge_pairs(self) -> None:
        """Halve the bucket count: each pair keeps the lower min and the higher max of the two."""
        old = self._buckets
        merged = [_merge_two(old[i], old[i + 1]) for i in range(0, len(old) - 1, 2)]
        if len(old) % 2:
            merged.append(old[-1])
        self._buckets = merged
        self.span *= 2
        if len(old) % 2 == 0:
            # the pairs level is the new bottom; the others shift down
            self._upper = self._upper[1:]
        else:  # a leftover bucket of the old span breaks the pairing: rebuild (once per doubling)
            self._upper, below = [], merged
            while len(below) >= 2:
                below = [_merge_two(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)]
                self._upper.append(below)

    def envelope(self, columns: int) -> tuple[list[float], list[float]]:
        """The series for a chart `columns` wide: each bucket's lowest and highest point, read from
        the finest level with at most 2 * `columns` buckets (plus the few not yet paired):
        O(columns), however long the run. A bucket covers consecutive points, so the min/max
        envelope of the full history is kept."""
        levels = [self._buckets, *self._upper]
        level = 0
        while level + 1 < len(levels) and len(levels[level]) + level > max(1, 2 * columns):
            level += 1
        buckets = list(levels[level])
        for j in range(level - 1, -1, -1):  # the finer buckets not yet paired up, in step order
            if len(levels[j]) % 2:
                buckets.append(levels[j][-1])
        if self._open is not None:
            buckets.append(self._open)
        return _bucket_points(buckets)

    def points(self) -> list[tuple[float, float]]:
        """Every stored point in arrival order (a bucket's min and max ordered by x)."""
        buckets = self._buckets if self._open is None else [*self._buckets, self._open]
        xs, ys = _bucket_points(buckets)
        return list(zip(xs, ys, strict=True))

    @property
    def xs(self) -> list[float]:
        return [x for x, _ in self.points()]

    @property
    def ys(self) -> list[float]:
        return [y for _, y in self.points()]

    @property
    def last(self) -> float | None:
        """The latest y appended (None while empty)."""
        return self._last_y

    @property
    def last_x(self) -> float | None:
        return self._last_x

    @property
    def min(self) -> float | None:
        return self._min if self._last_y is not None else None

    @property
    def max(self) -> float | None:
        return self._max if self._last_y is not None else None

    def __len__(self) -> int:
        stored = 0
        buckets = self._buckets if self._open is None else [*self._buckets, self._open]
        for x_lo, y_lo, x_hi, y_hi in buckets:
            stored += 1 if (x_lo == x_hi and y_lo == y_hi) else 2
        return stored

    def __repr__(self) -> str:
        return f"Series({len(self)} points, span {self.span}, last {self._last_y!r})"


def _merge_two(a: list[float], b: list[float]) -> list[float]:
    """One bucket for two neighbours: the lower min and the higher max (the
    earlier one on a tie)."""
    low = a if a[1] <= b[1] else b
    high = a if a[3] >= b[3] else b
    return [low[0], low[1], high[2], high[3]]


def _bucket_points(buckets: list[list[float]]) -> tuple[list[float], list[float]]:
    """Each bucket's min and max point in x order (one point when they are the same)."""
    xs: list[float] = []
    ys: list[float] = []
    for x_lo, y_lo, x_hi, y_hi in buckets:
        if x_lo == x_hi and y_lo == y_hi:
            xs.append(x_lo)
            ys.append(y_lo)
        elif x_lo <= x_hi:
            xs += (x_lo, x_hi)
            ys += (y_lo, y_hi)
        else:
            xs += (x_hi, x_lo)
            ys += (y_hi, y_lo)
    return xs, ys


class Ema:
    """Exponential moving average with bias correction, so the first values
    are not pulled towards 0."""

    __slots__ = ("weight", "_raw", "_power")

    def __init__(self, weight: float = EMA_WEIGHT) -> None:
        self.weight = weight
        self._raw = 0.0
        self._power = 1.0

    def update(self, value: float) -> float:
        self._raw = self.weight * self._raw + (1.0 - self.weight) * value
        self._power *= self.weight
        return self._raw / (1.0 - self._power)


# --------------------------------------------------------------------------------------------------
# Rows the screens show


@dataclass(frozen=True, slots=True)
class Marker:
    """A notable moment on the charts' step axis: kind is "oom", "nonfinite", "checkpoint", "best",
    "passed" (the validation metric first beat the reference), "early_stop"
    (train.early_stopping_patience ended the run), "memory" (the memory manager released caches,
    shrank the micro-batch or paused the run) or "overtraining"."""

    kind: str
    step: int
    t: float
    text: str


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of the log pane; `kind` is the event type it came from (or
    "reader", "trainer.log")."""

    t: float
    level: str
    kind: str
    message: str


@dataclass(slots=True)
class CheckpointRow:
    step: int
    path: str
    bytes: int | None
    val_loss: float | None
    t: float
    best: bool = False
    epoch: int | None = None


@dataclass(frozen=True, slots=True)
class SampleRow:
    step: int
    kind: str  # "audio" | "text" | "image"
    path: str
    text: str | None
    t: float = 0.0


def new_series(max_points: int) -> dict[str, Series]:
    return {key: Series(max_points) for key in SERIES_KEYS}


@dataclass
class RunState:
    """What the dashboard knows about one run. Numbers are None until an event has told us.

    `series`: the series vega_tui/chart_specs.py declares, by their keys (`LOSS.key`,
    `PARTS.of("mel")`, ...); x is the step.
    `total_steps` comes from a calibration plan, or is estimated from the
    trainer's ETA and the step rate.
    """

    run_dir: Path | None = None
    name: str = ""
    status: str = "starting"
    step: int = 0
    epoch: int = 0
    total_steps: int | None = None
    planned_epochs: int | None = None
    started_t: float | None = None
    last_t: float | None = None
    elapsed_s: float | None = None
    eta_s: float | None = None
    samples_per_s: float | None = None
    data_wait_frac: float | None = None
    micro_batch: int | None = None
    grad_accum: int | None = None
    device: str | None = None
    device_reason: str | None = None
    precision: str | None = None
    data_mode: str | None = None
    world_size: int = 1
    # DDP: each rank's own samples/s and data-wait fraction over the latest
    # step window, in rank order.
    rank_samples_per_s: list[float] = field(default_factory=list)
    rank_data_wait_frac: list[float] = field(default_factory=list)
    pid: int | None = None
    profile_path: str | None = None
    series: dict[str, Series] = field(default_factory=lambda: new_series(2000))
    markers: list[Marker] = field(default_factory=list)
    breakdown: dict[str, float] | None = None
    # Several optimizers: forward/backward/optimizer seconds per step of each
    # group (None: one optimizer).
    breakdown_groups: dict[str, dict[str, float]] | None = None
    logs: deque[LogLine] = field(default_factory=lambda: deque(maxlen=5000))
    checkpoints: dict[int, CheckpointRow] = field(default_factory=dict)
    samples: list[SampleRow] = field(default_factory=list)
    preload: tuple[int, int] | None = None
    resources: dict[str, Any] | None = None
    last_ack: dict[str, Any] | None = None
    finished: dict[str, Any] | None = None
    malformed_lines: int = 0
    seq_gaps: int = 0
    unknown_events: int = 0
    version: int = 0
    # Beyond the contract: details the status line and panels use.
    host: str | None = None
    resumed: bool = False
    fallback: bool = False
    loss: float | None = None
    lr: float | None = None
    # The latest step event's named loss parts (the window's last step), e.g. "generator.mel".
    losses: dict[str, float] = field(default_factory=dict)
    # Optimizer groups in update order (empty for one-optimizer runs) and the
    # one `loss` and `lr` belong to.
    groups: list[str] = field(default_factory=list)
    primary_group: str | None = None
    grad_norm: float | None = None
    loss_scale: float | None = None
    val_loss: float | None = None
    best_val_loss: float | None = None
    # Event times of the latest validation and checkpoint: a "save"/"evaluate" asked at time T is
    # done once one of these reaches T (vega_tui.pending).
    last_validation_t: float = 0.0
    last_checkpoint_t: float = 0.0
    last_checkpoint_path: str = ""
    best_step: int | None = None
    # What the trainer does between steps (step, phase, done, total), from `phase`
    # events; None while stepping.
    phase: tuple[int, str, int | None, int | None] | None = None
    # The step where train.early_stopping_patience ended the run (the finished
    # event's summary), else None.
    early_stopped_step: int | None = None
    # The latest free-running evaluation (voice runs): its summary, and the
    # vocoder's floor distance.
    free_running: dict[str, Any] | None = None
    free_running_floor: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    # The validation metric charted (the event's metric_name), and the same metrics for a reference
    # the model should beat (a vocoder: Griffin-Lim), with the step whose validation first beat it.
    metric_name: str | None = None
    reference: dict[str, float] = field(default_factory=dict)
    reference_name: str | None = None
    reference_passed_step: int | None = None
    data_scan: dict[str, Any] | None = None
    # The init_from event's fields when the run started from a trained model (train.init_from).
    init_from: dict[str, Any] | None = None
    # The task event's fields: which task trains (a built-in kind or model.task), whose code, and
    # whether it speaks (None: a log from before the event existed).
    task: dict[str, Any] | None = None
    memory_level: str | None = None
    pause_reason: str | None = None
    """Why the trainer paused itself (memory near its budget), while paused;
    None for a client's pause."""
    last_error: str | None = None
    # Where the last error happened (the error event's file and line: a
    # task's own code where it failed).
    last_error_file: str | None = None
    last_error_line: int | None = None
    crash_log: list[str] = field(default_factory=list)
    # The trainer's `fault_injection_on` warning (a test or drill run): the banner
    # says so while it is followed.
    fault_injection: str | None = None
    # The latest `overtraining` event (step, best_step, best_path, message)
    # until a new best model ends it.
    overtraining: dict[str, Any] | None = None
    unknown_fields: int = 0
    bad_events: int = 0
    events_seen: int = 0
    paused_s: float = 0.0
    # Set while this state is a preview of a big log (head, sample, tail): how much of the exact
    # history the follower has read so far (0..1). None once the state reflects every line.
    history_progress: float | None = None


# --------------------------------------------------------------------------------------------------
# Formatting helpers for one-line summaries


def finite_or_none(value: Any) -> float | None:
    """A float for finite numbers, None for None/NaN/inf (the wire's "no finite value")."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def group_losses_text(state: RunState) -> str:
    """`training losses at step 12: discriminator 0.811 · generator 146 (mel 3.24, adversarial
    0.786, ...)`: each optimizer group's total and its named parts, from the latest step event."""
    groups = []
    for group in state.groups:
        prefix = f"{group}."
        total = state.losses.get(f"{group}.total")
        parts = [
            f"{name.removeprefix(prefix)} {format_number(value, 3)}"
            for name, value in state.losses.items()
            if name.startswith(prefix) and name != f"{group}.total"
        ]
        detail = f" ({', '.join(parts)})" if parts else ""
        groups.append(f"{group} {format_number(total, 3)}{detail}")
    return f"training losses at step {state.step}: " + " · ".join(groups)
