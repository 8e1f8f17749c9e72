"""`trainer-core resources --json` as a typed document: the machine and each compute mode's device.

`resources_report()` builds it from a probe (`trainer_core.contract.resources`); readers parse it
with `read_report(ResourcesReport, text, ...)`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from trainer_core.contract.report_model import ReportModel
from trainer_core.contract.resources import DeviceChoice, GpuInfo, MachineResources


class CpuFigures(ReportModel):
    """Logical and physical cores; `percent` is None on a first reading."""

    logical: int
    physical: int | None
    percent: float | None


class RamFigures(ReportModel):
    total_bytes: int
    available_bytes: int


class GpuEntry(ReportModel):
    """One CUDA device; `compute_capability` as "8.6"; `torch_usable` None: torch not asked."""

    index: int
    name: str
    uuid: str | None
    memory_total_bytes: int
    memory_free_bytes: int
    memory_used_bytes: int
    utilization_pct: float | None
    temperature_c: float | None
    power_w: float | None
    compute_capability: str | None
    torch_usable: bool | None


class Accelerator(ReportModel):
    found: bool
    note: str


class ModeChoice(ReportModel):
    """The device a compute mode picks here, and why."""

    mode: str
    device: str
    kind: Literal["cuda", "mps", "cpu"]
    reason: str
    fallback: bool
    gpu: GpuEntry | None
    warnings: list[str]


class ModeRefused(ReportModel):
    """Why a compute mode cannot run on this machine."""

    error: str


class ResourcesReport(ReportModel):
    """What `trainer-core resources --json` prints; `selected` only with --mode / --device."""

    command: ClassVar[str] = "trainer-core resources --json"

    cpu: CpuFigures
    ram: RamFigures
    gpus: list[GpuEntry]
    mps_available: bool
    accelerator: Accelerator
    modes: dict[str, ModeChoice | ModeRefused]
    selected: ModeChoice | ModeRefused | None = None


def gpu_entry(gpu: GpuInfo) -> GpuEntry:
    return GpuEntry.model_validate(gpu.to_dict())


def mode_choice(choice: DeviceChoice | str) -> ModeChoice | ModeRefused:
    """A device choice, or the reason (a string) the mode was refused."""
    if isinstance(choice, str):
        return ModeRefused(error=choice)
    return ModeChoice(
        mode=choice.mode,
        device=choice.device,
        kind=choice.kind,
        reason=choice.reason,
        fallback=choice.fallback,
        gpu=gpu_entry(choice.gpu) if choice.gpu is not None else None,
        warnings=list(choice.warnings),
    )


def resources_report(
    resources: MachineResources,
    modes: dict[str, DeviceChoice | str],
    selected: DeviceChoice | str | None = None,
) -> ResourcesReport:
    """The document for a probe, each mode's choice, and the one --mode / --device asked about."""
    r = resources
    report = ResourcesReport(
        cpu=CpuFigures(logical=r.cpu_logical, physical=r.cpu_physical, percent=r.cpu_percent),
        ram=RamFigures(total_bytes=r.ram_total_bytes, available_bytes=r.ram_available_bytes),
        gpus=[gpu_entry(gpu) for gpu in r.gpus],
        mps_available=r.mps_available,
        accelerator=Accelerator(found=r.has_accelerator, note=r.accelerator_note),
        modes={mode: mode_choice(choice) for mode, choice in modes.items()},
    )
    # Set only when asked: `to_json` leaves an unset `selected` out, as the command always has.
    if selected is None:
        return report
    return report.model_copy(update={"selected": mode_choice(selected)})
