"""Benchmark 4: what events and monitoring cost, and how fast the event log grows.

Part 1, on the demo models (the `demo` TTS profile and `lm-small`): a real Vega run through the
engine API, where the instance methods EventHub.emit (validation + EventWriter.emit),
EventWriter.emit, MemoryGuard.observe, StepWindow.add/flush and StepProfiler.flush are wrapped with
timers from outside. Their time between the end of the warm-up and the last measured step, over the
wall time of those steps, is the fraction of step time they cost (target < 0.5 %). The profiler's
per-phase context managers cannot be wrapped without changing the engine; their cost is measured
with a micro-benchmark of `StepProfiler.phase` and multiplied by the phases per step.

Part 2: a synthetic step clock drives the real StepWindow + EventHub + EventWriter at
10, 100 and 1000 steps/s of simulated time; event-log growth in lines/s (target: bounded
by the coalescing window, 1 / logging.step_interval_s) and bytes/s, and the real CPU
cost of telemetry per simulated step.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import common

# (profile, overrides) of the demo models; TTS trains on the generated voice folder so that an epoch
# holds more steps than the measurement (an epoch end would add validation time to the window).
WATCHED = (
    ("events", "hub", "emit"),
    ("writer", "writer", "emit"),
    ("memory", "memory", "observe"),
    ("window_add", "window", "add"),
    ("window_flush", "window", "flush"),
    ("profiler_flush", "profiler", "flush"),
)
RATES = (10, 100, 1000)


def watch(run: common.VegaRun, totals: dict[str, float]) -> None:
    """Wrap the monitoring methods of this run's objects (instance
    attributes: the classes are untouched)."""
    owners = {
        "hub": run.hub,
        "writer": run.writer,
        "memory": run.trainer.memory_guard,
        "window": run.trainer.telemetry.window,
        "profiler": run.trainer.profiler,
    }
    for key, owner, method in WATCHED:
        target = owners[owner]
        setattr(target, method, common.timed(getattr(target, method), totals, key))


def phase_cost_s(repeats: int = 20000) -> float:
    """Seconds one `with profiler.phase(...)` costs on the CPU (median of 5 rounds)."""
    import torch

    from trainer_core.engine.profiler import StepProfiler

    profiler = StepProfiler(torch.device("cpu"), 5.0)
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats):
            with profiler.phase("forward"):
                pass
        rounds.append((time.perf_counter() - t0) / repeats)
    return common.median(rounds)


def measure_model(profile: str, overrides: list[str], warmup: int, steps: int) -> dict[str, Any]:
    """Monitoring seconds and wall seconds over the measured steps of one real run."""
    scratch = common.scratch_dir("events-")
    try:
        plan = common.vega_plan(profile, overrides, scratch / "run")
        run = common.build_vega(plan, scratch / "run")
        totals: dict[str, float] = {}
        watch(run, totals)
        at_warmup: dict[str, float] = {}
        snapshot = lambda: at_warmup.update(totals) if len(run.stamps) == warmup else None  # noqa: E731
        stamps = common.fit_steps(run, warmup + steps, snapshot)
        window = {k: totals.get(k, 0.0) - at_warmup.get(k, 0.0) for k in totals}
        return {
            "wall_s": stamps[-1] - stamps[warmup - 1],
            "steps": steps,
            "window": window,
            "step_events": sum(1 for e in common.read_events(scratch / "run") if e.type == "step"),
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def synthetic_growth(rate: float, seconds: float, interval_s: float) -> dict[str, float]:
    """Drive StepWindow + EventHub + EventWriter with a simulated clock at `rate` steps/s."""
    from trainer_core.contract.eventlog import EventWriter
    from trainer_core.engine.events import EventHub
    from trainer_core.engine.telemetry import StepRecord, StepWindow

    now = [0.0]
    window = StepWindow(interval_s, clock=lambda: now[0])
    folder = common.scratch_dir("growth-")
    path = folder / "events.jsonl"
    steps = int(rate * seconds)
    cpu0 = time.process_time()
    with EventWriter(path) as writer:
        hub = EventHub(writer)
        for step in range(1, steps + 1):
            now[0] = step / rate
            loss = 2.0 + 1.0 / step
            window.add(
                StepRecord(step, 0, loss, {"ce": loss}, 3e-4, 0.8, None, 16, 1.0 / rate, 0.0, 16, 1)
            )
            if window.due():
                event = window.flush()
                if event is not None:
                    event.eta_s = 100.0
                    hub.emit(event)
    cpu = time.process_time() - cpu0
    lines, size = len(path.read_bytes().splitlines()), path.stat().st_size
    shutil.rmtree(folder, ignore_errors=True)
    return {
        "lines_per_s": lines / seconds,
        "bytes_per_s": size / seconds,
        "cpu_us_per_step": cpu / steps * 1e6,
    }


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=None, help="measured steps per model (default 30)"
    )
    parser.add_argument(
        "--files", type=int, default=300, help="recordings in the generated voice folder"
    )
    args = parser.parse_args()
    steps, warmup = args.steps or (2 if args.tiny else 30), 1 if args.tiny else 3
    sim_s = 2.0 if args.tiny else 60.0
    started = time.monotonic()
    result = common.start_result(
        "event_cost",
        "4. Event and monitoring cost",
        {"measured_steps": steps, "warmup_steps": warmup, "simulated_seconds": sim_s},
    )
    voice = common.voice_data(args.files, args.tiny, result.notes)
    models = {
        "demo (TTS)": ("demo", common.voice_overrides(voice)),
        "lm-small": ("lm-small", common.LM_TINY if args.tiny else []),
    }
    phase_s = phase_cost_s(2000 if args.tiny else 20000)
    for label, (profile, overrides) in models.items():
        report_model(result, label, measure_model(profile, overrides, warmup, steps), phase_s)
    report_growth(result, sim_s)
    result.notes.append(
        f"profiler phase context manager: {phase_s * 1e6:.1f} µs each, 5 per step (data, transfer,"
        " forward, backward, optimizer); included in 'all monitoring'"
    )
    if args.tiny:
        result.notes.append("--tiny: lm-small shrunk to hidden 32, 1 layer, context 32")
    common.finish_result(result, started, args.out)
    return 0


def report_model(result: common.Result, label: str, m: dict[str, Any], phase_s: float) -> None:
    w, wall, steps = m["window"], m["wall_s"], m["steps"]
    events = w.get("events", 0.0) / wall
    memory = w.get("memory", 0.0) / wall
    # hub.emit contains writer.emit, so the writer is not added again.
    monitoring = sum(
        w.get(k, 0.0) for k in ("events", "memory", "window_add", "window_flush", "profiler_flush")
    )
    everything = (monitoring + 5 * phase_s * steps) / wall
    step_ms = wall / steps * 1e3
    emits = int(w.get("events#", 0))
    result.add(
        f"{label}: EventHub.emit (validate + write)",
        100 * events,
        "% of step time",
        "< 0.5 %",
        events < 0.005,
        f"{emits} events over {steps} steps of {step_ms:.0f} ms; writer alone"
        f" {100 * w.get('writer', 0) / wall:.4f} %",
    )
    result.add(
        f"{label}: MemoryGuard.observe",
        100 * memory,
        "% of step time",
        "< 0.5 %",
        memory < 0.005,
        f"{w.get('memory', 0) / max(1, w.get('memory#', 1)) * 1e6:.1f} µs per call",
    )
    result.add(
        f"{label}: all monitoring (events, memory, window, profiler)",
        100 * everything,
        "% of step time",
        "< 0.5 %",
        everything < 0.005,
    )


def report_growth(result: common.Result, sim_s: float) -> None:
    from trainer_core.contract.profile import LoggingSection

    interval = LoggingSection().step_interval_s
    bound = 1.0 / interval
    for rate in RATES:
        g = synthetic_growth(rate, sim_s, interval)
        result.add(
            f"event log at {rate} steps/s",
            g["lines_per_s"],
            "lines/s",
            f"<= {bound:g} (bounded)",
            g["lines_per_s"] <= bound * 1.01,
            f"{g['bytes_per_s'] / 1024:.1f} KiB/s; telemetry {g['cpu_us_per_step']:.1f} µs CPU per"
            f" step = {g['cpu_us_per_step'] * rate / 1e4:.2f} % at this rate",
        )


if __name__ == "__main__":
    raise SystemExit(main())
