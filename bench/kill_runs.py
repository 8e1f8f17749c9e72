"""The kill drill's workspace and trainer segments: three run folders (an LM, a two-optimizer
vocoder and a TTS voice), each resumed segment after segment, every segment held at a hold point
through the fault switches. bench/kill_loop.py drives them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import common

from trainer_core.contract.eventlog import EventReader
from trainer_core.contract.profile_audio import AudioSection
from trainer_core.contract.protocol import Event
from trainer_core.engine.faults import HOLD_AT_ENV, HOLD_MARKER_ENV
from trainer_core.tiny_profiles import tiny_profile

KEEP_LAST = 2
WAIT_S = 120.0  # generous: the machine is shared
# Fault switches act only with this set too (tests and drills set it; real runs never do).
FAULTS_ON = {"VEGA_FAULTS": "1"}
RUNS = ("lm", "vocoder", "tts")
SAVE_EVERY_STEP = {"checkpoint_every_steps": 1, "keep_last": KEEP_LAST}


def lm_profile(max_steps: int) -> str:
    return tiny_profile(
        "lm",
        run={"name": "kill-lm", "seed": 11},
        train={"max_steps": max_steps, "eval_every_steps": 7, **SAVE_EVERY_STEP},
        sample={"max_new_bytes": 8},
        logging={"step_interval_s": 0.1},
    )


def voice_profile(kind: str, cache: Path) -> str:
    """The vocoder (two optimizers, wav samples) or the TTS voice (wav samples and png views)."""
    return tiny_profile(
        "vocoder" if kind == "vocoder" else "tts",
        run={"name": f"kill-{kind}", "seed": 5},
        data={"path": str(common.SMALL_VOICE), "cache_dir": str(cache)},
        train={"max_steps": 1000000, "eval_every_steps": 5, **SAVE_EVERY_STEP},
        logging={"step_interval_s": 0.1},
    )


def write_corpus(folder: Path) -> Path:
    """A small English text corpus from the bundled demo text."""
    folder.mkdir(parents=True)
    text = " ".join(common.corpus_sentences(300))
    (folder / "corpus.txt").write_text(text + "\n", encoding="utf-8")
    return folder


@dataclass
class Run:
    """One run folder under the workspace: its profile and data, the events of all its segments,
    what to resume from, and (voice runs) its own feature cache folder."""

    name: str
    root: Path
    profile: Path
    data: Path
    cache: Path | None = None
    events: list[Event] = field(default_factory=list)
    expect: Path | None = None  # the checkpoint the next segment must resume from
    segments: int = 0
    cut_lines: int = 0

    @property
    def run_dir(self) -> Path:
        return self.root / self.name

    def audio(self) -> AudioSection:
        sections = tomllib.loads(self.profile.read_text(encoding="utf-8"))
        return AudioSection.model_validate(sections.get("audio", {}))

    def clear_cache(self) -> None:
        """A cold start: the next preload decodes every recording and writes the cache anew."""
        if self.cache is not None:
            shutil.rmtree(self.cache, ignore_errors=True)


def make_runs(root: Path, lm_max_steps: int = 1000000) -> dict[str, Run]:
    (root / "config").mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(root / "corpus")
    (root / "lm.toml").write_text(lm_profile(lm_max_steps), encoding="utf-8")
    runs = {"lm": Run("lm", root, root / "lm.toml", corpus)}
    for kind in ("vocoder", "tts"):
        cache = root / f"cache-{kind}"
        (root / f"{kind}.toml").write_text(voice_profile(kind, cache), encoding="utf-8")
        runs[kind] = Run(kind, root, root / f"{kind}.toml", common.SMALL_VOICE, cache)
    return runs


@dataclass
class Segment:
    proc: subprocess.Popen
    started: float
    reader: EventReader
    marker: Path
    events: list[Event] = field(default_factory=list)
    started_wall: float = field(default_factory=time.time)  # to compare with the events' unix times

    def poll(self) -> list[Event]:
        self.events.extend(self.reader.poll())
        return self.events

    def wait_held(self) -> bool:
        """True once the trainer says it is held; False when it exits first (or never does)."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if self.marker.exists():
                return True
            if self.proc.poll() is not None:
                return self.marker.exists()
            time.sleep(0.02)
        return False

    def held_phase(self) -> str | None:
        return self.marker.read_text().split()[0] if self.marker.exists() else None

    def preload_items(self) -> int | None:
        """The items this segment's preload announced, None when it did not finish a preload."""
        return next((e.items for e in self.events if e.type == "preload_done"), None)


def start_segment(run: Run, hold: str | None, extra_env: dict[str, str]) -> Segment:
    run.segments += 1
    argv = [*common.TRAINER_CORE, "train", "--profile", str(run.profile), "--data", str(run.data)]
    argv += ["--run-dir", str(run.run_dir)] + (["--resume", "auto"] if run.segments > 1 else [])
    marker = run.root / f"{run.name}-{run.segments:03d}.held"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VEGA_")}
    env.update(VEGA_CONFIG_DIR=str(run.root / "config"), OMP_NUM_THREADS="1")
    env.update(**FAULTS_ON, **extra_env)
    env.update({HOLD_AT_ENV: hold, HOLD_MARKER_ENV: str(marker)} if hold else {})
    log = run.run_dir / "events.jsonl"
    reader = EventReader(log)
    reader.offset = log.stat().st_size if log.exists() else 0  # this segment's events only
    with open(run.root / f"{run.name}-{run.segments:03d}.err", "wb") as err:
        quiet = subprocess.DEVNULL
        proc = subprocess.Popen(argv, stdin=quiet, stdout=quiet, stderr=err, env=env)
    return Segment(proc, time.monotonic(), reader, marker)
