"""Messages the launch screen's background threads post to it.

The machine probe, the profile scan and watcher, `trainer-core check-data` and the dry run never
touch a widget: each posts one of these and a handler of `vega_tui.screens.launch.LaunchScreen`
applies it on the app thread. `DataChecked` and `PlanReady` carry the generation they answer, so a
late, outdated answer is dropped (`vega_tui.screens.launch_state.Check`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from textual.message import Message

if TYPE_CHECKING:
    from trainer_core.contract.data_report import CheckDataReport
    from trainer_core.contract.plan_report import PlanReport
    from trainer_core.contract.report_model import ReportModel
    from trainer_core.contract.resources import MachineResources
    from vega_tui.widgets.choice_list import Choice
    from vega_tui.widgets.profile_list import ProfileEntry

# A check's document; its model is imported where the answer is parsed, off the first frame.
Result = TypeVar("Result", bound="ReportModel")

# How a background job hands the screen a message: its thread-safe `post_message`.
Post = Callable[[Message], Any]


class ResourcesProbed(Message):
    def __init__(self, resources: MachineResources | None, error: str | None) -> None:
        super().__init__()
        self.resources, self.error = resources, error


class ProfilesScanned(Message):
    def __init__(self, entries: list[ProfileEntry]) -> None:
        super().__init__()
        self.entries = entries


class ProfilesChanged(Message):
    """A profile file (or the machine file) changed on disk."""


class BackgroundProblem(Message):
    """Something a background thread could not do; shown as a warning, the screen keeps working."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class CheckAnswered(Message, Generic[Result]):
    """A `trainer-core` JSON command's document (`result`) or its failure (`error`), for one
    generation. Each subclass names the model its command's document is parsed into (`model`)."""

    def __init__(self, generation: int, result: Result | None, error: str | None) -> None:
        super().__init__()
        self.generation, self.result, self.error = generation, result, error

    @classmethod
    def model(cls) -> type[Result]:
        raise NotImplementedError(f"{cls.__name__} names no document model")


class DataChecked(CheckAnswered["CheckDataReport"]):
    """`trainer-core check-data --json` answered: its report."""

    @classmethod
    def model(cls) -> type[CheckDataReport]:
        from trainer_core.contract.data_report import CheckDataReport

        return CheckDataReport


class PlanReady(CheckAnswered["PlanReport"]):
    """`trainer-core train --dry-run --json` answered: the plan."""

    @classmethod
    def model(cls) -> type[PlanReport]:
        from trainer_core.contract.plan_report import PlanReport

        return PlanReport


class StartPointsScanned(Message):
    """The "Start from" choices for `key` (runs folder, model kind): scratch
    and the models found there."""

    def __init__(self, key: tuple[str, str | None], choices: list[Choice]) -> None:
        super().__init__()
        self.key, self.choices = key, choices
