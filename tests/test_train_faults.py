"""Faults injected into real trainer processes: out-of-memory, non-finite losses, precision fallback.

The runs are independent, so one module fixture starts them all at once (they mostly wait on imports,
which two cores overlap well) and each test checks its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import FAULTS_ON, TrainerLauncher, TrainerProcess, finished, of_type, step_rows
from trainer_core.engine.schedule import lr_factor

PEAK_LR, WARMUP, STEPS = 3e-3, 5, 12
SHORT = {"train.max_steps": STEPS, "train.batch_size": 8, "train.grad_accum": 1}
RUNS = {
    "oom": {**SHORT, "debug.oom_at_steps": [5]},
    "oom_at_one": {**SHORT, "train.batch_size": 1, "debug.oom_at_steps": [3]},
    # One skipped attempt at step 5, then three in a row at step 9: fp32 has nothing safer to fall back to.
    "nonfinite": {**SHORT, "debug.nonfinite_at_steps": [5, 9, 9, 9], "train.nonfinite_patience": 3},
    "bf16": {**SHORT, "train.precision": "bf16", "train.nonfinite_patience": 2, "debug.nonfinite_at_steps": [4, 4]},
    # A loss that stays NaN: fp32 gives up after 10 x patience attempts instead of skipping forever.
    "hopeless": {**SHORT, "train.nonfinite_patience": 1, "debug.nonfinite_at_steps": [3] * 10},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Iterator[dict[str, TrainerProcess]]:
    launcher = TrainerLauncher(tmp_path_factory.mktemp("faults"), corpus)
    launcher.env.update(FAULTS_ON)  # the [debug] faults act only with the gate open
    # in this process, one after the other: the faults are the subject, not the process
    started = {name: launcher.run_here(name, settings) for name, settings in RUNS.items()}
    yield started
    launcher.close()


def expected_lr(step: int) -> float:
    """The LR of 1-based step `step` in an undisturbed run: warmup then cosine to zero."""
    return PEAK_LR * lr_factor(step - 1, "cosine", WARMUP, STEPS)


def lrs(trainer: TrainerProcess) -> dict[int, float]:
    rows = step_rows(trainer.events())
    assert all(len(r) == 1 for r in rows.values()), "a step was reported twice"
    return {step: r[0][1] for step, r in rows.items()}


def test_oom_halves_the_micro_batch_and_keeps_the_effective_batch_and_lr(runs) -> None:
    oom = runs["oom"]
    assert oom.proc.returncode == 0, oom.stderr
    events = oom.events()
    (recovered,) = of_type(events, "oom_recovered")
    assert (recovered.step, recovered.micro_batch, recovered.grad_accum) == (5, 4, 2)
    assert "injected out-of-memory" in recovered.message
    steps = of_type(events, "step")
    assert all(e.micro_batch * e.grad_accum == 8 for e in steps)
    assert steps[-1].micro_batch == 4
    assert finished(events).status == "completed" and finished(events).step == STEPS
    # The same LR at every step as a run without OOM: the schedule's own values, and those of the
    # non-finite run below (same schedule, no OOM).
    got = lrs(oom)
    assert sorted(got) == list(range(1, STEPS + 1))
    assert got == {step: expected_lr(step) for step in got}
    assert got == lrs(runs["nonfinite"])


def test_oom_at_micro_batch_one_fails_with_a_clear_error(runs) -> None:
    run = runs["oom_at_one"]
    assert run.proc.returncode == 2
    assert "error: out of memory at step 3 even with micro-batch 1" in run.stderr
    assert "Traceback" not in run.stderr
    events = run.events()
    assert finished(events).status == "failed"
    assert any("micro-batch 1" in e.message for e in of_type(events, "error"))


def test_nonfinite_steps_are_skipped_without_moving_the_schedule(runs) -> None:
    run = runs["nonfinite"]
    assert run.proc.returncode == 0, run.stderr
    events = run.events()
    skipped = of_type(events, "nonfinite")
    assert [(e.step, e.consecutive) for e in skipped] == [(5, 1), (9, 1), (9, 2), (9, 3)]
    assert all(e.action.startswith("skipped step") and e.precision == "fp32" for e in skipped)
    assert "nothing safer" in skipped[-1].action
    assert not any(e.code == "precision_fallback" for e in of_type(events, "warning"))
    # Skipped attempts are invisible in the schedule: step k has the LR of step k of an undisturbed run.
    got = lrs(run)
    assert sorted(got) == list(range(1, STEPS + 1))
    for step, lr in got.items():
        assert lr == pytest.approx(expected_lr(step), rel=1e-12, abs=1e-15)
    assert finished(events).status == "completed"


def test_repeated_nonfinite_steps_in_bf16_fall_back_to_fp32(runs) -> None:
    run = runs["bf16"]
    assert run.proc.returncode == 0, run.stderr
    events = run.events()
    assert of_type(events, "device_selected")[0].precision == "bf16"
    skipped = of_type(events, "nonfinite")
    assert [(e.step, e.precision) for e in skipped] == [(4, "bf16"), (4, "bf16")]
    assert "falling back from bf16 to fp32" in skipped[-1].action
    (warning,) = [e for e in of_type(events, "warning") if e.code == "precision_fallback"]
    assert "bf16" in warning.message and "fp32" in warning.message
    end = finished(events)
    assert end.status == "completed" and end.summary["precision"] == "fp32"
    assert sorted(lrs(run)) == list(range(1, STEPS + 1))


def test_a_loss_that_stays_nonfinite_at_fp32_ends_the_run_with_a_clear_error(runs) -> None:
    run = runs["hopeless"]
    assert run.proc.returncode == 2
    assert "Traceback" not in run.stderr
    assert "error: the loss or gradients were non-finite in 10 steps in a row at fp32" in run.stderr
    events = run.events()
    assert len(of_type(events, "nonfinite")) == 10
    assert finished(events).status == "failed" and finished(events).step == 2
