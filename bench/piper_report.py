"""The figures of bench/piper_step.py: the pairs' ratios and interval, each side's speed, where
each step's time goes, the load, and the notes that say what was compared."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import common
from framework_overhead import median_ci

TARGET = 1.03
SLOWED = 0.06  # the negative control's step: the target plus this share of Piper's step
PROFILE = "vits-medium"


@dataclass
class Case:
    label: str
    vega_precision: str
    piper_precision: str
    batch: int
    device: str  # "cpu" or "cuda"


@dataclass
class Phases:
    """Seconds per phase summed over a set of steps, beside those steps' own seconds, so that the
    means add up to the mean step."""

    totals: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    seconds: float = 0.0

    def add(self, parts: dict[str, float], steps: int, seconds: float) -> None:
        for name, value in parts.items():
            self.totals[name] = self.totals.get(name, 0.0) + value
        self.steps += steps
        self.seconds += seconds


@dataclass
class Measured:
    """The pairs of every session of one case, and what was read beside them."""

    ratios: list[float] = field(default_factory=list)
    control: list[float] = field(default_factory=list)
    vega_s: list[float] = field(default_factory=list)
    piper_s: list[float] = field(default_factory=list)
    vega_phases: Phases = field(default_factory=Phases)
    piper_phases: Phases = field(default_factory=Phases)
    loads: list[float] = field(default_factory=list)
    util: dict[str, list[float]] = field(default_factory=lambda: {"vega": [], "piper": []})
    sizes: dict[str, int] = field(default_factory=dict)
    scheduler_steps: list[int] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    shrunk: int | None = None  # Vega's micro-batch after an out-of-memory halving, if any
    alignment: str = ""  # the alignment search Piper's loop was given


def shares(parts: dict[str, float], step: float, rest_is: str) -> str:
    shown = [f"{k} {s * 1e3:.0f} ms ({s / step:.0%})" for k, s in parts.items() if s]
    rest = step - sum(parts.values())
    return "; ".join([*shown, f"the rest ({rest_is}) {rest * 1e3:.0f} ms ({rest / step:.0%})"])


def report(result: common.Result, label: str, m: Measured, gpu: bool) -> None:
    prefix = f"{label}: " if label else ""
    if not m.ratios:
        result.add(f"{prefix}Vega / Piper step time", None, "", f"<= {TARGET}", False, "no pairs")
        return
    vega, piper = common.median(m.vega_s), common.median(m.piper_s)
    ratio, (low, high) = common.median(m.ratios), median_ci(m.ratios)
    pairs = f"{len(m.ratios)} pairs"
    loop = f"{pairs}; lightning.Trainer.fit, a callback ending each step; alignment search: "
    loop += m.alignment
    result.add(f"{prefix}Piper step time (its Lightning loop)", piper * 1e3, "ms", detail=loop)
    result.add(
        f"{prefix}Vega / Piper step time",
        ratio,
        "",
        f"<= {TARGET}",
        ratio <= TARGET,
        f"{(ratio - 1) * piper * 1e3:+.0f} ms/step; pairs {common.spread(m.ratios)}",
    )
    interval = f"{low:.4f}..{high:.4f} (bootstrap of the median, {pairs})"
    met = high <= TARGET
    name = f"{prefix}Vega / Piper, 95 % interval (top)"
    result.add(name, high, "", f"<= {TARGET}", met, interval)
    where = "this GPU" if gpu else "this machine's CPU"
    for side, seconds in (("Vega", vega), ("Piper", piper)):
        detail = f"median step {seconds * 1e3:.0f} ms on {where}"
        result.add(f"{prefix}{side} steps/s", 1 / seconds, "steps/s", detail=detail)
    control = common.median(m.control)
    result.add(
        f"{prefix}negative control (Vega slept to {TARGET + SLOWED:.2f} x Piper's step) / Piper",
        control,
        "",
        f"<= {TARGET} (negative control: must MISS)",
        control <= TARGET,
        f"pairs {common.spread(m.control)}",
    )
    if m.shrunk is not None:
        result.notes.append(
            f"{prefix}Vega ran out of memory and halved its micro-batch to {m.shrunk}: the "
            "batches differ, so these figures do not compare like with like; use a smaller batch"
        )
    report_phases(result, prefix, m, gpu)


def report_phases(result: common.Result, prefix: str, m: Measured, gpu: bool) -> None:
    """Where each side's step goes (the mean of each phase and of the whole step over the same
    steps: ordinary measured pairs) and, on a GPU, how busy each side keeps it."""
    v = m.vega_phases
    if v.steps:
        step = v.seconds / v.steps
        parts = {name: total / v.steps for name, total in v.totals.items()}
        detail = f"Vega's profiler over {v.steps} steps, mean step {step * 1e3:.0f} ms: "
        detail += shares(parts, step, "loop, events, telemetry")
        result.add(f"{prefix}where a Vega step goes", step * 1e3, "ms", detail=detail)
    else:
        detail = "no profiler window (one every 5 s) held ordinary measured steps only"
        result.add(f"{prefix}where a Vega step goes", None, "ms", detail=detail)
    p = m.piper_phases
    if p.steps and not gpu:  # host clocks mistime queued GPU work; a CPU runs synchronously
        step = p.seconds / p.steps
        names = {"forward": "forward (both models, losses)", "backward": "backward"}
        parts = {names.get(k, k): t / p.steps for k, t in p.totals.items() if k != "alignment"}
        detail = f"_compute_loss, manual_backward, optimizer.step timed over {p.steps} steps, "
        detail += f"mean step {step * 1e3:.0f} ms: "
        detail += shares(parts, step, "data, Lightning's loop, logging")
        search = p.totals.get("alignment", 0.0) / p.steps
        detail += f"; the alignment search {search * 1e3:.0f} ms of the forward"
        result.add(f"{prefix}where a Piper step goes", step * 1e3, "ms", detail=detail)
    if gpu:
        for side in ("vega", "piper"):
            value = statistics.fmean(m.util[side]) if m.util[side] else None
            detail = "NVML, mean of the readings taken while that loop held the turn"
            result.add(f"{prefix}{side.capitalize()} GPU utilisation", value, "%", detail=detail)


def report_common(result: common.Result, m: Measured, case: Case, args: Any) -> None:
    from piper_loop import ALIGNMENTS, PIPER_WORKERS

    s = m.sizes
    result.add(
        "model parameters (generator + discriminator), the same in both",
        (s["vega_g"] + s["vega_d"]) / 1e6,
        "M",
        detail=f"generator {s['vega_g']:,}, discriminator {s['vega_d']:,}; Piper's the same",
    )
    result.add(
        "machine load during the pairs",
        statistics.fmean(m.loads),
        "",
        detail=(
            f"1-minute load average at each session's start and end: {common.spread(m.loads)}; "
            f"the benchmark's own torch threads count in it ({result.machine.get('cores')} cores)"
        ),
    )
    departs = f" (departs from Piper's medium in: {'; '.join(m.differences)})"
    result.notes += [
        f"Model: Piper's medium voice in both: {PROFILE} with train.batch_size={case.batch} and "
        f"vits.segment_size={args.segment} for Vega; Piper's VitsModel from its own constructor "
        "with the same values" + (departs if m.differences else ""),
        (
            "Data: the recordings decoded once by Vega, written as float WAVs with Vega's phoneme"
            " ids into Piper's phoneme_ids CSV and preprocessed by Piper's"
            " VitsDataModule.prepare_data (silence trimming off: the samples are Vega's); the two"
            " steps of a pair take the same items, in Vega's bucketed order, Piper's through the"
            f" DataLoader its data module makes ({PIPER_WORKERS} worker, prefetch 4, pinned memory)"
        ),
        (
            "Piper's loop: lightning.Trainer.fit as Piper's training command sets it up (its two "
            "ModelCheckpoint callbacks, the default logger, manual optimisation: generator, then "
            "discriminator), progress bar off; the turn passes at on_train_batch_end. Vega's: the "
            "engine's Trainer.fit, the turn passing after after_step (events, telemetry)"
        ),
        (
            "Piper's wheel lacks its compiled alignment search"
            " (monotonic_align.core.maximum_path_c): its loop was given"
            f" {ALIGNMENTS[args.alignment]} at that import path"
        ),
        (
            "Method: the two loops run in one process, in two threads taking turns step by step "
            "(bench/turns.py); a step is timed from getting the turn to handing it over; sessions "
            "alternate which loop goes first"
        ),
    ]
    if m.scheduler_steps and not any(m.scheduler_steps):
        result.notes.append(
            "Piper's ExponentialLR schedulers never stepped in its loop (manual optimisation: "
            "Lightning leaves them to training_step, which does not step them): its learning "
            "rates stay at their start values"
        )
