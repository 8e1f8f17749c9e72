"""The launch screen's states and transitions, as one small machine with no widgets in it.

`LaunchFlow` holds what the screen decides from: the phase (`Phase`, named for what the user sees),
the data check's and the dry run's answers (`Check`), what keeps the choices from being planned
(`Problem`) and what keeps a typed "Start from" path from being used. The screen
(`vega_tui.screens.launch.LaunchScreen`) tells it what happened through its event methods and
renders from it; `TRANSITIONS` lists, per phase, the events allowed and the phases each may lead
to, and anything else raises `IllegalTransition`. No Textual import: tests drive it directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from trainer_core.contract.data_report import CheckDataReport
    from trainer_core.contract.plan_report import PlanReport

# A check's answer: the command's parsed document (a `ReportModel`; no pydantic needed here).
Result = TypeVar("Result")

READING = "reading profiles and this machine…"
PLANNING = "computing the plan…"
PREPARING = "preparing the plan… (Start now and it begins when ready)"
START = "Enter or s: start training"


class Phase(Enum):
    """What the launch screen shows, in the user's words."""

    CHECKING = "checking"  # profiles read, the data scanned, the plan computed: Start would wait
    READY = "ready"  # the plan is in and nothing blocks: Start runs it
    BLOCKED = "blocked"  # something to fix first (`LaunchFlow.reason`): Start refuses
    WAITING = "waiting to start"  # Start pressed before the plan: the plan decides, once it is in
    STARTING = "starting"  # the trainer is being spawned
    RUNNING = "running"  # the trainer runs; its dashboard covers this screen


# Short names for the table only.
_C, _R, _B, _W = Phase.CHECKING, Phase.READY, Phase.BLOCKED, Phase.WAITING
_S, _X = Phase.STARTING, Phase.RUNNING

# Phase -> event -> the phases it may lead to. Late answers to older questions are dropped
# before this table is read.
TRANSITIONS: dict[Phase, dict[str, frozenset[Phase]]] = {
    _C: {
        "profiles_read": frozenset({_C}),
        "choices_changed": frozenset({_C, _B}),
        "data_checked": frozenset({_C, _B}),
        "planned": frozenset({_R, _B}),
        "start_point_checked": frozenset({_C, _B}),
        "press_start": frozenset({_W}),
    },
    _R: {
        "profiles_read": frozenset({_R}),
        "choices_changed": frozenset({_C, _B}),
        "data_checked": frozenset({_R, _B}),
        "start_point_checked": frozenset({_R, _B}),
        "press_start": frozenset({_S}),
    },
    _B: {
        "profiles_read": frozenset({_B}),
        "choices_changed": frozenset({_C, _B}),
        "data_checked": frozenset({_B}),
        "planned": frozenset({_B}),
        "start_point_checked": frozenset({_C, _R, _B}),
    },
    _W: {
        "profiles_read": frozenset({_W}),
        "choices_changed": frozenset({_W, _B}),
        "data_checked": frozenset({_W}),
        "planned": frozenset({_S, _B}),
        "start_point_checked": frozenset({_W}),
        "press_start": frozenset({_W}),
    },
    _S: {
        "started": frozenset({_X}),
        "start_failed": frozenset({_R}),
    },
    _X: {
        "profiles_read": frozenset({_X}),
        "choices_changed": frozenset({_X}),
        "data_checked": frozenset({_X}),
        "start_point_checked": frozenset({_X}),
        "back_from_run": frozenset({_C}),
    },
}


class IllegalTransition(RuntimeError):
    """An event the current phase does not allow, or a move the table does not list: a bug."""


@dataclass(frozen=True)
class Problem:
    """What keeps the choices from being planned: no profile, an invalid one, no data folder."""

    title: str  # the preflight's heading
    detail: str  # the preflight's text under it
    reason: str  # why Start refuses, one line


@dataclass(frozen=True)
class Preflight:
    """What the preflight pane shows: a line while waiting, a problem, or one generation's plan."""

    waiting: str = ""
    problem: tuple[str, str] | None = None  # (title, detail)
    plan: int | None = None


@dataclass
class Check(Generic[Result]):
    """One background check (`trainer-core check-data` or the dry run): which question is current
    (`generation`), whether it was asked, and its answer (`result` or `error`)."""

    generation: int = 0
    asked: int = -1  # the generation last sent to a worker
    result: Result | None = None
    error: str | None = None

    @property
    def answered(self) -> bool:
        return self.result is not None or self.error is not None

    def forget(self) -> None:
        """The question changed: a new generation, no answer yet."""
        self.generation += 1
        self.result, self.error = None, None

    def ask(self) -> int | None:
        """The generation to send to a worker, once per generation (None: asked already)."""
        if self.asked == self.generation:
            return None
        self.asked = self.generation
        return self.generation

    def answer(self, generation: int, result: Result | None, error: str | None) -> bool:
        """Keep an answer to the current question; False (dropped) for a late one."""
        if generation != self.generation:
            return False
        self.result, self.error = result, error
        return True


@dataclass
class LaunchFlow:
    """The launch screen's state: a phase and what it was decided from."""

    phase: Phase = Phase.CHECKING
    profiles_known: bool = False  # the profile folders were read once
    problem: Problem | None = None
    start_problem: str | None = None  # the "Start from" path is being checked or is unusable
    data: Check[CheckDataReport] = field(default_factory=Check)
    plan: Check[PlanReport] = field(default_factory=Check)

    @property
    def reason(self) -> str | None:
        """Why Start cannot run, or None (also while the profiles are read or planned)."""
        if not self.profiles_known:
            return None
        if self.problem is not None:
            return self.problem.reason
        if self.data.error is not None:
            return f"data folder: {self.data.error}"
        return self.start_problem or self.plan.error

    @property
    def start_line(self) -> str:
        """The line beside Start: why it refuses, or what it will do."""
        if (reason := self.reason) is not None:
            return reason
        return PREPARING if self.plan.result is None else START

    @property
    def preflight(self) -> Preflight:
        if not self.profiles_known:
            return Preflight(waiting=READING)
        if self.problem is not None:
            return Preflight(problem=(self.problem.title, self.problem.detail))
        if self.plan.error is not None:
            return Preflight(problem=("The trainer would not start:", self.plan.error))
        if self.plan.result is not None:
            return Preflight(plan=self.plan.generation)
        return Preflight(waiting=PLANNING)

    def allows(self, event: str) -> bool:
        """Whether `event` may happen now (the others raise `IllegalTransition`)."""
        return event in TRANSITIONS[self.phase]

    # ------------------------------------------------------------------------------- events

    def profiles_read(self) -> None:
        self._allow("profiles_read")
        self.profiles_known = True
        self._move("profiles_read", self.phase)

    def choices_changed(self, problem: Problem | None, data_changed: bool) -> None:
        """A choice changed: forget the plan (and the data check when the data changed)."""
        self._allow("choices_changed")
        self.problem = problem
        self.plan.forget()
        if data_changed:
            self.data.forget()
        self._settle("choices_changed")

    def data_checked(
        self,
        generation: int,
        report: CheckDataReport | None,
        error: str | None,
    ) -> bool:
        """check-data answered; False when it answered an older question (dropped)."""
        if generation != self.data.generation:
            return False
        self._allow("data_checked")
        self.data.answer(generation, report, error)
        self._settle("data_checked")
        return True

    def planned(self, generation: int, plan: PlanReport | None, error: str | None) -> bool:
        """The dry run answered; False when it answered an older question (dropped)."""
        if generation != self.plan.generation:
            return False
        self._allow("planned")
        self.plan.answer(generation, plan, error)
        self._settle("planned")
        return True

    def start_point_checked(self, problem: str | None) -> None:
        self._allow("start_point_checked")
        self.start_problem = problem
        self._settle("start_point_checked")

    def press_start(self) -> None:
        """Start pressed without a reason to refuse: start now, or once the plan is in."""
        self._allow("press_start")
        self._move("press_start", Phase.STARTING if self.phase is Phase.READY else Phase.WAITING)

    def started(self) -> None:
        self._allow("started")
        self._move("started", Phase.RUNNING)

    def start_failed(self) -> None:
        self._allow("start_failed")
        self._move("start_failed", Phase.READY)

    def back_from_run(self) -> None:
        """The run's dashboard closed: check again (the next run gets a new plan)."""
        self._allow("back_from_run")
        self._move("back_from_run", Phase.CHECKING)

    # ------------------------------------------------------------------------------ checks

    def data_check_due(self) -> int | None:
        """The data check's generation to run now, once each (None while a run is open)."""
        return self.data.ask() if self.phase in _LIVE else None

    def plan_due(self) -> int | None:
        """The dry run's generation to run now, once each; None when there is nothing to plan."""
        if self.phase not in _LIVE or not self.profiles_known or self.problem is not None:
            return None
        return self.plan.ask()

    # ---------------------------------------------------------------------------- internals

    def _settle(self, event: str) -> None:
        """Move to the phase the answers and choices now call for."""
        if self.phase is Phase.RUNNING:
            target = Phase.RUNNING  # the dashboard is open: checked again on the way back
        elif self.phase is Phase.WAITING and self.problem is None and not self.plan.answered:
            target = Phase.WAITING  # the plan decides; a path check or data error may clear by then
        elif self.reason is not None:
            target = Phase.BLOCKED  # a start the user asked for is dropped, with the reason
        elif self.phase is Phase.WAITING:
            target = Phase.STARTING
        else:
            target = Phase.READY if self.plan.result is not None else Phase.CHECKING
        self._move(event, target)

    def _allow(self, event: str) -> None:
        if not self.allows(event):
            raise IllegalTransition(f"{event} is not allowed while {self.phase.value}")

    def _move(self, event: str, target: Phase) -> None:
        if target not in TRANSITIONS[self.phase][event]:
            where = f"from {self.phase.value} to {target.value}"
            raise IllegalTransition(f"{event} cannot lead {where}")
        self.phase = target


# Phases in which the screen is shown and checks run.
_LIVE = frozenset({Phase.CHECKING, Phase.READY, Phase.BLOCKED, Phase.WAITING})
