"""A stop signal must not log from its handler: the handler may interrupt the main thread while
it holds the event log's lock, and a log record there becomes an event that waits on that lock."""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path

from trainer_core.contract.eventlog import EventWriter
from trainer_core.engine.control_state import ControlState
from trainer_core.engine.events import EventHub, EventLogHandler
from trainer_core.engine.run import _stop_on_signals

# How long the rescue thread lets a blocked handler wait before freeing the lock for it.
RESCUE_AFTER_S = 3.0


def test_sigterm_inside_an_event_write_neither_waits_on_the_lock_nor_loses_the_stop(
    tmp_path: Path,
) -> None:
    writer = EventWriter(tmp_path / "events.jsonl")
    handler = EventLogHandler(EventHub(writer))
    logger = logging.getLogger("trainer_core")
    logger.addHandler(handler)
    control = ControlState()
    lock = writer._lock  # the lock an event write holds
    rescued = threading.Event()

    def rescue() -> None:
        # A plain Lock may be released by another thread: a blocked handler gets it and the test
        # ends with a failure instead of hanging.
        if not done.wait(RESCUE_AFTER_S) and lock.locked():
            rescued.set()
            lock.release()

    done = threading.Event()
    helper = threading.Thread(target=rescue, daemon=True)
    try:
        with _stop_on_signals(control):
            lock.acquire()
            helper.start()
            signal.raise_signal(signal.SIGTERM)  # the handler runs here, in this thread
            done.set()
            if not rescued.is_set():
                lock.release()
    finally:
        helper.join()
        logger.removeHandler(handler)
        writer.close()
    assert not rescued.is_set(), "the signal handler waited on the event log's lock"
    assert control.stop_signal == "SIGTERM"
    assert control.drain() == ["stop"] and control.stop_requested.is_set()
