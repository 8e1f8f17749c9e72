"""Benchmark 14: does starting from a trained voice beat starting from nothing on a small corpus of another speaker?

A base voice is the default demo run (`--profile demo`: the English demo voice, as shipped). Then two runs of
the same profile on the Spanish second-speaker corpus (`trainer_core/demo/voice-es`, about 2 minutes, phonemes
from espeak-ng's Spanish voice, so the symbol set differs) for the same N steps: one with `--init-from` the
base run, one from scratch. Figures: the held-out validation mel loss of each (the best over the run and the
last), and tuned / scratch (target <= 0.8: clearly lower). The negative control fine-tunes from an untrained
base (the same demo run stopped at step 1) and must miss the target: the gain comes from what the base
learned, not from the fine-tuning path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import common

SPANISH = common.REPO / "trainer_core" / "demo" / "voice-es"
TARGET = 0.8


def train(scratch: Path, name: str, sets: list[str], extra: tuple[str, ...] = ()) -> tuple[Path, float]:
    run_dir = scratch / name
    argv = [*common.TRAINER_CORE, "train", "--profile", "demo", "--run-dir", str(run_dir), *extra]
    for item in ["compute.mode=cpu", "logging.report=false", *sets]:
        argv += ["--set", item]
    env = {**os.environ, "VEGA_CONFIG_DIR": str(scratch / "config")}  # the profile as shipped, no machine file
    t0 = time.perf_counter()
    with open(scratch / f"{name}.err", "wb") as err:
        status = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=err, check=False).returncode
    if status != 0:
        tail = (scratch / f"{name}.err").read_text(encoding="utf-8", errors="replace")[-2000:]
        raise SystemExit(f"{name}: training failed (exit {status}):\n{tail}")
    return run_dir, time.perf_counter() - t0


def mel_losses(run_dir: Path) -> list[tuple[int, float]]:
    """(step, held-out mel loss) of every validation after step 0."""
    events = common.read_events(run_dir)
    return [(e.step, e.losses["mel"]) for e in events if e.type == "validation" and e.step > 0]


def spanish_run(
    scratch: Path, name: str, steps: int, eval_every: int, shrink: list[str], base: Path | None
) -> list[tuple[int, float]]:
    sets = [
        *shrink,
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
    args = parser.parse_args()
    steps, eval_every = (6, 3) if args.tiny else (args.steps, args.eval_every)
    started = time.monotonic()
    result = common.start_result("finetune", "14. Fine-tuning from a voice", {"steps": steps})
    scratch = common.scratch_dir("finetune-")
    try:
        shrink = [*common.TTS_TINY, "train.warmup_steps=2"] if args.tiny else []
        english = [*shrink, f"data.cache_dir={scratch / 'cache'}"]
        english += [f"data.path={common.SMALL_VOICE}"] if args.tiny else []
        base, base_s = train(scratch, "base", [*english, *(["train.max_steps=6"] if args.tiny else [])])
        result.notes.append(f"base voice: the demo run as shipped, {base_s / 60:.1f} min")
        untrained, _ = train(scratch, "untrained", [*english, "train.max_steps=1", "train.warmup_steps=0"])
        runs = {
            "fine-tuned from the demo voice": spanish_run(scratch, "tuned", steps, eval_every, shrink, base),
            "from scratch": spanish_run(scratch, "scratch", steps, eval_every, shrink, None),
            "negative control (from an untrained base)": spanish_run(
                scratch, "control", steps, eval_every, shrink, untrained
            ),
        }
        report(result, runs, steps)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.tiny:
        result.notes.append("--tiny: the tiny model, a 6-step base on the 40-clip test voice; smoke settings")
    common.finish_result(result, started, args.out)
    return 0


def report(result: common.Result, runs: dict[str, list[tuple[int, float]]], steps: int) -> None:
    for name, curve in runs.items():
        for step, loss in curve:
            result.add(f"{name}: step {step}: mel loss", loss)
    scratch_best = min(loss for _, loss in runs["from scratch"])
    for name in ("fine-tuned from the demo voice", "negative control (from an untrained base)"):
        best = min(loss for _, loss in runs[name])
        must = " (negative control: must MISS)" if name.startswith("negative") else ""
        result.add(
            f"{name} / from scratch: best mel loss",
            best / scratch_best,
            "x",
            f"<= {TARGET}{must}",
            best / scratch_best <= TARGET,
            f"{best:.4g} against {scratch_best:.4g} after {steps} steps",
        )


if __name__ == "__main__":
    raise SystemExit(main())
