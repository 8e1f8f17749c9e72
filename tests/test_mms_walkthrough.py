"""The README's walkthrough "Fine-tune an MMS voice for your language", run as written: its commands are
read from the README and run as real subprocesses, with only the paths and a tiny run's sizes changed.

A tiny random VITS saved by transformers, with a Kurmanji vocabulary, stands in for
`facebook/mms-tts-kmr-script_latin` in a pre-filled huggingface_hub cache, offline; the Common Voice
release is built here with Kurmanji sentences. The run's `export/hf/best` is loaded by transformers'
pipeline (the README's Python block, executed) and says what `trainer-core synth` says: both draw their
noise from seed 1234 (the README tells the pipeline to), so the audio agrees within 1e-4 at the
default noise scales. The same round trip on a `datasets` parquet folder, from a local folder.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from subprocess import PIPE

import numpy as np
import soundfile as sf

from conftest import REPO, TRAINER_CORE, run_cli
from corpus_builders import common_voice_folder, parquet_folder
from hf_reference import VOCAB, hub_cache_with, make_folder
from trainer_core.cli import main
from trainer_core.engine.checkpoint_manager import read_best
from trainer_core.models.griffin_lim import PEAK_LEVEL

SECTION = "### Fine-tune an MMS voice for your language"
HUB_ID = "hf:facebook/mms-tts-kmr-script_latin"
CORPUS, RUNS = "cv-corpus/kmr", "runs/mms-finetune-…"
TOLERANCE = 1e-4
STEPS = 2
# Kurmanji (Latin script): ç ê î û ş beside MMS's letters; punctuation and capitals as people write them.
VOCAB_KMR = {**VOCAB, **{char: len(VOCAB) + n for n, char in enumerate("çêîûş")}}
KURMANJI = [
    "Ez ji te hez dikim.", "Roj baş, tu çawa yî?", "Em ê sibê biçin bajêr.", "Zarok li baxçê dilîzin.",
    "Baran dibare û ba tê.", "Şev xweş be, hevalê min!", "Ev pirtûk pir xweş e.", "Dayika min nan çêdike.",
    "Ez îro diçim dibistanê.", "Av sar e, ji kaniyê tê.", "Stêrk di ezmên de dibiriqin.",
]  # fmt: skip
# A tiny run: the only settings changed from the README's commands (sizes, steps, warm-up, the CPU).
TINY_RUN = {
    "compute.mode": "cpu", "compute.num_threads": 1, "train.precision": "fp32", "train.batch_size": 2,
    "train.grad_accum": 1, "train.warmup_steps": 1, "train.max_steps": STEPS, "train.eval_every_steps": STEPS,
    "train.checkpoint_every_steps": STEPS, "train.free_running_every": 0, "vits.segment_size": 512,
    "vits.discriminator_channels": 2, "vits.discriminator_warmup_steps": 1, "data.val_max_items": 2,
    "data.max_items": 6, "sample.sentences": ["roj baş"], "logging.report": False,
}  # fmt: skip


def walkthrough() -> tuple[list[list[str]], str]:
    """The section's `trainer-core` command lines (split as a shell would) and its Python block."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split(SECTION, 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"```(bash|python)\n(.*?)```", section, re.S)
    lines = [line for kind, body in blocks if kind == "bash" for line in body.splitlines()]
    commands = [shlex.split(line)[1:] for line in lines if line.startswith("trainer-core ")]
    return commands, next(body for kind, body in blocks if kind == "python")


def command(commands: list[list[str]], *words: str) -> list[str]:
    """The one README command holding every word of `words`."""
    found = [args for args in commands if all(word in args for word in words)]
    assert len(found) == 1, (words, commands)
    return found[0]


def localised(args: list[str], corpus: Path, run: Path, out: Path) -> list[str]:
    """The README's placeholders made this test's paths: the corpus, the run folder, the wav files."""

    def one(arg: str) -> str:
        if arg == CORPUS:
            return str(corpus)
        if arg.startswith(RUNS):
            return str(run) + arg[len(RUNS) :]
        return str(out / arg) if arg.endswith(".wav") else arg

    return [one(arg) for arg in args]


def tiny(args: list[str], run: Path, cache: Path) -> list[str]:
    sets = {**TINY_RUN, "data.cache_dir": str(cache)}
    return [*args, "--run-dir", str(run), *(x for k, v in sets.items() for x in ("--set", f"{k}={_toml(v)}"))]


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value).replace("'", '"') if isinstance(value, (list, str)) else str(value)


def offline_hub(tmp_path: Path) -> dict[str, str]:
    """A huggingface_hub cache holding the stand-in model under the README's id; the environment using it."""
    model = make_folder(tmp_path / "mms-tts-kmr-tiny", vocab=VOCAB_KMR)
    tokenizer = model / "tokenizer_config.json"
    tokenizer.write_text(json.dumps({**json.loads(tokenizer.read_text()), "language": "kmr"}), encoding="utf-8")
    home = tmp_path / "hf-home"
    hub_cache_with(home / "hub", HUB_ID.removeprefix("hf:"), model)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("VEGA_", "HF_"))}
    (tmp_path / "config").mkdir()
    env.update(HF_HOME=str(home), HF_HUB_CACHE=str(home / "hub"), HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO),
               VEGA_CONFIG_DIR=str(tmp_path / "config"), OMP_NUM_THREADS="1")  # fmt: skip
    return env


def speak_readme_python(python: str, model: Path, out: Path) -> np.ndarray:
    """The README's Python block, executed with its model folder and wav path made this test's."""
    code = python.replace(f'"{RUNS}/export/hf/best"', repr(str(model))).replace('"kmr.wav"', repr(str(out)))
    assert code != python and str(out) in code
    exec(compile(code, "README.md (python)", "exec"), {"__name__": "readme"})  # noqa: S102
    audio, rate = sf.read(out, dtype="float32")
    assert rate == 16000 and audio.ndim == 1 and audio.size > 0
    return audio


def assert_same_speech(ours_wav: Path, theirs: np.ndarray) -> None:
    """synth's wav (16-bit, peak-normalised to PEAK_LEVEL) against transformers' float audio at that peak."""
    ours, rate = sf.read(ours_wav, dtype="float32")
    assert rate == 16000 and ours.shape == theirs.shape
    scaled = theirs * (PEAK_LEVEL / np.abs(theirs).max())
    assert np.abs(ours - scaled).max() < TOLERANCE


def run_side_by_side(env: dict[str, str], commands: list[list[str]]) -> list[subprocess.CompletedProcess[str]]:
    """`trainer-core` COMMANDS as real subprocesses running at once; each one's result."""
    started = [
        subprocess.Popen([*TRAINER_CORE, *args], env=env, cwd=REPO, text=True, stdout=PIPE, stderr=PIPE)
        for args in commands
    ]
    results = []
    for proc in started:
        stdout, stderr = proc.communicate(timeout=180)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr))
    return results


def test_the_readme_walkthrough_on_a_common_voice_release(tmp_path: Path) -> None:
    commands, python = walkthrough()
    # Every trainer-core command of the walkthrough is run below (the whole run's, as the subset's).
    assert [args[0] for args in commands] == ["check-data", "train", "train", "synth", "export"]
    env = offline_hub(tmp_path)
    corpus, run, out = tmp_path / "cv-corpus" / "kmr", tmp_path / "runs" / "mms-finetune", tmp_path
    common_voice_folder(corpus, KURMANJI)

    check = run_cli(env, *localised(command(commands, "check-data"), corpus, run, out), "--no-cache")
    assert check.returncode == 0, check.stderr
    report = " ".join(check.stdout.split())  # rich wraps its table cells
    assert "read as a Common Voice release" in report and "9 to train and 3 held out" in report
    assert f"Dropped by the tokenizer of {HUB_ID}" in report
    # Punctuation is dropped, by name; capitals are lowercased and ç ê î û ş are the voice's own letters.
    assert "QUESTION MARK" in report and "COMMA" in report and "LATIN" not in report

    subset = command(commands, "train", "data.max_items=2000")
    (whole,) = [args for args in commands if args[0] == "train" and args != subset]
    assert subset == [*whole, "--set", "data.max_items=2000"]  # the whole run's command, on a subset
    trained = run_cli(env, *tiny(localised(subset, corpus, run, out), run, tmp_path / "cache"))
    assert trained.returncode == 0, trained.stderr[-3000:]
    best = read_best(run / "checkpoints")
    assert best is not None and best["step"] == STEPS  # one validation, at the end: best is the last

    # synth and export --hf only read the run: side by side, to keep the test short.
    both = [localised(command(commands, word), corpus, run, out) for word in ("synth", "export")]
    for done in run_side_by_side(env, both):
        assert done.returncode == 0, done.stderr
    hf_best = run / "export" / "hf" / "best"
    for name in ("config.json", "model.safetensors", "vocab.json", "tokenizer_config.json"):
        assert (run / "hf" / name).read_bytes() == (hf_best / name).read_bytes(), name

    card = (hf_best / "README.md").read_text(encoding="utf-8")
    assert "base_model: facebook/mms-tts-kmr-script_latin" in card and "language: kmr" in card
    theirs = speak_readme_python(python, hf_best, out / "kmr.wav")
    assert_same_speech(out / "kmr-vega.wav", theirs)


def test_a_parquet_folder_round_trip_from_a_local_model_folder(tmp_path: Path) -> None:
    from transformers import pipeline

    commands, _ = walkthrough()
    env = offline_hub(tmp_path)
    model = tmp_path / "mms-tts-kmr-tiny"
    corpus, run = tmp_path / "kmr-parquet", tmp_path / "run"
    parquet_folder(corpus, KURMANJI)
    train = localised(command(commands, "train", "data.max_items=2000"), corpus, run, tmp_path)
    train[train.index(HUB_ID)] = str(model)
    trained = run_cli(env, *tiny(train, run, tmp_path / "cache"))
    assert trained.returncode == 0, trained.stderr[-3000:]

    folder, wav = tmp_path / "kmr-hf", tmp_path / "vega.wav"
    assert main(["export", "--hf", str(run), "--out", str(folder)]) == 0
    text = KURMANJI[4]
    assert main(["synth", "--export", str(run / "export"), "--text", text, "--out", str(wav)]) == 0
    import torch

    tts = pipeline("text-to-speech", model=str(folder), device="cpu")
    torch.manual_seed(1234)
    speech = tts(text)
    assert speech["sampling_rate"] == 16000
    assert_same_speech(wav, np.asarray(speech["audio"], dtype=np.float32).squeeze())
