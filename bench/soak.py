"""Benchmark: a long run (default 30 minutes) sampling the trainer's
resident memory and its event log.

A byte-level LM trains on the bundled demo novel at full speed on one CPU thread, validating and
checkpointing now and then (keep_last 3; an epoch lasts about a minute), while this script samples
the trainer process's RSS (psutil) and the size and line count of events.jsonl. The clock starts at
the first step. After a warm-up (the first quarter of the run, at most 5 minutes):

- RSS growth: the median of the last three samples over the median of the first three after warm-up,
  minus one; target < 5 %;
- event-log growth in lines/s and bytes/min; target: lines/s below 1 /
  logging.step_interval_s + 1 (step
  events are coalesced, so the log grows at a bounded rate whatever the step rate);
- checkpoints on disk stay within keep_last + 2: the best, and a new one in
  place before the prune that
  follows it (pruning waits for the new file, so a crash never leaves fewer).
The run ends with SIGTERM and must finish `stopped`.

The dashboard (bench/soak_dashboard.py) is attached from the first step to the
end, sampled with the trainer:
- its resident memory, vega-tui and its children together, growth after
  warm-up as above; target < 5 %;
- its CPU after warm-up, in % of one core; target < 10 %;
- at the end it shows the trainer's latest step;
- then a fresh dashboard attaches to the long log, as after a dropped SSH
  session: seconds until it shows the
  latest step (target < 2 s) and its peak memory with the child reading the history (target < 300
  MiB).

Negative control (`--control leaky`): the trainer and both dashboards run under
bench/leak_wrapper.py, which keeps memory it never frees; both growth figures
must miss and the script exits 1.

    .venv/bin/python bench/soak.py --minutes 30
    .venv/bin/python bench/soak.py --minutes 1 --control leaky
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
import soak_dashboard
from soak_dashboard import Dashboard, Reattach

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
# % of one core, as for the dashboard following a live run (bench/dashboard_speed.py)
DASHBOARD_CPU_TARGET = 10.0
REATTACH_TARGET_S = 2.0
REATTACH_RSS_TARGET_MIB = 300.0
LEAK_WRAPPER = [sys.executable, str(common.BENCH / "leak_wrapper.py")]


@dataclass
class Sample:
    t: float
    rss: int
    log_bytes: int
    log_lines: int
    dash_rss: int = 0  # vega-tui and its children; 0 without a dashboard or once it has gone
    dash_children: int = 0
    dash_cpu: float = 0.0  # CPU seconds of vega-tui and its children so far


@dataclass
class Soak:
    samples: list[Sample] = field(default_factory=list)
    steps: int = 0
    status: str | None = None
    exit_code: int | None = None
    checkpoints_max: int = 0
    # the attached dashboard at the end: (caught up, shown, latest)
    follows: tuple[bool, int, int] | None = None
    reattach: Reattach | None = None
    # the same reattach once the trainer has ended: what the trainer's share of the cores costs it
    reattach_idle: Reattach | None = None
    with_dashboard: bool = False
    dashboard_error: str | None = None  # what broke the measurements at the end, if anything did


@dataclass
class Commands:
    """How the trainer and the dashboard are started (through the leak
    wrapper in the negative control)."""

    trainer: list[str]
    dashboard: list[str] | None  # None: no dashboard


def write_workspace(root: Path) -> tuple[Path, Path]:
    """The profile and an empty config folder; the data is the demo corpus that ships with Vega."""
    profile = root / "soak.toml"
    profile.write_text(PROFILE, encoding="utf-8")
    (root / "config").mkdir()
    return profile, common.CORPUS_TEXT


def start_trainer(
    root: Path, profile: Path, corpus: Path, run_dir: Path, command: list[str]
) -> subprocess.Popen:
    argv = [
        *command,
        "train",
        "--profile",
        str(profile),
        "--data",
        str(corpus),
        "--run-dir",
        str(run_dir),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("VEGA_")}
    env.update(VEGA_CONFIG_DIR=str(root / "config"), OMP_NUM_THREADS="1")
    with open(root / "trainer.err", "wb") as err:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env
        )


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


def take_sample(
    process: psutil.Process, log: Path, started: float, dashboard: Dashboard | None
) -> Sample:
    data = log.read_bytes()
    sample = Sample(
        time.monotonic() - started, process.memory_info().rss, len(data), data.count(b"\n")
    )
    if dashboard is not None:
        sample.dash_rss, sample.dash_children = dashboard.memory()
        sample.dash_cpu = dashboard.cpu()
    return sample


def soak(
    proc: subprocess.Popen, run_dir: Path, seconds: float, every_s: float, commands: Commands
) -> Soak:
    log, result = run_dir / "events.jsonl", Soak()
    wait_for_training(proc, log)
    config = run_dir.parent / "config"
    dashboard = Dashboard(config, commands.dashboard) if commands.dashboard is not None else None
    try:
        if dashboard is not None:
            dashboard.attach(run_dir)
            result.with_dashboard = True
        process, started = psutil.Process(proc.pid), time.monotonic()
        while time.monotonic() - started < seconds and proc.poll() is None:
            result.samples.append(take_sample(process, log, started, dashboard))
            result.checkpoints_max = max(
                result.checkpoints_max, len(list((run_dir / "checkpoints").glob("step-*.pt")))
            )
            time.sleep(every_s)
        result.samples.append(take_sample(process, log, started, dashboard))
        if dashboard is not None and commands.dashboard is not None:
            try:
                result.follows = dashboard.shows_latest(log)
                result.reattach = soak_dashboard.reattach(run_dir, config, commands.dashboard)
            # a broken measurement at the end must not lose the soak's figures
            except Exception as error:
                result.dashboard_error = f"{type(error).__name__}: {error}"
    finally:
        if dashboard is not None:
            dashboard.close()
    proc.send_signal(signal.SIGTERM)
    result.exit_code = proc.wait(timeout=WAIT_S)
    if result.reattach is not None and commands.dashboard is not None:
        try:
            result.reattach_idle = soak_dashboard.reattach(run_dir, config, commands.dashboard)
        except Exception as error:  # a diagnosis: its failure must not lose the soak's figures
            result.dashboard_error = f"{type(error).__name__}: {error}"
    events = read_all(log)
    ends = [e for e in events if e.type == "finished"]
    result.status = ends[-1].status if ends else None
    result.steps = ends[-1].step if ends else 0
    return result


def after_warmup(samples: list[Sample], warmup_s: float) -> list[Sample]:
    later = [s for s in samples if s.t >= warmup_s]
    return later if len(later) >= 2 else samples[-2:]


def add_growth(result: common.Result, name: str, values: list[int], peak: int) -> None:
    """Growth of resident memory: the median of the last three samples over
    that of the first three."""
    head, tail = statistics.median(values[:3]), statistics.median(values[-3:])
    growth = 100.0 * (tail / max(head, 1.0) - 1.0)
    detail = f"{head / 2**20:.1f} MiB -> {tail / 2**20:.1f} MiB; max {peak / 2**20:.1f} MiB"
    result.add(name, growth, "%", target="< 5 %", met=growth < 5.0, detail=detail)


def report(run: Soak, seconds: float, warmup_s: float, result: common.Result) -> None:
    later = after_warmup(run.samples, warmup_s)
    add_growth(
        result, "RSS growth after warm-up", [s.rss for s in later], max(s.rss for s in run.samples)
    )
    span = max(1e-9, later[-1].t - later[0].t)
    lines_per_s = (later[-1].log_lines - later[0].log_lines) / span
    bound = 1.0 / STEP_INTERVAL_S + 1.0
    result.add(
        "event log lines/s after warm-up",
        lines_per_s,
        "lines/s",
        target=f"< {bound:g}",
        met=lines_per_s < bound,
    )
    result.add(
        "event log growth", (later[-1].log_bytes - later[0].log_bytes) / span * 60 / 1024, "KiB/min"
    )
    result.add("event log size at the end", run.samples[-1].log_bytes / 1024, "KiB")
    result.add(
        "checkpoints on disk (max)",
        run.checkpoints_max,
        target=f"<= {KEEP_LAST + 2}",
        met=run.checkpoints_max <= KEEP_LAST + 2,  # + the best + a new one before its prune
    )
    result.add("optimizer steps", run.steps, detail=f"over {seconds / 60:g} min of training")
    result.add("RSS samples", len(run.samples))
    stopped = run.status == "stopped" and run.exit_code == 0
    result.add("ended stopped after SIGTERM", float(stopped), target="= 1", met=stopped)
    if run.with_dashboard:
        report_dashboard(run, later, result)


def report_dashboard(run: Soak, later: list[Sample], result: common.Result) -> None:
    """The attached dashboard's memory, CPU and last screen, and the fresh
    one attached at the end."""
    alive = all(s.dash_rss > 0 for s in run.samples)
    result.add("dashboard alive at every sample", float(alive), target="= 1", met=alive)
    peak, children = max(s.dash_rss for s in run.samples), max(s.dash_children for s in run.samples)
    add_growth(
        result,
        "dashboard RSS growth after warm-up (vega-tui and its children)",
        [s.dash_rss for s in later],
        peak,
    )
    result.figures[-1].detail += f"; at most {children} child process(es) at a sample"
    span = max(1e-9, later[-1].t - later[0].t)
    cpu = 100.0 * (later[-1].dash_cpu - later[0].dash_cpu) / span
    result.add(
        "dashboard CPU after warm-up",
        cpu,
        "% of a core",
        target=f"< {DASHBOARD_CPU_TARGET:g}",
        met=cpu < DASHBOARD_CPU_TARGET,
    )
    if run.follows is None or run.reattach is None:
        result.add(
            "dashboard checks at the end",
            None,
            target="ran",
            met=False,
            detail=str(run.dashboard_error),
        )
        return
    caught_up, shown, latest = run.follows
    detail = f"showed step {shown}; the log's latest step {latest}"
    result.add(
        "dashboard shows the latest step at the end",
        float(caught_up),
        target="= 1",
        met=caught_up,
        detail=detail,
    )
    report_reattach(run.reattach, later[-1].dash_rss, result)
    if run.reattach_idle is not None:
        result.add(
            "diagnosis: the same reattach once the trainer has ended",
            run.reattach_idle.seconds,
            "s",
            detail="the same log, the trainer and the attached dashboard gone",
        )


def report_reattach(again: Reattach, attached_rss: int, result: common.Result) -> None:
    """The fresh dashboard attached to the long log at the end, beside the
    one attached all along."""
    size = f"events.jsonl {again.log_bytes / 2**20:.1f} MiB" + (
        "" if again.seconds is not None else "; never showed it"
    )
    fast = again.seconds is not None and again.seconds < REATTACH_TARGET_S
    name = "reattach at the end: until the latest step shows"
    result.add(name, again.seconds, "s", target=f"< {REATTACH_TARGET_S:g}", met=fast, detail=size)
    peak_mib = again.peak_rss / 2**20
    detail = (
        f"{again.children_seen} history child(ren) seen; {again.settled_rss / 2**20:.1f} MiB once"
        " read"
    )
    result.add(
        "reattach at the end: peak RSS (vega-tui and its children)",
        peak_mib,
        "MiB",
        target=f"< {REATTACH_RSS_TARGET_MIB:g}",
        met=peak_mib < REATTACH_RSS_TARGET_MIB,
        detail=detail,
    )
    ratio = (attached_rss / again.settled_rss) if again.settled_rss else None
    result.add(
        "attached for the whole soak / freshly attached: RSS",
        ratio,
        detail="the same log, read live vs at once",
    )


def make_commands(args: Any) -> Commands:
    if args.control == "leaky":
        leaking = [*LEAK_WRAPPER, str(args.leak_mib_per_min)]
        trainer, dashboard = [*leaking, "trainer_core"], [*leaking, "vega_tui"]
    else:
        trainer, dashboard = common.TRAINER_CORE, soak_dashboard.VEGA_TUI
    return Commands(trainer, None if args.no_dashboard else dashboard)


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.split("\n\n")[0])
    parser.add_argument(
        "--minutes", type=float, default=30.0, help="minutes of training to sample (default 30)"
    )
    parser.add_argument(
        "--sample-s",
        type=float,
        default=None,
        help="seconds between samples (default: run / 100, within 0.5..10)",
    )
    parser.add_argument("--no-dashboard", action="store_true", help="sample the trainer alone")
    parser.add_argument(
        "--control", choices=["leaky"], help="negative control: leaking processes (must fail)"
    )
    parser.add_argument(
        "--leak-mib-per-min", type=float, default=240.0, help="the control's leak (default 240)"
    )
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be more than 0")
    seconds = args.minutes * 60
    every = args.sample_s or min(10.0, max(0.5, seconds / 100))
    warmup = min(300.0, seconds / 4)
    settings: dict[str, Any] = {
        "minutes": args.minutes,
        "sample_s": every,
        "warmup_s": warmup,
        "control": args.control,
    }
    commands = make_commands(args)
    if args.control:
        result = common.start_result(
            "soak_control", "Soak negative control: leaking trainer and dashboard", settings
        )
    else:
        result = common.start_result(
            "soak", "Soak: resident memory and event log over a long run", settings
        )
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="vega-soak-"))
    try:
        profile, corpus = write_workspace(root)
        proc = start_trainer(root, profile, corpus, root / "run", commands.trainer)
        try:
            run = soak(proc, root / "run", seconds, every, commands)
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
