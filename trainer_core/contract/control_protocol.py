"""The control wire: commands a client sends on a run's socket, and the trainer's replies.

One JSON object per line each way (`{"cmd": "pause", "id": "<optional client id>"}`); the socket
itself is in `contract.control_client` (client) and `engine.control_server` (server).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
)

from trainer_core.contract.event_lines import describe_validation_error, load_json_object
from trainer_core.contract.protocol import ProtocolError

# --------------------------------------------------------------------------------------------------
# Control commands: `{"cmd": "pause", "id": "<optional client id>"}` one per
# line, answered by CommandReply


class CommandBase(BaseModel):
    """Fields every command has. Unknown fields are ignored so that newer clients still work."""

    model_config = ConfigDict(extra="ignore")

    id: str | None = Field(
        default=None, description="client id, echoed in the reply and the command_ack event"
    )


class PauseCommand(CommandBase):
    cmd: Literal["pause"] = "pause"


class ResumeCommand(CommandBase):
    cmd: Literal["resume"] = "resume"


class SaveCommand(CommandBase):
    """Write a checkpoint now."""

    cmd: Literal["save"] = "save"


class EvaluateCommand(CommandBase):
    """Run validation and write samples now."""

    cmd: Literal["evaluate"] = "evaluate"


class StopCommand(CommandBase):
    """Save a checkpoint, then exit."""

    cmd: Literal["stop"] = "stop"


COMMAND_MODELS: tuple[type[Command], ...] = (
    PauseCommand,
    ResumeCommand,
    SaveCommand,
    EvaluateCommand,
    StopCommand,
)
COMMAND_NAMES: tuple[str, ...] = tuple(
    model.model_fields["cmd"].default for model in COMMAND_MODELS
)
_COMMAND_TYPES: dict[str, type[Command]] = dict(zip(COMMAND_NAMES, COMMAND_MODELS, strict=True))

Command = Annotated[
    PauseCommand | ResumeCommand | SaveCommand | EvaluateCommand | StopCommand,
    Field(discriminator="cmd"),
]


class CommandReply(BaseModel):
    """The trainer's answer on the socket: ok, or an error saying what was
    wrong with the request."""

    model_config = ConfigDict(extra="allow")

    ok: bool
    cmd: str | None = None
    id: str | None = None
    error: str | None = None


def parse_command(obj: str | bytes | bytearray | dict[str, Any]) -> Command:
    """One command from a request line or a decoded object; ProtocolError says
    what is wrong and what to send."""
    if isinstance(obj, (str, bytes, bytearray)):
        obj = load_json_object(obj)
    if not isinstance(obj, dict):
        raise ProtocolError(
            f'a command must be a JSON object like {{"cmd": "pause"}}, got {type(obj).__name__}'
        )
    name = obj.get("cmd")
    choices = ", ".join(COMMAND_NAMES)
    if name is None:
        raise ProtocolError(f'missing \'cmd\'; send {{"cmd": "<command>"}} with one of: {choices}')
    model = _COMMAND_TYPES.get(name) if isinstance(name, str) else None
    if model is None:
        raise ProtocolError(f"unknown command {name!r}; expected one of: {choices}")
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise ProtocolError(f"invalid {name!r} command: {describe_validation_error(exc)}") from None


def command_to_json(command: CommandBase | CommandReply) -> str:
    """One compact line (no newline) for a command or a reply."""
    return command.model_dump_json()
