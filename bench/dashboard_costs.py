"""Parts of benchmark 5 (bench/dashboard_speed.py) kept apart: key presses while a big log's exact
history is read, the in-process costs behind opening it, and the open profiled under py-spy."""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections import Counter
from pathlib import Path

from terminal import VEGA_TUI, Terminal, wait_screen

LOGS_TAB = "level ≥"  # the log pane's header: on screen only while the Logs tab shows
CHARTS_TAB = "learning rate"  # a chart title: on screen only while the Charts tab shows


# --------------------------------------------------------------------------------------------------
# Key presses while the history is read


def keys_during_history(
    term: Terminal, run_dir: Path, final_step: int, presses: int, in_thread: bool, timeout: float
) -> dict[str, object]:
    """Open the big log; as soon as its preview shows, press 2 and 1 in turn (each timed until
    the screen shows the other tab), then wait for the exact history: latencies (s) of presses
    sent while the status line still said "history", and the seconds from spawn until the
    exact history replaced the preview."""
    env = ["env", "VEGA_HISTORY_WORKER=0"] if in_thread else []
    shown = re.compile(rf"\bstep {final_step}\b")
    t0 = term.open([*env, *VEGA_TUI, "attach", str(run_dir)], run_dir.parent)
    try:
        seen, screen = wait_screen(term, lambda s: bool(shown.search(s)), timeout)
        if seen is None:
            raise RuntimeError(f"the big log's final step never showed; screen:\n{screen}")
        latencies: list[float] = []
        for number in range(presses if "history" in screen.splitlines()[0] else 0):
            to_logs = number % 2 == 0
            sent = term.press("2" if to_logs else "1")
            marker = LOGS_TAB if to_logs else CHARTS_TAB
            answered, screen = wait_screen(term, lambda s, m=marker: m in s, 10)
            if "history" not in screen.splitlines()[0]:
                # the exact history arrived: later presses would not be measured under its load
                break
            latencies.append(float("inf") if answered is None else answered - sent)
            time.sleep(0.05)
        done, _ = wait_screen(
            term,
            lambda s: "history" not in s.split("\n", 1)[0] and f"step {final_step}" in s,
            timeout,
        )
        after = key_presses(term, presses // 2) if done is not None else []
    finally:
        term.close()
    return {
        "latencies": latencies,
        "history_s": None if done is None else done - t0,
        "after": after,
    }


def key_presses(term: Terminal, presses: int) -> list[float]:
    """Seconds from each press of 2 and 1 in turn until the screen shows the Logs or Charts tab."""
    latencies = []
    for number in range(presses):
        marker = LOGS_TAB if number % 2 == 0 else CHARTS_TAB
        sent = term.press("2" if number % 2 == 0 else "1")
        answered, _ = wait_screen(term, lambda s, m=marker: m in s, 10)
        latencies.append(float("inf") if answered is None else answered - sent)
        time.sleep(0.05)
    return latencies


# --------------------------------------------------------------------------------------------------
# In-process costs of a big log


def ingest_costs(run_dir: Path, sample: int) -> dict[str, float]:
    """In-process costs behind opening a big log: one liveness check, and
    per line parse and store costs."""
    import json

    from trainer_core.contract.event_lines import parse_event
    from vega_tui import runner
    from vega_tui.store import RunStore

    t0 = time.perf_counter()
    runner.is_alive(run_dir)
    liveness = time.perf_counter() - t0
    with open(run_dir / "events.jsonl", "rb") as handle:
        lines = [handle.readline() for _ in range(sample)]
    t0 = time.perf_counter()
    events = [parse_event(line) for line in lines]
    parse = (time.perf_counter() - t0) / sample
    t0 = time.perf_counter()
    for line in lines:
        json.loads(line)
    plain = (time.perf_counter() - t0) / sample
    store = RunStore(run_dir=run_dir)
    t0 = time.perf_counter()
    for first in range(0, sample, 5000):
        store.apply(events[first : first + 5000])
    apply = (time.perf_counter() - t0) / sample
    return {
        "liveness_s": liveness,
        "parse_us": parse * 1e6,
        "json_us": plain * 1e6,
        "apply_us": apply * 1e6,
    }


def history_costs(run_dir: Path) -> dict[str, float]:
    """What the run screen's follower does with a big log, timed in-process (no UI
    sharing the core): seconds to its preview store (head, sampled middle, tail) and to
    the store of the exact history."""
    from vega_tui.follow import EventFollower
    from vega_tui.store import RunStore

    t0 = time.perf_counter()
    handed: dict[bool, float] = {}
    follower = EventFollower(
        run_dir / "events.jsonl",
        lambda *batch: None,
        on_store=lambda store, exact: handed.setdefault(exact, time.perf_counter() - t0),
        make_store=lambda: RunStore(run_dir=run_dir),
        max_batch=1000,
    )
    try:
        follower.wait_history(600)
    finally:
        follower.close()
    return {"preview_s": handed.get(False, float("nan")), "exact_s": handed.get(True, float("nan"))}


# --------------------------------------------------------------------------------------------------
# Profiling the open with py-spy


def profile_open(term: Terminal, run_dir: Path, final_step: int, timeout: float) -> list[str]:
    """Run the open once under py-spy; the hottest functions (own and
    inclusive time) as note lines."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).is_file():
        return ["py-spy is not installed (pip install py-spy): the open was not profiled"]
    raw = run_dir.parent / "open-profile.txt"
    raw.unlink(missing_ok=True)
    argv = [
        spy,
        "record",
        "--rate",
        "100",
        "--format",
        "raw",
        "-o",
        str(raw),
        "--",
        *VEGA_TUI,
        "attach",
        str(run_dir),
    ]
    term.open(argv, run_dir.parent)
    shown = re.compile(rf"\bstep {final_step}\b")
    seen, _ = wait_screen(term, lambda s: bool(shown.search(s)), timeout)
    term.press("q")
    for _ in range(100):
        if raw.is_file():
            break
        time.sleep(0.1)
    term.close()
    if not raw.is_file():
        return ["py-spy wrote no profile (ptrace not permitted here?)"]
    text = raw.read_text(encoding="utf-8", errors="replace")
    raw.unlink()
    return summarise_profile(text, seen is not None)


def short_frame(frame: str) -> str:
    """`function (folder/file.py:line)` from py-spy's `function
    (/long/path/folder/file.py:line)`."""
    name, _, where = frame.partition(" (")
    return f"{name} ({'/'.join(where.split('/')[-2:])}" if where else frame


def summarise_profile(raw: str, finished: bool, top: int = 8) -> list[str]:
    """Own-time and inclusive-time leaders from py-spy's raw (collapsed stack) output."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [short_frame(f) for f in stack.split(";")]
        total += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
    if not total:
        return ["py-spy recorded no samples"]
    own_text = "; ".join(f"{name} {100 * n / total:.0f} %" for name, n in own.most_common(top))
    ours = [
        (n, c)
        for n, c in inclusive.most_common()
        if any(
            k in n
            for k in (
                "vega_tui",
                "eventlog",
                "protocol",
                "store",
                "follow",
                "runner",
                "pydantic",
                "run.py",
                "charts",
                "logs.py",
            )
        )
    ][:top]
    inc_text = "; ".join(f"{name} {100 * c / total:.0f} %" for name, c in ours)
    state = "" if finished else " (the final step was not shown before the timeout)"
    return [
        f"py-spy, own time in the open of the big log{state}: {own_text}",
        f"py-spy, inclusive time in Vega/pydantic functions: {inc_text}",
    ]
