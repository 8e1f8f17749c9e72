"""The event protocol: the only contract between the trainer and the dashboard (docs/architecture.md lists every event).

Events travel as one compact JSON object per line in `RUN/events.jsonl`:
`{"v": 1, "seq": 17, "t": 1763790000.123, "type": "step", ...}`. Every type is a pydantic model below,
named `<Name>Event`; `AnyEvent` is their discriminated union on `type`. Commands for the control socket
(`{"cmd": "pause", "id": "..."}`) and their replies are defined here too.

Wire rules, decided once for every reader and writer:
- Numbers are JSON numbers, never preformatted strings; a string in a number field is rejected.
- JSON has no NaN or infinity. A non-finite float is written as `null`. Reading it back, `null` in an
  optional number field gives None, and in a required number field (`Real`) gives NaN, so a line the
  trainer wrote always parses back. Fields that are non-finite in practice (losses, grad norm, loss
  scale, validation loss) are optional; "null" there means "no finite value".
- Readers are forward compatible: unknown fields are kept (models allow extra fields) and unknown event
  types come back as `UnknownEvent`, never as an error.
- `trainer-core schema` prints `event_json_schema()`: one JSON Schema document whose root validates an
  event line as this version writes it, with `$defs` holding every event model plus `Envelope` (what any
  line, even from a newer trainer, has), `Command` and `CommandReply`.

Torch-free: the dashboard imports this module. Only stdlib and pydantic.
"""

from __future__ import annotations

import json
import math
import operator
import os
import time
from functools import cache
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
)

PROTOCOL_VERSION = 1

# Envelope keys every line carries; parse_event rejects a line missing any of them.
ENVELOPE_FIELDS = ("v", "seq", "t", "type")


class ProtocolError(ValueError):
    """A line or command is not valid protocol: not JSON, not an object, or a known type with bad fields."""


# ---------------------------------------------------------------------------------------------------------------
# Field types: numbers that stay numbers


def _reject_text(value: Any) -> None:
    # A preformatted "0.123" must fail loudly: charts cannot plot strings.
    if isinstance(value, (str, bytes, bool)):
        raise ValueError(f"expected a number, got {type(value).__name__} {value!r}")


def _as_real(value: Any) -> Any:
    """Accept ints, floats and numeric scalars (numpy, torch); null on the wire means non-finite -> NaN."""
    if value is None:
        return math.nan
    _reject_text(value)
    if not isinstance(value, (int, float)) and hasattr(value, "__float__"):
        return float(value)
    return value


def _as_count(value: Any) -> Any:
    """Accept ints and integer scalars (numpy, torch); pydantic then rejects fractional floats."""
    _reject_text(value)
    if not isinstance(value, (int, float)) and hasattr(value, "__index__"):
        return operator.index(value)
    return value


def _as_number(value: Any) -> Any:
    _reject_text(value)
    return value


def _as_path_text(value: Any) -> Any:
    # Emitters naturally hold pathlib.Path objects; the wire carries plain strings.
    return os.fspath(value) if isinstance(value, os.PathLike) else value


_REAL_SCHEMA = {
    "anyOf": [{"type": "number"}, {"type": "null"}],
    "description": "a number; null stands for a non-finite value (NaN or infinity)",
}

Real = Annotated[float, BeforeValidator(_as_real), WithJsonSchema(_REAL_SCHEMA)]
Count = Annotated[int, BeforeValidator(_as_count)]
PathText = Annotated[str, BeforeValidator(_as_path_text)]
Timestamp = Annotated[float, BeforeValidator(_as_number)]


# ---------------------------------------------------------------------------------------------------------------
# Envelope and helpers


class Event(BaseModel):
    """The envelope shared by every event. Extra fields are kept so that newer trainers never fail a reader."""

    model_config = ConfigDict(extra="allow")

    v: Count = Field(default=PROTOCOL_VERSION, ge=1, description="protocol version of the writer")
    seq: Count = Field(default=0, ge=0, description="line number in the log, from 0, one per line: a jump is a gap")
    t: Timestamp = Field(default_factory=time.time, description="unix time the event was written")
    type: str = Field(description="event type: the discriminator")


class UnknownEvent(Event):
    """An event type this reader does not know (a newer trainer); every field is kept as an extra."""


class GpuInfo(BaseModel):
    """One accelerator as seen at start-up; readings NVML cannot give are None."""

    model_config = ConfigDict(extra="allow")

    index: Count
    name: str
    memory_total_bytes: Count | None = None
    memory_free_bytes: Count | None = None
    utilization_pct: Real | None = None
    temperature_c: Real | None = None
    power_w: Real | None = None


class DataProblem(BaseModel):
    """A data file that was skipped, and why."""

    model_config = ConfigDict(extra="allow")

    path: PathText
    reason: str


# ---------------------------------------------------------------------------------------------------------------
# Start-up: who is running, on what, with which data


class HelloEvent(Event):
    """First line of every run: versions, process and the profile it runs."""

    type: Literal["hello"] = "hello"
    trainer_version: str
    pid: Count
    host: str
    profile_hash: str
    run_dir: PathText
    argv: list[str] = Field(default_factory=list)
    python: str
    torch: str | None = None
    world_size: Count = 1
    rank: Count = 0
    backend: str | None = Field(
        default=None, description="torch.distributed backend under torchrun (gloo, nccl), else null"
    )
    profile_path: PathText | None = None
    resumed: bool = False


class ResourcesEvent(Event):
    """The machine at start-up: CPU, RAM and every accelerator."""

    type: Literal["resources"] = "resources"
    cpu_cores: Count | None
    ram_total_bytes: Count
    ram_available_bytes: Count
    gpus: list[GpuInfo] = Field(default_factory=list)


class DeviceSelectedEvent(Event):
    """The compute device chosen for the compute mode, and why (fallback: mixed mode ended on the CPU)."""

    type: Literal["device_selected"] = "device_selected"
    mode: str
    device: str
    reason: str
    fallback: bool = False
    precision: str | None = None


class DataScanEvent(Event):
    """What the data folder holds: the resolved data mode, usable and skipped items, problems."""

    type: Literal["data_scan"] = "data_scan"
    data_mode: str
    reason: str
    usable: Count
    skipped: Count
    total_hours: Real | None = None
    problems: list[DataProblem] = Field(default_factory=list)


class PreloadProgressEvent(Event):
    type: Literal["preload_progress"] = "preload_progress"
    done: Count
    total: Count
    bytes: Count = 0
    stage: str


class PreloadDoneEvent(Event):
    """Features are ready: how many, how long it took, and whether they live in RAM or a disk cache."""

    type: Literal["preload_done"] = "preload_done"
    items: Count
    seconds: Real
    where: Literal["ram", "disk"]
    bytes: Count
    reason: str = ""


class CalibrationEvent(Event):
    """Measured throughput and the epoch plan that fits the time budget."""

    type: Literal["calibration"] = "calibration"
    samples_per_s: Real
    planned_epochs: Count
    planned_steps: Count
    target_hours: Real | None = None


# ---------------------------------------------------------------------------------------------------------------
# Training progress


class EpochStartEvent(Event):
    type: Literal["epoch_start"] = "epoch_start"
    epoch: Count
    steps_in_epoch: Count | None = None


class EpochEndEvent(Event):
    type: Literal["epoch_end"] = "epoch_end"
    epoch: Count
    loss: Real | None
    seconds: Real


class StepEvent(Event):
    """Training progress, coalesced: values of the last step in the window, `steps_in_window` steps covered."""

    type: Literal["step"] = "step"
    step: Count
    epoch: Count
    loss: Real | None
    losses: dict[str, Real] = Field(default_factory=dict, description="named parts of the loss")
    lr: Real
    grad_norm: Real | None = None
    loss_scale: Real | None = None
    samples_per_s: Real
    data_wait_frac: Real = Field(description="fraction of wall time spent waiting for data, 0..1")
    micro_batch: Count
    grad_accum: Count = 1
    mem_device_bytes: Count | None = None
    mem_host_bytes: Count | None = None
    eta_s: Real | None = None
    steps_in_window: Count = 1
    step_series: list[Count] = Field(default_factory=list, description="every step number in the window")
    loss_series: list[Real | None] = Field(default_factory=list, description="total loss of each step in the window")
    lr_series: list[Real] = Field(default_factory=list, description="learning rate of each step in the window")
    world_size: Count = Field(default=1, description="training processes (DDP ranks); samples_per_s counts all of them")
    rank_samples_per_s: list[Real] = Field(
        default_factory=list, description="DDP: each rank's own samples/s over the window, in rank order"
    )
    rank_data_wait_frac: list[Real] = Field(
        default_factory=list, description="DDP: each rank's fraction of step time spent waiting for data"
    )


class ProfileBreakdownEvent(Event):
    """Seconds spent per phase over the last `steps` steps."""

    type: Literal["profile_breakdown"] = "profile_breakdown"
    data_s: Real
    transfer_s: Real
    forward_s: Real
    backward_s: Real
    optimizer_s: Real
    steps: Count


class MemoryEvent(Event):
    """Memory pressure changed level; `action` says what the trainer did about it ("none" when nothing)."""

    type: Literal["memory"] = "memory"
    level: MemoryLevel
    used_frac: Real
    action: str = "none"


class OomRecoveredEvent(Event):
    """An out-of-memory error was survived by halving the micro-batch and doubling accumulation."""

    type: Literal["oom_recovered"] = "oom_recovered"
    step: Count
    micro_batch: Count
    grad_accum: Count
    message: str = ""


class NonfiniteEvent(Event):
    """A non-finite loss or gradient skipped a step; `action` says what followed (e.g. a precision fallback)."""

    type: Literal["nonfinite"] = "nonfinite"
    step: Count
    action: str
    consecutive: Count
    precision: str


class ValidationEvent(Event):
    type: Literal["validation"] = "validation"
    step: Count
    epoch: Count
    loss: Real | None
    losses: dict[str, Real] = Field(default_factory=dict)
    metric_name: str | None = Field(default=None, description="an extra metric, e.g. bits_per_byte")
    metric_value: Real | None = None
    metrics: dict[str, Real] = Field(default_factory=dict, description="all task metrics, e.g. bits_per_byte")


class CheckpointSavedEvent(Event):
    type: Literal["checkpoint_saved"] = "checkpoint_saved"
    step: Count
    epoch: Count
    path: PathText
    bytes: Count
    val_loss: Real | None = None
    seconds: Real


class BestModelEvent(Event):
    type: Literal["best_model"] = "best_model"
    step: Count
    path: PathText
    val_loss: Real | None


class SampleEvent(Event):
    """An audio or text sample written during evaluation; `text` is the prompt or the generated text."""

    type: Literal["sample"] = "sample"
    step: Count
    kind: Literal["audio", "text"]
    path: PathText
    text: str | None = None


# ---------------------------------------------------------------------------------------------------------------
# Messages, control and the end of a run


class LogEvent(Event):
    type: Literal["log"] = "log"
    level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    message: str


class CommandAckEvent(Event):
    """Every control command is answered in the log too, so every attached viewer sees it."""

    type: Literal["command_ack"] = "command_ack"
    cmd: str
    id: str | None = None
    ok: bool
    detail: str | None = None


class PausedEvent(Event):
    type: Literal["paused"] = "paused"
    step: Count


class ResumedEvent(Event):
    type: Literal["resumed"] = "resumed"
    step: Count


class WarningEvent(Event):
    type: Literal["warning"] = "warning"
    message: str
    code: str | None = Field(default=None, description="stable machine-readable name, e.g. cpu_fallback")


class ErrorEvent(Event):
    type: Literal["error"] = "error"
    message: str
    traceback: str | None = None


FinishedStatus = Literal["completed", "stopped", "failed"]
MemoryLevel = Literal["low", "moderate", "high", "critical"]


class FinishedEvent(Event):
    """Last line of a run that ended by itself; a log without it belongs to a crashed trainer."""

    type: Literal["finished"] = "finished"
    status: FinishedStatus
    step: Count
    epoch: Count
    seconds: Real
    summary: dict[str, Any] = Field(default_factory=dict, description="final metrics and timings")


# Every event model, in the order a run usually emits them.
EVENT_MODELS: tuple[type[Event], ...] = (
    HelloEvent,
    ResourcesEvent,
    DeviceSelectedEvent,
    DataScanEvent,
    PreloadProgressEvent,
    PreloadDoneEvent,
    CalibrationEvent,
    EpochStartEvent,
    EpochEndEvent,
    StepEvent,
    ProfileBreakdownEvent,
    MemoryEvent,
    OomRecoveredEvent,
    NonfiniteEvent,
    ValidationEvent,
    CheckpointSavedEvent,
    BestModelEvent,
    SampleEvent,
    LogEvent,
    CommandAckEvent,
    PausedEvent,
    ResumedEvent,
    WarningEvent,
    ErrorEvent,
    FinishedEvent,
)

# `type` string -> model, for dispatch without going through the union.
EVENT_TYPES: dict[str, type[Event]] = {model.model_fields["type"].default: model for model in EVENT_MODELS}

# Built from EVENT_MODELS so that adding an event type means adding it in one place.
AnyEvent = Annotated[Union[EVENT_MODELS], Field(discriminator="type")]  # type: ignore[valid-type]  # noqa: UP007 - built from a tuple, no | spelling


@cache
def _event_adapter() -> TypeAdapter[Any]:
    # Built on first use: the union's validator costs a few milliseconds that a bare import should not pay.
    return TypeAdapter(AnyEvent)


# ---------------------------------------------------------------------------------------------------------------
# Reading and writing event lines


def parse_event(obj: str | bytes | bytearray | dict[str, Any]) -> Event:
    """One event from a JSON line or a decoded object.

    Known types give their typed model, unknown types an `UnknownEvent` holding every field. Raises
    ProtocolError for anything that is not an event: not JSON, not an object, a missing or invalid
    envelope (`v`, `seq`, `t`, `type`), or a known type with invalid fields.
    """
    if isinstance(obj, (str, bytes, bytearray)):
        try:
            # Fast path: pydantic parses and dispatches in one go; errors and unknown types go the slow way.
            event = _event_adapter().validate_json(obj)
        except ValidationError:
            event = _validate_object(_load_json_object(obj))
    elif isinstance(obj, dict):
        event = _validate_object(obj)
    else:
        raise ProtocolError(f"an event must be a JSON object, got {type(obj).__name__}")
    _check_envelope(event)
    return event


def _load_json_object(text: str | bytes | bytearray) -> dict[str, Any]:
    try:
        obj = json.loads(text)
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"not UTF-8 text ({exc.reason}): {_snippet(text)}") from None
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON ({exc.msg} at column {exc.colno}): {_snippet(text)}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"expected a JSON object, got {type(obj).__name__}: {_snippet(text)}")
    return obj


def _validate_object(obj: dict[str, Any]) -> Event:
    kind = obj.get("type")
    if not isinstance(kind, str) or not kind:
        raise ProtocolError(f"missing or invalid 'type' (got {kind!r}); every event names its type")
    model = EVENT_TYPES.get(kind, UnknownEvent)
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise ProtocolError(f"invalid {kind!r} event: {describe_validation_error(exc)}") from None


def _check_envelope(event: Event) -> None:
    missing = [name for name in ENVELOPE_FIELDS if name not in event.model_fields_set]
    if missing:
        raise ProtocolError(f"{event.type!r} event lacks envelope field(s) {', '.join(missing)}")


def describe_validation_error(exc: ValidationError, limit: int = 5) -> str:
    """A short one-line account of pydantic errors: `field: message; ...`."""
    parts = []
    for error in exc.errors()[:limit]:
        where = ".".join(str(part) for part in error["loc"]) or "(object)"
        parts.append(f"{where}: {error['msg']}")
    if exc.error_count() > limit:
        parts.append(f"and {exc.error_count() - limit} more")
    return "; ".join(parts)


def _snippet(text: str | bytes | bytearray, limit: int = 80) -> str:
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    return repr(text[:limit] + ("…" if len(text) > limit else ""))


def event_to_json(event: Event) -> str:
    """One compact line (no newline) for an event. Non-finite floats become null (see the module docstring);
    numeric scalars in free-form fields (numpy, torch) become numbers, other odd objects their str()."""
    return event.model_dump_json(fallback=_json_fallback)


def _json_fallback(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "__index__"):
        return operator.index(value)
    if hasattr(value, "__float__"):
        return _finite_or_none(float(value))
    return str(value)


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------------------------------------------------------
# Control commands: `{"cmd": "pause", "id": "<optional client id>"}` one per line, answered by CommandReply


class CommandBase(BaseModel):
    """Fields every command has. Unknown fields are ignored so that newer clients still work."""

    model_config = ConfigDict(extra="ignore")

    id: str | None = Field(default=None, description="client id, echoed in the reply and the command_ack event")


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


COMMAND_MODELS: tuple[type[CommandBase], ...] = (
    PauseCommand,
    ResumeCommand,
    SaveCommand,
    EvaluateCommand,
    StopCommand,
)
COMMAND_NAMES: tuple[str, ...] = tuple(model.model_fields["cmd"].default for model in COMMAND_MODELS)
_COMMAND_TYPES: dict[str, type[CommandBase]] = dict(zip(COMMAND_NAMES, COMMAND_MODELS, strict=True))

Command = Annotated[
    PauseCommand | ResumeCommand | SaveCommand | EvaluateCommand | StopCommand,
    Field(discriminator="cmd"),
]


class CommandReply(BaseModel):
    """The trainer's answer on the socket: ok, or an error saying what was wrong with the request."""

    model_config = ConfigDict(extra="allow")

    ok: bool
    cmd: str | None = None
    id: str | None = None
    error: str | None = None


def parse_command(obj: str | bytes | bytearray | dict[str, Any]) -> Command:
    """One command from a request line or a decoded object; ProtocolError says what is wrong and what to send."""
    if isinstance(obj, (str, bytes, bytearray)):
        obj = _load_json_object(obj)
    if not isinstance(obj, dict):
        raise ProtocolError(f'a command must be a JSON object like {{"cmd": "pause"}}, got {type(obj).__name__}')
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


# ---------------------------------------------------------------------------------------------------------------
# JSON Schema export (`trainer-core schema`)

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def event_json_schema() -> dict[str, Any]:
    """The protocol as one JSON Schema document.

    The root validates one event line as this version writes it (a `oneOf` over the event models, with
    an OpenAPI-style `discriminator` hint on `type`). `$defs` holds every model, plus `Envelope` (the
    fields any line has, whatever its type: what a forward-compatible reader may rely on), `Command`
    (a request on the control socket) and `CommandReply`. Refer to them as `#/$defs/Command` etc.
    """
    events = _event_adapter().json_schema()
    commands = TypeAdapter(Command).json_schema()
    reply = CommandReply.model_json_schema()
    defs: dict[str, Any] = {**events.pop("$defs"), **commands.pop("$defs"), **reply.pop("$defs", {})}
    for model in EVENT_MODELS:
        _require_envelope(defs[model.__name__])
    defs["Envelope"] = _require_envelope(Event.model_json_schema() | {"title": "Envelope"})
    defs["Command"] = commands
    defs["CommandReply"] = reply
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "Vega trainer event protocol",
        "description": (
            f"Protocol version {PROTOCOL_VERSION}: one JSON object per line in RUN/events.jsonl. Readers must "
            "ignore unknown event types and unknown fields. Non-finite floats are written as null."
        ),
        "x-protocol-version": PROTOCOL_VERSION,
        **events,
        "$defs": defs,
    }


def _require_envelope(schema: dict[str, Any]) -> dict[str, Any]:
    # Defaults make the envelope optional when building a model in Python, but every written line has it.
    required = list(schema.get("required", []))
    schema["required"] = [name for name in ENVELOPE_FIELDS if name not in required] + required
    return schema
