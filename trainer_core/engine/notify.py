"""Notifications from the trainer: news (contract.notices) posted to a
webhook from a thread of their own.

The training loop only ever calls `put_nowait` on a bounded queue: a full queue drops the notice
with one log line, a slow or dead server costs the loop nothing. The thread tries each notice
`tries` times with a short timeout and a growing pause between tries; at the end of the run `close`
waits a few seconds at most for the queue to drain. Log lines name the webhook's host, never its URL
(a secret). Payloads: ntfy (plain text, Title/Priority/Tags headers), Slack (`{"text"}`), Discord
(`{"content"}`) or generic JSON.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from base64 import b64encode
from pathlib import Path
from typing import Any

from trainer_core.contract import rundir
from trainer_core.contract.notices import Notice, NoticeTracker
from trainer_core.contract.notify_config import NotifyConfig
from trainer_core.contract.protocol import Event
from trainer_core.engine.events import EventHub, Listener

log = logging.getLogger("trainer_core")
QUEUE_SIZE = 32
TRIES = 3
TIMEOUT_S = 5.0
BACKOFF_S = 1.0  # pause before the second try; doubled before each later one
DRAIN_S = 5.0  # the most the end of a run waits for notices still queued
DISCORD_LIMIT = 2000  # characters Discord accepts in one message
NTFY_PRIORITY = {"low": "2", "default": "3", "high": "4"}
_STOP = object()


def payload(notice: Notice, fmt: str) -> tuple[bytes, dict[str, str]]:
    """The request body and headers for one notice in the webhook's format."""
    if fmt == "ntfy":
        headers = {"Title": _header_text(notice.title), "Priority": NTFY_PRIORITY[notice.priority]}
        if notice.tags:
            headers["Tags"] = ",".join(notice.tags)
        return notice.message.encode("utf-8"), {
            **headers,
            "Content-Type": "text/plain; charset=utf-8",
        }
    if fmt == "slack":
        body: dict[str, Any] = {"text": f"*{notice.title}*\n{notice.message}"}
    elif fmt == "discord":
        body = {"content": f"**{notice.title}**\n{notice.message}"[:DISCORD_LIMIT]}
    else:
        body = {
            "title": notice.title,
            "message": notice.message,
            "kind": notice.kind,
            "priority": notice.priority,
            "tags": list(notice.tags),
        }
    return json.dumps(body).encode("utf-8"), {"Content-Type": "application/json"}


def _header_text(text: str) -> str:
    """HTTP headers are Latin-1: other text goes as an RFC 2047 encoded word (ntfy decodes it)."""
    flat = " ".join(text.split())
    if flat.isascii():
        return flat
    return f"=?UTF-8?B?{b64encode(flat.encode('utf-8')).decode('ascii')}?="


class WebhookSender:
    """Posts notices from a daemon thread; `send` never blocks and `close`
    waits at most `drain_s`."""

    def __init__(
        self,
        config: NotifyConfig,
        *,
        queue_size: int = QUEUE_SIZE,
        tries: int = TRIES,
        timeout_s: float = TIMEOUT_S,
        backoff_s: float = BACKOFF_S,
    ) -> None:
        self.config, self.tries, self.timeout_s, self.backoff_s = (
            config,
            tries,
            timeout_s,
            backoff_s,
        )
        self.sent = self.failed = self.dropped = self.attempts = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._closing = threading.Event()
        self._quiet = False  # after close gave up waiting: the log may be closed, say nothing more
        self._thread = threading.Thread(target=self._work, name="vega-notify", daemon=True)
        self._thread.start()

    def send(self, notice: Notice) -> bool:
        """Queue a notice; False (and one log line) when the queue is full
        or the sender is closed."""
        if self._closing.is_set():
            return False
        try:
            self._queue.put_nowait(notice)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:  # one line, not one per dropped notice; close() gives the count
                log.warning(
                    "notification %r dropped: %d notices still wait for %s",
                    notice.kind,
                    self._queue.qsize(),
                    self.config.host,
                )
            return False
        return True

    def close(self, drain_s: float = DRAIN_S) -> bool:
        """Stop taking notices, wait up to `drain_s` for the queued ones;
        True when all were dealt with."""
        deadline = time.monotonic() + drain_s
        self._closing.set()  # from now on retries do not wait between tries
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=drain_s)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        done = not self._thread.is_alive()
        if self.dropped > 1:
            log.warning("notifications: %d dropped in all (the queue was full)", self.dropped)
        if not done:
            log.warning(
                "notifications: %d still unsent to %s after waiting %.0f s; giving up",
                self._queue.qsize() + 1,
                self.config.host,
                drain_s,
            )
            self._quiet = True
        return done

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            self._deliver(item)

    def _deliver(self, notice: Notice) -> None:
        body, headers = payload(notice, self.config.format)
        why = ""
        for attempt in range(self.tries):
            # once the run is over, retry without waiting
            if attempt and not self._closing.is_set():
                self._closing.wait(self.backoff_s * 2 ** (attempt - 1))
            self.attempts += 1
            why, retry = self._post(body, headers)
            if not why:
                self.sent += 1
                return
            if not retry:
                break
        self.failed += 1
        if not self._quiet:
            log.warning(
                "notification %r not delivered to %s: %s", notice.kind, self.config.host, why
            )

    def _post(self, body: bytes, headers: dict[str, str]) -> tuple[str, bool]:
        """("", _) when delivered; else why not, and whether another try may help."""
        request = urllib.request.Request(self.config.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read(1024)
            return "", False
        # the server answered: only its own trouble is worth a retry
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}", exc.code >= 500 or exc.code == 429
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            return (
                str(reason).replace(self.config.url, self.config.host) or type(exc).__name__,
                True,
            )


class NotifySink:
    """An EventHub listener: every event through the tracker, each notice to the sender."""

    def __init__(self, sender: WebhookSender, tracker: NoticeTracker) -> None:
        self.sender, self.tracker = sender, tracker

    def on_event(self, event: Event) -> None:
        notice = self.tracker.observe(event)
        if notice is not None:
            self.sender.send(notice)


class RunWatchers:
    """What listens to a run besides the log: the overtraining detector, and
    notifications when configured.

    `attach` after the opening events, `close` after the `finished` event (it
    drains the notification queue)."""

    def __init__(self) -> None:
        self.hub: EventHub | None = None
        self.listeners: list[Listener] = []
        self.sender: WebhookSender | None = None

    def attach(
        self, hub: EventHub, run_dir: Path, overtraining_evals: int, config: NotifyConfig | None
    ) -> None:
        from trainer_core.engine.overtraining import OvertrainingDetector

        self.hub = hub
        if overtraining_evals > 0:
            detector = OvertrainingDetector(overtraining_evals, hub, run_dir / rundir.CHECKPOINTS)
            self.listeners.append(detector.on_event)
        if config is not None:
            self.sender = WebhookSender(config)
            self.listeners.append(NotifySink(self.sender, NoticeTracker(run_dir.name)).on_event)
            log.info("notifications: %s", config.where())
        hub.listeners.extend(self.listeners)

    def close(self) -> None:
        if self.hub is not None:
            for listener in self.listeners:
                self.hub.listeners.remove(listener)
        if self.sender is not None:
            self.sender.close()
