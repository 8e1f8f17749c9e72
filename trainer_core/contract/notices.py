"""Which events are news worth a notification, and what it says: one place for the trainer's webhook
and the dashboard's desktop notification, so both tell the same story.

News: the run finished (completed, stopped, early-stopped), failed (a non-finite stop
named as such), paused itself (memory), scored a new best free-running distance, or
started overtraining. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Literal

from trainer_core.contract.protocol import (
    ErrorEvent,
    Event,
    FinishedEvent,
    FreeRunningEvent,
    HelloEvent,
    OvertrainingEvent,
    PausedEvent,
)
from trainer_core.contract.units import format_duration, format_number

NoticeKind = Literal[
    "finished",
    "stopped",
    "early_stop",
    "failed",
    "nonfinite_stop",
    "memory_pause",
    "best_free_running",
    "overtraining",
]
Priority = Literal["low", "default", "high"]
NONFINITE_STOP = "nonfinite_stop"  # the `error` event's code when non-finite steps ended the run


@dataclass(frozen=True)
class Notice:
    """One notification: a short title, a message of a few lines, how
    urgent, and tags (ntfy shows them)."""

    kind: NoticeKind
    title: str
    message: str
    priority: Priority = "default"
    tags: tuple[str, ...] = ()


class NoticeTracker:
    """Feed it every event in order; `observe` returns a Notice when one is news, else None."""

    def __init__(self, run_name: str | None = None) -> None:
        self.run_name = run_name
        self._error: ErrorEvent | None = None
        self._best_distance: float | None = None

    def observe(self, event: Event) -> Notice | None:
        if isinstance(event, HelloEvent):
            self.run_name = self.run_name or PurePath(event.run_dir).name
            self._error = None
        elif isinstance(event, ErrorEvent):
            self._error = event
        elif isinstance(event, FinishedEvent):
            return self._finished(event)
        elif isinstance(event, PausedEvent) and event.reason:
            return self._notice(
                "memory_pause",
                f"paused itself at step {event.step}",
                f"{event.reason}; free memory or lower train.batch_size, then resume",
                "high",
                ("pause_button",),
            )
        elif isinstance(event, FreeRunningEvent):
            return self._free_running(event)
        elif isinstance(event, OvertrainingEvent):
            return self._notice(
                "overtraining",
                f"overtraining at step {event.step}",
                event.message,
                "high",
                ("chart_with_upwards_trend",),
            )
        return None

    def _notice(
        self, kind: NoticeKind, what: str, message: str, priority: Priority, tags: tuple[str, ...]
    ) -> Notice:
        name = f"{self.run_name}: " if self.run_name else ""
        return Notice(kind, f"vega {name}{what}", message, priority, tags)

    def _finished(self, e: FinishedEvent) -> Notice:
        took = f" after {format_duration(e.seconds)}"
        if e.status == "failed":
            error = (
                self._error.message.strip().splitlines()[0]
                if self._error and self._error.message
                else None
            )
            if self._error is not None and self._error.code == NONFINITE_STOP:
                return self._notice(
                    "nonfinite_stop",
                    f"non-finite stop at step {e.step}",
                    error or "non-finite steps",
                    "high",
                    ("warning",),
                )
            where = f" (at {e.summary['error_at']})" if e.summary.get("error_at") else ""
            message = f"{error or e.summary.get('error') or 'no error message'}{where}"
            return self._notice("failed", f"failed at step {e.step}{took}", message, "high", ("x",))
        best = _best_text(e.summary)
        if e.summary.get("early_stopped") is True:
            message = f"validation stopped improving (train.early_stopping_patience){best}"
            return self._notice(
                "early_stop",
                f"stopped early at step {e.step}{took}",
                message,
                "default",
                ("white_check_mark",),
            )
        if e.status == "stopped":
            return self._notice(
                "stopped",
                f"stopped at step {e.step}{took}",
                f"stopped on request{best}",
                "low",
                ("stop_sign",),
            )
        return self._notice(
            "finished",
            f"finished at step {e.step}{took}",
            f"completed{best}",
            "default",
            ("white_check_mark",),
        )

    def _free_running(self, e: FreeRunningEvent) -> Notice | None:
        distance, best = e.distance, self._best_distance
        if not math.isfinite(distance):
            return None
        if best is not None and distance >= best:
            return None
        self._best_distance = distance
        if best is None:
            return None  # the first score is where the curve starts, not news
        message = (
            f"free-running distance {format_number(distance)} (was {format_number(best)}; "
            f"the recordings through the vocoder score {format_number(e.floor_distance)})"
        )
        return self._notice(
            "best_free_running",
            f"new best free-running score at step {e.step}",
            message,
            "low",
            ("star",),
        )


def _best_text(summary: dict[str, Any]) -> str:
    """`; best checkpoint step 40 (score 2.31)`, from the finished event's summary, else "".

    The score is what train.select_best_by names: the validation loss or the
    free-running distance."""
    step, score = summary.get("best_step"), summary.get("best_val_loss")
    if not isinstance(step, int):
        return ""
    value = f" (score {format_number(score)})" if isinstance(score, (int, float)) else ""
    return f"; best checkpoint step {step}{value}"
