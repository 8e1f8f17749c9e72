"""Benchmark: a long run (default 30 minutes) sampling the trainer's resident memory and its event log.

A byte-level LM trains on the bundled demo novel at full speed on one CPU thread, validating and checkpointing
now and then (keep_last 3; an epoch lasts about a minute), while this script samples the trainer process's
RSS (psutil) and the size and line count of events.jsonl.
The clock starts at the first step. After a warm-up (the first quarter of the run, at most 5 minutes):

- RSS growth: the median of the last three samples over the median of the first three after warm-up,
  minus one; target < 5 %;
- event-log growth in lines/s and bytes/min; target: lines/s below 1 / logging.step_interval_s + 1 (step
  events are coalesced, so the log grows at a bounded rate whatever the step rate);
- checkpoints on disk stay within keep_last + 1 (the best).
The run ends with SIGTERM and must finish `stopped`.

    .venv/bin/python bench/soak.py --minutes 30
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common
import psutil

from trainer_core.contract.eventlog import read_all
from trainer_core.tiny_profiles import tiny_profile

STEP_INTERVAL_S = 0.5
KEEP_LAST = 3
# The tiny LM (trainer_core.tiny_profiles) twice as wide and deep, training "forever".
PROFILE = tiny_profile(
    "lm",
    run={"name": "soak", "seed": 5},
    data={"context_bytes": 64},
    model={"hidden": 64, "encoder_layers": 2, "dropout": None},
    train={
        "lr": 1e-3,
        "warmup_steps": 50,
        "max_steps": 100000000,
        "eval_every_steps": 3000,
        "checkpoint_every_steps": 3000,
        "keep_last": KEEP_LAST,
    },
    sample={"max_new_bytes": 32},
    logging={"step_interval_s": STEP_INTERVAL_S},
)
WAIT_S = 120.0


@dataclass
class Sample:
    t: float
    rss: int
    log_bytes: int
    log_lines: int


@dataclass
class Soak:
    samples: list[Sample] = field(default_factory=list)
    steps: int = 0
    status: str | None = None
    exit_code: int | None = None
    checkpoints_max: int = 0


def write_workspace(root: Path) -> tuple[Path, Path]:
    """The profile and an empty config folder; the data is the demo corpus that ships with Vega."""
    profile = root / "soak.toml"
    profile.write_text(PROFILE, encoding="utf-8")
    (root / "config").mkdir()
    return profile, common.CORPUS_TEXT


def start_trainer(root: Path, profile: Path, corpus: Path, run_dir: Path) -> subprocess.Popen:
    argv = [*common.TRAINER_CORE, "train", "--profile", str(profile), "--data", str(corpus), "--run-dir", str(run_dir)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VEGA_")}
    env.update(VEGA_CONFIG_DIR=str(root / "config"), OMP_NUM_THREADS="1")
    with open(root / "trainer.err", "wb") as err:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)


def wait_for_training(proc: subprocess.Popen, log: Path) -> None:
    """Until the first step event: start-up and data loading are not part of the soak."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the trainer exited ({proc.returncode}) before training")
        if log.exists() and b'"type":"step"' in log.read_bytes():
            return
        time.sleep(0.1)
    raise TimeoutError("the trainer did not start training")


def take_sample(process: psutil.Process, log: Path, started: float) -> Sample:
    data = log.read_bytes()
    return Sample(time.monotonic() - started, process.memory_info().rss, len(data), data.count(b"\n"))


def soak(proc: subprocess.Popen, run_dir: Path, seconds: float, every_s: float) -> Soak:
    log, result = run_dir / "events.jsonl", Soak()
    wait_for_training(proc, log)
    process, started = psutil.Process(proc.pid), time.monotonic()
    while time.monotonic() - started < seconds and proc.poll() is None:
        result.samples.append(take_sample(process, log, started))
        result.checkpoints_max = max(result.checkpoints_max, len(list((run_dir / "checkpoints").glob("step-*.pt"))))
        time.sleep(every_s)
    result.samples.append(take_sample(process, log, started))
    proc.send_signal(signal.SIGTERM)
    result.exit_code = proc.wait(timeout=WAIT_S)
    events = read_all(log)
    ends = [e for e in events if e.type == "finished"]
    result.status = ends[-1].status if ends else None
    result.steps = ends[-1].step if ends else 0
    return result


def after_warmup(samples: list[Sample], warmup_s: float) -> list[Sample]:
    later = [s for s in samples if s.t >= warmup_s]
    return later if len(later) >= 2 else samples[-2:]


def report(run: Soak, seconds: float, warmup_s: float, result: common.Result) -> None:
    later = after_warmup(run.samples, warmup_s)
    head = statistics.median(s.rss for s in later[:3])
    tail = statistics.median(s.rss for s in later[-3:])
    growth = 100.0 * (tail / head - 1.0)
    peak = max(s.rss for s in run.samples)
    result.add(
        "RSS growth after warm-up",
        growth,
        "%",
        target="< 5 %",
        met=growth < 5.0,
        detail=f"{head / 2**20:.1f} MiB -> {tail / 2**20:.1f} MiB; max {peak / 2**20:.1f} MiB",
    )
    span = max(1e-9, later[-1].t - later[0].t)
    lines_per_s = (later[-1].log_lines - later[0].log_lines) / span
    bound = 1.0 / STEP_INTERVAL_S + 1.0
    result.add(
        "event log lines/s after warm-up", lines_per_s, "lines/s", target=f"< {bound:g}", met=lines_per_s < bound
    )
    result.add("event log growth", (later[-1].log_bytes - later[0].log_bytes) / span * 60 / 1024, "KiB/min")
    result.add("event log size at the end", run.samples[-1].log_bytes / 1024, "KiB")
    result.add(
        "checkpoints on disk (max)",
        run.checkpoints_max,
        target=f"<= {KEEP_LAST + 1}",
        met=run.checkpoints_max <= KEEP_LAST + 1,
    )
    result.add("optimizer steps", run.steps, detail=f"over {seconds / 60:g} min of training")
    result.add("RSS samples", len(run.samples))
    stopped = run.status == "stopped" and run.exit_code == 0
    result.add("ended stopped after SIGTERM", float(stopped), target="= 1", met=stopped)


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="minutes of training to sample (default 30)")
    parser.add_argument(
        "--sample-s", type=float, default=None, help="seconds between samples (default: run / 100, within 0.5..10)"
    )
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be more than 0")
    seconds = args.minutes * 60
    every = args.sample_s or min(10.0, max(0.5, seconds / 100))
    warmup = min(300.0, seconds / 4)
    settings: dict[str, Any] = {"minutes": args.minutes, "sample_s": every, "warmup_s": warmup}
    result = common.start_result("soak", "Soak: resident memory and event log over a long run", settings)
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="vega-soak-"))
    try:
        profile, corpus = write_workspace(root)
        proc = start_trainer(root, profile, corpus, root / "run")
        try:
            run = soak(proc, root / "run", seconds, every)
        finally:
            if proc.poll() is None:
                proc.kill()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(run, seconds, warmup, result)
    common.finish_result(result, started, args.out)
    return 0 if all(f.met is not False for f in result.figures) else 1


if __name__ == "__main__":
    sys.exit(main())
