"""Benchmarks 11 and 12: what a model learns in a fixed wall-clock budget.

11 (`--sections voice`). Each variant trains `trainer-core train --set train.target_hours=M/60` (the
same budget, one after the other on this machine, nothing else running) on a single-speaker corpus
of espeak-ng speech of the bundled book's sentences (about 41 minutes; no one on the team recorded
it); `trainer-core evaluate` then scores its last checkpoint on held-out sentences: synthesised from
text alone, heard through Griffin-Lim, DTW-aligned log-mel L1 per bin against the recordings.
"before" is the model as it was before this work (its old defaults pinned with --set), "after" the
profile as shipped; each ablation row takes one change out of "after" (or adds one that was tried
and left off), one row lets `model.size = "auto"` choose the size, and when "after" misses the
target a last row trains it for twice the budget (is time the limit?). References measured in the
same run: the floor (the recordings re-synthesised through Griffin-Lim), a wrong sentence (another
recording's mel through the same Griffin-Lim, scored against each reference) and a negative control
that must miss the target (the model stopped at step 2).

12 (`--sections lm`). lm-small as shipped against `model.size = "auto"` on text that is not the
bundled book (the docstrings of this Python's standard library), same budget, bits per byte on the
held-out text; the negative control stops the auto-sized model at step 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import common
import trainer_runs

# Today's model, before this work: the settings the changed defaults
# replaced, pinned for the baseline.
OLD_DECODER = ['model.decoder="transformer"']
BEFORE = {
    "demo": [*OLD_DECODER, "model.decoder_layers=2", "model.dropout=0.1", "train.lr=1e-3"],
    "tts-small": [*OLD_DECODER, "model.decoder_layers=4", "model.dropout=0.1", "train.lr=3e-4"],
}
# One change taken out of "after" per row, and one option that was tried and left off (demo-size
# model only: each row costs a full budget, so the post-net, left off earlier, is not re-run here).
ABLATIONS = {
    "after with the transformer decoder": [*OLD_DECODER, "model.decoder_layers=2"],
    "after with the old learning rate": ["train.lr=1e-3"],
    "after with the old dropout": ["model.dropout=0.1"],
    "after plus the pitch predictor": ["model.pitch=true"],
}
CORPUS_FILES = 480
LM_TEXT_BYTES = 400_000
LM_MINUTES = 4.0
BITS_TARGET = 3.0  # the target for model.size = "auto" on text that is not the bundled book
EVAL_ITEMS = 16
# The smoke run (--tiny): a few sentences, and the ablation whose model code differs most (the
# decoder; the pitch predictor has its own tests).
TINY_EVAL_ITEMS = 4
TINY_ABLATIONS = ("after with the transformer decoder",)
TINY_MINUTES = 0.04  # seconds a variant: the smoke checks the plumbing, not the learning
TARGET_RATIO = 0.75  # the target: at least 25 % lower distance than "before"


@dataclass(frozen=True)
class Trained:
    """One budgeted training run: where it is, how long the whole job took, how far it got."""

    run_dir: Path
    wall_s: float
    steps: int
    status: int


@dataclass(frozen=True)
class Setup:
    """What every variant shares: the corpus, the budget, the scratch folder
    and any smoke-test shrinking."""

    corpus: Path
    minutes: float
    scratch: Path
    extra: tuple[str, ...] = ()
    eval_items: int = EVAL_ITEMS
    ablations: tuple[str, ...] = tuple(ABLATIONS)
    twice_up_front: bool = False
    """The smoke run trains "twice the budget" with the rest (in the real
    one it runs only on a miss)."""


def train(setup: Setup, name: str, profile: str, sets: list[str]) -> Trained:
    corpus, minutes, scratch = setup.corpus, setup.minutes, setup.scratch
    run_dir = scratch / name
    args = ["train", "--profile", profile, "--run-dir", str(run_dir), "--compute-mode", "cpu"]
    settings = [
        *common.voice_overrides(corpus),
        f"train.target_hours={minutes / 60}",
        "logging.report=false",
    ]
    # The profiles' own device choice stays out of it: every variant runs on
    # this machine's CPU cores.
    for item in [*settings, *setup.extra, *sets]:
        args += ["--set", item]
    # no machine file: the profile as shipped
    env = {**os.environ, "VEGA_CONFIG_DIR": str(scratch / "config")}
    t0 = time.perf_counter()
    status = trainer_runs.trainer_core(args, env, scratch / f"{name}.err").returncode
    wall = time.perf_counter() - t0
    finished = [e for e in common.read_events(run_dir) if e.type == "finished"]
    return Trained(run_dir, wall, finished[-1].step if finished else 0, status)


def evaluate(run: Trained, corpus: Path, items: int = EVAL_ITEMS) -> dict[str, Any]:
    """`trainer-core evaluate` on the run's last checkpoint: its scores and the floor, as JSON."""
    checkpoints = sorted((run.run_dir / "checkpoints").glob("step-*.pt"))
    if run.status != 0 or not checkpoints:
        raise SystemExit(
            f"{run.run_dir.name}: training failed (exit {run.status}); see {run.run_dir}.err"
        )
    args = ["evaluate", str(checkpoints[-1]), "--data", str(corpus), "--items", str(items)]
    done = trainer_runs.trainer_core([*args, "--json"], dict(os.environ))
    if done.returncode != 0:
        raise SystemExit(f"evaluate failed on {checkpoints[-1]}:\n{done.stderr[-1500:]}")
    return json.loads(done.stdout)


def add_variant(
    result: common.Result, label: str, run: Trained, scores: dict[str, Any], target: str = ""
) -> float:
    s = scores["scores"]
    detail = (
        f"{run.steps} steps, whole job {run.wall_s:.0f} s; before the vocoder"
        f" {s['acoustic_distance']:.3f}; durations x{s['duration_ratio']:.2f}; voicing agrees"
        f" {100 * s['vuv_agreement']:.0f} %"
    )
    result.add(f"{label}: free-running distance", s["distance"], "", target, None, detail)
    return float(s["distance"])


def train_and_score(
    setup: Setup, profile: str, jobs: dict[str, list[str]]
) -> dict[str, tuple[Trained, Any]]:
    """Each job (run name -> its --set items) trained and scored, one after the other (each run's
    budget is the machine's alone)."""
    scored = {}
    for name, sets in jobs.items():
        run = train(setup, name, profile, sets)
        scored[name] = run, evaluate(run, setup.corpus, setup.eval_items)
    return scored


def voice_profile(
    result: common.Result, setup: Setup, profile: str, ablate: bool
) -> dict[str, Any]:
    """Before, after (and the ablations) of one profile; returns the scores of "after"."""
    jobs = {f"{profile}-before": BEFORE[profile], f"{profile}-after": []}
    if ablate:
        jobs.update({label.replace(" ", "-"): ABLATIONS[label] for label in setup.ablations})
        jobs[f"{profile}-auto"] = ['model.size="auto"']
        if setup.twice_up_front:
            jobs[f"{profile}-after-twice"] = twice_the_budget_sets(setup)
    jobs[f"{profile}-one-step"] = ["train.max_steps=2", "train.warmup_steps=1"]
    done = train_and_score(setup, profile, jobs)
    (before, scored_before), (after, scored_after) = (
        done[f"{profile}-before"],
        done[f"{profile}-after"],
    )
    base = add_variant(result, f"{profile}, before", before, scored_before)
    new = add_variant(result, f"{profile}, after", after, scored_after)
    ratio = new / base
    target = f"<= {TARGET_RATIO}"
    result.add(
        f"{profile}: after / before",
        ratio,
        "x",
        target,
        ratio <= TARGET_RATIO,
        "same budget, same sentences",
    )
    if ablate:
        for label in setup.ablations:
            add_variant(result, f"{profile}, {label}", *done[label.replace(" ", "-")])
        sized, scored_sized = done[f"{profile}-auto"]
        add_variant(result, f'{profile}, after with model.size = "auto"', sized, scored_sized)
        result.notes.extend(f"{profile}: {line}" for line in sized_lines(sized))
        # missed (or the smoke run): is time the limit?
        if ratio > TARGET_RATIO or setup.twice_up_front:
            twice_the_budget(result, setup, profile, base, done.get(f"{profile}-after-twice"))
    floor = scored_after["floor"]["distance"]
    result.add(
        f"{profile}: floor (recordings through Griffin-Lim)",
        floor,
        "",
        detail="the best any model can score",
    )
    control = done[f"{profile}-one-step"][1]["scores"]["distance"] / base
    result.add(
        f"{profile}, negative control (after, stopped at step 2) / before",
        control,
        "x",
        f"{target} (negative control: must MISS)",
        control <= TARGET_RATIO,
    )
    return scored_after


def twice_the_budget_sets(setup: Setup) -> list[str]:
    return [f"train.target_hours={2 * setup.minutes / 60}"]


def twice_the_budget(
    result: common.Result, setup: Setup, profile: str, base: float, done: tuple[Trained, Any] | None
) -> None:
    """ "after" trained for twice the budget, against "before" at one
    budget: how far time alone goes."""
    if done is None:
        done = train_and_score(
            setup, profile, {f"{profile}-after-twice": twice_the_budget_sets(setup)}
        )[f"{profile}-after-twice"]
    twice, scores = done
    longer = add_variant(result, f"{profile}, after with twice the budget", twice, scores)
    ratio = longer / base
    label = f"{profile}, after with twice the budget / before"
    result.add(label, ratio, "x", f"<= {TARGET_RATIO}", ratio <= TARGET_RATIO, "is time the limit?")


def lm_section(result: common.Result, setup: Setup) -> None:
    """lm-small as shipped against model.size = "auto", same budget, on the
    standard library's docstrings."""
    jobs = {
        "lm-fixed": [],
        "lm-auto": ['model.size="auto"'],
        "lm-two-steps": ['model.size="auto"', "train.max_steps=2", "train.warmup_steps=1"],
    }
    fixed, auto, negative = [train(setup, name, "lm-small", sets) for name, sets in jobs.items()]
    target = f"< {BITS_TARGET:g}"
    for label, run, goal in (
        ("lm-small as shipped", fixed, ""),
        ('lm-small, model.size = "auto"', auto, target),
        (
            'negative control: model.size = "auto", stopped at step 2',
            negative,
            f"{target} (negative control: must MISS)",
        ),
    ):
        bits, detail = bits_per_byte(run)
        result.add(
            f"{label}: bits per byte",
            bits,
            "",
            goal,
            None if not goal else bits < BITS_TARGET,
            detail,
        )
    result.notes.extend(f"lm-small: {line}" for line in sized_lines(auto))


def bits_per_byte(run: Trained) -> tuple[float | None, str]:
    validations = [e for e in common.read_events(run.run_dir) if e.type == "validation"]
    if run.status != 0 or not validations:
        raise SystemExit(
            f"{run.run_dir.name}: training failed (exit {run.status}); see {run.run_dir}.err"
        )
    last = validations[-1]
    return last.metrics.get("bits_per_byte"), f"{run.steps} steps, whole job {run.wall_s:.0f} s"


def sized_lines(run: Trained) -> list[str]:
    return [
        e.message
        for e in common.read_events(run.run_dir)
        if e.type == "log" and "model size" in e.message
    ]


def wrong_sentence(result: common.Result, corpus: Path, scored: dict[str, Any]) -> None:
    """Each held-out recording's mel, vocoded as the models' are (Griffin-Lim), scored
    against the next sentence's recording: what an unrelated utterance scores on the same
    scale as the floor and the models."""
    from trainer_core.contract.profile_audio import AudioSection
    from trainer_core.models.free_running import FreeRunning, HeldOutSentence
    from trainer_core.scoring.speech_scores import Scores, score_heard

    ids = [item["item_id"] for item in scored["scores"]["items"]]
    audio = AudioSection()
    free = FreeRunning(
        [HeldOutSentence(i, "", corpus / "wavs" / f"{i}.wav") for i in ids], audio, _tts(), None
    )
    refs = free.recordings()
    rate, hop = audio.sample_rate, audio.hop_length
    heard = [free.vocode(refs[(k + 1) % len(refs)].mel) for k in range(len(refs))]
    scores = Scores(
        [score_heard(r, wave, free.mel_of, rate, hop) for r, wave in zip(refs, heard, strict=True)]
    )
    detail = (
        "no model: the scale's top; the other sentence's mel through the same Griffin-Lim as the"
        " scores"
    )
    result.add(
        "wrong sentence (another recording, through Griffin-Lim)",
        scores.summary().distance,
        "",
        detail=detail,
    )


def _tts() -> Any:
    from trainer_core.contract.profile_audio import TtsSection

    return TtsSection()


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--minutes", type=float, default=12.0, help="voice: training budget per variant"
    )
    parser.add_argument(
        "--lm-minutes", type=float, default=LM_MINUTES, help="lm: training budget per variant"
    )
    parser.add_argument("--profiles", default="demo,tts-small", help="voice profiles to compare")
    parser.add_argument(
        "--no-ablation", action="store_true", help="skip the ablation rows (each costs a budget)"
    )
    parser.add_argument(
        "--sections", default="voice,lm", help="voice (11. learning per minute), lm (12. sizing)"
    )
    args = parser.parse_args()
    trainer_runs.run_here(args.tiny)  # smoke runs train in this process
    sections = args.sections.split(",")
    if "voice" in sections:
        voice_result(args)
    if "lm" in sections:
        lm_result(args)
    return 0


def voice_result(args: argparse.Namespace) -> None:
    minutes = TINY_MINUTES if args.tiny else args.minutes
    profiles = "demo" if args.tiny else args.profiles
    started = time.monotonic()
    settings = {
        "minutes": minutes,
        "profiles": profiles,
        "eval_items": EVAL_ITEMS,
        "corpus_files": CORPUS_FILES,
    }
    result = common.start_result("learning", "11. Learning per minute (free-running)", settings)
    scratch = common.scratch_dir("learning-")
    try:
        corpus = common.SMALL_VOICE if args.tiny else single_speaker_corpus(result)
        setup = Setup(corpus, minutes, scratch)
        # the ablations that run other model code; the rest differ only in --set values
        if args.tiny:
            # the smoke run: tiny models, one core each
            extra = (*common.TTS_TINY, "compute.num_threads=1")
            setup = Setup(corpus, minutes, scratch, extra, TINY_EVAL_ITEMS, TINY_ABLATIONS, True)
        scored = [
            voice_profile(result, setup, profile, ablate=number == 0 and not args.no_ablation)
            for number, profile in enumerate(profiles.split(","))
        ]
        wrong_sentence(result, corpus, scored[0])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.tiny:
        result.notes.append(
            f"--tiny: the demo profile shrunk, the 40-clip test voice, {TINY_MINUTES * 60:.1f} s"
            f" per variant, one ablation, {TINY_EVAL_ITEMS} sentences scored; smoke settings"
        )
    common.finish_result(result, started, args.out)


def lm_result(args: argparse.Namespace) -> None:
    minutes = TINY_MINUTES if args.tiny else args.lm_minutes
    started = time.monotonic()
    settings = {"minutes": minutes, "text_bytes": LM_TEXT_BYTES, "profile": "lm-small"}
    result = common.start_result(
        "sizing", '12. Models sized for the budget (model.size = "auto")', settings
    )
    scratch = common.scratch_dir("sizing-")
    try:
        text = common.docstring_corpus(
            common.DATA / "text-docstrings", 40_000 if args.tiny else LM_TEXT_BYTES
        )
        size = sum(f.stat().st_size for f in text.glob("*.txt"))
        result.notes.append(
            f"text: docstrings of this Python's standard library, {size / 1000:.0f} kB"
        )
        extra = (*common.LM_TINY, "compute.num_threads=1") if args.tiny else ()
        lm_section(result, Setup(text, minutes, scratch, extra))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.tiny:
        seconds = TINY_MINUTES * 60
        result.notes.append(
            f"--tiny: lm-small shrunk, 40 kB of text, {seconds:.1f} s per variant; smoke settings"
        )
    common.finish_result(result, started, args.out)


def single_speaker_corpus(result: common.Result) -> Path:
    folder = common.espeak_voice_corpus(
        common.DATA / f"voice-single-{CORPUS_FILES}",
        CORPUS_FILES,
        sample_rate=22050,
        voices=("en-us",),
    )
    minutes = common.audio_seconds((folder / "wavs").glob("*.wav")) / 60
    result.notes.append(
        f"corpus: {CORPUS_FILES} espeak-ng (en-us) recordings of sentences from the bundled book,"
        f" {minutes:.1f} minutes"
    )
    return folder


if __name__ == "__main__":
    raise SystemExit(main())
