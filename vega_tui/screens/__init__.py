"""Screens of the dashboard: launch (start a run), runs (browse), compare (marked runs side by
side), run (follow one), confirm, notes (a run's notes and tags).

Each module is imported where it is used, so that the first frame does not wait for every screen.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def run_in_background(
    target: Callable[..., Any], *args: Any, name: str = "vega-worker"
) -> threading.Thread:
    """Run blocking work (a subprocess, a disk scan, a file watch) on a daemon thread.

    Daemon threads, not Textual's thread workers: those run in asyncio's default executor, which
    the interpreter joins at exit, so quitting would wait for a dry run or a file watch to end.
    The target reports back only by posting messages (thread-safe); it never touches widgets.
    """
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return thread
