"""Benchmark 13: does vocoder-small beat Griffin-Lim, and when?

`trainer-core train --profile vocoder-small` for a wall-clock budget (`train.target_hours`) on a
single-speaker corpus of espeak-ng speech (the one benchmark 11 uses, about 41 minutes; no one on
the team recorded it), validating every E steps: each validation copy-synthesises the held-out clips
and scores them against the recordings by mel L1 and a multi-resolution STFT distance, beside
Griffin-Lim's scores on the same clips (the reference line the run logs once). Figures: the curve (a
row per validation, thinned), the last mel L1 against Griffin-Lim's, and the first step below it.
When the budget ends above Griffin-Lim, the same run with twice the budget measures whether time is
the limit. The negative control stops the same run at step 10 and must not beat Griffin-Lim.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import common
import trainer_runs

CORPUS_FILES = 480
CURVE_ROWS = 12


def train(corpus: Path, scratch: Path, name: str, sets: list[str]) -> tuple[Path, float]:
    run_dir = scratch / name
    args = ["train", "--profile", "vocoder-small", "--run-dir", str(run_dir)]
    for item in [
        *common.voice_overrides(corpus),
        "compute.mode=cpu",
        "logging.report=false",
        *sets,
    ]:
        args += ["--set", item]
    env = {**os.environ, "VEGA_CONFIG_DIR": str(scratch / "config")}  # the profile as shipped
    t0 = time.perf_counter()
    status = trainer_runs.trainer_core(args, env, scratch / f"{name}.err").returncode
    if status != 0:
        raise SystemExit(f"{name}: training failed (exit {status}); see {scratch / name}.err")
    return run_dir, time.perf_counter() - t0


def curve(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """(step, minutes, mel_l1, stft_distance) of every validation after step
    0, and the reference."""
    events = common.read_events(run_dir)
    start = events[0].t
    rows, reference = [], {}
    for e in events:
        if e.type == "validation" and e.step > 0 and "mel_l1" in e.metrics:
            rows.append({"step": e.step, "minutes": (e.t - start) / 60, **e.metrics})
            reference = dict(e.reference)
    return rows, reference


def report(
    result: common.Result, rows: list[dict[str, Any]], reference: dict[str, float], wall_s: float
) -> None:
    gl = reference["mel_l1"]
    stride = max(1, len(rows) // CURVE_ROWS)
    for row in [*rows[:-1:stride], rows[-1]]:
        detail = f"{row['minutes']:.1f} min; STFT distance {row['stft_distance']:.3f}"
        result.add(f"curve: step {row['step']}: mel L1", row["mel_l1"], "", detail=detail)
    result.add(
        "Griffin-Lim: mel L1 (the reference)",
        gl,
        "",
        detail=f"STFT distance {reference['stft_distance']:.3f}",
    )
    last = rows[-1]
    result.add(
        "vocoder-small, end of the budget: mel L1",
        last["mel_l1"],
        "",
        f"< {gl:.4g} (Griffin-Lim)",
        last["mel_l1"] < gl,
        f"step {last['step']}, whole job {wall_s / 60:.1f} min",
    )
    crossing = next((row for row in rows if row["mel_l1"] < gl), None)
    result.add(
        "first validation below Griffin-Lim: step",
        crossing["step"] if crossing else None,
        "",
        detail=(
            f"after {crossing['minutes']:.1f} min" if crossing else "never crossed in the budget"
        ),
    )


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="training budget")
    parser.add_argument("--eval-every", type=int, default=200, help="steps between validations")
    parser.add_argument(
        "--no-twice",
        dest="twice",
        action="store_false",
        help="skip the twice-the-budget run after a miss",
    )
    args = parser.parse_args()
    trainer_runs.run_here(args.tiny)  # smoke runs train in this process
    minutes = 0.1 if args.tiny else args.minutes
    started = time.monotonic()
    result = common.start_result(
        "vocoder", "13. The vocoder against Griffin-Lim", {"minutes": minutes}
    )
    scratch = common.scratch_dir("vocoder-")
    try:
        corpus = common.SMALL_VOICE if args.tiny else single_speaker(result)
        extra = [*common.VOCODER_TINY, "train.eval_every_steps=4"] if args.tiny else []
        sets = [
            f"train.target_hours={minutes / 60}",
            f"train.eval_every_steps={args.eval_every}",
            *extra,
        ]
        run_dir, wall = train(corpus, scratch, "vocoder-small", sets)
        rows, reference = curve(run_dir)
        report(result, rows, reference, wall)
        if rows[-1]["mel_l1"] >= reference["mel_l1"] and not args.tiny and args.twice:
            twice_the_budget(result, corpus, scratch, sets, minutes, rows[-1])
        stop = ["train.max_steps=10", "train.warmup_steps=5", "train.eval_every_steps=10"]
        control_dir, _ = train(corpus, scratch, "stopped", [*sets, *stop])
        control = curve(control_dir)[0][-1]["mel_l1"]
        gl = reference["mel_l1"]
        label = "negative control (stopped at step 10): mel L1"
        result.add(label, control, "", f"< {gl:.4g} (negative control: must MISS)", control < gl)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.tiny:
        result.notes.append(
            "--tiny: the vocoder shrunk, the 40-clip test voice, 6 s; smoke settings"
        )
    common.finish_result(result, started, args.out)
    return 0


def twice_the_budget(
    result: common.Result,
    corpus: Path,
    scratch: Path,
    sets: list[str],
    minutes: float,
    once: dict[str, Any],
) -> None:
    """The same run with twice the budget (its own schedule): does time
    alone close the gap to Griffin-Lim?"""
    longer = [*sets, f"train.target_hours={2 * minutes / 60}"]
    run_dir, wall = train(corpus, scratch, "vocoder-small-twice", longer)
    rows, reference = curve(run_dir)
    last, gl = rows[-1], reference["mel_l1"]
    for row in rows[:: max(1, len(rows) // CURVE_ROWS)][1:]:
        result.add(
            f"twice the budget: step {row['step']}: mel L1",
            row["mel_l1"],
            "",
            detail=f"{row['minutes']:.1f} min",
        )
    detail = (
        f"step {last['step']} (once: {once['mel_l1']:.4g} at step {once['step']}), whole job"
        f" {wall / 60:.1f} min"
    )
    result.add(
        "vocoder-small, twice the budget: mel L1",
        last["mel_l1"],
        "",
        f"< {gl:.4g} (Griffin-Lim)",
        last["mel_l1"] < gl,
        detail,
    )
    gained = once["mel_l1"] - last["mel_l1"]
    result.add(
        "twice the budget: gap to Griffin-Lim closed",
        gained / (once["mel_l1"] - gl),
        "",
        detail="fraction",
    )


def single_speaker(result: common.Result) -> Path:
    folder = common.espeak_voice_corpus(
        common.DATA / f"voice-single-{CORPUS_FILES}",
        CORPUS_FILES,
        sample_rate=22050,
        voices=("en-us",),
    )
    minutes = common.audio_seconds((folder / "wavs").glob("*.wav")) / 60
    result.notes.append(
        f"corpus: {CORPUS_FILES} espeak-ng (en-us) recordings of the bundled book,"
        f" {minutes:.1f} min"
    )
    return folder


if __name__ == "__main__":
    raise SystemExit(main())
