"""Events of a run's start: who runs, on what, with which data, and what the
model was built from."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trainer_core.contract.event_envelope import Event
from trainer_core.contract.protocol_fields import Count, PathText, Real


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


# --------------------------------------------------------------------------------------------------
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
    """The compute device chosen for the compute mode, and why (fallback:
    mixed mode ended on the CPU)."""

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
    speakers: dict[str, Count] = Field(
        default_factory=dict,
        description="usable clips per speaker (multi-speaker voice data; empty for one)",
    )


class PreloadProgressEvent(Event):
    type: Literal["preload_progress"] = "preload_progress"
    done: Count
    total: Count
    bytes: Count = 0
    stage: str


class PreloadDoneEvent(Event):
    """Features are ready: how many, how long it took, and whether they live
    in RAM or a disk cache."""

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


# --------------------------------------------------------------------------------------------------
# Training progress


class MappedRows(BaseModel):
    """A table whose rows moved by what they stand for (symbols, speakers):
    `kept` of its `rows` came along."""

    model_config = ConfigDict(extra="allow")

    name: str
    kept: Count
    rows: Count
    by: str = Field(description="what the rows stand for: symbol or speaker")


class InitFromEvent(Event):
    """The run started from a trained model (train.init_from), once at start:
    what came from it and what not."""

    type: Literal["init_from"] = "init_from"
    source: PathText = Field(description="what train.init_from named")
    path: PathText = Field(description="the checkpoint or export read")
    form: Literal["export", "checkpoint", "piper", "hf"]
    kind: str
    step: Count | None = None
    loaded: Count = Field(description="tensors copied (name and shape matched)")
    mapped: list[MappedRows] = Field(default_factory=list)
    skipped: Count = Field(description="source tensors not used: absent here or another shape")
    new: Count = Field(description="tensors only this model has: fresh initialisation")
    loaded_names: list[str] = Field(default_factory=list, description="the first few of each list")
    skipped_names: list[str] = Field(default_factory=list)
    new_names: list[str] = Field(default_factory=list)
    own: list[str] = Field(
        default_factory=list, description="this run's own values kept, e.g. its mel statistics"
    )


class TaskEvent(Event):
    """Once per start, when the task is built: which task trains and whose code it is."""

    type: Literal["task"] = "task"
    name: str = Field(
        description='a built-in kind ("tts", "lm", "vocoder", "vits") or "package.module:factory"'
    )
    module: str | None = Field(default=None, description="model.task's module")
    file: PathText | None = Field(
        default=None, description="the file model.task's module was loaded from"
    )
    external: bool = Field(
        default=False, description="the code comes from outside Vega (allowed by the machine file)"
    )
    speaks: bool = Field(
        default=False, description="the model turns text into speech (scored free-running)"
    )
    parameters: Count | None = None
