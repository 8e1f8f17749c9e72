"""Benchmark 6: time budget accuracy: a run given `train.target_hours` ends within ±5 % of it.

Runs the real CLI, `trainer-core train --profile lm-small --set train.target_hours=H` (default H = 1/6:
ten minutes), as a subprocess with its own run folder, and measures the whole job from spawn to exit:
interpreter start-up, data loading, calibration, training, the final validation, checkpoint, export and
report all count, because that is the time a user budgets. The run's own `finished` event and its
`calibration` events (measured throughput, planned steps) are read back for the details.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import common

TINY_MODEL = [
    *common.LM_TINY,
    "train.warmup_steps=2",
    "sample.max_new_bytes=8",
    "logging.report=false",
]


def run_with_budget(hours: float, extra: list[str], scratch: Path) -> tuple[float, int, Path]:
    """Wall seconds from spawn to exit, exit status and the run folder of one budgeted run."""
    run_dir = scratch / "run"
    argv = [*common.TRAINER_CORE, "train", "--profile", "lm-small", "--run-dir", str(run_dir)]
    for item in ["compute.mode=cpu", f"train.target_hours={hours}", *extra]:
        argv += ["--set", item]
    env = {**os.environ, "VEGA_CONFIG_DIR": str(scratch / "config")}  # no machine file: the profile as shipped
    with open(scratch / "trainer-stderr.txt", "wb") as err:
        t0 = time.perf_counter()
        status = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=err, check=False).returncode
        wall = time.perf_counter() - t0
    return wall, status, run_dir


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=None, help="train.target_hours (default 0.1667: 10 minutes)")
    args = parser.parse_args()
    hours = args.hours or (0.002 if args.tiny else 0.1667)
    started = time.monotonic()
    result = common.start_result("budget", "6. Time budget accuracy", {"target_hours": hours, "profile": "lm-small"})
    scratch = common.scratch_dir("budget-")
    try:
        wall, status, run_dir = run_with_budget(hours, TINY_MODEL if args.tiny else [], scratch)
        if status != 0:
            tail = (scratch / "trainer-stderr.txt").read_text(encoding="utf-8", errors="replace")[-1500:]
            raise SystemExit(f"the budgeted run failed with exit status {status}; its stderr ends:\n{tail}")
        report(result, hours * 3600.0, wall, common.read_events(run_dir))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.tiny:
        result.notes.append(
            "--tiny: lm-small shrunk to hidden 32, one layer, context 32, no report, short samples; a 7 s budget"
        )
    common.finish_result(result, started, args.out)
    return 0


def report(result: common.Result, target_s: float, wall: float, events: list) -> None:
    error = (wall - target_s) / target_s
    finished = next((e for e in reversed(events) if e.type == "finished"), None)
    plans = [e for e in events if e.type == "calibration"]
    steps = [e for e in events if e.type == "step"]
    last_step_t = steps[-1].t - events[0].t if steps else None
    result.add(
        "whole job (spawn to exit) against the target",
        100 * error,
        "% off",
        "within ±5 %",
        abs(error) <= 0.05,
        f"{wall:.1f} s for a {target_s:.1f} s budget",
    )
    if finished is not None:
        result.add(
            "trainer's own run time (finished.seconds)",
            finished.seconds,
            "s",
            detail=f"status {finished.status}, {finished.step} steps, {finished.epoch} epochs",
        )
    if last_step_t is not None:
        result.add(
            "last training step, after the first event",
            last_step_t,
            "s",
            detail="after it: " + tail_breakdown(events, steps[-1]),
        )
    if plans:
        first, last = plans[0], plans[-1]
        result.notes.append(
            f"{len(plans)} calibration plans: first {first.samples_per_s:.1f} samples/s -> "
            f"{first.planned_steps} steps, "
            f"last {last.samples_per_s:.1f} samples/s -> {last.planned_steps} steps"
        )


def tail_breakdown(events: list, last_step) -> str:
    """Where the time after the last training step went, from the landmark events that follow it."""
    after = [e for e in events if e.seq > last_step.seq]
    marks = [
        ("validation losses and samples", "validation"),
        ("checkpoint", "checkpoint_saved"),
        ("export, report, session", "finished"),
    ]
    parts, previous = [], last_step.t
    for label, kind in marks:
        found = [e for e in after if e.type == kind]
        if found:
            parts.append(f"{label} {found[-1].t - previous:.1f} s")
            previous = found[-1].t
    return "; ".join(parts) or "no landmark events"


if __name__ == "__main__":
    raise SystemExit(main())
