"""`trainer-core train --dry-run --json` as a typed document: the plan the dashboard previews.

`trainer_core.plan.TrainPlan.to_report()` builds it; the preflight reads it with
`read_report(PlanReport, text, ...)` and formats attributes. Optional parts the trainer writes only
for some runs (a vocoder's or a VITS voice's shape, what a start model maps) default to None.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from trainer_core.contract.data_report import ProblemEntry, SpeakerFigures
from trainer_core.contract.report_model import ReportModel


class PlanDevice(ReportModel):
    """The device the compute mode picked, and why; `fallback`: the CPU, for want of a GPU."""

    mode: str
    device: str
    kind: Literal["cuda", "mps", "cpu"]
    reason: str
    fallback: bool


class PlanData(ReportModel):
    """The data folder as scanned for training (`trainer-core check-data` has every figure)."""

    path: str
    mode: Literal["voice", "text"]
    reason: str
    usable: int
    skipped: int
    hours: float
    problems: list[ProblemEntry]
    speaker_mode: str
    speakers: dict[str, SpeakerFigures]


class SizeShape(ReportModel):
    hidden: int
    layers: int
    heads: int


class SizeCandidate(ReportModel):
    """One shape `model.size = "auto"` measured on this machine."""

    shape: SizeShape
    parameters: int
    step_s: float
    tokens: float
    useful_tokens: float
    tokens_per_parameter: float


class ModelSize(ReportModel):
    """`model.size = "auto"`: why this size; a resumed run has only the reason."""

    reason: str
    chosen: SizeShape | None = None
    lr: float | None = None
    candidates: list[SizeCandidate] | None = None


class VocoderShape(ReportModel):
    """A GAN vocoder's generator and discriminators."""

    channels: int
    blocks: int
    segment_frames: int
    discriminator_channels: int
    periods: list[int]
    resolutions: int


class VitsShape(ReportModel):
    """A VITS voice: its Piper quality level, sizes and a training memory estimate."""

    quality: str
    hidden_channels: int
    layers: int
    resblock: str
    upsample_rates: list[int]
    duration_predictor: str
    generator_parameters: int
    discriminator_parameters: int
    segment_size: int
    segment_frames: int
    memory_estimate_bytes: int


class PlanModel(ReportModel):
    """The model kind and the transformer's shape; `vocoder` / `vits` only for those kinds."""

    kind: str
    hidden: int
    layers: int
    heads: int
    size: ModelSize | None
    task: str | None
    vocoder: VocoderShape | None = None
    vits: VitsShape | None = None


class Preload(ReportModel):
    """Where the features live while training (RAM or the disk cache), and why."""

    estimated_bytes: int
    available_bytes: int
    where: str
    reason: str


class Schedule(ReportModel):
    """Batching and length; `warmup_effective` is None until a time budget's calibration."""

    batch_size: int
    grad_accum: int
    steps_per_epoch: int
    epochs: int
    max_steps: int | None
    target_hours: float | None
    warmup_steps: int
    warmup_effective: int | None


class ValidationEstimate(ReportModel):
    """Validation items (after the cap) and the estimated share of wall time spent on them."""

    items: int
    capped: int
    max_items: int
    every_steps: int | None
    interval_items: int
    estimated_share: float
    item_size: float
    estimate: str


class SymbolMapping(ReportModel):
    """VITS: how a start model's symbol map and speakers cover this corpus."""

    symbols_seen: int
    symbols_known: int
    symbols_new: list[str]
    symbols_new_count: int
    transcripts_sampled: int
    source_speakers: int
    corpus_speakers: int
    speakers_known: list[str]
    text: str
    dropped: dict[str, int] | None = None


class InitFrom(ReportModel):
    """`train.init_from`: what the run starts from, or (`applied` false) why it is not applied."""

    given: str
    applied: bool
    text: str
    path: str | None = None
    form: str | None = None
    kind: str | None = None
    step: int | None = None
    settings: list[str] | None = None
    mapping: SymbolMapping | None = None


class TaskInfo(ReportModel):
    """`model.task`: the module the run imports, its file and the pattern that allows it."""

    spec: str
    module: str
    factory: str
    file: str | None
    external: bool
    allowed_by: str | None
    text: str


class NodesInfo(ReportModel):
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int


class LaunchInfo(ReportModel):
    """`--nproc-per-node N` on this machine, before torchrun starts."""

    nproc_per_node: int
    device_kind: str
    requested: int
    nodes: NodesInfo | None = None


class RankInfo(ReportModel):
    """This process's place under torchrun."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


class PlanReport(ReportModel):
    """What `trainer-core train --dry-run --json` prints."""

    command: ClassVar[str] = "trainer-core train --dry-run --json"

    profile: str
    overrides: list[str]
    run_dir: str
    resume: str | None
    device: PlanDevice
    data: PlanData
    model: PlanModel
    preload: Preload
    schedule: Schedule
    validation: ValidationEstimate | None
    init_from: InitFrom | None
    task: TaskInfo | None
    distributed: LaunchInfo | RankInfo | None
    notes: list[str]
