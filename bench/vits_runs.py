"""Training jobs for bench/vits_learning.py and what it reads back from them: a shipped profile
trained through `trainer-core train` into a `Run` (folder, wall time, steps, time inside steps,
trained parameters, learning rate), one job after another, and a run's vits voice with the held-out
sentences `trainer-core evaluate` scores it on.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import common

Job = tuple[str, list[str], tuple[str, ...]]  # profile, --set items, further arguments


@dataclass(frozen=True)
class Run:
    """One finished training job: its folder, the whole job's wall time, steps reached, size."""

    path: Path
    wall_s: float
    steps: int
    step_s: float
    """Seconds inside optimizer steps (the profiler's breakdowns); the rest is start-up,
    validation, checkpoints and export."""
    trained_parameters: int | None
    lr: float | None  # the learning rate it trained at (its frozen profile.toml)

    def facts(self) -> str:
        rate = self.steps / max(self.step_s, 1e-9)
        inside = 100 * self.step_s / max(self.wall_s, 1e-9)
        whole = f"whole job {self.wall_s:.0f} s, {inside:.0f} % of it in steps"
        return f"{self.steps} steps, {whole} ({rate:.2f} steps/s)"

    def last_checkpoint(self) -> Path:
        found = sorted((self.path / "checkpoints").glob("step-*.pt"))
        if not found:
            raise SystemExit(f"{self.path}: the run wrote no checkpoint")
        return found[-1]


def train(scratch: Path, name: str, job: Job) -> Run:
    profile, sets, extra = job
    run_dir, wall = common.train_shipped(profile, scratch, name, sets, extra)
    events = common.read_events(run_dir)
    finished = [e.step for e in events if e.type == "finished"]
    task = [e.parameters for e in events if e.type == "task"]
    phases = ("data_s", "transfer_s", "forward_s", "backward_s", "optimizer_s")
    breakdowns = [e for e in events if e.type == "profile_breakdown"]
    step_s = sum(sum(getattr(e, p) for p in phases) * e.steps for e in breakdowns)
    steps = finished[-1] if finished else 0
    frozen = tomllib.loads((run_dir / "profile.toml").read_text(encoding="utf-8"))
    lr = frozen.get("train", {}).get("lr")
    return Run(run_dir, wall, steps, step_s, task[0] if task else None, lr)


def train_all(scratch: Path, jobs: dict[str, Job]) -> dict[str, Run]:
    """Every job trained, one after the other."""
    return {name: train(scratch, name, job) for name, job in jobs.items()}


def budget(minutes: float) -> str:
    return f"train.target_hours={minutes / 60}"


def millions(count: int | None) -> str:
    return "?" if count is None else f"{count / 1e6:.2f}M"


def load_vits(checkpoint: Path) -> Any:
    from trainer_core.cli.evaluate_cmd import load_voice
    from trainer_core.cli.vits_voice import VitsVoice

    voice, _ = load_voice(checkpoint, "cpu")
    if not isinstance(voice, VitsVoice):
        raise SystemExit(f"{checkpoint}: not a vits voice")
    return voice


def held_out(voice: Any, corpus: Path, count: int) -> list[Any]:
    """The `count` held-out sentences of `corpus` that `trainer-core evaluate` scores voice on."""
    from trainer_core.cli.evaluate_cmd import choose_sentences
    from trainer_core.data.scan import scan_data
    from trainer_core.data.scan_report import VoiceItem

    found = scan_data(corpus, mode="voice", speakers="auto").items
    return choose_sentences(voice, [i for i in found if isinstance(i, VoiceItem)], count, False)
