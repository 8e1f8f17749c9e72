"""The run store's state and the helpers its event handlers share: log lines, chart markers,
status, and the declared series (vega_tui/chart_specs.py) filled by the generic feeder."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from pathlib import Path

from trainer_core.contract.protocol import Event
from vega_tui.chart_specs import ChartSpec
from vega_tui.run_state import (
    ENDED,
    MAX_LOG_MESSAGE,
    MAX_MARKERS,
    Ema,
    LogLine,
    Marker,
    RunState,
    Series,
    new_series,
)
from vega_tui.store_feed import FEEDS, feed, feed_table


class StoreBase:
    """A `RunState` and the bookkeeping every handler uses; `RunStore` adds the handlers."""

    def __init__(
        self,
        max_points: int = 2000,
        max_logs: int = 5000,
        *,
        run_dir: Path | str | None = None,
        charts: Iterable[ChartSpec] | None = None,
    ) -> None:
        self.max_points = max_points
        self._feeds = FEEDS if charts is None else feed_table(charts)  # other charts: tests' own
        self.max_logs = max_logs
        folder = Path(run_dir) if run_dir is not None else None
        self.state = RunState(
            run_dir=folder,
            name=folder.name if folder is not None else "",
            series=new_series(max_points),
            logs=deque(maxlen=max_logs),
        )
        self._ema = Ema()
        self._paused_at: float | None = None
        self._paused_step = 0
        self._train_start_t: float | None = None
        self._status_before_eval = "training"
        self._steps_while_evaluating = 0
        # the step of the trainer's "passes the reference" line
        self._trainer_passed_step: int | None = None

    def _bad_event(self, event: Event, exc: Exception) -> None:
        self.state.bad_events += 1
        if self.state.bad_events <= 10:
            self._log(
                "warning",
                "reader",
                f"could not use a {event.type!r} event (seq {event.seq}): {exc}",
                event.t,
            )

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

    def _series(self, key: str) -> Series:
        """The series `key` (a family's member is made on its first point)."""
        series = self.state.series.get(key)
        if series is None:
            series = self.state.series[key] = Series(self.max_points)
        return series

    def _feed(self, event: Event) -> None:
        """Copy the fields vega_tui/chart_specs.py declares for this event into their series."""
        plan = self._feeds.get(type(event))
        if plan:
            feed(event, plan, self.state.series, self._series)
