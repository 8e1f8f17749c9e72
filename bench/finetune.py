"""Benchmark 14: does starting from a trained voice beat starting from nothing on a
small corpus of another speaker?

A base voice is the default demo run (`--profile demo`: the English demo voice, as shipped). Then
two runs of the same profile on the Spanish second-speaker corpus (`trainer_core/demo/voice-es`,
about 2 minutes, phonemes from espeak-ng's Spanish voice, so the symbol set differs) for the same N
steps: one with `--init-from` the base run, one from scratch. Figures: the held-out validation mel
loss of each (the best over the run and the last), and tuned / scratch (target <= 0.8: clearly
lower). The negative control fine-tunes from an untrained base (the same demo run stopped at step 1)
and must miss the target: the gain comes from what the base learned, not from the fine-tuning path.
Each Spanish run is repeated with --seeds seeds (the runs' random initialisation and batch order)
and a fifth of the corpus is held out, because on 60 clips one seed's luck moves the loss by a
fifth; the figures compare the means.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import common
import trainer_runs

SPANISH = common.REPO / "trainer_core" / "demo" / "voice-es"
TARGET = 0.8


def train(
    scratch: Path, name: str, sets: list[str], extra: tuple[str, ...] = ()
) -> tuple[Path, float]:
    return common.train_shipped("demo", scratch, name, sets, extra)


def mel_losses(run_dir: Path) -> list[tuple[int, float]]:
    """(step, held-out mel loss) of every validation after step 0."""
    events = common.read_events(run_dir)
    return [(e.step, e.losses["mel"]) for e in events if e.type == "validation" and e.step > 0]


def spanish_run(
    scratch: Path, name: str, steps: int, eval_every: int, shrink: list[str], base: Path | None
) -> list[tuple[int, float]]:
    seed = int(name.rsplit("-", 1)[1])
    sets = [
        *shrink,
        f"run.seed={seed}",
        "data.val_fraction=0.2",
        f"data.path={SPANISH}",
        f"data.cache_dir={scratch / 'cache'}",
        "tts.espeak_voice=es",
        f"train.max_steps={steps}",
        "train.epochs=100000",
        f"train.eval_every_steps={eval_every}",
        "train.validate_at_start=false",
    ]
    run_dir, _ = train(scratch, name, sets, ("--init-from", str(base)) if base else ())
    return mel_losses(run_dir)


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="fine-tuning steps (N)")
    parser.add_argument("--eval-every", type=int, default=25, help="steps between validations")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per Spanish run")
    args = parser.parse_args()
    trainer_runs.run_here(args.tiny)  # smoke runs train in this process
    steps, eval_every, seeds = (6, 3, 1) if args.tiny else (args.steps, args.eval_every, args.seeds)
    started = time.monotonic()
    result = common.start_result(
        "finetune", "14. Fine-tuning from a voice", {"steps": steps, "seeds": seeds}
    )
    scratch = common.scratch_dir("finetune-")
    try:
        shrink = (
            [*common.TTS_TINY, "train.warmup_steps=2", "compute.num_threads=1"] if args.tiny else []
        )
        english = [*shrink, f"data.cache_dir={scratch / 'cache'}"]
        english += [f"data.path={common.SMALL_VOICE}"] if args.tiny else []
        bases = {
            "base": [*english, *(["train.max_steps=6"] if args.tiny else [])],
            "untrained": [*english, "train.max_steps=1", "train.warmup_steps=0"],
        }
        (base, base_s), (untrained, _) = [
            train(scratch, name, sets) for name, sets in bases.items()
        ]
        result.notes.append(f"base voice: the demo run as shipped, {base_s / 60:.1f} min")
        starts = {
            "fine-tuned from the demo voice": base,
            "from scratch": None,
            "negative control (from an untrained base)": untrained,
        }
        jobs = [
            (name, seed, number, start)
            for seed in range(1, seeds + 1)
            for number, (name, start) in enumerate(starts.items())
        ]
        runs = {
            (name, seed): spanish_run(
                scratch, f"run{number}-{seed}", steps, eval_every, shrink, start
            )
            for name, seed, number, start in jobs
        }
        report(result, runs, steps, seeds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.tiny:
        result.notes.append(
            "--tiny: the tiny model, a 6-step base on the 40-clip test voice; smoke settings"
        )
    common.finish_result(result, started, args.out)
    return 0


def report(
    result: common.Result,
    runs: dict[tuple[str, int], list[tuple[int, float]]],
    steps: int,
    seeds: int,
) -> None:
    """Per seed the best held-out mel loss; per start the mean over seeds;
    the ratios of the means."""
    means: dict[str, float] = {}
    for name in dict.fromkeys(name for name, _ in runs):
        bests = [min(loss for _, loss in runs[(name, seed)]) for seed in range(1, seeds + 1)]
        for seed, best in enumerate(bests, start=1):
            curve = ", ".join(f"{loss:.3g}" for _, loss in runs[(name, seed)])
            result.add(f"{name}, seed {seed}: best mel loss", best, detail=f"curve {curve}")
        means[name] = sum(bests) / len(bests)
        result.add(
            f"{name}: mean best mel loss", means[name], detail=f"{seeds} seeds, {steps} steps each"
        )
    scratch = means["from scratch"]
    for name in ("fine-tuned from the demo voice", "negative control (from an untrained base)"):
        must = " (negative control: must MISS)" if name.startswith("negative") else ""
        ratio = means[name] / scratch
        detail = (
            f"{means[name]:.4g} against {scratch:.4g}, means of {seeds} seeds after {steps} steps"
        )
        result.add(
            f"{name} / from scratch: best mel loss",
            ratio,
            "x",
            f"<= {TARGET}{must}",
            ratio <= TARGET,
            detail,
        )


if __name__ == "__main__":
    raise SystemExit(main())
