"""The time budget on a real trainer: calibrate, plan the steps, keep an ETA, end near the target."""

from __future__ import annotations

import time

from conftest import FAULTS_ON, TrainerLauncher, finished, of_type

# About 18 seconds, start-up included: 9 left a loaded machine (two workers) no time to calibrate in.
# Loose bounds below: this checks the plan is honoured, it is not a timing benchmark.
TARGET_HOURS = 0.005


def test_time_budget_plans_the_run_and_ends_near_the_target(trainers: TrainerLauncher) -> None:
    target_s = TARGET_HOURS * 3600
    started = time.monotonic()
    run = trainers.start(
        "budget",
        {"train.max_steps": None, "train.epochs": 1000, "train.target_hours": TARGET_HOURS},
        env={**FAULTS_ON, "VEGA_FAULT_STEP_SLEEP_S": "0.01"},  # steady steps that leave the CPU to other tests
    )
    assert run.wait() == 0, run.stderr
    wall = time.monotonic() - started
    events = run.events()

    plans = of_type(events, "calibration")
    assert plans, "no calibration event"
    assert all(p.planned_steps > 0 and p.samples_per_s > 0 and p.target_hours == TARGET_HOURS for p in plans)
    end = finished(events)
    assert end.status == "completed"
    assert 0.5 * target_s <= wall <= 1.6 * target_s
    # The last plan was close to what the run did.
    assert 0.5 * plans[-1].planned_steps <= end.step <= 1.5 * plans[-1].planned_steps

    first_plan = plans[0].seq
    later_steps = [e for e in of_type(events, "step") if e.seq > first_plan]
    assert later_steps and all(e.eta_s is not None and e.eta_s >= 0 for e in later_steps)
    assert later_steps[-1].eta_s < later_steps[0].eta_s


def test_max_steps_still_ends_a_budgeted_run_that_reaches_it_first(trainers: TrainerLauncher) -> None:
    run = trainers.run_here("budget-cap", {"train.max_steps": 3, "train.warmup_steps": 1, "train.target_hours": 1.0})
    assert run.proc.returncode == 0, run.stderr
    end = finished(run.events())
    assert end.status == "completed" and end.step == 3
