"""A VITS voice trained end to end by real trainer processes, with the engine's promises: a kill in the middle of
a checkpoint write resumed from the one before and ending bit-identical to an uninterrupted run in both optimizer
groups (the latent noise, duration noise and segment choices included), and two gloo ranks that stop, resume and
end identical. The non-finite and out-of-memory recoveries run in process (tests/test_group_step.py).

Each run trains the tiny vits (`tiny_profiles`, kind "vits") on the test voice, without free-running passes."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import FAULTS_ON, TEST_VOICE, TrainerLauncher, finished, new_vits_export, of_type, step_rows
from test_ddp import two_ranks_stop_resume_and_end_identical
from test_vocoder_train import group_rows
from trainer_core.engine.checkpoint_manager import list_checkpoints, load_checkpoint
from trainer_core.tiny_profiles import tiny_profile

STEPS = 10  # 36 training clips in batches of 4: the run crosses an epoch boundary
SETTINGS = {"train.max_steps": STEPS, "train.eval_every_steps": STEPS}


@pytest.fixture
def voices(tmp_path: Path) -> Iterator[TrainerLauncher]:
    launcher = TrainerLauncher(tmp_path, TEST_VOICE)
    profile = tiny_profile("vits", data={"cache_dir": "cache"}, train={"free_running_every": 0})
    launcher.profile.write_text(profile, encoding="utf-8")
    yield launcher
    launcher.close()


def checkpoint_steps(run_dir: Path) -> list[int]:
    return sorted(int(p.stem.split("-")[1]) for p in (run_dir / "checkpoints").glob("step-*.pt"))


def test_killed_mid_checkpoint_it_resumes_from_the_one_before_and_ends_bit_identical(
    voices: TrainerLauncher, tmp_path: Path
) -> None:
    """Fault injection and exact resume at once: the second save hangs half-written and the trainer is killed; the
    resumed run redoes the steps since the first save and every step's losses in both groups, the validation and
    the export equal an uninterrupted run's, the random draws (latent and duration noise, segments) included.

    Both runs start from another vits voice (an export, its embedding smaller than theirs: rows move by symbol, the
    rest are new), and the resume names no start model: it keeps the symbol map, shape and fine-tuning rate the
    run started with."""
    source = new_vits_export(tmp_path / "made")
    started = {**SETTINGS, "train.init_from": str(source), "vits.num_symbols": 200}
    settings = {**started, "train.checkpoint_every_steps": 4, "debug.hold_checkpoint_write_s": 30}
    whole = voices.run_here("whole", {**settings, "debug.hold_checkpoint_write_s": 0})  # the reference
    killed = voices.start("kill", settings, env={**FAULTS_ON, "VEGA_FAULT_HOLD_CHECKPOINT_SAVES": "2"})
    folder = killed.run_dir / "checkpoints"
    killed.wait_for(lambda _: any(folder.glob(".step-00000008.pt.*.tmp")), timeout=90)
    assert checkpoint_steps(killed.run_dir) == [4]
    killed.proc.kill()
    killed.wait()
    plain = {**settings, "train.init_from": None, "vits.num_symbols": None, "debug.hold_checkpoint_write_s": 0}
    resumed = voices.run_here("kill", plain, "--resume", "auto", run_dir=killed.run_dir)
    assert resumed.proc.returncode == 0, resumed.stderr
    assert whole.wait() == 0, whole.stderr
    events, reference = killed.events(), whole.events()
    assert any(e.message.startswith("resumed from") and "step-00000004.pt: step 4," in e.message
               for e in of_type(events, "log"))  # fmt: skip
    assert finished(events).status == "completed" and finished(events).step == STEPS
    assert not list(folder.glob("*.tmp"))
    # Steps 5-8 ran twice (before the kill and after the resume), each time exactly as in the whole run.
    expected, got = step_rows(reference), step_rows(events)
    assert sorted(expected) == sorted(got) == list(range(1, STEPS + 1))
    assert all(row == expected[step][0] for step, rows in got.items() for row in rows)
    assert any(len(rows) == 2 for rows in got.values())
    ours, theirs = group_rows(events), group_rows(reference)
    shared = ours.keys() & theirs.keys()
    assert shared and all(ours[step] == theirs[step] for step in shared)
    assert {"generator.kl", "generator.duration", "discriminator.total"} <= next(iter(ours.values()))[0].keys()
    assert of_type(events, "validation")[-1].losses == of_type(reference, "validation")[-1].losses
    # The exports (the generator alone) are bit-identical.
    a, b = (load_file(str(run / "export" / "model.safetensors")) for run in (killed.run_dir, whole.run_dir))
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    assert not any(k.startswith("model_d") for k in a) and "enc_p.emb.weight" in a
    checkpoint = load_checkpoint(list_checkpoints(folder)[0])
    assert set(checkpoint["extra"]["optimizer_groups"]) == {"optimizer.discriminator", "scheduler.discriminator"}
    start = of_type(events, "init_from")
    assert len(start) == 1 and start[0].form == "export" and start[0].kind == "vits"
    assert start[0].mapped[0].by == "symbol" and start[0].mapped[0].rows == 200 and start[0].mapped[0].kept > 20
    assert a["enc_p.emb.weight"].shape[0] == 200  # the resume rebuilt the run's own 200-row map, not a new one
    frozen = tomllib.loads((killed.run_dir / "profile.toml").read_text(encoding="utf-8"))
    assert frozen["train"]["lr"] == 2e-4 and frozen["vits"]["num_symbols"] == 200  # finetune_lr's vits default
    assert 0 < max(e.lr for e in of_type(events, "step")) <= 2e-4


def test_two_gloo_ranks_train_vits_stop_resume_and_end_identical(voices: TrainerLauncher) -> None:
    settings = {
        "train.max_steps": 5, "train.warmup_steps": 2, "train.eval_every_steps": 5, "train.checkpoint_every_steps": 2,
    }  # fmt: skip
    two_ranks_stop_resume_and_end_identical(voices, settings, stop_at=2)
