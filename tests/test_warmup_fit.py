"""The LR warmup fitted to a short plan (trainer_core.warmup): the rule, a real epochs-based run and its resume,
and a real time-budget run whose warmup is fitted at calibration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import FAULTS_ON, TrainerLauncher, finished, of_type, step_rows, write_corpus
from test_validation_cap import dry_run
from trainer_core.engine.schedule import lr_factor
from trainer_core.warmup import WARMUP_FITTED_SHARE, WARMUP_MAX_SHARE, fitted_warmup

PEAK_LR = 3e-3  # the tiny profile's train.lr (conftest.TINY_PROFILE)


def test_warmup_is_kept_up_to_half_the_plan_and_else_a_tenth_of_it() -> None:
    assert fitted_warmup(100, 200) == 100  # exactly half: kept
    assert fitted_warmup(101, 200) == int(200 * WARMUP_FITTED_SHARE)
    assert fitted_warmup(500, 377) == 37  # tts-small on a 0.2 h budget
    assert fitted_warmup(0, 1) == 0 and fitted_warmup(5, 1) == 0
    assert all(fitted_warmup(w, p) <= p * WARMUP_MAX_SHARE for w in (1, 10, 1000) for p in (1, 7, 50, 3000))


def warmup_warnings(events) -> list:
    return [e for e in of_type(events, "warning") if e.code == "warmup_fitted"]


def assert_lrs_follow(rows: dict, warmup: int, total: int) -> None:
    for step, [(_, lr)] in rows.items():
        assert lr == pytest.approx(PEAK_LR * lr_factor(step - 1, "cosine", warmup, total), rel=1e-6), step


def test_short_run_fits_the_warmup_and_a_resume_keeps_it(trainers: TrainerLauncher, tmp_path: Path) -> None:
    data = write_corpus(tmp_path / "small", documents=2)
    settings = {"train.max_steps": None, "train.epochs": 3, "train.warmup_steps": 500}
    first = trainers.run_here("short", settings, data=data)
    assert first.proc.returncode == 0, first.stderr
    events = first.events()
    per_epoch = of_type(events, "epoch_start")[0].steps_in_epoch
    planned = 3 * per_epoch
    warmup = fitted_warmup(500, planned)
    assert 0 < warmup < 500
    [warning] = warmup_warnings(events)
    assert f"over {warmup} steps" in warning.message and "train.warmup_steps (500)" in warning.message
    rows = step_rows(events)
    assert sorted(rows) == list(range(1, planned + 1))
    assert_lrs_follow(rows, warmup, planned)
    assert max(lr for [(_, lr)] in rows.values()) == pytest.approx(PEAK_LR)  # the run reached the peak LR

    # Extended on resume: a fresh plan of 6 epochs would fit another warmup; the resumed run keeps its own.
    longer = 6 * per_epoch
    assert fitted_warmup(500, longer) != warmup
    resumed = trainers.run_here(
        "short", {**settings, "train.epochs": 6}, "--resume", "auto", run_dir=first.run_dir, data=data
    )
    assert resumed.proc.returncode == 0, resumed.stderr
    events = first.events()
    assert finished(events).step == longer
    later = {step: row for step, row in step_rows(events).items() if step > planned}
    assert sorted(later) == list(range(planned + 1, longer + 1))
    assert_lrs_follow(later, warmup, longer)


def test_time_budget_fits_the_warmup_at_calibration(trainers: TrainerLauncher) -> None:
    settings = {
        "train.max_steps": None,
        "train.epochs": 1000,
        "train.target_hours": 0.005,  # 18 s: start-up counts, and takes ~7 s on a loaded 2-core machine
        "train.warmup_steps": 100000,
    }
    run = trainers.run("budget", settings, env={**FAULTS_ON, "VEGA_FAULT_STEP_SLEEP_S": "0.01"})
    assert run.proc.returncode == 0, run.stderr
    events = run.events()
    first_plan = of_type(events, "calibration")[0]
    [warning] = warmup_warnings(events)
    assert warning.seq > first_plan.seq and "the time budget plans" in warning.message
    warmup = fitted_warmup(100000, first_plan.planned_steps)
    assert f"over {warmup} steps" in warning.message
    rows = step_rows(events)
    assert finished(events).step > warmup  # the run got past its fitted warmup...
    # ...and trained near the peak LR (a 100,000-step warmup would have kept it under 1 % of the peak). A budget
    # this short calibrates after about as many steps as the fitted warmup, so the peak itself may be passed.
    assert max(lr for [(_, lr)] in rows.values()) > 0.5 * PEAK_LR


def test_dry_run_shows_the_fitted_warmup_and_says_why(tmp_path: Path) -> None:
    cache = f"data.cache_dir={json.dumps(str(tmp_path / 'cache'))}"
    plan = dry_run("train.epochs=2", "train.warmup_steps=500", cache, config=tmp_path)
    planned = 2 * plan["schedule"]["steps_per_epoch"]
    assert plan["schedule"]["warmup_steps"] == 500
    assert plan["schedule"]["warmup_effective"] == fitted_warmup(500, planned) < 500
    assert any(f"over {fitted_warmup(500, planned)} steps" in note for note in plan["notes"])
    kept = dry_run("train.epochs=2", "train.warmup_steps=1", cache, config=tmp_path)
    assert kept["schedule"]["warmup_effective"] == 1 and not any("warmup" in n for n in kept["notes"])
    budget = dry_run("train.target_hours=0.2", "train.warmup_steps=500", cache, config=tmp_path)
    assert budget["schedule"]["warmup_effective"] is None  # known after calibration, and the plan says so
    assert any("after calibration" in note for note in budget["notes"])
