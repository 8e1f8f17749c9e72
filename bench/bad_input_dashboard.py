"""Damaged event-log lines for the bad-input drill, appended while the real dashboard follows.

The dashboard is `vega_tui.app.VegaApp` attached to a copy of a recorded run (tests/fixtures),
driven by Textual's test pilot, in this process. Garbage, half a line then its end (a writer
killed mid-line, then the next one), binary bytes, a 2 MiB line and an event of the wrong types
are appended a moment apart, then a good line: the dashboard must show the good line, count each
bad one and say so in its log, and its follower must still run.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
from bad_input_checks import Case, Trial, Workspace

WAIT_S = 60.0
FIXTURE = common.REPO / "tests" / "fixtures" / "events" / "lm_killed"
GOOD_LINE = "still going after the damage"


def dashboard_case(key: str, fed: str, chunks: tuple[bytes, ...], malformed: int) -> Case:
    """The dashboard on a copy of a recorded run; `chunks` appended in turn, then a good line."""

    def build(ws: Workspace) -> Trial:
        run_dir = ws.root / "runs" / key
        shutil.copytree(FIXTURE, run_dir)

        def follow() -> tuple[str, str]:
            return asyncio.run(follow_damaged(run_dir, chunks, malformed))

        return Trial([], grow=[run_dir / "events.jsonl"], inline=follow)

    return Case(key, "event logs", fed, build, tiny=key == "events-garbage")


def good_line(seq: int) -> bytes:
    event = {"v": 1, "seq": seq, "t": time.time(), "type": "log", "level": "info"}
    return (json.dumps({**event, "message": GOOD_LINE}) + "\n").encode("utf-8")


async def follow_damaged(
    run_dir: Path,
    chunks: tuple[bytes, ...],
    malformed: int,
) -> tuple[str, str]:
    from vega_tui.app import VegaApp
    from vega_tui.screens.run import RunScreen

    log = run_dir / "events.jsonl"
    last = json.loads(log.read_bytes().splitlines()[-1])
    app = VegaApp(start="attach", run_dir=run_dir)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.follower)
        screen = app.screen
        if not isinstance(screen, RunScreen) or screen.follower is None:
            return "hang", "the run dashboard never opened"
        screen.follower.wait_caught_up(WAIT_S)
        for chunk in [*chunks, good_line(last["seq"] + 1)]:
            with open(log, "ab") as out:
                out.write(chunk)
            await pilot.pause(0.3)  # a poll or two: the follower meets each piece on its own
        logs = screen.state.logs
        shown = await wait_for(pilot, lambda: any(line.message == GOOD_LINE for line in logs))
        if screen.follower.error is not None:
            return "crash", f"the follower stopped: {screen.follower.error!r}"
        if not shown:
            return "hang", f"the line after the damage never showed ({WAIT_S:g} s)"
        warnings = [line.message for line in logs if "malformed" in line.message]
        counted = screen.state.malformed_lines
        if counted != malformed or not warnings:
            return "unhandled", f"{counted} malformed line(s) counted, {malformed} written"
        return "skip", f"dashboard log: {warnings[-1]}"


async def wait_for(pilot: Any, predicate: Callable[[], object]) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.05)
    return False


STEP = b'{"v":1,"seq":999,"t":1.0,"type":"step","ste'
WRONG = b'{"v":"one","seq":"x","t":null,"type":"step","step":"many","loss":"low"}\n'
DASHBOARD_CASES = [
    dashboard_case(
        "events-garbage",
        "a garbage line in events.jsonl under the dashboard",
        (b"this is not json at all\n",),
        1,
    ),
    dashboard_case(
        "events-cut",
        "half an event line (a killed writer), then its end and more",
        (STEP, b"\n"),
        1,
    ),
    dashboard_case(
        "events-binary",
        "binary bytes, then a 2 MiB line, under the dashboard",
        (b"\x00\xff\xfe\x80garbage\n", b"x" * (2 << 20) + b"\n"),
        2,
    ),
    dashboard_case(
        "events-wrong-types", "an event with every field of the wrong type", (WRONG,), 1
    ),
]
