"""The base of the CLI's JSON documents (plan, check-data, resources) and how a reader parses one.

Each command builds a `ReportModel` and prints `to_json()`; the dashboard parses the text back with
`read_report`, which turns a document that does not fit the model into a `ReportError` naming the
command and the fields. Unknown keys are refused: a renamed key fails here, not as a "?" on screen.
"""

from __future__ import annotations

import json
from typing import ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from trainer_core.contract.errors import VegaError

# Fields named in a ReportError; the rest are counted.
SHOWN_PROBLEMS = 3


class ReportError(VegaError):
    """A command's JSON document does not match the model this dashboard reads it with."""


class ReportModel(BaseModel):
    """A part of a command's JSON document: every key declared, none unknown."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    command: ClassVar[str] = ""
    """A whole document's command line, named in errors; "" for a part of one."""

    def to_json(self) -> str:
        """The document as the command prints it; keys the writer left unset stay out."""
        # ASCII-escaped, as before the models: transcripts and paths survive any stdout encoding.
        return json.dumps(self.model_dump(mode="json", exclude_unset=True), indent=2)


Report = TypeVar("Report", bound=ReportModel)


def read_report(model: type[Report], text: str | bytes, command: str | None = None) -> Report:
    """`text` parsed into `model`; ReportError names the command (`model.command` unless given)
    and the fields that do not fit."""
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        raise ReportError(f"`{command or model.command}` {describe_mismatch(model, exc)}") from None


def describe_mismatch(model: type[ReportModel], exc: ValidationError) -> str:
    """'printed a document that does not fit PlanReport: data.usable: Field required; …'."""
    errors = exc.errors(include_url=False)
    parts = []
    for error in errors[:SHOWN_PROBLEMS]:
        where = ".".join(str(part) for part in error["loc"]) or "(the document)"
        parts.append(f"{where}: {error['msg']}")
    more = f"; and {len(errors) - SHOWN_PROBLEMS} more" if len(errors) > SHOWN_PROBLEMS else ""
    return (
        f"printed a document that does not fit {model.__name__}: {'; '.join(parts)}{more} "
        "(are the trainer and the dashboard from the same Vega install?)"
    )
