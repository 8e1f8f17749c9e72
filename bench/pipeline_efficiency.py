"""Benchmark 1: pipeline efficiency, Vega's real run against the limit of its own loop.

For lm-small, tts-small and vocoder-small (two optimizers), in one process:

- Vega: a real run built through the engine API (`build_trainer` from a
  `make_plan` TrainPlan): the real
  data pipeline (batches cut from the corpus / collated from preloaded mels each step), events
  written to events.jsonl, the inter-batch profiler and the memory manager on, stopped after W + N
  steps the way the control socket stops a run;
- limit: the same model architecture and initialisation (its own copy), the
  same first W + N batches of
  epoch 0 already built and resident in memory, and the loop stripped to zero_grad, forward,
  backward, gradient clipping (the profile asks for it) and optimizer.step.

The two are paired step by step (`reference_loops.Paired`): after each Vega step, one limit step
runs on the same batch, so both see the same machine load. Efficiency = limit seconds / Vega seconds
per pair, median over the N pairs after W warm-up steps and over the repetitions (target >= 0.97);
the limit paired with itself is the control. The data-wait fraction is read back from the run's own
`step` and `profile_breakdown` events.
"""

from __future__ import annotations

import copy
import itertools
import shutil
import time
from typing import Any

import common
import reference_loops


class Limit:
    """The stripped loop of one model: the task's initial model and its first batches, resident."""

    def __init__(self, plan: Any, batches_needed: int) -> None:
        from trainer_core.models.base import batch_to
        from trainer_core.models.registry import build_task

        # The device Vega's run trains on (the CPU here; the GPU under
        # bench/gpu_check), batches resident on it.
        device = plan.device.device
        task = build_task(plan.profile, plan.data, device, preload_where="ram")
        self.profile = plan.profile
        self.task = task
        self.initial = copy.deepcopy(task.model)
        batches = task.train_batches(0, plan.profile.train.batch_size)
        self.batches = [
            batch_to(batch, device) for batch, _ in itertools.islice(batches, batches_needed)
        ]

    def loop(self) -> Any:
        """A fresh copy of the initial model with its own optimizer(s), over
        the resident batches."""
        model = copy.deepcopy(self.initial)
        if self.task.optimizer_groups():  # the vocoder: a hand-written two-optimizer step
            total = self.profile.train.epochs * len(self.batches)
            return reference_loops.TwoOptimizerLoop(
                self.task, model, self.batches, self.profile, total
            )
        optimizer = reference_loops.adamw_like_vega(model, self.profile)
        loss = lambda m, batch: self.task.compute_losses(m, batch)["total"]  # noqa: E731
        return reference_loops.RawLoop(
            model, loss, self.batches, optimizer, self.profile.train.grad_clip
        )


def measure_model(
    profile: str, overrides: list[str], warmup: int, steps: int, repeats: int
) -> dict[str, Any]:
    """Per-pair efficiencies, Vega and limit step seconds, and the data-wait
    fractions of each repetition."""
    scratch = common.scratch_dir("pipeline-")
    try:
        plan = common.vega_plan(profile, overrides, scratch / "plan")
        spe = plan.steps_per_epoch
        if warmup + steps >= spe:
            raise SystemExit(
                f"{profile}: {warmup + steps} steps do not fit in one epoch of {spe} steps; use"
                " fewer"
            )
        limit = Limit(plan, warmup + steps)
        out: dict[str, Any] = {
            "efficiency": [],
            "vega": [],
            "limit": [],
            "wait_steps": [],
            "wait_breakdown": [],
        }
        for rep in range(repeats):
            run = common.build_vega(plan, scratch / f"run-{rep}")
            paired = reference_loops.Paired(limit.loop().step)
            common.fit_steps(run, warmup + steps, paired)
            out["efficiency"] += [1 / ratio for ratio in paired.ratios(warmup)]
            out["vega"] += paired.framework_s(warmup)
            out["limit"] += paired.reference_s(warmup)
            waits = common.data_wait_from_events(common.read_events(run.run_dir), warmup)
            out["wait_steps"].append(waits["step_events"])
            out["wait_breakdown"].append(waits["profile_breakdown"])
        out["control"] = control_ratios(limit, warmup + steps, warmup)
        out["steps_per_epoch"] = spe
        return out
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def control_ratios(limit: Limit, total: int, warmup: int) -> list[float]:
    """The limit paired with itself: what the method reads when both sides do the same work."""
    first, paired = limit.loop(), reference_loops.Paired(limit.loop().step)
    for _ in range(total):
        first.step()
        paired()
    return [1 / ratio for ratio in paired.ratios(warmup)]


def report_model(result: common.Result, label: str, m: dict[str, Any]) -> None:
    efficiency = common.median(m["efficiency"])
    vega_rate, limit_rate = 1 / common.median(m["vega"]), 1 / common.median(m["limit"])
    mean_ratio = sum(m["limit"]) / sum(m["vega"])
    result.add(
        f"{label}: pipeline efficiency",
        efficiency,
        "",
        ">= 0.97",
        efficiency >= 0.97,
        f"median of {len(m['efficiency'])} step pairs (range {common.spread(m['efficiency'])});"
        f" ratio of sums {mean_ratio:.3f}; Vega {vega_rate:.3g} steps/s, limit {limit_rate:.3g}"
        " steps/s",
    )
    result.add(
        f"{label}: control, limit / limit",
        common.median(m["control"]),
        "",
        detail=(
            f"the method's own bias and noise: ideally 1.000; pairs {common.spread(m['control'])}"
        ),
    )
    waits = [w for w in m["wait_steps"] if w is not None]
    result.add(
        f"{label}: data-wait fraction (step events)",
        100 * common.median(waits) if waits else None,
        "%",
    )
    breakdowns = [w for w in m["wait_breakdown"] if w is not None]
    result.add(
        f"{label}: data-wait fraction (profile_breakdown)",
        100 * common.median(breakdowns) if breakdowns else None,
        "%",
        detail=(
            "" if breakdowns else "no breakdown was due within the run (logging.profile_interval_s)"
        ),
    )


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=None, help="measured step pairs per repetition (default 12)"
    )
    parser.add_argument(
        "--warmup", type=int, default=None, help="warm-up steps per repetition (default 2)"
    )
    parser.add_argument(
        "--files", type=int, default=300, help="recordings in the generated voice folder"
    )
    parser.add_argument(
        "--models",
        default="lm-small,tts-small,vocoder-small",
        help="comma-separated: lm-small, tts-small, vocoder-small",
    )
    args = parser.parse_args()
    steps, warmup = args.steps or (2 if args.tiny else 12), args.warmup or (1 if args.tiny else 2)
    repeats = args.repeats or 1
    started = time.monotonic()
    result = common.start_result(
        "pipeline",
        "1. Pipeline efficiency",
        {"measured_steps": steps, "warmup_steps": warmup, "repeats": repeats},
    )
    voice = common.voice_data(args.files, args.tiny, result.notes)
    models = {
        "lm-small": ("lm-small", common.LM_TINY if args.tiny else []),
        "tts-small": (
            "tts-small",
            common.voice_overrides(voice) + (common.TTS_TINY if args.tiny else []),
        ),
        "vocoder-small": (
            "vocoder-small",
            common.voice_overrides(voice) + (common.VOCODER_TINY if args.tiny else []),
        ),
    }
    for label in args.models.split(","):
        profile, overrides = models[label]
        report_model(result, label, measure_model(profile, overrides, warmup, steps, repeats))
    if args.tiny:
        result.notes.append("--tiny: models shrunk to hidden 32, one layer")
    common.finish_result(result, started, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
