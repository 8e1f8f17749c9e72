"""The vocoder trained end to end by real trainer processes: two optimizer groups through stop and resume, on
two gloo ranks, with their losses, learning rates, phases and reference line in the events.

Each run trains the tiny vocoder (`tiny_profiles`, kind "vocoder") on the bundled demo voice."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import FAULTS_ON, TEST_VOICE, TrainerLauncher, finished, of_type, step_rows
from test_ddp import two_ranks_stop_resume_and_end_identical
from trainer_core.data.validation_split import validation_share
from trainer_core.engine.checkpoint_manager import list_checkpoints, load_checkpoint
from trainer_core.tiny_profiles import tiny_profile

SLOW = {**FAULTS_ON, "VEGA_FAULT_STEP_SLEEP_S": "0.1"}
STEPS = 14  # 36 training clips in batches of 4: the run crosses an epoch boundary
SETTINGS = {"train.max_steps": STEPS, "train.eval_every_steps": 7}


@pytest.fixture
def vocoders(tmp_path: Path) -> Iterator[TrainerLauncher]:
    launcher = TrainerLauncher(tmp_path, TEST_VOICE)
    launcher.profile.write_text(tiny_profile("vocoder", data={"cache_dir": "cache"}), encoding="utf-8")
    yield launcher
    launcher.close()


def group_rows(events: list) -> dict[int, tuple[dict[str, float], dict[str, float]]]:
    """Step -> (losses, lrs) of the steps whose step event was the last of its window."""
    return {e.step: (e.losses, e.lrs) for e in of_type(events, "step")}


def test_stop_and_resume_gives_bit_identical_losses_in_both_groups(vocoders: TrainerLauncher) -> None:
    whole = vocoders.run_here("whole", SETTINGS)  # the reference: what a run does, in this process
    split = vocoders.start("split", SETTINGS, env=SLOW)
    split.wait_for_step(4)
    split.send(signal.SIGTERM)
    assert split.wait() == 0, split.stderr
    first = finished(split.events())
    assert first.status == "stopped" and 4 <= first.step < STEPS
    resumed = vocoders.run_here("split", SETTINGS, "--resume", "auto", run_dir=split.run_dir)
    assert resumed.proc.returncode == 0, resumed.stderr
    assert whole.wait() == 0, whole.stderr
    events, reference = split.events(), whole.events()
    assert finished(events).status == "completed" and finished(events).step == STEPS
    assert sorted(step_rows(reference)) == list(range(1, STEPS + 1))
    assert step_rows(events) == step_rows(reference)
    # Both groups' losses and learning rates agree wherever both logs have the step.
    ours, theirs = group_rows(events), group_rows(reference)
    shared = ours.keys() & theirs.keys()
    assert shared and all(ours[step] == theirs[step] for step in shared)
    # The exports (the generator alone) are bit-identical.
    a, b = (load_file(str(run / "export" / "model.safetensors")) for run in (split.run_dir, whole.run_dir))
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    assert not any(k.startswith("discriminators") for k in a)
    checkpoint = load_checkpoint(list_checkpoints(split.run_dir / "checkpoints")[0])
    assert {"optimizer", "scheduler"} <= checkpoint.keys()  # the primary group's (the generator)
    assert set(checkpoint["extra"]["optimizer_groups"]) == {"optimizer.discriminator", "scheduler.discriminator"}


def test_vocoder_events_carry_each_groups_losses_rates_phases_and_the_reference(vocoders: TrainerLauncher) -> None:
    run = vocoders.run_here("events", {**SETTINGS, "logging.profile_interval_s": 0.5}, env=SLOW)
    assert run.proc.returncode == 0, run.stderr
    events = run.events()
    steps = of_type(events, "step")
    assert all(set(e.lrs) == {"discriminator", "generator"} and e.lr == e.lrs["generator"] for e in steps)
    assert {"discriminator.total", "generator.mel", "generator.adversarial"} <= steps[-1].losses.keys()
    breakdowns = of_type(events, "profile_breakdown")
    assert breakdowns and set(breakdowns[-1].groups) == {"discriminator", "generator"}
    assert breakdowns[-1].groups["generator"]["backward_s"] > 0
    validations = of_type(events, "validation")
    assert validations and all(v.reference_name == "griffin_lim" for v in validations)
    assert set(validations[-1].reference) == {"mel_l1", "stft_distance"}
    assert set(validations[-1].metrics) == {"mel_l1", "stft_distance"}
    samples = of_type(events, "sample")
    assert samples and all(s.kind == "audio" and Path(s.path).is_file() for s in samples)


def test_two_gloo_ranks_train_the_vocoder_stop_resume_and_end_identical(vocoders: TrainerLauncher) -> None:
    settings = {"train.max_steps": 8, "train.eval_every_steps": 4, "train.checkpoint_every_steps": 4}
    two_ranks_stop_resume_and_end_identical(vocoders, settings, stop_at=3)


def test_the_plan_describes_a_vocoder_by_its_generator_and_discriminators(vocoders: TrainerLauncher) -> None:
    done = vocoders.run_here("plan", {}, "--dry-run", "--json")
    assert done.proc.returncode == 0, done.stderr
    plan = json.loads(done.out_path.read_text(encoding="utf-8"))
    model = plan["model"]
    assert model["kind"] == "vocoder"
    assert model["vocoder"] == {
        "channels": 16, "blocks": 1, "segment_frames": 8, "discriminator_channels": 4, "periods": [2, 3],
        "resolutions": 1,
    }  # fmt: skip
    # Whole clips are validated against 8-frame training segments: each held-out clip weighs its length in them.
    v, voice = plan["validation"], plan["data"]
    segment_s = 8 * 256 / 22050
    assert v["item_size"] == pytest.approx(voice["hours"] * 3600 / voice["usable"] / segment_s, rel=1e-6)
    assert v["estimated_share"] == pytest.approx(validation_share(v["items"], v["interval_items"], v["item_size"]))
    table = vocoders.run_here("table", {}, "--dry-run").out_path.read_text(encoding="utf-8")
    assert "vocoder (generator 16 channels x 1 blocks" in table
    flat = " ".join(table.replace("│", " ").split())  # the table wraps its cells
    assert f"x {v['item_size']:.0f} segments per whole clip" in flat
