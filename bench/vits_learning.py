"""Benchmarks 18 and 19: a VITS voice's learning per CPU minute; a warm start in another language.

18 (`--sections learning`). On the English demo voice (trainer_core/demo/voice: 330 clips, 17
minutes) vits-small trains for M minutes (`train.target_hours = M/60`) and the two-stage voice for
M minutes in all: tts-small for (1 - s) M, then vocoder-small for s M (the README's recipe, one
stage after the other; s is --vocoder-share, a half by default). Each profile runs as shipped but
for the data folder and data.val_fraction = 0.1 (vits-small's and vocoder-small's own), so every
run holds out the same clips. Both voices speak the same held-out sentences (the vits run's
held-out split, picked as `trainer-core evaluate` picks them) from text alone, and both are scored
alike: the audio at vits-small's 16 kHz (the two-stage voice's 22.05 kHz resampled), its log-mel at
vits-small's [audio] settings DTW-aligned with the recording's, L1 per bin; the vits-small score is
the one `trainer-core evaluate` reports. References in the same run: the floors (the recordings
re-made by vits-small's decoder from their posteriors, through vocoder-small, through Griffin-Lim),
tts-small heard through Griffin-Lim (the acoustic model without the vocoder its budget share
bought), a wrong sentence, and a negative control that must miss: vits-small stopped at step 2.

19 (`--sections warm`). A base vits-small trains B minutes on the English demo voice. On the
Spanish second speaker (trainer_core/demo/voice-es: 60 clips, a fifth held out, espeak-ng's Spanish
phonemes) three starts then train the same N steps for each seed: `--init-from` the base, from
scratch, and the negative control, `--init-from` an untrained base (the same profile stopped at
step 1). The control takes the warm start's path (the base's symbol map, the fine-tuning learning
rate) without what the base learned, so it must not beat scratch. Per seed: the held-out
validation mel loss at step N (the vits validation total: held-out clips decoded through the
posterior) and the free-running distance of the step-N checkpoint (what `trainer-core evaluate`
reports, computed in this process by its functions); the mean and spread over seeds, and on how
many seeds each start beats scratch.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
import trainer_runs
from vits_runs import Job, Run, budget, held_out, load_vits, millions, train_all

from trainer_core.tiny_profiles import tiny_settings

SPANISH = common.REPO / "trainer_core" / "demo" / "voice-es"
MINUTES, VOCODER_SHARE, EVAL_ITEMS = 12.0, 0.5, 16
SAME_SPLIT = "data.val_fraction=0.1"  # every run of section 18 holds out the same clips
BASE_MINUTES, STEPS, SEEDS = 5.0, 120, 3
SPANISH_ITEMS = 8  # of the 12 held-out Spanish clips
UNTRAINED = ["train.max_steps=1", "train.warmup_steps=0"]
# The bases' own validation is never read: one short pass at their end, so the budget trains.
BASE_VALIDATION = [
    "train.validate_at_start=false",
    "train.eval_every_steps=100000",
    "data.val_max_items=8",
]
# Smoke settings (--tiny): the tiny models, one thread each, seconds of training,
# no validation passes but the last.
QUIET = ["compute.num_threads=1", "train.validate_at_start=false", "train.free_running_every=0"]
TINY_VITS = [*tiny_settings("vits", ("audio", "tts", "vits")), "train.batch_size=4", *QUIET]
TINY = {
    "vits-small": TINY_VITS,
    "tts-small": [*common.TTS_TINY, *QUIET],
    "vocoder-small": [*common.VOCODER_TINY, *QUIET],
}
TINY_MINUTES, TINY_BASE_MINUTES, TINY_ITEMS, TINY_STEPS = 0.1, 0.05, 2, 4
TINY_WARMUP = "train.warmup_steps=2"  # the Spanish runs' 4 steps: vits-small's 20 would not fit


# -------------------------------------------------------------------------------------------------
# 18. Learning per minute


def learning_result(args: argparse.Namespace) -> None:
    tiny, share = args.tiny, args.vocoder_share
    minutes, items = (TINY_MINUTES, TINY_ITEMS) if tiny else (args.minutes, args.items)
    corpus = common.SMALL_VOICE if tiny else common.DEMO_VOICE
    started = time.monotonic()
    settings = {"minutes": minutes, "vocoder_share": share, "items": items, "corpus": corpus.name}
    title = "20. VITS against two stages: learning per minute"
    result = common.start_result("vits_learning", title, settings)
    scratch = common.scratch_dir("vitslearn-")
    try:
        data = [*common.voice_overrides(corpus), SAME_SPLIT]

        def job(profile: str, *sets: str) -> Job:
            return profile, [*data, *sets, *(TINY[profile] if tiny else [])], ()

        jobs = {
            "vits": job("vits-small", budget(minutes)),
            "tts": job("tts-small", budget((1 - share) * minutes)),
            "vocoder": job("vocoder-small", budget(share * minutes)),
            "vits-two-steps": job("vits-small", "train.max_steps=2", "train.warmup_steps=1"),
        }
        runs = train_all(scratch, jobs)
        scores, sizes, facts = score_voices(runs, corpus, items)
        report_learning(result, runs, scores, sizes, share)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result.notes += [
        (
            f"budget: vits-small {minutes:g} min; tts-small {(1 - share) * minutes:g} min, then "
            f"vocoder-small {share * minutes:g} min (--vocoder-share {share:g}), each its own "
            "train.target_hours"
        ),
        *facts,
    ]
    if tiny:
        result.notes.append("--tiny: the tiny models on the 40-clip test voice; smoke settings")
    common.finish_result(result, started, args.out)


def score_voices(
    runs: dict[str, Run],
    corpus: Path,
    count: int,
) -> tuple[dict[str, Any], dict[str, int], list[str]]:
    """Each voice's free-running score summary on the vits run's held-out sentences, all heard at
    its audio settings; the parameters of each model that speaks; notes on how they were heard."""
    import soxr
    import torch

    from trainer_core.cli.evaluate_cmd import load_voice
    from trainer_core.cli.synthesiser import Synthesiser
    from trainer_core.data.audio import load_audio
    from trainer_core.models.free_running import FreeRunning, HeldOutSentence
    from trainer_core.models.mel_vocoders import load_vocoder, open_vocoder

    vits = load_vits(runs["vits"].last_checkpoint())
    control = load_vits(runs["vits-two-steps"].last_checkpoint())
    acoustic, _ = load_voice(runs["tts"].last_checkpoint(), "cpu")
    if not isinstance(acoustic, Synthesiser):
        raise SystemExit("the tts-small run did not give an acoustic model")
    sentences = held_out(vits, corpus, count)
    scorer = FreeRunning(sentences, vits.audio, vits.tts, None, vocoder_name="common")
    a, v = acoustic.audio, vits.audio
    native = FreeRunning(sentences, a, acoustic.tts, None)  # the two-stage voice's own mels
    vocoder = load_vocoder(runs["vocoder"].last_checkpoint(), a)
    griffin_lim = open_vocoder("griffin-lim", a, "cpu", acoustic.tts.griffin_lim_iters)

    def heard(wave: Any) -> Any:
        same = a.sample_rate == v.sample_rate
        return wave if same else soxr.resample(wave, a.sample_rate, v.sample_rate, quality="HQ")

    def spoken(vocode: Callable[[Any], Any]) -> Callable[[HeldOutSentence], tuple[Any, None]]:
        def speak(s: HeldOutSentence) -> tuple[Any, None]:
            ids = acoustic.encoder.encode(s.text)
            mel = acoustic.model.synthesise(ids, acoustic.tts.length_scale, s.speaker)
            return heard(vocode(mel.float().cpu())), None

        return speak

    def remade(vocode: Callable[[Any], Any]) -> Callable[[HeldOutSentence], Any]:
        def again(s: HeldOutSentence) -> Any:
            wave = load_audio(s.path, a.sample_rate, a.trim_silence, a.trim_top_db, a.normalize)
            return heard(vocode(native.mel_of(wave)))

        return again

    place = {s.item_id: k for k, s in enumerate(sentences)}
    rate, trim, top_db = v.sample_rate, v.trim_silence, v.trim_top_db
    waves = [load_audio(s.path, rate, trim, top_db, v.normalize) for s in sentences]

    def wrong(s: HeldOutSentence) -> tuple[Any, None]:
        return waves[(place[s.item_id] + 1) % len(waves)], None  # the next sentence's recording

    def said_by_control(s: HeldOutSentence) -> tuple[Any, None]:
        return control.speaker.speak(control.model, s.text, s.speaker), None

    acoustic.model.eval()
    with torch.inference_mode():
        own = vits.free_running(sentences)  # what `evaluate` reports: scores, its decoder's floor
        scores = {
            "vits": own.scores,
            "vits floor": own.floor,
            "two-stage": scorer.score_speech(spoken(vocoder)),
            "griffin-lim": scorer.score_speech(spoken(griffin_lim)),
            "vocoder floor": scorer.floor_of(remade(vocoder)),
            "griffin-lim floor": scorer.floor_of(remade(griffin_lim)),
            "control": scorer.score_speech(said_by_control),
            "wrong": scorer.score_speech(wrong),
        }
    generator = vocoder.generator
    sizes = {
        "vits": sum(p.numel() for p in vits.model.parameters()),
        "tts": sum(p.numel() for p in acoustic.model.parameters()),
        "vocoder": sum(p.numel() for p in generator.parameters()) if generator else 0,
    }
    top = v.f_max or v.sample_rate / 2
    facts = [
        (
            f"scored at vits-small's [audio] settings: {v.sample_rate} Hz, n_fft {v.n_fft}, hop "
            f"{v.hop_length}, {v.n_mels} mels from {v.f_min:g} to {top:g} Hz; "
            f"the two-stage voice's {a.sample_rate} Hz audio resampled to it first"
        ),
        f"text: vits-small reads {vits.encoder.units}, tts-small {acoustic.encoder.units}",
        f"{len(sentences)} held-out sentences: {', '.join(s.item_id for s in sentences)}",
    ]
    return {name: scored.summary() for name, scored in scores.items()}, sizes, facts


def report_learning(
    result: common.Result,
    runs: dict[str, Run],
    scores: dict[str, Any],
    sizes: dict[str, int],
    share: float,
) -> None:
    vits, tts, vocoder = runs["vits"], runs["tts"], runs["vocoder"]

    def how(name: str) -> str:
        s = scores[name]
        return f"durations x{s.duration_ratio:.2f}; voicing agrees {100 * s.vuv_agreement:.0f} %"

    trained = millions(vits.trained_parameters)
    result.add(
        "vits-small: free-running distance",
        scores["vits"].distance,
        detail=(
            f"{vits.facts()}; generator {millions(sizes['vits'])} parameters ({trained} "
            f"trained, the discriminator's included); {how('vits')}"
        ),
    )
    two = scores["two-stage"].distance
    result.add(
        "tts-small + vocoder-small: free-running distance",
        two,
        detail=(
            f"tts-small {tts.facts()}, {millions(sizes['tts'])} parameters; vocoder-small "
            f"{vocoder.facts()}, generator {millions(sizes['vocoder'])} parameters "
            f"({millions(vocoder.trained_parameters)} trained); {how('two-stage')}"
        ),
    )
    result.add(
        "tts-small through Griffin-Lim: free-running distance",
        scores["griffin-lim"].distance,
        detail=f"tts-small without the vocoder its {100 * share:.0f} % of the budget trained",
    )
    ratio = scores["vits"].distance / two
    winner = "vits-small" if ratio < 1 else "tts-small + vocoder-small"
    walls = f"vits-small {vits.wall_s:.0f} s, the two stages {tts.wall_s + vocoder.wall_s:.0f} s"
    result.add(
        "vits-small / tts-small + vocoder-small: free-running distance",
        ratio,
        "x",
        "< 1 (vits-small wins)",
        ratio < 1,
        f"{winner} wins; whole jobs: {walls}",
    )
    floors = (
        ("vits floor", "vits-small's decoder from the recordings' posteriors"),
        ("vocoder floor", "the recordings' mels through vocoder-small"),
        ("griffin-lim floor", "the recordings' mels through Griffin-Lim"),
    )
    for name, what in floors:
        best = "the best a voice heard this way can score"
        result.add(f"floor: {what}", scores[name].distance, detail=best)
    wrong = scores["wrong"].distance
    result.add("wrong sentence (another recording)", wrong, detail="no model: the scale's top")
    control = scores["control"].distance / two
    result.add(
        "negative control (vits-small stopped at step 2) / tts-small + vocoder-small",
        control,
        "x",
        "< 1 (negative control: must MISS)",
        control < 1,
        f"{runs['vits-two-steps'].facts()}; distance {scores['control'].distance:.3f}",
    )


# -------------------------------------------------------------------------------------------------
# 19. Warm start in another language

LABELS = {
    "warm": "warm start (from the English base)",
    "scratch": "from scratch",
    "control": "negative control (from an untrained base)",
}


def warm_result(args: argparse.Namespace) -> None:
    tiny = args.tiny
    steps, seeds = (TINY_STEPS, 1) if tiny else (args.steps, args.seeds)
    base_minutes = TINY_BASE_MINUTES if tiny else args.base_minutes
    items = TINY_ITEMS if tiny else SPANISH_ITEMS
    started = time.monotonic()
    settings = {"steps": steps, "seeds": seeds, "base_minutes": base_minutes, "items": items}
    title = "21. Warm-starting a VITS voice in another language"
    result = common.start_result("vits_warm", title, settings)
    scratch = common.scratch_dir("vitswarm-")
    try:
        # No free-running passes while training: every run is scored at its end.
        shrink = [*(TINY_VITS if tiny else []), "train.free_running_every=0"]
        shrink.append(f"data.cache_dir={scratch / 'cache'}")
        english = [*shrink, f"data.path={common.SMALL_VOICE if tiny else common.DEMO_VOICE}"]
        english += BASE_VALIDATION
        bases: dict[str, Job] = {
            "base": ("vits-small", [*english, budget(base_minutes)], ()),
            "untrained": ("vits-small", [*english, *UNTRAINED], ()),
        }
        base = train_all(scratch, bases)
        where = {"warm": base["base"].path, "scratch": None, "control": base["untrained"].path}
        spanish = [
            *shrink,
            *([TINY_WARMUP] if tiny else []),
            f"data.path={SPANISH}",
            "data.val_fraction=0.2",
            "tts.espeak_voice=es",
            f"train.max_steps={steps}",
            "train.epochs=100000",
            f"train.eval_every_steps={max(1, steps // 2)}",  # at N/2 and N
            "train.validate_at_start=false",
            "train.checkpoint_every_epochs=100000",  # saved: new bests and the last step only
        ]
        jobs: dict[str, Job] = {}
        for seed in range(1, seeds + 1):
            for start, path in where.items():
                extra = ("--init-from", str(path)) if path else ()
                jobs[f"{start}-{seed}"] = ("vits-small", [*spanish, f"run.seed={seed}"], extra)
        runs = train_all(scratch, jobs)
        scored = {name: evaluate(run, items) for name, run in runs.items()}
        report_warm(result, runs, scored, seeds, steps)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result.notes += [
        f"base: vits-small, English demo voice, {base_minutes:g} min: {base['base'].facts()}",
        (
            "negative control: --init-from vits-small stopped at step 1 on the English voice: it "
            "starts as the warm start does (the base's symbol map, train.finetune_lr) from weights "
            "that learned nothing"
        ),
    ]
    if tiny:
        result.notes.append("--tiny: the tiny vits, a 3 s base on the 40-clip test voice; smoke")
    common.finish_result(result, started, args.out)


def evaluate(run: Run, items: int) -> Any:
    """What `trainer-core evaluate` reports for the run's step-N checkpoint on held-out Spanish
    (its functions, in this process): the scores, and the floor, its decoder on the posteriors."""
    import torch

    voice = load_vits(run.last_checkpoint())
    with torch.inference_mode():
        return voice.free_running(held_out(voice, SPANISH, items))


def validation_mel(run: Run) -> list[tuple[int, float]]:
    """(step, held-out mel loss) of every validation of the run."""
    events = common.read_events(run.path)
    found = [e for e in events if e.type == "validation" and "mel" in e.losses]
    return [(e.step, e.losses["mel"]) for e in found]


def report_warm(
    result: common.Result,
    runs: dict[str, Run],
    scored: dict[str, Any],
    seeds: int,
    steps: int,
) -> None:
    """Per seed the last validation mel loss and the free-running distance; means and seeds won."""
    mel: dict[str, list[float]] = {}
    distance: dict[str, list[float]] = {}
    for start, label in LABELS.items():
        mel[start], distance[start] = [], []
        for seed in range(1, seeds + 1):
            run, found = runs[f"{start}-{seed}"], scored[f"{start}-{seed}"]
            curve = validation_mel(run)
            if not curve or curve[-1][0] != run.steps:
                raise SystemExit(f"{run.path.name}: no validation at its last step ({curve})")
            s = found.scores.summary()
            mel[start].append(curve[-1][1])
            distance[start].append(s.distance)
            shown = ", ".join(f"{step}: {loss:.3g}" for step, loss in curve)
            detail = f"by step {shown}; lr {run.lr}"
            result.add(f"{label}, seed {seed}: validation mel loss", curve[-1][1], detail=detail)
            floor, ratio = found.floor.summary().distance, s.duration_ratio
            result.add(
                f"{label}, seed {seed}: free-running distance",
                s.distance,
                detail=f"{run.facts()}; its decoder's floor {floor:.3f}; durations x{ratio:.2f}",
            )
        for what, values in (("validation mel loss", mel), ("free-running distance", distance)):
            mean = sum(values[start]) / seeds
            spread = f"{common.spread(values[start])} seeds, {steps} steps each"
            result.add(f"{label}: mean {what}", mean, detail=spread)
    for start in ("warm", "control"):
        must = " (negative control: must MISS)" if start == "control" else ""
        for what, values in (("validation mel loss", mel), ("free-running distance", distance)):
            pairs = zip(values[start], values["scratch"], strict=True)
            won = sum(mine < theirs for mine, theirs in pairs)
            ratio = sum(values[start]) / sum(values["scratch"])
            result.add(
                f"{LABELS[start]} beats scratch: seeds won, {what}",
                won,
                f"of {seeds}",
                f"= {seeds}{must}",
                won == seeds,
                f"its mean {ratio:.3f} x scratch's",
            )


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    add = parser.add_argument
    add("--sections", default="learning,warm", help="learning (18), warm (19)")
    add("--minutes", type=float, default=MINUTES, help="learning: each side's budget")
    add("--vocoder-share", type=float, default=VOCODER_SHARE, help="learning: the vocoder's share")
    add("--items", type=int, default=EVAL_ITEMS, help="learning: held-out sentences scored")
    add("--base-minutes", type=float, default=BASE_MINUTES, help="warm: the English base's budget")
    add("--steps", type=int, default=STEPS, help="warm: steps of every Spanish run (N)")
    add("--seeds", type=int, default=SEEDS, help="warm: seeds per start")
    args = parser.parse_args()
    trainer_runs.run_here(args.tiny)  # smoke runs train in this process
    sections = args.sections.split(",")
    if set(sections) - {"learning", "warm"}:
        parser.error(f"--sections {args.sections}: name learning, warm or both")
    if not 0 < args.vocoder_share < 1:
        parser.error(f"--vocoder-share {args.vocoder_share}: give a share between 0 and 1")
    if "learning" in sections:
        learning_result(args)
    if "warm" in sections:
        warm_result(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
