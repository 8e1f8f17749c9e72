"""Benchmark 18: Vega's VITS step against Piper's own trainer (19: the same on a CUDA GPU).

The same model (Piper's medium voice: 22.05 kHz, the resblock-2 decoder from 256 channels, the
47 M-parameter multi-period discriminator), the same data (the demo voice, decoded once by Vega and
preprocessed into Piper's dataset format by Piper's own code), the same batches (the two steps of a
pair take the same items), segment and precision, in one process:

(a) Piper: its Lightning module (`piper.train.vits.lightning.VitsModel`, manual optimisation: the
    generator's AdamW, then the discriminator's) in `lightning.Trainer.fit`, set up as Piper's
    training command sets it up; a callback ends each step at `on_train_batch_end`;
(b) Vega: a real run of the vits-medium profile through the engine (events, profiler, memory
    manager on).

The two loops run in two threads taking turns step by step (bench/turns.py), so that each Vega
step is paired with the Piper step next to it under the same machine load; sessions alternate
which loop goes first and drop their first W pairs. Figures: the median Vega / Piper step-time
ratio with a bootstrap 95 % interval, steps/s each, where each step's time goes, and the load
average. Target: Vega / Piper <= 1.03 (faster is the aim). Negative control: every 4th Vega step
sleeps inside the step, the sleep sized from the medians of the pairs before it to put that step
at the target plus 6 % of Piper's step (and at least 6 % of a step): it must MISS the target, or
the method could not see such a cost.

On CPU both run in fp32 at a small batch, equal on both sides. The GPU section (CUDA only; skipped
with its reason elsewhere) runs at Piper's default batch of 32: Vega in bf16 and in fp16 autocast
against Piper's default recipe (fp32: Lightning's "32-true") and against Piper in the same mixed
precision, with NVML's GPU utilisation per loop.
"""

from __future__ import annotations

import gc
import json
import shutil
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import common
from framework_overhead import quiet_lightning
from piper_report import PROFILE, SLOWED, TARGET, Case, Measured, report, report_common

VEGA_PHASES = ("data", "transfer", "forward", "backward", "optimizer")  # its profiler's
CONTROL_EVERY = 4  # every 4th measured pair is a negative-control pair
CPU_TITLE = "18. Vega's VITS step against Piper's own trainer"
GPU_TITLE = "19. Vega's VITS step against Piper's own trainer on a CUDA GPU"
GPU_KEY = "piper_step_gpu"
# Vega's side: one micro-batch, no checkpoint at the epoch ends inside the run; the memory manager
# reports only (this process also holds Piper's model and optimizers).
VEGA_SETS = ["train.grad_accum=1", "memory.act=false", "train.checkpoint_every_epochs=1000"]
# --tiny: the same layout, narrow (Piper's posterior and flow depths are fixed), on the tests'
# 40-clip voice, characters instead of phonemes; Piper's fixed 47 M-parameter discriminator is
# replaced in both by Vega's at width 4 (a smoke run of the loops, not of the models).
TINY_DISCRIMINATOR = 4
TINY_SETS = [
    f"vits.discriminator_channels={TINY_DISCRIMINATOR}",
    "vits.inter_channels=8",
    "vits.hidden_channels=16",
    "vits.filter_channels=32",
    "vits.n_layers=1",
    "vits.resblock_kernel_sizes=[3]",
    "vits.resblock_dilation_sizes=[[1, 2]]",
    "vits.upsample_initial_channel=16",
    'tts.text_units="chars"',
]
# GPU cases: (label, Vega's precision, Piper's Lightning precision); "32-true" is Piper's default.
GPU_CASES = (
    ("bf16 vs Piper's default (fp32)", "bf16", "32-true"),
    ("fp16 vs Piper's default (fp32)", "fp16", "32-true"),
    ("bf16 vs Piper bf16-mixed", "bf16", "bf16-mixed"),
    ("fp16 vs Piper 16-mixed", "fp16", "16-mixed"),
)


class ControlPauses:
    """The negative control: which Vega steps sleep, and how long (from earlier pairs only)."""

    def __init__(self, warmup: int, every: int) -> None:
        self.warmup, self.every = warmup, every

    def is_control(self, index: int) -> bool:
        if self.every < 1 or index < self.warmup:
            return False
        return (index - self.warmup) % self.every == self.every - 1

    def pause(self, turns: Any) -> float:
        index = len(turns.ends["vega"])  # the Vega step now ending
        if not self.is_control(index):
            return 0.0
        # Earlier pairs only: never this pair's own Piper step.
        piper = turns.step_seconds("piper")[:index]
        vega = turns.step_seconds("vega")[:index]
        vega = [s for i, s in enumerate(vega) if not self.is_control(i)]
        p = statistics.median(piper[self.warmup :] or piper)
        v = statistics.median(vega[self.warmup :] or vega)
        return max(SLOWED * p, (TARGET + SLOWED) * p - v)


@dataclass
class Session:
    turns: Any
    pauses: ControlPauses
    util: dict[str, float | None]


def vega_sets(case: Case, voice: Path, args: Any) -> list[str]:
    sets = [*common.voice_overrides(voice), *VEGA_SETS, *(TINY_SETS if args.tiny else [])]
    sets += [
        f"train.precision={json.dumps(case.vega_precision)}",
        f"train.batch_size={case.batch}",
        f"vits.segment_size={args.segment}",
    ]
    return [*sets, "compute.mode=gpu"] if case.device == "cuda" else sets


def measure(
    case: Case,
    voice: Path,
    args: Any,
    shape: tuple[int, int, int],
    scratch: Path,
    shared: dict[str, Any],
) -> Measured:
    """`repeats` sessions of warmup + steps pairs; `shape` is (steps, warmup, repeats). `shared`
    keeps Piper's prepared data and the count of sessions from case to case."""
    import piper_loop
    import torch

    steps, warmup, repeats = shape
    plan = common.vega_plan(PROFILE, vega_sets(case, voice, args), scratch / "plan")
    accelerator = "gpu" if case.device == "cuda" else "cpu"
    m = Measured(alignment=piper_loop.ALIGNMENTS[args.alignment])
    with piper_loop.install_alignment(args.alignment):
        for rep in range(repeats):
            m.loads.append(common.load_average()[0])
            vega = common.build_vega(plan, scratch / f"vega-{rep}")
            task: Any = vega.trainer.task
            if "data" not in shared:  # the same recordings and ids in every case
                folder = scratch / "piper-data"
                shared["data"] = piper_loop.PiperData(folder, task, plan.profile, case.batch)
            data = shared["data"]
            batches = piper_loop.batch_order(task.dataset, case.batch, warmup + steps)
            symbols = task.symbols.num_symbols
            arguments = piper_loop.piper_arguments(plan.profile, symbols, case.batch)
            torch.manual_seed(rep)
            root = scratch / f"piper-{rep}"
            piper = piper_loop.PiperLoop(
                arguments,
                data.loader(batches),
                root,
                case.piper_precision,
                accelerator,
            )
            if args.tiny:
                piper.module.model_d = tiny_discriminator()
            if rep == 0:
                m.sizes = same_model(task.model, piper.module)
                m.differences = [] if args.tiny else piper_loop.medium_differences(arguments)
            # Sessions alternate which loop goes first, over the cases too.
            shared["sessions"] = shared.get("sessions", -1) + 1
            first = "vega" if shared["sessions"] % 2 == 0 else "piper"
            pauses = ControlPauses(warmup, control_every(steps))
            session = run_session(vega, piper, warmup + steps, pauses, first, case)
            collect(m, session, warmup, vega, piper)
            if vega.trainer.state.micro_batch != case.batch:
                m.shrunk = vega.trainer.state.micro_batch
            m.loads.append(common.load_average()[0])
            del vega, task, piper, session
            gc.collect()
            if case.device == "cuda":
                torch.cuda.empty_cache()
            # Their checkpoints: a gigabyte each at the medium size.
            shutil.rmtree(scratch / f"vega-{rep}", ignore_errors=True)
            shutil.rmtree(root, ignore_errors=True)
    return m


def tiny_discriminator() -> Any:
    from trainer_core.models.vits.discriminator import MultiPeriodDiscriminator

    return MultiPeriodDiscriminator(TINY_DISCRIMINATOR)


def same_model(vega: Any, piper: Any) -> dict[str, int]:
    """Parameter counts of both models: they must agree, or the models would not be the same."""
    from piper_loop import parameters

    sizes = {
        "vega_g": parameters(vega.model_g),
        "vega_d": parameters(vega.model_d),
        "piper_g": parameters(piper.model_g),
        "piper_d": parameters(piper.model_d),
    }
    if (sizes["vega_g"], sizes["vega_d"]) != (sizes["piper_g"], sizes["piper_d"]):
        raise SystemExit(f"the two models differ in size: {sizes}")
    return sizes


def control_every(steps: int) -> int:
    """Every CONTROL_EVERY-th measured pair is a control pair; a short session still has one."""
    return min(CONTROL_EVERY, max(2, steps))


def run_session(
    vega: Any,
    piper: Any,
    total: int,
    pauses: ControlPauses,
    first: str,
    case: Case,
) -> Session:
    """One session: Piper's fit in a thread, Vega's in this one, `total` steps each by turns."""
    import torch
    from turns import Aborted, Turns, UtilByTurn

    cuda = case.device == "cuda"
    turns = Turns(("vega", "piper"), first, torch.cuda.synchronize if cuda else None)
    util = UtilByTurn(turns) if cuda else None
    thread = threading.Thread(target=piper.run, args=(turns,), name="piper-loop", daemon=True)
    thread.start()
    try:
        turns.ready("vega")
        common.fit_steps(vega, total, lambda: turns.step_done("vega", pauses.pause(turns)))
    except Aborted:
        pass  # Piper's loop failed: its error is raised below
    except BaseException as exc:
        turns.fail(exc)
        raise
    finally:
        turns.finish("vega")
        thread.join()
        readings = util.stop() if util is not None else {}
    if piper.error is not None:
        raise SystemExit(f"Piper's loop failed: {piper.error!r}") from piper.error
    return Session(turns, pauses, readings)


def collect(m: Measured, session: Session, warmup: int, vega: Any, piper: Any) -> None:
    vega_s = session.turns.step_seconds("vega")
    piper_s = session.turns.step_seconds("piper")
    pairs = min(len(vega_s), len(piper_s))
    for i in range(warmup, pairs):
        ratio = vega_s[i] / piper_s[i]
        if session.pauses.is_control(i):
            m.control.append(ratio)
        else:
            m.ratios.append(ratio)
            m.vega_s.append(vega_s[i])
            m.piper_s.append(piper_s[i])
    normal = {i for i in range(warmup, pairs) if not session.pauses.is_control(i)}
    # Vega's profiler windows (in step order) that hold ordinary measured steps only.
    first = 0
    for event in common.read_events(vega.run_dir):
        if event.type != "profile_breakdown" or not event.steps:
            continue
        span, first = range(first, first + event.steps), first + event.steps
        if all(i in normal for i in span):
            parts = {name: getattr(event, f"{name}_s") * len(span) for name in VEGA_PHASES}
            m.vega_phases.add(parts, len(span), sum(vega_s[i] for i in span))
    for i in sorted(normal):
        m.piper_phases.add(piper.clock.step(i), 1, piper_s[i])
    for name, value in session.util.items():
        if value is not None:
            m.util[name].append(value)
    m.scheduler_steps = piper.scheduler_steps()


# ------------------------------------------------------------------------------------------ main


def run_cpu(args: Any, voice: Path, shape: tuple[int, int, int]) -> None:
    steps, warmup, repeats = shape
    settings = {
        "measured_pairs_per_session": steps,
        "warmup_pairs": warmup,
        "sessions": repeats,
        "batch": args.batch,
        "segment": args.segment,
        "precision": "fp32",
        "alignment": args.alignment,
        "control_every": control_every(steps),
        "control_slowed_to": TARGET + SLOWED,
    }
    result = common.start_result("piper_step", CPU_TITLE, settings)
    started = time.monotonic()
    case = Case("", "fp32", "32-true", args.batch, "cpu")
    scratch = common.scratch_dir("piperstep-")
    try:
        m = measure(case, voice, args, shape, scratch, {})
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report(result, "", m, gpu=False)
    report_common(result, m, case, args)
    if args.tiny:
        result.notes.append("--tiny: narrow, Vega's discriminator at width 4 in both, 40 clips")
    common.finish_result(result, started, args.out)


def run_gpu(args: Any, voice: Path) -> None:
    import torch

    shape = (args.gpu_steps, args.gpu_warmup, args.gpu_repeats)
    settings = {
        "measured_pairs_per_session": shape[0],
        "warmup_pairs": shape[1],
        "sessions_per_case": shape[2],
        "batch": args.gpu_batch,
        "segment": args.segment,
        "alignment": args.alignment,
    }
    started = time.monotonic()
    if not torch.cuda.is_available():
        skip_gpu(args.out, settings, started)
        return
    from trainer_core.engine.precision import cuda_bf16_supported

    # Piper's training command sets these before training; in one process Vega's side has them too.
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    result = common.start_result(GPU_KEY, GPU_TITLE, settings)
    last: tuple[Measured, Case] | None = None
    scratch = common.scratch_dir("piperstep-")
    shared: dict[str, Any] = {}
    try:
        for label, vega_precision, piper_precision in GPU_CASES:
            if "bf16" in vega_precision + piper_precision and not cuda_bf16_supported():
                result.notes.append(f"{label}: skipped, this GPU has no native bf16")
                continue
            case = Case(label, vega_precision, piper_precision, args.gpu_batch, "cuda")
            m = measure(case, voice, args, shape, scratch, shared)
            report(result, label, m, gpu=True)
            last = (m, case)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if last is not None:
        report_common(result, *last, args)
        result.notes.append("On CUDA a step ends once the GPU is done (synchronize), both sides")
    common.finish_result(result, started, args.out)


def skip_gpu(out: Path, settings: dict[str, Any], started: float) -> None:
    """No CUDA: a skipped result with its reason, unless `out` holds GPU figures from before."""
    path = out / f"{GPU_KEY}.json"
    if path.is_file() and not common.load_result(path).skipped:
        print(f"no CUDA device here: {path} keeps the GPU figures measured earlier")
        return
    result = common.start_result(GPU_KEY, GPU_TITLE, settings)
    result.skipped = (
        "no CUDA device on this machine (torch.cuda.is_available() is False); run "
        "`bench/piper_step.py --sections gpu` where there is one"
    )
    common.finish_result(result, started, out)


def parse_args() -> Any:
    parser = common.base_parser(__doc__.splitlines()[0])
    add = parser.add_argument
    add("--sections", default="cpu,gpu", help="comma-separated: cpu, gpu (skipped without CUDA)")
    add("--steps", type=int, default=None, help="measured pairs per session (default 24)")
    add("--warmup", type=int, default=None, help="warm-up pairs per session, dropped (default 2)")
    add("--batch", type=int, default=None, help="CPU: the batch on both sides (default 2)")
    add("--segment", type=int, default=None, help="training segment in samples (default 8192)")
    add("--alignment", choices=("vega", "numpy"), default="vega", help="Piper's alignment search")
    add("--gpu-steps", type=int, default=20, help="GPU: measured pairs per session")
    add("--gpu-warmup", type=int, default=3, help="GPU: warm-up pairs per session")
    add("--gpu-repeats", type=int, default=1, help="GPU: sessions per case")
    add("--gpu-batch", type=int, default=32, help="GPU: the batch on both sides (Piper's default)")
    args = parser.parse_args()
    if args.warmup is not None and args.warmup < 1:
        parser.error("--warmup must be at least 1 (a loop's first step holds its set-up)")
    return args


def main() -> int:
    args = parse_args()
    steps, warmup, repeats = (2, 1, 1) if args.tiny else (24, 2, 2)
    shape = (args.steps or steps, args.warmup or warmup, args.repeats or repeats)
    args.batch = args.batch or (1 if args.tiny else 2)
    args.segment = args.segment or (1024 if args.tiny else 8192)
    if args.tiny:
        args.gpu_steps, args.gpu_warmup, args.gpu_repeats, args.gpu_batch = 2, 1, 1, 2
    quiet_lightning()
    voice = common.SMALL_VOICE if args.tiny else common.DEMO_VOICE
    sections = args.sections.split(",")
    if "cpu" in sections:
        run_cpu(args, voice, shape)
    if "gpu" in sections:
        run_gpu(args, voice)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
