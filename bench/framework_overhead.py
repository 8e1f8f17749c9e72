"""Benchmark 2: framework overhead of Vega against a plain PyTorch loop and PyTorch Lightning.

The same model (lm-small's byte transformer; and the same architecture shrunk to a tiny one,
where the per-step cost of a framework is not lost in the compute), the same batches from the
same corpus iterator, the same AdamW, LR schedule, gradient clipping and fp32 precision,
interleaved in one process and repeated:

(a) raw: a hand-written loop (zero_grad, forward, backward, clip, step, scheduler step,
loss.item()); (b) Lightning: `lightning.Trainer` with progress bar, logger,
checkpointing and model summary off (its
    parity-test settings), gradient_clip_val set, the scheduler stepped every step;
(c) Vega: a real run through the engine API, events, profiler and memory manager on.

vocoder-small (two optimizers: the discriminators, then the generator against them) is measured
against a hand-written two-optimizer loop (`reference_loops.TwoOptimizerLoop`: per group zero_grad,
loss, backward, step; the schedules after; the discriminators frozen in the generator's pass, as
Vega does) on a generated voice corpus; Lightning is left out there (its GAN recipe is manual
optimisation, i.e. the hand-written loop again). Target for it: Vega within 3 % of the raw loop. A
third side is the same loop without the freezing, as HiFi-GAN's reference training script writes it:
what a user's own loop usually costs.

mms is the MMS-shaped VITS step (the mms-finetune profile's model: 36 M generator parameters and the
47 M multi-period discriminator; batch and segment cut to what a CPU steps in seconds) against the
same two-optimizer loop, with a bootstrap 95 % interval of the median ratio. Its negative control is
Vega with 6 % of the paired raw step slept inside every step: that side must miss the 1.03 target,
or the method could not see such a cost.

Every framework step is paired with one raw step run right after it (`reference_loops.Paired`;
hooks: Lightning's `on_train_batch_end` callback, a wrapper around Vega's instance `after_step`), so
each pair sees the same machine load. Figures: median framework / raw ratio over the step pairs
after W warm-up steps, and the overhead in ms per step it means; raw paired with raw is the control
that shows the method's own bias. Targets: Vega within 2 % of raw; faster than Lightning.
"""

from __future__ import annotations

import copy
import logging
import random
import shutil
import statistics
import time
import warnings
from typing import Any

import common
import reference_loops

from trainer_core.tiny_profiles import TINY

SIZES = {
    "lm-small": [],
    "lm-tiny": [
        "model.hidden=64",
        "model.encoder_layers=2",
        "model.heads=2",
        "data.context_bytes=64",
        "train.batch_size=8",
    ],
}
SIDES = ("vega", "lightning", "raw")
GAN_SIDES = ("vega", "unfrozen", "raw")
MMS_SIDES = ("vega", "slowed", "raw")
MMS_TINY_WIDTHS = (
    "inter_channels",
    "hidden_channels",
    "filter_channels",
    "n_layers",
    "posterior_layers",
    "flow_layers",
    "flow_count",
    "discriminator_channels",
    "p_dropout",
)
# Vega / raw targets: a two-optimizer step does more bookkeeping (a snapshot to
# undo the first group's step).
TARGETS = {"vocoder-small": 1.03, "mms": 1.03}
# --tiny: MMS's audio and decoder layout (4 upsamplings, resblock 1) at the tiny profiles' widths.
MMS_TINY = [
    *(
        f"vits.{name}={value}"
        for name, value in TINY["vits"]["vits"].items()
        if name in MMS_TINY_WIDTHS
    ),
    "vits.upsample_initial_channel=16",
    "vits.resblock_kernel_sizes=[3]",
    "vits.resblock_dilation_sizes=[[1, 3, 5]]",
    "vits.segment_size=1024",
    "train.batch_size=1",
]
SLOWED = 0.06  # the negative control's extra time per step, as a fraction of the paired raw step
# MMS-shaped on a CPU: fp32, a micro-batch of 2 and 8192-sample segments (the profile's), no
# accumulation. The memory manager reports only: this process holds the raw loop's models
# beside Vega's, past the profile's 7 GB budget (meant for an 8 GB card), and a paused
# trainer would wait here for ever.
MMS_CPU = [
    "compute.mode=cpu",
    "train.precision=fp32",
    "train.batch_size=2",
    "train.grad_accum=1",
    "memory.act=false",
]


class Baselines:
    """The raw and Lightning sides of one model size: the task's initial
    model and its batch iterator."""

    def __init__(self, plan: Any, total_steps: int) -> None:
        from trainer_core.models.registry import build_task

        self.profile = plan.profile
        self.task = build_task(plan.profile, plan.data, "cpu")
        self.initial = copy.deepcopy(self.task.model)
        self.total_steps = total_steps

    def batches(self, steps: int):
        """Epoch 0's batches from item 0, cut by the same corpus code Vega
        uses (the same data cost)."""
        for number, (batch, _) in enumerate(
            self.task.train_batches(0, self.profile.train.batch_size)
        ):
            if number == steps:
                return
            yield batch

    def raw_loop(self, steps: int, freeze: bool = True) -> Any:
        """A hand-written loop on a fresh copy of the initial model, with
        Vega's optimizer and schedule."""
        model = copy.deepcopy(self.initial)
        if self.task.optimizer_groups():
            batches = self.batches(steps)
            return reference_loops.TwoOptimizerLoop(
                self.task, model, batches, self.profile, self.total_steps, freeze
            )
        optimizer = reference_loops.adamw_like_vega(model, self.profile)
        scheduler = reference_loops.scheduler_like_vega(optimizer, self.profile, self.total_steps)
        loss = lambda m, batch: self.task.compute_losses(m, batch)["total"]  # noqa: E731
        return reference_loops.RawLoop(
            model, loss, self.batches(steps), optimizer, self.profile.train.grad_clip, scheduler
        )

    def run_raw(self, steps: int, hook: Any, freeze: bool = True) -> None:
        """The raw loop as a framework of its own (the A/A control: raw paired with raw)."""
        loop = self.raw_loop(steps, freeze)
        for _ in range(steps):
            loop.step()
            hook()

    def run_lightning(self, steps: int, hook: Any) -> None:
        import lightning as L

        module = lightning_module(self, copy.deepcopy(self.initial))
        trainer = L.Trainer(
            accelerator="cpu",
            devices=1,
            max_steps=steps,
            max_epochs=1,
            enable_progress_bar=False,
            logger=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
            limit_val_batches=0,
            gradient_clip_val=self.profile.train.grad_clip or None,
            gradient_clip_algorithm="norm",
            callbacks=[HookCallback(hook)],
            deterministic=False,
            benchmark=False,
        )
        trainer.fit(module, train_dataloaders=BatchIterable(self, steps))


class BatchIterable:
    """An iterable Lightning accepts as its train loader: the corpus batches, `steps` of them."""

    def __init__(self, owner: Baselines, steps: int) -> None:
        self.owner, self.steps = owner, steps

    def __iter__(self):
        return self.owner.batches(self.steps)

    def __len__(self) -> int:
        return self.steps


def lightning_module(owner: Baselines, model: Any) -> Any:
    import lightning as L

    class ByteLmModule(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = owner.task.compute_losses(self.model, batch)["total"]
            loss.item()  # the same one host sync per step as the other two sides
            return loss

        def configure_optimizers(self) -> Any:
            optimizer = reference_loops.adamw_like_vega(self.model, owner.profile)
            scheduler = reference_loops.scheduler_like_vega(
                optimizer, owner.profile, owner.total_steps
            )
            return {
                "optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
            }

    return ByteLmModule()


def hook_callback_class() -> type:
    import lightning as L

    class _Hook(L.Callback):
        def __init__(self, hook: Any) -> None:
            self.hook = hook

        def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
            self.hook()

    return _Hook


def HookCallback(hook: Any) -> Any:  # noqa: N802 - reads like the class it builds
    """A Lightning callback calling `hook()` at the end of every training batch."""
    return hook_callback_class()(hook)


def quiet_lightning() -> None:
    """Lightning's advice (workers, GPU available, ...) is noise here; errors still show."""
    import lightning  # noqa: F401 - importing sets its loggers' levels, which are lowered after it

    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")


def measure_size(
    profile: str, overrides: list[str], warmup: int, steps: int, repeats: int
) -> dict[str, list[float]]:
    """Per-pair (framework / raw) ratios and step seconds of each side;
    sides rotated each repetition."""
    scratch = common.scratch_dir("overhead-")
    try:
        plan = common.vega_plan(profile, overrides, scratch / "plan")
        total = warmup + steps
        if total >= plan.steps_per_epoch:
            raise SystemExit(
                f"{total} steps do not fit in one epoch of {plan.steps_per_epoch} steps; use fewer"
            )
        base = Baselines(plan, plan.profile.train.epochs * plan.steps_per_epoch)
        out: dict[str, list[float]] = {}
        sides = (
            SIDES
            if not base.task.optimizer_groups()
            else MMS_SIDES
            if profile == "mms-finetune"
            else GAN_SIDES
        )
        for rep, order in enumerate(common.rotations(sides, repeats)):
            for side in order:
                paired = reference_loops.Paired(base.raw_loop(total).step)
                if side in ("raw", "unfrozen"):
                    base.run_raw(total, paired, freeze=side == "raw")
                elif side == "lightning":
                    base.run_lightning(total, paired)
                elif side == "slowed":
                    common.fit_steps(
                        common.build_vega(plan, scratch / f"slow-{rep}"), total, slowed(paired)
                    )
                else:
                    common.fit_steps(common.build_vega(plan, scratch / f"run-{rep}"), total, paired)
                out.setdefault(f"{side}/raw", []).extend(paired.ratios(warmup))
                out.setdefault(side, []).extend(paired.framework_s(warmup))
                out.setdefault(f"raw beside {side}", []).extend(paired.reference_s(warmup))
        return out
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def median_ci(values: list[float], level: float = 0.95, draws: int = 2000) -> tuple[float, float]:
    """A bootstrap confidence interval of the median (fixed seed: the same
    samples give the same interval)."""
    if not values:
        return float("nan"), float("nan")
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    tail = (1 - level) / 2
    return medians[int(tail * draws)], medians[min(draws - 1, int((1 - tail) * draws))]


def slowed(paired: reference_loops.Paired) -> Any:
    """The negative control's hook: sleep SLOWED of the last raw step inside
    the framework's step, then pair."""

    def hook() -> None:
        time.sleep(SLOWED * (paired.reference[-1] if paired.reference else 0.0))
        paired()

    return hook


def report_size(result: common.Result, label: str, m: dict[str, list[float]]) -> None:
    raw = common.median(m["raw beside vega"] + m.get("raw beside lightning", []))
    vega_ratio, target = common.median(m["vega/raw"]), TARGETS.get(label, 1.02)
    control = common.median(m["raw/raw"])
    result.add(
        f"{label}: raw step time",
        raw * 1e3,
        "ms",
        detail=f"{len(m['vega/raw'])} step pairs per side",
    )
    result.add(
        f"{label}: Vega / raw",
        vega_ratio,
        "",
        f"<= {target}",
        vega_ratio <= target,
        f"{(vega_ratio - 1) * raw * 1e3:+.2f} ms/step; pairs {common.spread(m['vega/raw'])}",
    )
    result.add(
        f"{label}: Vega steps/s",
        1 / common.median(m["vega"]),
        "steps/s",
        detail="on this machine's CPU",
    )
    if "lightning/raw" in m:
        report_lightning(result, label, m, raw, vega_ratio)
    if "slowed/raw" in m:
        report_mms(result, label, m, target)
    if "unfrozen/raw" in m:
        unfrozen = common.median(m["unfrozen/raw"])
        versus = f"Vega / it {vega_ratio / unfrozen:.3f}"
        detail = (
            f"the discriminators' unused gradients computed, as HiFi-GAN's script does; {versus}"
        )
        result.add(f"{label}: loop without freezing / raw", unfrozen, "", detail=detail)
    result.add(
        f"{label}: control, raw / raw",
        control,
        "",
        detail=(
            f"the method's own bias and noise: ideally 1.000; pairs {common.spread(m['raw/raw'])}"
        ),
    )


def report_mms(result: common.Result, label: str, m: dict[str, list[float]], target: float) -> None:
    low, high = median_ci(m["vega/raw"])
    interval = f"{low:.4f}..{high:.4f}"
    result.add(
        f"{label}: Vega / raw, 95 % interval (top)",
        high,
        "",
        f"<= {target}",
        high <= target,
        interval,
    )
    slow = common.median(m["slowed/raw"])
    result.add(
        f"{label}, negative control (Vega + {SLOWED:.0%} of a step) / raw",
        slow,
        "",
        f"<= {target} (negative control: must MISS)",
        slow <= target,
        f"pairs {common.spread(m['slowed/raw'])}",
    )


def report_lightning(
    result: common.Result, label: str, m: dict[str, list[float]], raw: float, vega: float
) -> None:
    lit_ratio = common.median(m["lightning/raw"])
    result.add(
        f"{label}: Lightning / raw",
        lit_ratio,
        "",
        detail=(
            f"{(lit_ratio - 1) * raw * 1e3:+.2f} ms/step; pairs {common.spread(m['lightning/raw'])}"
        ),
    )
    result.add(
        f"{label}: Vega / Lightning",
        vega / lit_ratio,
        "",
        "< 1 (faster)",
        vega < lit_ratio,
        "ratio of the two medians against raw",
    )


def size_settings(label: str, args: Any, notes: list[str]) -> tuple[str, list[str]]:
    """(profile, overrides) of one size; the vocoder trains on a generated voice folder (one epoch
    must hold the measured steps)."""
    if label == "mms":
        voice = common.voice_data(args.files, args.tiny, notes)
        tiny = MMS_TINY if args.tiny else []
        return "mms-finetune", [*common.voice_overrides(voice), *MMS_CPU, *tiny]
    if label == "vocoder-small":
        voice = common.voice_data(args.files, args.tiny, notes)
        tiny = common.VOCODER_TINY if args.tiny else []
        return "vocoder-small", [*common.voice_overrides(voice), *tiny]
    return "lm-small", common.LM_TINY if args.tiny else SIZES[label]


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="lm-small,lm-tiny,vocoder-small,mms",
        help="comma-separated: lm-small, lm-tiny, vocoder-small, mms",
    )
    parser.add_argument(
        "--files", type=int, default=300, help="recordings in the generated voice folder (vocoder)"
    )
    parser.add_argument(
        "--steps", default=None, help="measured steps per size, e.g. lm-small=10,lm-tiny=200"
    )
    parser.add_argument(
        "--warmup", type=int, default=None, help="warm-up steps per segment (default 3)"
    )
    args = parser.parse_args()
    steps = {"lm-small": 10, "lm-tiny": 150, "vocoder-small": 20, "mms": 8}
    if args.tiny:
        steps = {"lm-small": 2, "lm-tiny": 3, "vocoder-small": 3, "mms": 2}
    if args.steps:
        steps.update({k: int(v) for k, v in (item.split("=") for item in args.steps.split(","))})
    warmup, repeats = (
        args.warmup or (1 if args.tiny else 3),
        args.repeats or (1 if args.tiny else 3),
    )
    quiet_lightning()
    sizes = args.sizes.split(",")
    general = [label for label in sizes if label != "mms"]
    if general:
        started = time.monotonic()
        result = common.start_result(
            "overhead", "2. Framework overhead", settings(steps, warmup, repeats, general)
        )
        measure_sizes(result, general, args, steps, warmup, repeats)
        result.notes.append(
            "lm-tiny = lm-small with hidden 64, 2 layers, 2 heads, context 64, batch 8"
        )
        if args.tiny:
            result.notes.append("--tiny: every size shrunk to hidden 32, one layer")
        common.finish_result(result, started, args.out)
    if "mms" in sizes:
        title = "17. Framework overhead of an MMS-shaped VITS step"
        started = time.monotonic()
        result = common.start_result(
            "overhead_mms", title, settings(steps, warmup, repeats, ["mms"])
        )
        measure_sizes(result, ["mms"], args, steps, warmup, repeats)
        if args.tiny:
            result.notes.append(
                "--tiny: MMS's layout at hidden 16, segments of 1024 samples, a micro-batch of 1"
            )
        common.finish_result(result, started, args.out)
    return 0


def settings(steps: dict[str, int], warmup: int, repeats: int, sizes: list[str]) -> dict[str, Any]:
    measured = {label: steps[label] for label in sizes}
    return {"measured_steps": measured, "warmup_steps": warmup, "repeats": repeats}


def measure_sizes(
    result: common.Result,
    sizes: list[str],
    args: Any,
    steps: dict[str, int],
    warmup: int,
    repeats: int,
) -> None:
    for label in sizes:
        profile, overrides = size_settings(label, args, result.notes)
        report_size(result, label, measure_size(profile, overrides, warmup, steps[label], repeats))


if __name__ == "__main__":
    raise SystemExit(main())
