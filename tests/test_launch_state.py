"""The launch screen's state machine on its own (`vega_tui.screens.launch_state`): every transition
its table allows, driven by the event that makes it; every event a phase does not allow raises;
late answers are dropped; each check is asked once per question. No Textual, no subprocess."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trainer_core.contract.data_report import CheckDataReport
from trainer_core.contract.plan_report import PlanReport
from vega_tui.screens.launch_state import (
    PLANNING,
    PREPARING,
    READING,
    START,
    TRANSITIONS,
    IllegalTransition,
    LaunchFlow,
    Phase,
    Preflight,
    Problem,
)

C, R, B, W = Phase.CHECKING, Phase.READY, Phase.BLOCKED, Phase.WAITING
S, X = Phase.STARTING, Phase.RUNNING
# The flow keeps the documents without reading them: partial ones (not validated) are enough.
PLAN = PlanReport.model_construct(run_dir="runs/tiny-20261127-093000")
REPORT = CheckDataReport.model_construct(mode="text", reason="text")
NO_FOLDER = Problem("No data folder", "type the path of your data", "choose a data folder")
PATH_CHECK = "checking the path to start from…"

Step = Callable[[LaunchFlow], object]


# ------------------------------------------------------------------------------------------ events


def change(problem: Problem | None, data: bool = True) -> Step:
    return lambda flow: flow.choices_changed(problem, data_changed=data)


def data_ok(flow: LaunchFlow) -> object:
    return flow.data_checked(flow.data.generation, REPORT, None)


def data_bad(flow: LaunchFlow) -> object:
    return flow.data_checked(flow.data.generation, None, "no audio with transcripts")


def plan_ok(flow: LaunchFlow) -> object:
    return flow.planned(flow.plan.generation, PLAN, None)


def plan_bad(flow: LaunchFlow) -> object:
    return flow.planned(flow.plan.generation, None, "train.batch_size = -4: must be >= 1")


def start_point(problem: str | None) -> Step:
    return lambda flow: flow.start_point_checked(problem)


# One way to fire each event, for the phases that must refuse it.
EVENTS: dict[str, Step] = {
    "profiles_read": lambda flow: flow.profiles_read(),
    "choices_changed": change(None),
    "data_checked": data_ok,
    "planned": plan_ok,
    "start_point_checked": start_point(None),
    "press_start": lambda flow: flow.press_start(),
    "started": lambda flow: flow.started(),
    "start_failed": lambda flow: flow.start_failed(),
    "back_from_run": lambda flow: flow.back_from_run(),
}


# ------------------------------------------------------------------------------------------ phases


def checking() -> LaunchFlow:
    flow = LaunchFlow()
    flow.profiles_read()
    flow.choices_changed(None, data_changed=True)
    return flow


def then(name: str, make: Callable[[], LaunchFlow], *steps: Step) -> Callable[[], LaunchFlow]:
    """`make`, then `steps`: a flow in another phase (`name` for the test ids)."""

    def build() -> LaunchFlow:
        flow = make()
        for step in steps:
            step(flow)
        return flow

    build.__name__ = name
    return build


ready = then("ready", checking, plan_ok)
no_folder = then("no_folder", checking, change(NO_FOLDER))
path_checked = then("path_checked", checking, start_point(PATH_CHECK))  # blocked while planning
path_checked_with_plan = then("path_checked_with_plan", ready, start_point(PATH_CHECK))
waiting = then("waiting", checking, EVENTS["press_start"])
starting = then("starting", ready, EVENTS["press_start"])
running = then("running", starting, EVENTS["started"])

# (the phase it starts in, the event, how it is fired, the phase it must lead to)
SCENARIOS: list[tuple[Callable[[], LaunchFlow], str, Step, Phase]] = [
    (checking, "profiles_read", EVENTS["profiles_read"], C),
    (checking, "choices_changed", change(None), C),
    (checking, "choices_changed", change(NO_FOLDER), B),
    (checking, "data_checked", data_ok, C),
    (checking, "data_checked", data_bad, B),
    (checking, "planned", plan_ok, R),
    (checking, "planned", plan_bad, B),
    (checking, "start_point_checked", start_point(None), C),
    (checking, "start_point_checked", start_point(PATH_CHECK), B),
    (checking, "press_start", EVENTS["press_start"], W),
    (ready, "profiles_read", EVENTS["profiles_read"], R),
    (ready, "choices_changed", change(None, data=False), C),
    (ready, "choices_changed", change(NO_FOLDER), B),
    (ready, "data_checked", data_ok, R),
    (ready, "data_checked", data_bad, B),
    (ready, "start_point_checked", start_point(None), R),
    (ready, "start_point_checked", start_point(PATH_CHECK), B),
    (ready, "press_start", EVENTS["press_start"], S),
    (no_folder, "profiles_read", EVENTS["profiles_read"], B),
    (no_folder, "choices_changed", change(None), C),
    (no_folder, "choices_changed", change(NO_FOLDER), B),
    (no_folder, "start_point_checked", start_point(None), B),
    (path_checked, "data_checked", data_ok, B),
    (path_checked, "planned", plan_ok, B),
    (path_checked, "start_point_checked", start_point(None), C),
    (path_checked_with_plan, "start_point_checked", start_point(None), R),
    (waiting, "profiles_read", EVENTS["profiles_read"], W),
    (waiting, "choices_changed", change(None), W),
    (waiting, "choices_changed", change(NO_FOLDER), B),
    (waiting, "data_checked", data_bad, W),
    (waiting, "planned", plan_ok, S),
    (waiting, "planned", plan_bad, B),
    (waiting, "start_point_checked", start_point(PATH_CHECK), W),
    (waiting, "press_start", EVENTS["press_start"], W),
    (starting, "started", EVENTS["started"], X),
    (starting, "start_failed", EVENTS["start_failed"], R),
    (running, "profiles_read", EVENTS["profiles_read"], X),
    (running, "choices_changed", change(NO_FOLDER), X),
    (running, "data_checked", data_bad, X),
    (running, "start_point_checked", start_point(PATH_CHECK), X),
    (running, "back_from_run", EVENTS["back_from_run"], C),
]


def _run(make: Callable[[], LaunchFlow], step: Step) -> tuple[Phase, Phase]:
    flow = make()
    before = flow.phase
    step(flow)
    return before, flow.phase


@pytest.mark.parametrize(
    ("make", "event", "step", "target"),
    SCENARIOS,
    ids=[f"{make.__name__}-{event}-{target.name}" for make, event, _, target in SCENARIOS],
)
def test_each_legal_transition(
    make: Callable[[], LaunchFlow],
    event: str,
    step: Step,
    target: Phase,
) -> None:
    before, after = _run(make, step)
    assert after is target
    assert target in TRANSITIONS[before][event], (before, event, target)


def test_the_scenarios_cover_the_whole_table() -> None:
    covered = {(_run(make, step)[0], event, target) for make, event, step, target in SCENARIOS}
    table = {
        (phase, event, target)
        for phase, events in TRANSITIONS.items()
        for event, targets in events.items()
        for target in targets
    }
    assert covered == table


PHASES = {C: checking, R: ready, B: no_folder, W: waiting, S: starting, X: running}
ILLEGAL = [(phase, e) for phase in Phase for e in EVENTS if e not in TRANSITIONS[phase]]


@pytest.mark.parametrize(("phase", "event"), ILLEGAL, ids=[f"{p.name}-{e}" for p, e in ILLEGAL])
def test_an_event_the_phase_does_not_allow_raises(phase: Phase, event: str) -> None:
    flow = PHASES[phase]()
    assert flow.phase is phase and not flow.allows(event)
    with pytest.raises(IllegalTransition, match=f"{event} is not allowed while {phase.value}"):
        EVENTS[event](flow)
    assert flow.phase is phase


def test_a_move_the_table_does_not_list_raises() -> None:
    flow = checking()  # a dry run that answered neither a plan nor an error would stay "checking"
    with pytest.raises(IllegalTransition, match="planned cannot lead from checking to checking"):
        flow.planned(flow.plan.generation, None, None)


# ------------------------------------------------------------------------------------- answers


def test_a_late_answer_is_dropped() -> None:
    flow = checking()
    asked = flow.plan_due()
    assert asked is not None and flow.data_check_due() is not None
    flow.choices_changed(None, data_changed=False)  # the user moved on before the plan came
    assert not flow.planned(asked, PLAN, None) and flow.plan.result is None and flow.phase is C
    # The data did not change: its check still answers the current question.
    assert flow.data_checked(flow.data.generation, REPORT, None)
    assert flow.data.result == REPORT


def test_each_check_is_asked_once_per_question() -> None:
    flow = LaunchFlow()
    assert flow.plan_due() is None  # profiles not read yet: nothing to plan
    flow.profiles_read()
    flow.choices_changed(NO_FOLDER, data_changed=True)
    assert flow.plan_due() is None and flow.reason == "choose a data folder"
    flow.choices_changed(None, data_changed=True)
    first = flow.plan_due()
    assert first is not None and flow.plan_due() is None
    assert flow.data_check_due() is not None and flow.data_check_due() is None
    flow.choices_changed(None, data_changed=False)
    assert flow.plan_due() == first + 1 and flow.data_check_due() is None


def test_reasons_come_in_the_order_the_user_fixes_them() -> None:
    flow = LaunchFlow()
    flow.start_point_checked(PATH_CHECK)
    assert flow.reason is None and flow.phase is C  # nothing blocks while the profiles are read
    flow.profiles_read()
    flow.choices_changed(None, data_changed=True)
    assert flow.phase is B and flow.reason == PATH_CHECK
    data_bad(flow)
    assert flow.reason == "data folder: no audio with transcripts"
    flow.choices_changed(NO_FOLDER, data_changed=True)
    assert flow.reason == "choose a data folder" and flow.data.error is None
    flow.choices_changed(None, data_changed=True)
    flow.start_point_checked(None)
    plan_bad(flow)
    assert flow.phase is B and flow.reason == "train.batch_size = -4: must be >= 1"


def test_a_start_asked_for_early_waits_for_the_plan_to_decide() -> None:
    flow = LaunchFlow()
    flow.press_start()  # Enter on the first frame, before the profiles are read
    flow.profiles_read()
    flow.choices_changed(None, data_changed=True)
    flow.start_point_checked(PATH_CHECK)  # a typed path is checked meanwhile: Start shows why
    assert flow.phase is W and flow.reason == PATH_CHECK
    flow.start_point_checked(None)
    plan_ok(flow)
    assert flow.phase is S  # the path was good by the time the plan came
    again = waiting()
    data_bad(again)
    plan_ok(again)
    assert again.phase is B and again.reason == "data folder: no audio with transcripts"
    dropped = waiting()
    dropped.choices_changed(NO_FOLDER, data_changed=True)  # nothing left to plan: the start is dropped
    assert dropped.phase is B and dropped.plan_due() is None


def test_a_run_started_and_left_is_planned_again() -> None:
    flow = running()
    flow.choices_changed(None, data_changed=True)  # a profile edited while the run is shown
    assert flow.phase is X and flow.plan_due() is None and flow.data_check_due() is None
    flow.back_from_run()
    flow.choices_changed(None, data_changed=False)
    assert flow.phase is C and flow.plan.result is None
    assert flow.plan_due() is not None and flow.data_check_due() is not None


def test_what_the_preflight_and_the_start_line_show() -> None:
    flow = LaunchFlow()
    assert flow.preflight == Preflight(waiting=READING) and flow.start_line == PREPARING
    flow.profiles_read()
    flow.choices_changed(NO_FOLDER, data_changed=True)
    assert flow.preflight == Preflight(problem=(NO_FOLDER.title, NO_FOLDER.detail))
    assert flow.start_line == "choose a data folder"
    flow.choices_changed(None, data_changed=True)
    assert flow.preflight == Preflight(waiting=PLANNING) and flow.start_line == PREPARING
    plan_ok(flow)
    assert flow.preflight == Preflight(plan=flow.plan.generation) and flow.start_line == START
    flow.choices_changed(None, data_changed=False)
    plan_bad(flow)
    error = "train.batch_size = -4: must be >= 1"
    assert flow.preflight == Preflight(problem=("The trainer would not start:", error))
    assert flow.start_line == error
