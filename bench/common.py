"""Shared helpers for the benchmark scripts in bench/: results, machine
facts, timing, Vega runs, data.

Every benchmark script builds a `Result` (figures with their targets), writes it as JSON under
`--out` (default bench/.data/results) and prints it; `bench/run_all` runs the scripts and renders
docs/benchmarks.md from those JSON files. Figures are ratios measured side by side in one process,
repeated and reduced with the median, because this kind of machine is shared and noisy.

Scripts import this module as `common` (it sits beside them, so running
`python bench/x.py` finds it). The reference loops that Vega is measured against are in
reference_loops.py.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trainer_runs
from corpora import (  # noqa: F401 - re-exported: scripts read them as common.X
    audio_seconds,
    corpus_sentences,
    docstring_corpus,
    espeak_path,
    espeak_speaker,
    espeak_voice_corpus,
    voice_data,
    voice_overrides,
)
from machine import (  # noqa: F401 - re-exported: scripts read them as common.X
    git_commit,
    load_average,
    machine_info,
    package_version,
    this_command,
)
from paths import (  # noqa: F401 - re-exported: scripts read them as common.X
    BENCH,
    CORPUS_TEXT,
    DATA,
    DEMO_VOICE,
    FEATURE_CACHE,
    REPO,
    RESULTS,
    SMALL_VOICE,
    TRAINER_CORE,
)

from trainer_core.tiny_profiles import tiny_settings

if TYPE_CHECKING:
    from trainer_core.contract.eventlog import EventWriter
    from trainer_core.engine.control_state import ControlState
    from trainer_core.engine.events import EventHub
    from trainer_core.engine.trainer import Trainer
    from trainer_core.plan import TrainPlan

# `--tiny` smoke settings over the shipped lm-small / tts-small profiles: the tiny model
# of trainer_core.tiny_profiles.
LM_TINY = [*tiny_settings("lm"), "data.context_bytes=32", "train.batch_size=4"]
TTS_TINY = tiny_settings("tts")
VOCODER_TINY = [*tiny_settings("vocoder", ("vocoder",)), "train.batch_size=4"]


# --------------------------------------------------------------------------------------------------
# Results


@dataclass
class Figure:
    """One measured figure: its value, what it should reach, and whether it
    did (None: no target)."""

    name: str
    value: float | None
    unit: str = ""
    target: str = ""
    met: bool | None = None
    detail: str = ""


@dataclass
class Result:
    """Everything one benchmark script measured, with the facts needed to reproduce it."""

    key: str
    title: str
    command: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    started: str = ""
    # git HEAD measured, " dirty" when the tree had changes; "" in results from before
    commit: str = ""
    seconds: float = 0.0
    load_before: list[float] = field(default_factory=list)
    load_after: list[float] = field(default_factory=list)
    skipped: str | None = None

    def add(
        self,
        name: str,
        value: float | None,
        unit: str = "",
        target: str = "",
        met: bool | None = None,
        detail: str = "",
    ) -> Figure:
        figure = Figure(name, None if value is None else float(value), unit, target, met, detail)
        self.figures.append(figure)
        return figure

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def start_result(key: str, title: str, settings: dict[str, Any]) -> Result:
    """A Result stamped with the command line, the machine, the commit, the
    date and the load average now."""
    return Result(
        key=key,
        title=title,
        command=this_command(),
        settings=settings,
        machine=machine_info(),
        started=dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        commit=git_commit(),
        load_before=load_average(),
    )


def finish_result(result: Result, started_at: float, out_dir: Path) -> Path:
    """Stamp the duration and final load, write `<out_dir>/<key>.json` and print a short summary."""
    result.seconds = time.monotonic() - started_at
    result.load_after = load_average()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{result.key}.json"
    path.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    print(summary_text(result))
    return path


def summary_text(result: Result) -> str:
    lines = [f"== {result.title} ({result.seconds:.0f} s)"]
    if result.skipped:
        lines.append(f"   skipped: {result.skipped}")
    for f in result.figures:
        mark = {True: "met", False: "MISSED", None: ""}[f.met]
        lines.append(f"   {f.name}: {format_value(f.value, f.unit)}  {f.target}  {mark}".rstrip())
    lines.extend(f"   note: {note}" for note in result.notes)
    return "\n".join(lines)


def format_value(value: float | None, unit: str = "") -> str:
    """A figure as people read it: 3 significant digits, no exponent for everyday magnitudes."""
    if value is None:
        return "—"
    if not math.isfinite(value):
        return f"{value} {unit}".rstrip()  # a timed-out figure reads "inf s"
    magnitude = abs(value)
    if magnitude >= 1000 or value == int(value) and magnitude >= 10:
        text = f"{value:,.0f}"
    elif magnitude >= 100:
        text = f"{value:.1f}"
    elif magnitude >= 0.01 or value == 0:
        text = f"{value:.3g}" if magnitude < 10 else f"{value:.2f}"
    else:
        text = f"{value:.2e}"
    return f"{text} {unit}".rstrip()


def scratch_dir(prefix: str) -> Path:
    """A fresh folder under DATA for one measurement (the caller removes it)."""

    DATA.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=DATA))


def load_result(path: Path) -> Result:
    data = json.loads(path.read_text(encoding="utf-8"))
    data["figures"] = [Figure(**f) for f in data.get("figures", [])]
    return Result(**data)


# --------------------------------------------------------------------------------------------------
# Machine and command


def base_parser(description: str) -> argparse.ArgumentParser:
    """Options every benchmark has: --tiny (seconds-long smoke settings for the tests) and --out."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="smallest settings: checks the script runs, measures nothing",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS,
        help="folder for the JSON result (default: bench/.data/results)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="interleaved repetitions (default depends on --tiny)",
    )
    return parser


# --------------------------------------------------------------------------------------------------
# Statistics and timing


def median(values: Iterable[float]) -> float:
    items = list(values)
    return statistics.median(items) if items else float("nan")


def spread(values: Sequence[float]) -> str:
    """`min..max (n)`, to show how noisy a median is."""
    if not values:
        return "no samples"
    return f"{min(values):.4g}..{max(values):.4g} over {len(values)}"


def rotations(names: Sequence[str], repeats: int) -> list[list[str]]:
    """The order of each repetition: rotated each time, so that slow drift
    of the machine hits every side."""
    return [[names[(r + i) % len(names)] for i in range(len(names))] for r in range(repeats)]


def timed(fn: Callable[..., Any], totals: dict[str, float], key: str) -> Callable[..., Any]:
    """`fn` wrapped so that its run time adds to `totals[key]` (and a call
    count to `totals[key + '#']`)."""
    clock = time.perf_counter

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[key] = totals.get(key, 0.0) + clock() - t0
            totals[key + "#"] = totals.get(key + "#", 0) + 1

    return wrapper


def steady_step_s(stamps: Sequence[float], warmup: int) -> float:
    """Mean seconds per step after `warmup` steps, from the end-of-step timestamps of every step."""
    measured = len(stamps) - warmup
    if warmup < 1 or measured < 1:
        raise ValueError(
            f"need at least one warm-up step and one measured step, got {len(stamps)} stamps"
        )
    return (stamps[-1] - stamps[warmup - 1]) / measured


# --------------------------------------------------------------------------------------------------
# Vega in-process


@dataclass
class VegaRun:
    """A Trainer built through the engine API exactly as `trainer-core train` builds it."""

    plan: TrainPlan
    trainer: Trainer
    hub: EventHub
    writer: EventWriter
    control: ControlState
    run_dir: Path
    stamps: list[float] = field(default_factory=list)


def vega_plan(profile: str, overrides: Sequence[str], run_dir: Path) -> TrainPlan:
    """The plan for a profile on the CPU, ignoring any per-user machine file
    (reproducible settings)."""
    from trainer_core.plan import make_plan

    return make_plan(
        profile, ["compute.mode=cpu", *overrides], run_dir=run_dir, use_machine_file=False
    )


def build_vega(plan: TrainPlan, run_dir: Path) -> VegaRun:
    """A trainer writing real events to `run_dir/events.jsonl`, with
    profiler and memory manager on."""
    from trainer_core.contract import rundir
    from trainer_core.contract.eventlog import EventWriter
    from trainer_core.engine.control_state import ControlState
    from trainer_core.engine.events import EventHub
    from trainer_core.engine.setup import build_trainer

    rundir.create_run_dir(run_dir)
    writer = EventWriter(run_dir / rundir.EVENTS)
    hub = EventHub(writer)
    control = ControlState()
    trainer = build_trainer(plan, hub, control, run_dir)
    return VegaRun(plan, trainer, hub, writer, control, run_dir)


def fit_steps(run: VegaRun, steps: int, hook: Callable[[], None] | None = None) -> list[float]:
    """Run `Trainer.fit()` for `steps` optimizer steps, then stop it the way
    the control socket does.

    Returns the perf_counter time at the end of each step (after its events and
    monitoring), measured from outside by wrapping the instance's `after_step`: the
    engine's code is not changed. `hook()` is called right after each step's time is taken
    (a `Paired` reference step, a counter snapshot).
    """
    trainer, stamps = run.trainer, run.stamps
    inner = trainer.after_step

    def after_step(outcome: Any) -> None:
        inner(outcome)
        stamps.append(time.perf_counter())
        if hook is not None:
            hook()
        if len(stamps) >= steps:
            run.control.request("stop")

    trainer.after_step = after_step  # type: ignore[method-assign]
    try:
        trainer.fit()
    finally:
        run.writer.close()
    return list(stamps)


def train_shipped(
    profile: str, scratch: Path, name: str, sets: Sequence[str], extra: Sequence[str] = ()
) -> tuple[Path, float]:
    """`trainer-core train --profile <profile>` as shipped (no machine file, CPU, no report) into
    scratch/name with `--set` overrides; (run folder, wall seconds). SystemExit with the
    trainer's last stderr when it fails."""
    run_dir = scratch / name
    args = ["train", "--profile", profile, "--run-dir", str(run_dir), *extra]
    for item in ["compute.mode=cpu", "logging.report=false", *sets]:
        args += ["--set", item]
    env = {**os.environ, "VEGA_CONFIG_DIR": str(scratch / "config")}
    t0 = time.perf_counter()
    status = trainer_runs.trainer_core(args, env, scratch / f"{name}.err").returncode
    if status != 0:
        tail = (scratch / f"{name}.err").read_text(encoding="utf-8", errors="replace")[-2000:]
        raise SystemExit(f"{name}: training failed (exit {status}):\n{tail}")
    return run_dir, time.perf_counter() - t0


def read_events(run_dir: Path) -> list[Any]:
    from trainer_core.contract.eventlog import read_all

    return read_all(run_dir / "events.jsonl")


def data_wait_from_events(events: Sequence[Any], first_step: int) -> dict[str, float | None]:
    """Data-wait fraction from `step` events (weighted by steps) and from `profile_breakdown`
    events, counting only windows that end after `first_step` (the warm-up is left out)."""
    steps = [e for e in events if e.type == "step" and e.step > first_step]
    weights = sum(e.steps_in_window for e in steps)
    from_steps = (
        sum(e.data_wait_frac * e.steps_in_window for e in steps) / weights if weights else None
    )
    breakdowns = [e for e in events if e.type == "profile_breakdown"]
    phases = ("data_s", "transfer_s", "forward_s", "backward_s", "optimizer_s")
    total = sum(getattr(e, p) * e.steps for e in breakdowns for p in phases)
    data = sum(e.data_s * e.steps for e in breakdowns)
    return {
        "step_events": from_steps,
        "profile_breakdown": data / total if total else None,
        "breakdowns": float(len(breakdowns)),
    }
