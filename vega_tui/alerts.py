"""An attached dashboard's own alerts: the terminal bell plus an OSC 9 and
an OSC 777 desktop notification.

The same news as the trainer's webhook (trainer_core.contract.notices: finished, failed, a
non-finite stop, early stop, a memory pause, a new best free-running score, overtraining), for
events that arrive while the dashboard watches: events older than the moment it attached are
history, not news. Terminals such as iTerm2, kitty, WezTerm, Ghostty and foot show OSC 9 or OSC 777
as a desktop notification; a terminal that knows neither ignores them. Inside tmux both also go
through tmux's passthrough (with its allow-passthrough on).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable

from trainer_core.contract.notices import Notice, NoticeTracker
from trainer_core.contract.protocol import Event

BEL = "\a"
ST = "\x1b\\"  # string terminator of an OSC sequence
MAX_BODY = 240  # desktop notifications show a few lines at most
# C0 and C1 control characters: a message must not end the sequence early or start another one.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]+")
# Events this much older than the moment of attaching are history (clocks of
# one machine; a little slack).
HISTORY_SLACK_S = 1.0


def _clean(text: str, limit: int) -> str:
    flat = _CONTROLS.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def alert_sequences(notice: Notice, in_tmux: bool = False) -> str:
    """The bell, then `OSC 9 ; message ST` and `OSC 777 ; notify ; title ; body ST`."""
    title = _clean(notice.title, 80).replace(";", ",")  # OSC 777 separates its fields with ';'
    body = _clean(notice.message, MAX_BODY)
    osc = f"\x1b]9;{title}: {body}{ST}\x1b]777;notify;{title};{body}{ST}"
    if in_tmux:  # tmux keeps OSC sequences to itself unless wrapped (and allow-passthrough is on)
        wrapped = (
            f"\x1bPtmux;{(seq + ST).replace(chr(27), chr(27) * 2)}{ST}"
            for seq in osc.split(ST)
            if seq
        )
        osc += "".join(wrapped)
    return BEL + osc


class DashboardAlerts:
    """Fed every batch of events the dashboard applies; writes the alerts of
    the new ones with `write`."""

    def __init__(self, run_name: str | None, since: float | None = None) -> None:
        self.tracker = NoticeTracker(run_name)
        self.since = (time.time() if since is None else since) - HISTORY_SLACK_S
        self.in_tmux = bool(os.environ.get("TMUX"))
        self.sent: list[Notice] = []
        self._last_seq = -1

    def on_events(self, events: Iterable[Event], write: Callable[[str], None] | None) -> None:
        for event in events:
            if 0 < event.seq <= self._last_seq:
                # delivered again (a big log's live lines, once for the preview
                # and once for the exact store)
                continue
            self._last_seq = max(self._last_seq, event.seq)
            notice = self.tracker.observe(event)  # history too: it knows the best score so far
            if notice is None or event.t < self.since:
                continue
            self.sent.append(notice)
            if write is not None:
                write(alert_sequences(notice, self.in_tmux))


def terminal_writer(app: object) -> Callable[[str], None] | None:
    """What writes straight to the app's terminal (as Textual's own bell
    does); None when headless."""
    driver = getattr(app, "_driver", None)
    if getattr(app, "is_headless", True) or driver is None:
        return None
    return driver.write
