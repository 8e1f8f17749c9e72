"""Benchmark 8: speaking speed of `trainer-core synth`: one sentence cold, and
many sentences in one process.

A demo-profile voice is trained for a few steps by the real CLI (the model size users get), then:
- cold: `trainer-core synth --checkpoint C --text S --out F` as a fresh
  process, spawn to exit (median);
- negative control: the same command with librosa's inverse module and
  torch._dynamo imported first, which
  is what the old vocoder and the import-time compile decorator cost; it must miss the cold target;
- batch: the loaded model speaks the demo corpus's 40 transcripts (what the
  slow synth was measured on:
  1-2 s sentences) through the same code as `synth --text-file`, Griffin-Lim included; then N book
  sentences of 40-140 characters for the real-time factor on longer speech. The end-to-end CLI wall
  is a detail.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import common
import trainer_runs

COLD_TARGET_S = 3.0
BATCH_TARGET = 10.0
SENTENCE = "The weather was fine, and they walked to the village."
SLOW_IMPORTS = "import librosa.feature.inverse, torch._dynamo\n"


def train_voice(scratch: Path, steps: int, tiny: bool) -> Path:
    """A checkpoint of the demo profile after `steps` real CPU steps (on the 40-clip test voice
    for the smoke run: the model is the same, the 330 clips' preload is not worth its time)."""
    run_dir = scratch / "run"
    argv = ["train", "--profile", "demo", "--run-dir", str(run_dir)]
    settings = ["compute.mode=cpu", f"train.max_steps={steps}", f"train.eval_every_steps={steps}"]
    settings += ["train.validate_at_start=false", "logging.report=false", "train.warmup_steps=0"]
    settings += [f"data.path={common.SMALL_VOICE}"] if tiny else []
    for item in [*settings, f"data.cache_dir={scratch / 'cache'}"]:
        argv += ["--set", item]
    done = trainer_runs.trainer_core(argv, bench_env(scratch))
    if done.returncode != 0:
        raise SystemExit(f"training the voice failed ({done.returncode}):\n{done.stderr[-1500:]}")
    return run_dir / "checkpoints" / f"step-{steps:08d}.pt"


def bench_env(scratch: Path) -> dict[str, str]:
    # no machine file: the profile as shipped
    return {**os.environ, "VEGA_CONFIG_DIR": str(scratch / "config")}


def cold_seconds(checkpoint: Path, scratch: Path, repeats: int, preload: str = "") -> list[float]:
    """Spawn-to-exit seconds of a one-sentence synth, `preload` run first in
    the same interpreter."""
    code = preload + "import sys\nfrom trainer_core.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    times = []
    for n in range(repeats):
        out = scratch / f"cold-{n}.wav"
        argv = [
            sys.executable,
            "-c",
            code,
            "synth",
            "--checkpoint",
            str(checkpoint),
            "--text",
            SENTENCE,
            "--out",
            str(out),
        ]
        t0 = time.perf_counter()
        done = subprocess.run(
            argv, env=bench_env(scratch), capture_output=True, text=True, check=False
        )
        times.append(time.perf_counter() - t0)
        if done.returncode != 0 or not out.is_file():
            raise SystemExit(f"synth failed ({done.returncode}):\n{done.stderr[-1500:]}")
    return times


def batch_rate(checkpoint: Path, scratch: Path, sentences: list[str]) -> tuple[float, float]:
    """(sentences per second, seconds of speech per second of work) for the
    loaded model speaking each line."""
    from trainer_core.cli.synth_batch import speak_lines
    from trainer_core.cli.synthesiser import load_from_checkpoint

    synth = load_from_checkpoint(checkpoint)
    args = argparse.Namespace(out_dir=scratch / "batch", length_scale=None, griffin_lim_iters=None)
    args.out_dir.mkdir(parents=True)
    lines = list(enumerate(sentences, start=1))
    # first calls allocate; the user's second sentence does not pay that
    speak_lines(synth, lines[:2], args)
    t0 = time.perf_counter()
    rows = speak_lines(synth, lines, args)
    wall = time.perf_counter() - t0
    failed = [row for row in rows if row["error"]]
    if failed:
        raise SystemExit(f"{len(failed)} sentences could not be spoken: {failed[0]['error']}")
    return len(rows) / wall, sum(row["seconds"] for row in rows) / wall


def demo_transcripts() -> list[str]:
    import csv

    with (common.SMALL_VOICE / "metadata.csv").open(encoding="utf-8", newline="") as f:
        return [row[1] for row in csv.reader(f, delimiter="|") if len(row) > 1]


def cli_batch_wall(checkpoint: Path, scratch: Path, sentences: list[str]) -> float:
    script = scratch / "lines.txt"
    script.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    argv = [
        *common.TRAINER_CORE,
        "synth",
        "--checkpoint",
        str(checkpoint),
        "--text-file",
        str(script),
    ]
    argv += ["--out-dir", str(scratch / "cli-batch")]
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=bench_env(scratch), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"synth --text-file failed ({done.returncode}):\n{done.stderr[-1500:]}")
    return time.perf_counter() - t0


def main() -> int:
    parser = common.base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "--sentences", type=int, default=None, help="sentences in the batch (default 40)"
    )
    parser.add_argument(
        "--train-steps", type=int, default=None, help="training steps of the voice (default 20)"
    )
    args = parser.parse_args()
    count, steps = (
        args.sentences or (4 if args.tiny else 40),
        args.train_steps or (2 if args.tiny else 20),
    )
    repeats = args.repeats or (1 if args.tiny else 5)
    trainer_runs.run_here(args.tiny)  # the smoke run trains its voice in this process
    started = time.monotonic()
    result = common.start_result(
        "synth",
        "8. Speaking speed (synth)",
        {"sentences": count, "train_steps": steps, "repeats": repeats, "profile": "demo"},
    )
    scratch = common.scratch_dir("synth-")
    try:
        checkpoint = train_voice(scratch, steps, args.tiny)
        report(result, checkpoint, scratch, count, repeats)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.tiny:
        result.notes.append(
            "--tiny: a 2-step voice trained on the 40-clip test voice, one cold run of each kind,"
            " 4 sentences; smoke settings"
        )
    common.finish_result(result, started, args.out)
    return 0


def report(
    result: common.Result, checkpoint: Path, scratch: Path, count: int, repeats: int
) -> None:
    cold = cold_seconds(checkpoint, scratch, repeats)
    slow = cold_seconds(checkpoint, scratch, repeats, preload=SLOW_IMPORTS)
    transcripts = demo_transcripts()[:count]
    rate, _ = batch_rate(checkpoint, scratch / "demo", transcripts)
    sentences = common.corpus_sentences(count)
    book_rate, realtime = batch_rate(checkpoint, scratch / "book", sentences)
    wall = cli_batch_wall(checkpoint, scratch, sentences)
    cold_s, slow_s = statistics.median(cold), statistics.median(slow)
    result.add(
        "cold: one sentence, spawn to wav written",
        cold_s,
        "s",
        f"< {COLD_TARGET_S:g} s",
        cold_s < COLD_TARGET_S,
        f"median of {repeats}: {common.spread(cold)}",
    )
    result.add(
        "negative control: cold with librosa's inverse module and torch._dynamo imported",
        slow_s,
        "s",
        f"< {COLD_TARGET_S:g} s (negative control: must MISS)",
        slow_s < COLD_TARGET_S,
        f"median of {repeats}: {common.spread(slow)}; the imports the old synth paid",
    )
    if slow_s < COLD_TARGET_S:
        result.notes.append(
            "negative control met the cold target: the benchmark cannot tell the slow path apart"
        )
    else:
        result.notes.append("negative control (old imports) misses the cold target, as it should")
    result.add(
        "batch: sentences per second, Griffin-Lim included",
        rate,
        "/s",
        f">= {BATCH_TARGET:g}/s",
        rate >= BATCH_TARGET,
        f"the demo corpus's first {len(transcripts)} transcripts, loaded model",
    )
    result.add(
        "batch, book sentences: sentences per second",
        book_rate,
        "/s",
        "",
        None,
        f"{count} sentences of 40-140 characters (about 3 s of speech each)",
    )
    result.add(
        "batch, book sentences: seconds of speech per second of work",
        realtime,
        "x",
        "",
        None,
        "real-time factor",
    )
    result.add(
        "synth --text-file end to end (spawn, load, speak all, index)",
        wall,
        "s",
        "",
        None,
        f"{count} sentences, {count / wall:.1f} sentences/s including start-up",
    )
    result.notes.append(
        f"voice: demo profile trained {checkpoint.stem.removeprefix('step-').lstrip('0')} steps on"
        " CPU; speed does not depend on how well it speaks, only on the frames it predicts"
    )


if __name__ == "__main__":
    raise SystemExit(main())
