"""TimeBudget with a fake clock: plans from measured throughput and keeps time for the final save."""

from __future__ import annotations

from trainer_core.engine.budget import END_MARGIN_S, PASS_SHARE, PassAllowance, TimeBudget


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def first_plan(budget: TimeBudget, clock: FakeClock, seconds_per_step: float, first_step: int = 1):
    """Step until the budget makes its first plan; returns (plan, step, time) at that moment."""
    for step in range(first_step, first_step + 60):
        clock.now += seconds_per_step
        plan = budget.observe(step, items=8)
        if plan is not None:
            return plan, step, clock.now
    raise AssertionError("no plan was made")


def test_plan_fills_the_remaining_budget_at_the_measured_rate() -> None:
    clock = FakeClock()
    budget = TimeBudget(target_hours=0.1, steps_per_epoch=50, clock=clock)  # 360 s
    plan, step, now = first_plan(budget, clock, seconds_per_step=0.5)
    assert plan.steps_per_s == 2.0 and plan.samples_per_s == 16.0
    assert plan.total_steps == step + int((360 - now - END_MARGIN_S) * 2.0)
    assert plan.planned_epochs == -(-plan.total_steps // 50)
    assert budget.eta_s(step) == (plan.total_steps - step) / 2.0


def test_final_costs_move_the_stop_earlier() -> None:
    clock = FakeClock()
    budget = TimeBudget(target_hours=0.01, steps_per_epoch=10, clock=clock)  # 36 s
    clock.now = 30.0
    assert not budget.out_of_time()
    budget.note_end_cost("validate", 3.0)
    budget.note_end_cost("checkpoint", 1.5)
    assert budget.reserve_s == END_MARGIN_S + 4.5
    assert budget.out_of_time()  # 30 s + 6.5 s reserve passes the 36 s target
    budget.note_end_cost("validate", 1.0)  # the latest measurement replaces the older one
    assert budget.reserve_s == END_MARGIN_S + 2.5


def test_evaluations_between_steps_are_planned_for_and_not_counted_as_step_time() -> None:
    clock = FakeClock()
    budget = TimeBudget(target_hours=0.1, steps_per_epoch=50, clock=clock)  # 360 s
    budget.note_recurring("validate", 2.0, every_steps=10)  # 0.2 s a step
    budget.note_recurring("free_running", 4.0, every_steps=40)  # 0.1 s a step
    for step in range(1, 5):
        clock.now += 0.5
        budget.observe(step, items=8)
    clock.now += 2.0  # a validation inside the measurement window
    budget.exclude(2.0)
    plan, step, now = first_plan(budget, clock, 0.5, first_step=5)
    assert plan.steps_per_s == 2.0  # the validation's 2 s are not step time
    assert plan.seconds_per_step == 0.5 + 0.3
    assert plan.total_steps == step + int((360 - now - END_MARGIN_S) / 0.8)
    assert budget.eta_s(step) == (plan.total_steps - step) * 0.8
    # Negative control: the same run planned without the recurring work overruns by 60 %.
    bare_clock = FakeClock()
    bare = TimeBudget(target_hours=0.1, steps_per_epoch=50, clock=bare_clock)
    bare_plan, bare_step, bare_now = first_plan(bare, bare_clock, 0.5)
    assert (bare_plan.total_steps - bare_step) * 0.8 > 1.5 * (360 - bare_now)


def test_free_running_passes_before_the_last_stay_within_their_share_of_the_budget() -> None:
    allowance = PassAllowance(target_s=180.0)
    assert allowance.limit_s == PASS_SHARE * 180.0 == 7.2
    allowance.note_estimate(2.0)  # the floor's time, before any pass
    assert allowance.room()  # this pass and the last: 2 x 2.0 <= 7.2
    allowance.note_pass(2.0)
    allowance.note_estimate(0.1)  # an estimate no longer replaces a measured pass
    assert allowance.room()  # 2.0 spent + 2 x 2.0 = 6.0
    allowance.note_pass(2.0)
    assert not allowance.room()  # 4.0 + 2 x 2.0 = 8.0: only the last pass is left room for
    assert PassAllowance(target_s=None).room()  # no budget: every pass
