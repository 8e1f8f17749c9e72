"""The open measurement of benchmark 5 (bench/dashboard_speed.py): `vega-tui attach` on the big
finished log until its final step shows, with vega-tui's peak memory, and the diagnosis figures of
what that open costs (liveness check, exact history, parsing, applying events).
"""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path

import common
from dashboard_costs import history_costs, ingest_costs
from dashboard_logs import big_log
from terminal import VEGA_TUI, Terminal, wait_screen


def open_big_log(
    term: Terminal, run_dir: Path, final_step: int, timeout: float
) -> tuple[float | None, float]:
    """Seconds until `attach` shows the final step (None on timeout), and the peak RSS in MiB."""
    shown = re.compile(rf"\bstep {final_step}\b")
    peak = [0.0]

    def sample_rss() -> None:
        proc = term.app_process()
        if proc is not None:
            with contextlib.suppress(Exception):  # the process may go between lookup and read
                peak[0] = max(peak[0], proc.memory_info().rss / 2**20)

    t0 = term.open([*VEGA_TUI, "attach", str(run_dir)], run_dir.parent)
    seen, _ = wait_screen(term, lambda s: bool(shown.search(s)), timeout, sample_rss)
    sample_rss()
    term.close()
    return (None if seen is None else seen - t0), peak[0]


def report_open(
    result: common.Result, term: Terminal, lines: int, repeats: int, timeout: float
) -> None:
    t0 = time.perf_counter()
    run_dir, final = big_log(lines)
    made = time.perf_counter() - t0
    opens, peaks = [], []
    for _ in range(repeats):
        seconds, peak = open_big_log(term, run_dir, final, timeout)
        opens.append(seconds if seconds is not None else float("inf"))
        peaks.append(peak)
    seconds, peak = common.median(opens), max(peaks)
    size = (run_dir / "events.jsonl").stat().st_size / 2**20
    label = f"{lines:,}-line events.jsonl"
    result.add(
        f"open a {label} until the final step shows",
        seconds if seconds != float("inf") else None,
        "s",
        "< 2 s",
        seconds < 2.0,
        f"{common.spread(opens)}; {size:.0f} MiB file"
        + (f"; timed out after {timeout:.0f} s" if seconds == float("inf") else ""),
    )
    result.add(
        f"peak RSS of vega-tui opening the {label}", peak, "MiB", "< 300 MB", peak * 2**20 < 300e6
    )
    costs = ingest_costs(run_dir, min(lines - 1, 100_000))
    result.add(
        "diagnosis: one liveness check (runner.is_alive) on that log",
        costs["liveness_s"],
        "s",
        detail=(
            "the first check reads the log backwards to its only hello in 8 MiB windows; later "
            "checks read only the bytes appended since"
        ),
    )
    history = history_costs(run_dir)
    result.add(
        "diagnosis: exact history of that log, read by the follower after its preview",
        history["exact_s"],
        "s",
        detail=(
            f"preview store (head, sampled middle, tail) after {history['preview_s']:.2f} s; the"
            " history read by the follower's child process (vega_tui.history_worker), no UI"
            " running"
        ),
    )
    result.add(
        "diagnosis: event_lines.parse_event per line",
        costs["parse_us"],
        "µs",
        detail=(
            f"{costs['parse_us'] * lines / 1e6:.1f} s for {lines:,} lines; json.loads alone "
            f"{costs['json_us']:.1f} µs ({costs['json_us'] * lines / 1e6:.1f} s)"
        ),
    )
    result.add(
        "diagnosis: RunStore.apply per event",
        costs["apply_us"],
        "µs",
        detail=f"{costs['apply_us'] * lines / 1e6:.1f} s for {lines:,} events",
    )
    if made > 1:
        result.notes.append(
            f"the {label} was generated in {made:.0f} s (kept under bench/.data for the next run)"
        )
