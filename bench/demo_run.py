"""Benchmark 15: does the default demo run keep improving to its end?

`trainer-core train --profile demo` exactly as shipped (the 330-clip demo voice, its own epochs and
validation interval), on this machine's CPU. Figures: the validation curve (teacher-forced loss on
the held-out clips), the step of the best checkpoint and where it falls in the run (target: in the
last quarter, i.e. >= 0.75 of the run's steps), and the last validation against the best. The
negative control trains the same profile for the same number of steps on 16 clips (the first of the
tests' corpus): it overfits early, so its best checkpoint must fall before the last quarter.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import common
import trainer_runs

CURVE_ROWS = 10
LAST_QUARTER = 0.75
CONTROL_CLIPS = 16


def few_clips(folder: Path, count: int) -> Path:
    """The first `count` clips of the tests' corpus, linked into `folder`
    with their metadata rows."""
    (folder / "wavs").mkdir(parents=True)
    rows = (common.SMALL_VOICE / "metadata.csv").read_text(encoding="utf-8").splitlines()[:count]
    for row in rows:
        name = row.split("|")[0] + ".wav"
        (folder / "wavs" / name).symlink_to(common.SMALL_VOICE / "wavs" / name)
    (folder / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def train(scratch: Path, name: str, sets: list[str]) -> tuple[Path, float]:
    return common.train_shipped("demo", scratch, name, sets)


def outcome(run_dir: Path) -> dict[str, Any]:
    """The validation curve, the last best-model step and the run's last
    step, from the event log."""
    events = common.read_events(run_dir)
    curve = [(e.step, e.loss) for e in events if e.type == "validation" and e.loss is not None]
    best = [e.step for e in events if e.type == "best_model"]
    last_step = next(e.step for e in reversed(events) if e.type == "finished")
    if not best:
        raise SystemExit(f"{run_dir}: no best checkpoint was announced")
    return {"curve": curve, "best_step": best[-1], "last_step": last_step}


def report(result: common.Result, run: dict[str, Any], wall_s: float) -> None:
    curve = run["curve"]
    stride = max(1, len(curve) // CURVE_ROWS)
    for step, loss in [*curve[:-1:stride], curve[-1]]:
        result.add(f"curve: step {step}: validation loss", loss)
    best_loss = min(loss for _, loss in curve)
    position = run["best_step"] / run["last_step"]
    result.add(
        "demo: best checkpoint's place in the run",
        position,
        "",
        f">= {LAST_QUARTER} (the last quarter)",
        position >= LAST_QUARTER,
        f"best at step {run['best_step']} of {run['last_step']}; whole job {wall_s / 60:.1f} min",
    )
    result.add(
        "demo: last validation / best",
        curve[-1][1] / best_loss,
        "x",
        detail=f"best {best_loss:.4g}",
    )


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    args = parser.parse_args()
    trainer_runs.run_here(args.tiny)  # smoke runs train in this process
    started = time.monotonic()
    result = common.start_result("demo_run", "15. The demo run", {})
    scratch = common.scratch_dir("demo-")
    try:
        # --tiny: the tiny model on the 40-clip corpus for a few steps, so
        # the smoke run takes seconds.
        shrink = (
            [*common.TTS_TINY, f"data.path={common.SMALL_VOICE}", "train.epochs=2"]
            if args.tiny
            else []
        )
        tiny_eval = ["train.eval_every_steps=3", "train.warmup_steps=2"] if args.tiny else []
        run_dir, wall = train(scratch, "demo", [*shrink, *tiny_eval])
        demo = outcome(run_dir)
        report(result, demo, wall)
        same_steps = [f"train.max_steps={demo['last_step']}", "train.epochs=100000"]
        small = [*common.TTS_TINY] if args.tiny else []
        few = few_clips(scratch / "few", CONTROL_CLIPS)
        control_dir, _ = train(
            scratch, "control", [*small, f"data.path={few}", *same_steps, *tiny_eval]
        )
        control = outcome(control_dir)
        position = control["best_step"] / control["last_step"]
        result.add(
            f"negative control ({CONTROL_CLIPS} clips, same steps): best checkpoint's place",
            position,
            "",
            f">= {LAST_QUARTER} (negative control: must MISS)",
            position >= LAST_QUARTER,
            f"best at step {control['best_step']} of {control['last_step']}",
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.tiny:
        result.notes.append(
            "--tiny: the tiny model on the 40-clip test voice for two epochs; smoke settings"
        )
    common.finish_result(result, started, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
