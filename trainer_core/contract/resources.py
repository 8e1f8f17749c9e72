"""What this machine offers (CPU, RAM, GPUs, MPS) and which device each compute mode picks.

The dashboard imports this module, so it never imports torch at import time. `probe()` reads
CPU and RAM with psutil and GPUs through a `GpuSource` (NVML by default, see
`trainer_core.contract.nvml`); the trainer passes a `TorchCheck` (`trainer_core.torch_check`,
outside this torch-free wing) to learn what NVML cannot tell: whether the installed torch can drive
the GPUs, and whether MPS works on macOS.

`select_device()` is the compute-mode policy:
  gpu   - an accelerator is required: the CUDA GPU with the most free memory, else MPS, else
        DeviceError.
  cpu   - never an accelerator.
  mixed - the CUDA GPU with the most free memory among those with at least `min_gpu_memory_gb`
          free, else MPS, else CPU with `fallback=True` and a reason saying why.
An explicit device (`cuda:1`, `cuda`, `mps`, `cpu`) overrides the choice after validation.
"""

from __future__ import annotations

import functools
import platform
import re
import sys
from dataclasses import dataclass, field
from typing import Literal, Protocol

import psutil

from trainer_core.contract.errors import DeviceError
from trainer_core.contract.nvml import (
    GpuInfo,
    GpuSource,
    NvmlSource,
    StaticGpuSource,
    default_gpu_source,
)
from trainer_core.contract.units import GIB

__all__ = [
    "MODES",
    "DeviceChoice",
    "GpuInfo",
    "GpuSource",
    "MachineResources",
    "NvmlSource",
    "StaticGpuSource",
    "describe_modes",
    "parse_device",
    "probe",
    "select_device",
]

MODES: tuple[str, ...] = ("gpu", "cpu", "mixed")
DeviceKind = Literal["cuda", "mps", "cpu"]


@dataclass(frozen=True, kw_only=True)
class MachineResources:
    """A snapshot of the machine; `accelerator_note` is one human line about GPUs/MPS.

    `trainer-core resources --json` prints it as `contract.resources_report.ResourcesReport`."""

    cpu_logical: int
    cpu_physical: int | None
    cpu_percent: float | None
    ram_total_bytes: int
    ram_available_bytes: int
    gpus: list[GpuInfo]
    mps_available: bool
    accelerator_note: str
    torch_note: str = ""  # why the installed torch cannot use the GPUs; "" when fine or not checked

    @property
    def has_accelerator(self) -> bool:
        return bool(self.gpus) or self.mps_available


# ---------------------------------------------------------------------------------------------
# Probing


class TorchCheck(Protocol):
    """What only torch can tell about the GPUs; the trainer's
    `trainer_core.torch_check.TORCH` answers it."""

    def usable_gpus(self, gpus: list[GpuInfo]) -> tuple[list[GpuInfo], str]:
        """The GPUs marked usable or not by the installed torch, and a note
        when torch cannot use CUDA."""
        ...

    def mps_available(self) -> bool: ...


def probe(
    source: GpuSource | None = None, torch_check: TorchCheck | None = None
) -> MachineResources:
    """Read CPU, RAM, GPUs and MPS. Cheap without `torch_check` (safe to poll every 2 s)."""
    source = default_gpu_source() if source is None else source
    gpus = source.read()
    torch_note = ""
    # Only real devices can be cross-checked: torch cannot see injected fake GPUs.
    if torch_check is not None and gpus and isinstance(source, NvmlSource):
        gpus, torch_note = torch_check.usable_gpus(gpus)
    mps, mps_verified = _mps_available(torch_check)
    logical, physical = _cpu_counts()
    memory = psutil.virtual_memory()
    return MachineResources(
        cpu_logical=logical,
        cpu_physical=physical,
        cpu_percent=_cpu_percent(),
        ram_total_bytes=int(memory.total),
        ram_available_bytes=int(memory.available),
        gpus=gpus,
        mps_available=mps,
        accelerator_note=_accelerator_note(gpus, source, mps, mps_verified, torch_note),
        torch_note=torch_note,
    )


@functools.cache
def _cpu_counts() -> tuple[int, int | None]:
    return psutil.cpu_count(logical=True) or 1, psutil.cpu_count(logical=False)


_cpu_percent_primed = False


def _cpu_percent() -> float | None:
    """CPU use since the previous call; None on the first call, whose psutil
    value is meaningless."""
    global _cpu_percent_primed
    value = psutil.cpu_percent(interval=None)
    if not _cpu_percent_primed:
        _cpu_percent_primed = True
        return None
    return float(value)


def _mps_available(torch_check: TorchCheck | None) -> tuple[bool, bool]:
    """(available, verified by torch). Only macOS has MPS, so other systems never ask torch."""
    if sys.platform != "darwin":
        return False, True
    if torch_check is None:
        # Without torch, Apple silicon is the best sign we have that MPS will work.
        return platform.machine() == "arm64", False
    return torch_check.mps_available(), True


def _accelerator_note(
    gpus: list[GpuInfo], source: GpuSource, mps: bool, mps_verified: bool, torch_note: str
) -> str:
    if gpus:
        note = f"{len(gpus)} NVIDIA GPU" + ("s" if len(gpus) > 1 else "")
        if isinstance(source, StaticGpuSource):
            note += f" (fake, from {source.origin})"
        return f"{note}; {torch_note}" if torch_note else note
    if mps:
        return "Apple GPU (MPS) available" + (
            "" if mps_verified else " (not yet verified with torch)"
        )
    return source.note or "no NVIDIA GPU found"


# ---------------------------------------------------------------------------------------------
# Device policy


@dataclass(frozen=True, kw_only=True)
class DeviceChoice:
    """Where training runs and why; `warnings` are meant to become warning events."""

    mode: str
    device: str
    kind: DeviceKind
    reason: str
    fallback: bool = False
    gpu: GpuInfo | None = None
    warnings: list[str] = field(default_factory=list)


def parse_device(device: str) -> tuple[DeviceKind, int | None]:
    """`cuda:1` -> ("cuda", 1); `cuda`/`mps`/`cpu` -> (kind, None); anything
    else is a DeviceError."""
    text = device.strip().lower()
    if text in ("cpu", "mps", "cuda"):
        return text, None  # type: ignore[return-value]
    match = re.fullmatch(r"cuda:(\d+)", text)
    if match is None:
        raise DeviceError(
            f"device {device!r} is not understood; use cpu, mps, cuda or cuda:N (for example"
            " cuda:1)"
        )
    return "cuda", int(match.group(1))


def select_device(
    mode: str,
    min_gpu_memory_gb: float = 2.0,
    device: str | None = None,
    resources: MachineResources | None = None,
) -> DeviceChoice:
    """Apply the compute-mode policy to `resources` (the trainer passes
    `torch_check.probe_with_torch()`); without them the machine is probed without torch."""
    if mode not in MODES:
        raise DeviceError(f"compute mode {mode!r} is not one of {', '.join(MODES)}")
    if device is not None:
        kind, index = parse_device(device)
        _check_conflict(mode, device, kind)
        if kind == "cpu":
            reason = f"explicit device cpu (compute mode {mode})"
            return DeviceChoice(mode=mode, device="cpu", kind="cpu", reason=reason)
        return _explicit_accelerator(mode, kind, index, min_gpu_memory_gb, resources or probe())
    if mode == "cpu":
        return _cpu_mode(resources)  # never probes: cpu mode must not touch an accelerator
    resources = resources or probe()
    return (
        _gpu_mode(resources, min_gpu_memory_gb)
        if mode == "gpu"
        else _mixed_mode(resources, min_gpu_memory_gb)
    )


def describe_modes(
    resources: MachineResources, min_gpu_memory_gb: float = 2.0
) -> dict[str, DeviceChoice | str]:
    """What each compute mode would pick on this machine, or the error it would stop with."""
    choices: dict[str, DeviceChoice | str] = {}
    for mode in MODES:
        try:
            choices[mode] = select_device(mode, min_gpu_memory_gb, resources=resources)
        except DeviceError as exc:
            choices[mode] = str(exc)
    return choices


def _check_conflict(mode: str, device: str, kind: DeviceKind) -> None:
    if mode == "cpu" and kind != "cpu":
        raise DeviceError(
            f"--device {device} conflicts with --mode cpu, which never uses an accelerator; "
            "drop --device, or use --mode gpu or --mode mixed"
        )
    if mode == "gpu" and kind == "cpu":
        raise DeviceError(
            "--device cpu conflicts with --mode gpu, which requires an accelerator; use --mode cpu"
            " or --mode mixed"
        )


def _cpu_mode(resources: MachineResources | None) -> DeviceChoice:
    reason = "compute mode cpu: never uses an accelerator"
    if resources is not None and resources.has_accelerator:
        reason += f" (ignoring what was found: {resources.accelerator_note})"
    return DeviceChoice(mode="cpu", device="cpu", kind="cpu", reason=reason)


def _gpu_mode(resources: MachineResources, min_gb: float) -> DeviceChoice:
    usable, excluded = _usable_cuda(resources)
    if usable:
        gpu = _most_free(usable)
        low = (
            [_low_memory(gpu, min_gb) + "; training may run out of memory"]
            if _below(gpu, min_gb)
            else []
        )
        return _cuda_choice(
            "gpu", gpu, f"compute mode gpu: {_why_this_gpu(gpu, usable)}", excluded + low
        )
    if resources.mps_available:
        return _mps_choice(
            "gpu", "compute mode gpu: Apple GPU through MPS (no usable CUDA GPU)", excluded
        )
    found = "; ".join(excluded) if excluded else resources.accelerator_note
    raise DeviceError(
        f"--mode gpu needs a CUDA or MPS device, but none was found: {found}; use --mode mixed or"
        " --mode cpu"
    )


def _mixed_mode(resources: MachineResources, min_gb: float) -> DeviceChoice:
    usable, excluded = _usable_cuda(resources)
    roomy = [gpu for gpu in usable if not _below(gpu, min_gb)]
    if roomy:
        gpu = _most_free(roomy)
        return _cuda_choice(
            "mixed", gpu, f"compute mode mixed: {_why_this_gpu(gpu, roomy)}", excluded
        )
    too_small = [_low_memory(gpu, min_gb) for gpu in sorted(usable, key=lambda g: g.index)]
    if resources.mps_available:
        return _mps_choice(
            "mixed", "compute mode mixed: Apple GPU through MPS", excluded + too_small
        )
    why = "; ".join(excluded + too_small) or f"no GPU: {resources.accelerator_note}"
    reason = f"compute mode mixed: no usable accelerator, falling back to CPU ({why})"
    return DeviceChoice(
        mode="mixed", device="cpu", kind="cpu", reason=reason, fallback=True, warnings=[reason]
    )


def _explicit_accelerator(
    mode: str, kind: DeviceKind, index: int | None, min_gb: float, resources: MachineResources
) -> DeviceChoice:
    if kind == "mps":
        if not resources.mps_available:
            raise DeviceError(
                f"--device mps was requested but MPS is not available: {resources.accelerator_note}"
            )
        return _mps_choice(mode, f"explicit device mps (compute mode {mode})", [])
    gpu = _explicit_gpu(index, resources)
    warns = (
        [_low_memory(gpu, min_gb) + "; using it anyway because --device was given"]
        if _below(gpu, min_gb)
        else []
    )
    reason = (
        f"explicit device {'cuda' if index is None else f'cuda:{index}'}: {gpu.label},"
        f" {_memory(gpu)}"
    )
    return _cuda_choice(mode, gpu, reason, warns)


def _explicit_gpu(index: int | None, resources: MachineResources) -> GpuInfo:
    usable, excluded = _usable_cuda(resources)
    if index is None:
        if not usable:
            found = "; ".join(excluded) if excluded else resources.accelerator_note
            raise DeviceError(
                f"--device cuda was requested but no usable CUDA GPU was found: {found}"
            )
        return _most_free(usable)
    gpu = next((g for g in resources.gpus if g.index == index), None)
    if gpu is None:
        raise DeviceError(
            f"--device cuda:{index} does not exist on this machine; found: {_list_gpus(resources)}"
        )
    if gpu.torch_usable is False:
        raise DeviceError(
            f"--device cuda:{index} cannot be used: {_torch_excluded(gpu, resources)}"
        )
    return gpu


def _usable_cuda(resources: MachineResources) -> tuple[list[GpuInfo], list[str]]:
    """GPUs torch can use (unknown counts as usable), and one sentence per GPU it cannot."""
    usable = [gpu for gpu in resources.gpus if gpu.torch_usable is not False]
    excluded = [
        _torch_excluded(gpu, resources) for gpu in resources.gpus if gpu.torch_usable is False
    ]
    return usable, excluded


def _torch_excluded(gpu: GpuInfo, resources: MachineResources) -> str:
    detail = f" ({resources.torch_note})" if resources.torch_note else ""
    return (
        f"{gpu.label} is visible to the NVIDIA driver but the installed torch cannot use it{detail}"
    )


def _most_free(gpus: list[GpuInfo]) -> GpuInfo:
    """Most free memory wins; ties go to the lowest index."""
    return min(gpus, key=lambda gpu: (-gpu.memory_free_bytes, gpu.index))


def _below(gpu: GpuInfo, min_gb: float) -> bool:
    return gpu.memory_free_bytes < min_gb * GIB


def _why_this_gpu(gpu: GpuInfo, candidates: list[GpuInfo]) -> str:
    if len(candidates) == 1:
        return f"{gpu.label}, the only suitable CUDA GPU, {_memory(gpu)}"
    return (
        f"{gpu.label} has the most free memory of {len(candidates)} suitable GPUs, {_memory(gpu)}"
    )


def _cuda_choice(mode: str, gpu: GpuInfo, reason: str, warns: list[str]) -> DeviceChoice:
    return DeviceChoice(
        mode=mode, device=f"cuda:{gpu.index}", kind="cuda", reason=reason, gpu=gpu, warnings=warns
    )


def _mps_choice(mode: str, reason: str, warns: list[str]) -> DeviceChoice:
    return DeviceChoice(mode=mode, device="mps", kind="mps", reason=reason, warnings=warns)


def _low_memory(gpu: GpuInfo, min_gb: float) -> str:
    return (
        f"{gpu.label} has only {_gib(gpu.memory_free_bytes)} GiB free, below min {min_gb:.1f} GiB"
    )


def _memory(gpu: GpuInfo) -> str:
    return f"{_gib(gpu.memory_free_bytes)} GiB free of {_gib(gpu.memory_total_bytes)} GiB"


def _list_gpus(resources: MachineResources) -> str:
    if not resources.gpus:
        return f"no CUDA GPU ({resources.accelerator_note})"
    return ", ".join(
        f"cuda:{gpu.index} ({gpu.name}, {_gib(gpu.memory_free_bytes)} GiB free)"
        for gpu in resources.gpus
    )


def _gib(n_bytes: int) -> str:
    """1.2 stays `1.2`, 1.96 shows as `1.96`: never round a value onto the threshold it missed."""
    value = round(n_bytes / GIB, 2)
    return f"{value:.1f}" if value == round(value, 1) else f"{value:.2f}"
