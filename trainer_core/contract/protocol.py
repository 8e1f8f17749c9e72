"""The event protocol: the only contract between the trainer and the dashboard
(docs/architecture.md lists every event).

Events travel as one compact JSON object per line in `RUN/events.jsonl`:
`{"v": 1, "seq": 17, "t": 1763790000.123, "type": "step", ...}`. Every type is a pydantic model
below, named `<Name>Event`; `AnyEvent` is their discriminated union on `type`. Commands for the
control socket (`{"cmd": "pause", "id": "..."}`) and their replies are in
`contract.control_protocol`; reading and writing lines is `contract.event_lines`.

Wire rules, decided once for every reader and writer:
- Numbers are JSON numbers, never preformatted strings; a string in a number field is rejected.
- JSON has no NaN or infinity. A non-finite float is written as `null`.
  Reading it back, `null` in an
  optional number field gives None, and in a required number field (`Real`) gives NaN, so a line the
  trainer wrote always parses back. Fields that are non-finite in practice (losses, grad norm, loss
  scale, validation loss) are optional; "null" there means "no finite value".
- Readers are forward compatible: unknown fields are kept (models allow
  extra fields) and unknown event
  types come back as `UnknownEvent`, never as an error.
- `trainer-core schema` prints `event_json_schema()`: one JSON Schema
  document whose root validates an
  event line as this version writes it, with `$defs` holding every event model plus `Envelope` (what
  any line, even from a newer trainer, has), `Command` and `CommandReply`.

Torch-free: the dashboard imports this module. Only stdlib and pydantic.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

# Re-exported: readers import every event name from this module.
from trainer_core.contract.event_envelope import PROTOCOL_VERSION as PROTOCOL_VERSION
from trainer_core.contract.event_envelope import Event as Event
from trainer_core.contract.event_envelope import UnknownEvent as UnknownEvent
from trainer_core.contract.protocol_fields import Count, PathText, Real
from trainer_core.contract.startup_events import CalibrationEvent as CalibrationEvent
from trainer_core.contract.startup_events import DataProblem as DataProblem
from trainer_core.contract.startup_events import DataScanEvent as DataScanEvent
from trainer_core.contract.startup_events import DeviceSelectedEvent as DeviceSelectedEvent
from trainer_core.contract.startup_events import GpuInfo as GpuInfo
from trainer_core.contract.startup_events import HelloEvent as HelloEvent
from trainer_core.contract.startup_events import InitFromEvent as InitFromEvent
from trainer_core.contract.startup_events import MappedRows as MappedRows
from trainer_core.contract.startup_events import PreloadDoneEvent as PreloadDoneEvent
from trainer_core.contract.startup_events import PreloadProgressEvent as PreloadProgressEvent
from trainer_core.contract.startup_events import ResourcesEvent as ResourcesEvent
from trainer_core.contract.startup_events import TaskEvent as TaskEvent

# Envelope keys every line carries; parse_event rejects a line missing any of them.
ENVELOPE_FIELDS = ("v", "seq", "t", "type")


class ProtocolError(ValueError):
    """A line or command is not valid protocol: not JSON, not an object, or
    a known type with bad fields."""


# --------------------------------------------------------------------------------------------------
# Training progress (the envelope is contract.event_envelope; start-up
# events contract.startup_events)


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
    """Training progress, coalesced: values of the last step in the window,
    `steps_in_window` steps covered."""

    type: Literal["step"] = "step"
    step: Count
    epoch: Count
    loss: Real | None
    losses: dict[str, Real] = Field(default_factory=dict, description="named parts of the loss")
    lr: Real
    lrs: dict[str, Real] = Field(
        default_factory=dict,
        description="several optimizers: each group's learning rate ('lr' is the primary's)",
    )
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
    step_series: list[Count] = Field(
        default_factory=list, description="every step number in the window"
    )
    loss_series: list[Real | None] = Field(
        default_factory=list, description="total loss of each step in the window"
    )
    lr_series: list[Real] = Field(
        default_factory=list, description="learning rate of each step in the window"
    )
    world_size: Count = Field(
        default=1, description="training processes (DDP ranks); samples_per_s counts all of them"
    )
    rank_samples_per_s: list[Real] = Field(
        default_factory=list,
        description="DDP: each rank's own samples/s over the window, in rank order",
    )
    rank_data_wait_frac: list[Real] = Field(
        default_factory=list,
        description="DDP: each rank's fraction of step time spent waiting for data",
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
    groups: dict[str, dict[str, Real]] = Field(
        default_factory=dict,
        description="several optimizers: forward_s, backward_s, optimizer_s of each group",
    )


class MemoryEvent(Event):
    """Memory pressure changed level; `action` says what the trainer did
    about it ("none" when nothing).

    `used_frac` is the trainer's memory over its budget (profile [memory]); `decision` is the
    manager's act: release caches, shrink the micro-batch (then `micro_batch`/`grad_accum` are the
    new sizes), or checkpoint and pause."""

    type: Literal["memory"] = "memory"
    level: MemoryLevel
    used_frac: Real
    action: str = "none"
    decision: MemoryDecision | None = None
    step: Count | None = None
    used_bytes: Count | None = None
    budget_bytes: Count | None = None
    micro_batch: Count | None = None
    grad_accum: Count | None = None


class OomRecoveredEvent(Event):
    """An out-of-memory error was survived by halving the micro-batch and doubling accumulation."""

    type: Literal["oom_recovered"] = "oom_recovered"
    step: Count
    micro_batch: Count
    grad_accum: Count
    message: str = ""


class NonfiniteEvent(Event):
    """A non-finite loss or gradient skipped a step; `action` says what
    followed (e.g. a precision fallback)."""

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
    metrics: dict[str, Real] = Field(
        default_factory=dict, description="all task metrics, e.g. bits_per_byte"
    )
    reference: dict[str, Real] = Field(
        default_factory=dict,
        description="the same metrics for a reference to beat (vocoder: Griffin-Lim's)",
    )
    reference_name: str | None = Field(
        default=None, description="what the reference is, e.g. griffin_lim"
    )


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
    selected_by: Literal["val_loss", "free_running"] = "val_loss"
    score: Real | None = Field(
        default=None, description="the figure that made it best (train.select_best_by)"
    )


class FreeRunningItem(BaseModel):
    """One held-out sentence of a free-running evaluation."""

    model_config = ConfigDict(extra="allow")

    item_id: str
    distance: Real
    duration_ratio: Real
    vuv_agreement: Real
    acoustic_distance: Real | None = None
    f0_error_cents: Real | None = None


class FreeRunningEvent(Event):
    """Held-out sentences spoken without teacher forcing, scored against their
    recordings as heard through the vocoder; the floor is the recordings themselves
    re-synthesised through the same vocoder."""

    type: Literal["free_running"] = "free_running"
    step: Count
    items: int
    distance: Real = Field(description="DTW-aligned log-mel L1 per bin, mean over sentences")
    duration_ratio: Real = Field(description="synthesised / recorded length, geometric mean")
    vuv_agreement: Real = Field(
        description="share of aligned frames whose voiced/unvoiced decision agrees"
    )
    acoustic_distance: Real | None = Field(
        default=None, description="the model's mel before the vocoder"
    )
    f0_error_cents: Real | None = Field(
        default=None, description="pitch error on frames voiced on both sides"
    )
    floor_distance: Real
    floor_vuv_agreement: Real
    floor_f0_error_cents: Real | None = None
    vocoder: str = "griffin-lim"
    seconds: Real = 0.0
    per_item: list[FreeRunningItem] = Field(default_factory=list)


class SampleEvent(Event):
    """An audio, text or image sample written during evaluation; `text` is the prompt or the
    generated text, or for an image (a voice's mel or alignment picture, PNG) its caption."""

    type: Literal["sample"] = "sample"
    step: Count
    kind: Literal["audio", "text", "image"]
    path: PathText
    text: str | None = None


# --------------------------------------------------------------------------------------------------
# Messages, control and the end of a run


# What the trainer does between steps (a `phase` event).
Phase = Literal["training", "validating", "sampling", "free_running", "finishing"]


class PhaseEvent(Event):
    """What the trainer is doing between steps, so a viewer need not show an
    ETA of 0 s while it evaluates."""

    type: Literal["phase"] = "phase"
    step: Count
    phase: Phase
    done: Count | None = Field(default=None, description="free_running: sentences scored so far")
    total: Count | None = Field(default=None, description="free_running: sentences in the pass")


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
    reason: str | None = None
    """Why the trainer paused itself (e.g. memory near its budget); None for
    a pause asked for by a client."""


class ResumedEvent(Event):
    type: Literal["resumed"] = "resumed"
    step: Count


class WarningEvent(Event):
    type: Literal["warning"] = "warning"
    message: str
    code: str | None = Field(
        default=None, description="stable machine-readable name, e.g. cpu_fallback"
    )


class OvertrainingEvent(Event):
    """Validation loss rose `evaluations` times in a row while the training loss fell
    (train.overtraining_evals): sent once per episode, which ends when validation reaches a new
    best; names the best checkpoint."""

    type: Literal["overtraining"] = "overtraining"
    step: Count
    evaluations: Count = Field(description="validations in a row whose loss rose")
    val_losses: list[Real] = Field(
        default_factory=list, description="validation losses, from before the rise"
    )
    train_losses: list[Real] = Field(
        default_factory=list, description="mean training loss of each interval"
    )
    best_step: Count | None = Field(
        default=None, description="the best checkpoint's step (best.json)"
    )
    best_path: PathText | None = Field(default=None, description="the best checkpoint's file")
    message: str


class ErrorEvent(Event):
    """A failure, with where in the code it happened; a task's failure (a Task
    method raised, or returned or yielded the wrong thing) names the task's own
    source line and what the engine expected."""

    type: Literal["error"] = "error"
    message: str
    traceback: str | None = None
    code: str | None = Field(
        default=None,
        description=(
            "task_failed (a Task method raised), task_contract (a Task method returned or yielded"
            " the wrong thing), nonfinite_stop (non-finite steps with no safer precision left),"
            " trainer (any other exception)"
        ),
    )
    task_method: str | None = Field(
        default=None, description="the Task method that failed, or 'building the task'"
    )
    file: str | None = Field(
        default=None, description="source file: the task's code where it is in the traceback"
    )
    line: Count | None = Field(default=None, description="line in `file`")
    function: str | None = Field(default=None, description="function at that line")
    expected: str | None = Field(
        default=None, description="what the engine expected (task_contract failures)"
    )


FinishedStatus = Literal["completed", "stopped", "failed"]
MemoryLevel = Literal["low", "moderate", "high", "critical"]
MemoryDecision = Literal["none", "release", "shrink", "pause"]


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
    InitFromEvent,
    TaskEvent,
    EpochStartEvent,
    EpochEndEvent,
    StepEvent,
    ProfileBreakdownEvent,
    MemoryEvent,
    OomRecoveredEvent,
    NonfiniteEvent,
    ValidationEvent,
    FreeRunningEvent,
    CheckpointSavedEvent,
    BestModelEvent,
    SampleEvent,
    PhaseEvent,
    LogEvent,
    CommandAckEvent,
    PausedEvent,
    ResumedEvent,
    WarningEvent,
    OvertrainingEvent,
    ErrorEvent,
    FinishedEvent,
)

# `type` string -> model, for dispatch without going through the union.
EVENT_TYPES: dict[str, type[Event]] = {
    model.model_fields["type"].default: model for model in EVENT_MODELS
}

# Built from EVENT_MODELS so that adding an event type means adding it in one place.
AnyEvent = Annotated[Union[EVENT_MODELS], Field(discriminator="type")]  # type: ignore[valid-type]  # noqa: UP007 - built from a tuple, no | spelling


@cache
def event_adapter() -> TypeAdapter[Event]:
    # Built on first use: the union's validator costs a few milliseconds that
    # a bare import should not pay.
    return TypeAdapter(AnyEvent)
