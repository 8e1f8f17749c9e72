"""Run state built from events: everything the run dashboard shows, in bounded memory.

`RunStore.apply(events)` folds trainer events (trainer_core.contract.protocol) into one `RunState`: status, progress,
chart series, markers, checkpoints, samples and a ring buffer of log lines. Memory stays bounded however long
the run: every `Series` keeps at most `max_points` points by merging neighbours into min/max buckets (so a
spike survives downsampling), logs are a fixed-size ring, markers, samples and checkpoints are capped.

Pure Python: no Textual, no torch. The screens read `state` on the app thread; `state.version` tells them
whether anything changed since their last redraw.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer_core.contract.protocol import Event, UnknownEvent

STATUSES = ("starting", "preloading", "training", "paused", "evaluating", "finished", "stopped", "failed", "crashed")
# finished-event status -> dashboard status
FINISHED_STATUS = {"completed": "finished", "stopped": "stopped", "failed": "failed"}
ENDED = frozenset({"finished", "stopped", "failed", "crashed"})
SERIES_KEYS = ("loss", "loss_smooth", "val_loss", "lr", "samples_per_s", "mem_device", "mem_host")
# Weight of the past in the smoothed loss (TensorBoard-style, with start-up bias correction).
EMA_WEIGHT = 0.9
MAX_MARKERS = 2000
MAX_SAMPLES = 200
MAX_CHECKPOINTS = 1000
MAX_LOG_MESSAGE = 2000


# ---------------------------------------------------------------------------------------------------------------
# Bounded series


class Series:
    """An x/y series of at most `max_points` points that keeps its extremes when it downsamples.

    Points are grouped into buckets; each bucket stores its lowest and its highest point. While there is room
    every bucket holds one point. When the buckets fill up, neighbouring pairs merge (halving their number and
    doubling how many raw points a bucket spans), and new points gather into a bucket of the current span
    before it is sealed. The global min and max of y therefore always remain in `ys`. Non-finite y is skipped.
    """

    __slots__ = ("max_points", "span", "_buckets", "_cap", "_open", "_n", "_last_x", "_last_y", "_min", "_max")

    def __init__(self, max_points: int = 2000) -> None:
        if max_points < 4:
            raise ValueError(f"Series max_points must be at least 4, got {max_points}")
        self.max_points = max_points
        self.span = 1  # raw points per bucket
        # Sealed buckets: [x_of_min, min_y, x_of_max, max_y]; the open bucket adds up to 2 points.
        self._buckets: list[list[float]] = []
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
        if len(self._buckets) > self._cap:
            self._merge_pairs()

    def _merge_pairs(self) -> None:
        """Halve the bucket count: each pair keeps the lower min and the higher max of the two."""
        old, merged = self._buckets, []
        for i in range(0, len(old) - 1, 2):
            a, b = old[i], old[i + 1]
            low = a if a[1] <= b[1] else b
            high = a if a[3] >= b[3] else b
            merged.append([low[0], low[1], high[2], high[3]])
        if len(old) % 2:
            merged.append(old[-1])
        self._buckets = merged
        self.span *= 2

    def points(self) -> list[tuple[float, float]]:
        """Every stored point in arrival order (a bucket's min and max ordered by x)."""
        out: list[tuple[float, float]] = []
        buckets = self._buckets if self._open is None else [*self._buckets, self._open]
        for x_lo, y_lo, x_hi, y_hi in buckets:
            if x_lo == x_hi and y_lo == y_hi:
                out.append((x_lo, y_lo))
            elif x_lo <= x_hi:
                out.append((x_lo, y_lo))
                out.append((x_hi, y_hi))
            else:
                out.append((x_hi, y_hi))
                out.append((x_lo, y_lo))
        return out

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


class Ema:
    """Exponential moving average with bias correction, so the first values are not pulled towards 0."""

    __slots__ = ("weight", "_raw", "_power")

    def __init__(self, weight: float = EMA_WEIGHT) -> None:
        self.weight = weight
        self._raw = 0.0
        self._power = 1.0

    def update(self, value: float) -> float:
        self._raw = self.weight * self._raw + (1.0 - self.weight) * value
        self._power *= self.weight
        return self._raw / (1.0 - self._power)


# ---------------------------------------------------------------------------------------------------------------
# Rows the screens show


@dataclass(frozen=True, slots=True)
class Marker:
    """A notable moment on the charts' step axis: kind is "oom", "nonfinite", "checkpoint" or "best"."""

    kind: str
    step: int
    t: float
    text: str


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of the log pane; `kind` is the event type it came from (or "reader", "trainer.log")."""

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
    kind: str  # "audio" | "text"
    path: str
    text: str | None
    t: float = 0.0


def _new_series(max_points: int) -> dict[str, Series]:
    return {key: Series(max_points) for key in SERIES_KEYS}


@dataclass
class RunState:
    """What the dashboard knows about one run. Numbers are None until an event has told us.

    `series` keys: loss, loss_smooth (EMA), val_loss, lr, samples_per_s, mem_device and mem_host (bytes),
    `part:<name>` per training loss part and `val_part:<name>` per validation loss part; x is the step.
    `total_steps` comes from a calibration plan, or is estimated from the trainer's ETA and the step rate.
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
    pid: int | None = None
    profile_path: str | None = None
    series: dict[str, Series] = field(default_factory=lambda: _new_series(2000))
    markers: list[Marker] = field(default_factory=list)
    breakdown: dict[str, float] | None = None
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
    grad_norm: float | None = None
    loss_scale: float | None = None
    val_loss: float | None = None
    best_val_loss: float | None = None
    # Event times of the latest validation and checkpoint: a "save"/"evaluate" asked at time T is done
    # once one of these reaches T (vega_tui.pending).
    last_validation_t: float = 0.0
    last_checkpoint_t: float = 0.0
    last_checkpoint_path: str = ""
    best_step: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    data_scan: dict[str, Any] | None = None
    memory_level: str | None = None
    last_error: str | None = None
    crash_log: list[str] = field(default_factory=list)
    unknown_fields: int = 0
    bad_events: int = 0
    events_seen: int = 0
    paused_s: float = 0.0
    # Set while this state is a preview of a big log (head, sample, tail): how much of the exact history the
    # follower has read so far (0..1). None once the state reflects every line.
    history_progress: float | None = None


# ---------------------------------------------------------------------------------------------------------------
# Formatting helpers for one-line summaries


def _fmt(value: float | None, digits: int = 4) -> str:
    return "n/a" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.{digits}g}"


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _finite(value: Any) -> float | None:
    """A float for finite numbers, None for None/NaN/inf (the wire's "no finite value")."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------------------------------------------------------
# The store


class RunStore:
    """Folds events into `state`. One store per run; call `apply` from one thread (the app thread)."""

    def __init__(self, max_points: int = 2000, max_logs: int = 5000, *, run_dir: Path | str | None = None) -> None:
        self.max_points = max_points
        self.max_logs = max_logs
        folder = Path(run_dir) if run_dir is not None else None
        self.state = RunState(
            run_dir=folder,
            name=folder.name if folder is not None else "",
            series=_new_series(max_points),
            logs=deque(maxlen=max_logs),
        )
        self._ema = Ema()
        self._paused_at: float | None = None
        self._paused_step = 0
        self._train_start_t: float | None = None
        self._status_before_eval = "training"
        self._steps_while_evaluating = 0
        self._handlers: dict[str, Callable[[Any], None]] = {
            name[4:]: getattr(self, name) for name in dir(self) if name.startswith("_on_")
        }

    # -- public API -------------------------------------------------------------------------------------------

    def apply(self, events: Iterable[Event]) -> bool:
        """Fold events into the state; True when anything changed (then `state.version` went up by one)."""
        state, handlers = self.state, self._handlers
        changed = False
        for event in events:
            state.events_seen += 1
            state.last_t = event.t
            changed = True
            handler = handlers.get(event.type)
            if handler is None or isinstance(event, UnknownEvent):
                state.unknown_events += 1  # a newer trainer's event: counted, never an error
                continue
            if event.__pydantic_extra__:
                state.unknown_fields += 1  # fields a newer trainer added: ignored
            try:
                handler(event)
            except (AttributeError, TypeError, ValueError, KeyError) as exc:
                # An event built outside the protocol's validation must not take the dashboard down.
                self._bad_event(event, exc)
        if changed:
            self._update_elapsed()
            state.version += 1
        return changed

    def note_reader(self, malformed: int, gaps: int) -> None:
        """Record the reader's running totals of malformed lines and seq gaps (a log line when they grow)."""
        state = self.state
        if malformed == state.malformed_lines and gaps == state.seq_gaps:
            return
        new_bad, new_gaps = malformed - state.malformed_lines, gaps - state.seq_gaps
        if new_bad > 0:
            self._log("warning", "reader", f"{new_bad} malformed line(s) in events.jsonl skipped ({malformed} in all)")
        if new_gaps > 0:
            self._log("warning", "reader", f"{new_gaps} gap(s) in the event sequence: some lines were lost")
        state.malformed_lines, state.seq_gaps = malformed, gaps
        state.version += 1

    def note_dashboard(self, level: str, message: str) -> None:
        """A line of the dashboard's own (not the trainer's) in the Logs tab, e.g. how the history was read."""
        self._log(level, "dashboard", message)

    def mark_crashed(self, log_tail: list[str]) -> None:
        """The trainer died without a `finished` event: show it as crashed with the end of its trainer.log."""
        state = self.state
        if state.finished is not None or (state.status == "crashed" and state.crash_log == list(log_tail)):
            return
        state.status = "crashed"
        state.crash_log = list(log_tail)
        self._log("error", "crashed", "the trainer exited without a finished event; last lines of trainer.log:")
        for line in log_tail:
            self._log("error", "trainer.log", line)
        state.version += 1

    # -- helpers ----------------------------------------------------------------------------------------------

    def _bad_event(self, event: Event, exc: Exception) -> None:
        self.state.bad_events += 1
        if self.state.bad_events <= 10:
            self._log("warning", "reader", f"could not use a {event.type!r} event (seq {event.seq}): {exc}", event.t)

    def _log(self, level: str, kind: str, message: str, t: float | None = None) -> None:
        if len(message) > MAX_LOG_MESSAGE:
            message = message[:MAX_LOG_MESSAGE] + "…"
        when = t if t is not None else (self.state.last_t or 0.0)
        self.state.logs.append(LogLine(when, level, kind, message))

    def _mark(self, kind: str, step: int, t: float, text: str) -> None:
        markers = self.state.markers
        markers.append(Marker(kind, step, t, text))
        if len(markers) > MAX_MARKERS + MAX_MARKERS // 4:
            del markers[: len(markers) - MAX_MARKERS]  # trim in chunks: amortised O(1)

    def _set_status(self, status: str) -> None:
        if self.state.status not in ENDED or status == "starting":
            self.state.status = status

    def _update_elapsed(self) -> None:
        state = self.state
        if state.finished is not None:
            state.elapsed_s = float(state.finished.get("seconds") or 0.0)
        elif state.started_t is not None and state.last_t is not None:
            state.elapsed_s = max(0.0, state.last_t - state.started_t)

    # -- start-up events ----------------------------------------------------------------------------------------

    def _on_hello(self, e: Any) -> None:
        state = self.state
        if state.started_t is not None:
            self._log("info", "hello", f"trainer restarted (pid {e.pid}){' resuming' if e.resumed else ''}", e.t)
        # A new trainer in the same folder (a resume) starts a new life: clear the previous ending.
        state.status, state.finished, state.crash_log = "starting", None, []
        state.started_t = state.started_t if state.started_t is not None else e.t
        state.pid, state.host, state.world_size = e.pid, e.host, e.world_size
        state.profile_path, state.resumed = e.profile_path, e.resumed
        if state.run_dir is None:
            state.run_dir = Path(e.run_dir)
            state.name = state.run_dir.name
        self._log(
            "info", "hello", f"trainer {e.trainer_version} pid {e.pid} on {e.host}; profile {e.profile_path}", e.t
        )

    def _on_resources(self, e: Any) -> None:
        self.state.resources = e.model_dump(exclude={"v", "seq", "type"})

    def _on_device_selected(self, e: Any) -> None:
        state = self.state
        state.device, state.device_reason, state.fallback = e.device, e.reason, e.fallback
        state.precision = e.precision or state.precision
        level = "warning" if e.fallback else "info"
        self._log(level, "device_selected", f"device {e.device} ({e.mode} mode): {e.reason}", e.t)

    def _on_data_scan(self, e: Any) -> None:
        state = self.state
        state.data_mode = e.data_mode
        state.data_scan = {"usable": e.usable, "skipped": e.skipped, "hours": e.total_hours, "reason": e.reason}
        hours = f", {e.total_hours:.2f} h" if e.total_hours else ""
        self._log("info", "data_scan", f"data: {e.data_mode}, {e.usable} usable, {e.skipped} skipped{hours}", e.t)

    def _on_preload_progress(self, e: Any) -> None:
        self.state.preload = (e.done, e.total)
        self._set_status("preloading")

    def _on_preload_done(self, e: Any) -> None:
        self.state.preload = (e.items, e.items)
        where = f"{e.where} ({_fmt_bytes(e.bytes)})"
        self._log("info", "preload_done", f"preloaded {e.items} items in {e.seconds:.1f} s into {where}", e.t)

    def _on_calibration(self, e: Any) -> None:
        state = self.state
        state.total_steps, state.planned_epochs = e.planned_steps, e.planned_epochs
        self._log(
            "info",
            "calibration",
            f"calibrated {e.samples_per_s:.1f} samples/s: {e.planned_epochs} epochs, {e.planned_steps} steps",
            e.t,
        )

    # -- training progress ----------------------------------------------------------------------------------

    def _on_epoch_start(self, e: Any) -> None:
        state = self.state
        state.epoch = e.epoch
        if self._train_start_t is None:
            self._train_start_t = e.t
        if state.status in ("starting", "preloading"):
            self._set_status("training")

    def _on_epoch_end(self, e: Any) -> None:
        self._log("info", "epoch_end", f"epoch {e.epoch} done: loss {_fmt(e.loss)}", e.t)

    def _on_step(self, e: Any) -> None:
        state = self.state
        state.step, state.epoch = e.step, e.epoch
        state.loss, state.lr = _finite(e.loss), e.lr
        state.grad_norm, state.loss_scale = e.grad_norm, e.loss_scale
        state.samples_per_s, state.data_wait_frac = e.samples_per_s, e.data_wait_frac
        state.micro_batch, state.grad_accum, state.eta_s = e.micro_batch, e.grad_accum, e.eta_s
        if self._train_start_t is None:
            self._train_start_t = e.t
        self._append_step_series(e)
        self._step_status()
        self._estimate_total_steps(e)

    def _append_step_series(self, e: Any) -> None:
        series, step = self.state.series, e.step
        steps, losses = e.step_series, e.loss_series
        if steps and len(steps) == len(losses):
            for x, y in zip(steps, losses, strict=False):
                self._append_loss(x, y)
        else:
            self._append_loss(step, e.loss)
        if steps and len(steps) == len(e.lr_series):
            lr = series["lr"]
            for x, y in zip(steps, e.lr_series, strict=False):
                lr.append(x, y)
        else:
            series["lr"].append(step, e.lr)
        series["samples_per_s"].append(step, e.samples_per_s)
        if e.mem_device_bytes is not None:
            series["mem_device"].append(step, e.mem_device_bytes)
        if e.mem_host_bytes is not None:
            series["mem_host"].append(step, e.mem_host_bytes)
        for name, value in e.losses.items():
            if name != "total":
                self._part(name).append(step, value)

    def _append_loss(self, step: int, loss: float | None) -> None:
        series = self.state.series
        if series["loss"].append(step, loss):
            series["loss_smooth"].append(step, self._ema.update(loss))  # type: ignore[arg-type]

    def _part(self, name: str, prefix: str = "part:") -> Series:
        key = f"{prefix}{name}"
        series = self.state.series.get(key)
        if series is None:
            series = self.state.series[key] = Series(self.max_points)
        return series

    def _step_status(self) -> None:
        status = self.state.status
        if status == "evaluating":
            # The trainer flushes one step event right before it evaluates; a second one means it is done.
            self._steps_while_evaluating += 1
            if self._steps_while_evaluating >= 2:
                self._set_status(self._status_before_eval)
        elif status in ("starting", "preloading"):
            self._set_status("training")
        elif status == "paused" and self.state.step > self._paused_step:
            self._set_status("training")  # the resumed event was lost (a seq gap), but steps go on

    def _estimate_total_steps(self, e: Any) -> None:
        """Without a calibration plan, infer the total from the trainer's ETA and our own step rate."""
        state = self.state
        if state.planned_epochs is not None or e.eta_s is None or self._train_start_t is None:
            return
        trained_s = e.t - self._train_start_t - state.paused_s
        if trained_s > 0 and e.step > 0:
            state.total_steps = e.step + round(e.eta_s * e.step / trained_s)

    def _on_profile_breakdown(self, e: Any) -> None:
        self.state.breakdown = {
            "data": e.data_s,
            "transfer": e.transfer_s,
            "forward": e.forward_s,
            "backward": e.backward_s,
            "optimizer": e.optimizer_s,
        }

    def _on_memory(self, e: Any) -> None:
        self.state.memory_level = e.level
        level = "warning" if e.level in ("high", "critical") else "info"
        self._log(level, "memory", f"memory pressure {e.level} ({e.used_frac:.0%} used): {e.action}", e.t)

    def _on_oom_recovered(self, e: Any) -> None:
        state = self.state
        state.micro_batch, state.grad_accum = e.micro_batch, e.grad_accum
        text = f"out of memory at step {e.step}: micro-batch now {e.micro_batch} x accumulation {e.grad_accum}"
        self._mark("oom", e.step, e.t, text)
        self._log("warning", "oom_recovered", text, e.t)

    def _on_nonfinite(self, e: Any) -> None:
        self.state.precision = e.precision
        text = f"non-finite loss/gradient at step {e.step} ({e.consecutive} in a row): {e.action}"
        self._mark("nonfinite", e.step, e.t, text)
        self._log("warning", "nonfinite", text, e.t)

    # -- evaluation, checkpoints, samples --------------------------------------------------------------------

    def _on_validation(self, e: Any) -> None:
        state = self.state
        state.val_loss = _finite(e.loss)
        state.metrics = dict(e.metrics)
        state.series["val_loss"].append(e.step, e.loss)
        for name, value in e.losses.items():
            if name != "total":
                self._part(name, prefix="val_part:").append(e.step, value)
        metric = f", {e.metric_name} {_fmt(e.metric_value)}" if e.metric_name else ""
        self._log("info", "validation", f"validation at step {e.step}: loss {_fmt(e.loss)}{metric}", e.t)
        state.last_validation_t = max(state.last_validation_t, e.t)
        self._end_evaluating()

    def _end_evaluating(self) -> None:
        if self.state.status == "evaluating":
            self._set_status(self._status_before_eval)

    def _on_checkpoint_saved(self, e: Any) -> None:
        if e.t >= self.state.last_checkpoint_t:
            self.state.last_checkpoint_t, self.state.last_checkpoint_path = e.t, e.path
        rows = self.state.checkpoints
        row = rows.get(e.step)
        if row is None:
            rows[e.step] = CheckpointRow(e.step, e.path, e.bytes, _finite(e.val_loss), e.t, epoch=e.epoch)
            self._mark("checkpoint", e.step, e.t, f"checkpoint at step {e.step}")
            self._trim_checkpoints()
        else:  # the same step saved again (e.g. as best): refresh, no second marker
            row.path, row.bytes, row.t, row.epoch = e.path, e.bytes, e.t, e.epoch
            row.val_loss = _finite(e.val_loss) if e.val_loss is not None else row.val_loss
        self._log(
            "info", "checkpoint_saved", f"checkpoint saved at step {e.step}: {e.path} ({_fmt_bytes(e.bytes)})", e.t
        )

    def _trim_checkpoints(self) -> None:
        rows = self.state.checkpoints
        if len(rows) <= MAX_CHECKPOINTS:
            return
        oldest = next(step for step, row in rows.items() if not row.best)
        del rows[oldest]

    def _on_best_model(self, e: Any) -> None:
        state = self.state
        for row in state.checkpoints.values():
            row.best = False
        row = state.checkpoints.get(e.step)
        if row is None:
            row = state.checkpoints[e.step] = CheckpointRow(e.step, e.path, None, _finite(e.val_loss), e.t)
        row.best, row.path = True, e.path
        state.best_val_loss, state.best_step = _finite(e.val_loss), e.step
        self._mark("best", e.step, e.t, f"best model at step {e.step}: val loss {_fmt(e.val_loss)}")
        self._log("info", "best_model", f"new best model at step {e.step}: val loss {_fmt(e.val_loss)}", e.t)

    def _on_sample(self, e: Any) -> None:
        samples = self.state.samples
        samples.append(SampleRow(e.step, e.kind, e.path, e.text, e.t))
        if len(samples) > MAX_SAMPLES + MAX_SAMPLES // 4:
            del samples[: len(samples) - MAX_SAMPLES]
        self._log("info", "sample", f"{e.kind} sample at step {e.step}: {e.path}", e.t)

    # -- messages and control --------------------------------------------------------------------------------

    def _on_log(self, e: Any) -> None:
        self._log(e.level, "log", e.message, e.t)

    def _on_warning(self, e: Any) -> None:
        code = f"[{e.code}] " if e.code else ""
        self._log("warning", "warning", f"{code}{e.message}", e.t)

    def _on_error(self, e: Any) -> None:
        self.state.last_error = e.message
        self._log("error", "error", e.message, e.t)

    def _on_command_ack(self, e: Any) -> None:
        state = self.state
        state.last_ack = {"cmd": e.cmd, "id": e.id, "ok": e.ok, "detail": e.detail, "t": e.t}
        outcome = "accepted" if e.ok else "refused"
        detail = f" ({e.detail})" if e.detail else ""
        self._log("info" if e.ok else "warning", "command_ack", f"command {e.cmd} {outcome}{detail}", e.t)
        if e.cmd == "evaluate" and e.ok and state.status in ("training", "paused"):
            self._status_before_eval, self._steps_while_evaluating = state.status, 0
            self._set_status("evaluating")

    def _on_paused(self, e: Any) -> None:
        state = self.state
        if self._paused_at is None:
            self._paused_at = e.t
        self._paused_step = e.step
        if state.status == "evaluating":
            self._status_before_eval = "paused"
        else:
            self._set_status("paused")
        self._log("info", "paused", f"paused at step {e.step}", e.t)

    def _on_resumed(self, e: Any) -> None:
        state = self.state
        if self._paused_at is not None:
            state.paused_s += max(0.0, e.t - self._paused_at)
            self._paused_at = None
        if state.status == "evaluating":
            self._status_before_eval = "training"
        else:
            self._set_status("training")
        self._log("info", "resumed", f"resumed at step {e.step}", e.t)

    def _on_finished(self, e: Any) -> None:
        state = self.state
        state.finished = {"status": e.status, "summary": dict(e.summary), "step": e.step, "seconds": e.seconds}
        state.status = FINISHED_STATUS.get(e.status, "failed")
        state.step, state.eta_s = max(state.step, e.step), None
        if e.status == "completed":
            state.total_steps = e.step
        best = e.summary.get("best_val_loss")
        if isinstance(best, (int, float)) and state.best_val_loss is None:
            state.best_val_loss = float(best)
        level = {"completed": "info", "stopped": "warning"}.get(e.status, "error")
        self._log(level, "finished", f"run {e.status} at step {e.step} after {e.seconds:.1f} s", e.t)
