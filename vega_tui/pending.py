"""Control requests still under way in the dashboard: "saving…" from the key press until the
trainer's `checkpoint_saved` event, "evaluating…" until its `validation` event.

The trainer acknowledges a command when it is queued and does the work at the end of its current
step, so the acknowledgement alone does not mean a checkpoint exists. A request asked at wall time
T is done once an event of the right kind carries a time at or after T (trainer and dashboard
share the machine's clock: the control socket is local). Times survive the follower swapping a
preview store for the exact one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from vega_tui.run_state import ENDED, RunState

WAIT_LABELS = {"save": "saving…", "evaluate": "evaluating…"}


def done_time(cmd: str, state: RunState) -> float:
    return state.last_checkpoint_t if cmd == "save" else state.last_validation_t


@dataclass
class PendingRequests:
    """Requests asked and not yet seen done; `settle` moves the done ones out."""

    asked_at: dict[str, float] = field(default_factory=dict)

    def ask(self, cmd: str, now: float | None = None) -> None:
        if cmd in WAIT_LABELS:
            self.asked_at[cmd] = time.time() if now is None else now

    def forget(self, cmd: str) -> None:
        """The trainer refused or never got the request: nothing to wait for."""
        self.asked_at.pop(cmd, None)

    def settle(self, state: RunState) -> list[tuple[str, bool]]:
        """(command, done) for each request that is over: done, or given up
        because the run has ended."""
        over = []
        for cmd, at in list(self.asked_at.items()):
            done = done_time(cmd, state) >= at
            if done or state.status in ENDED:
                over.append((cmd, done))
                del self.asked_at[cmd]
        return over

    def labels(self) -> list[str]:
        return [WAIT_LABELS[cmd] for cmd in self.asked_at]
