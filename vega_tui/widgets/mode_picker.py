"""Choices for the launch screen's compute mode, device and data mode lists.

Plain functions from `trainer_core.contract.resources` results to `Choice` rows, so that
what the list says a mode would pick is exactly the trainer's own policy
(`describe_modes`), evaluated on this machine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from vega_tui.widgets.choice_list import Choice

if TYPE_CHECKING:
    from trainer_core.contract.resources import DeviceChoice, GpuInfo, MachineResources

COMPUTE_MODES = ("gpu", "cpu", "mixed")
DATA_MODES = ("voice", "text", "auto")
AUTO_DEVICE = "auto"

_DATA_MODE_DETAIL = {
    "voice": "audio + transcripts",
    "text": "text files",
    "auto": "detect",
}


def compute_mode_choices(
    modes: Mapping[str, DeviceChoice | str] | None, note: str = ""
) -> list[Choice]:
    """One row per compute mode: what it would pick and why, or disabled
    with the reason it cannot run.

    `modes` None means the machine has not been read yet (or could not be):
    every mode stays choosable.
    """
    if modes is None:
        return [Choice(mode, mode, note or "reading this machine…") for mode in COMPUTE_MODES]
    return [_mode_choice(mode, modes[mode]) for mode in COMPUTE_MODES]


def _mode_choice(mode: str, picked: DeviceChoice | str) -> Choice:
    if isinstance(picked, str):
        # The trainer's message ends with CLI advice ("use --mode mixed ..."); here
        # the other rows are that advice.
        why = re.sub(r";\s*use --mode .*$", "", picked)
        why = why.replace(
            "--mode gpu needs a CUDA or MPS device, but none was found: ", "no CUDA or MPS device: "
        )
        return Choice(mode, mode, f"unavailable: {why}", disabled=True)
    style = "bold yellow" if picked.fallback else "bold"
    return Choice(mode, mode, f"-> {picked.device}: {short_reason(picked)}", style=style)


def short_reason(picked: DeviceChoice) -> str:
    """The policy's reason, cut to what one list row needs (the row already
    names the mode and device)."""
    if picked.kind == "cuda" and picked.gpu is not None:
        return f"{picked.gpu.name}, {picked.gpu.memory_free_gib:.1f} GiB free"
    reason = re.sub(r"^compute mode \w+:\s*", "", picked.reason)
    reason = re.sub(r"\s*\(ignoring what was found: .*\)$", "", reason)
    return reason.replace(", falling back to CPU", "")


def device_choices(resources: MachineResources | None, mode: str) -> list[Choice]:
    """auto, each GPU with its name and free memory, MPS when present, and CPU; rows
    the mode forbids are disabled."""
    rows = [Choice(AUTO_DEVICE, AUTO_DEVICE, "let the compute mode choose")]
    if resources is not None:
        rows += [_gpu_choice(gpu, mode) for gpu in resources.gpus]
        if resources.mps_available:
            rows.append(_accelerator_row("mps", "Apple GPU (Metal)", mode))
    cpu_blocked = mode == "gpu"
    rows.append(
        Choice(
            "cpu",
            "cpu",
            "gpu mode needs an accelerator" if cpu_blocked else "processor only",
            cpu_blocked,
        )
    )
    return rows


def _gpu_choice(gpu: GpuInfo, mode: str) -> Choice:
    memory = f"{gpu.memory_free_gib:.1f} of {gpu.memory_total_gib:.1f} GiB free"
    value = f"cuda:{gpu.index}"
    if gpu.torch_usable is False:
        return Choice(value, value, f"{gpu.name}: the installed torch cannot use it", disabled=True)
    return _accelerator_row(value, f"{gpu.name} · {memory}", mode)


def _accelerator_row(value: str, detail: str, mode: str) -> Choice:
    if mode == "cpu":
        return Choice(value, value, f"{detail} (cpu mode never uses it)", disabled=True)
    return Choice(value, value, detail)


def data_mode_choices() -> list[Choice]:
    return [Choice(mode, mode, _DATA_MODE_DETAIL[mode]) for mode in DATA_MODES]


# Processes per node on a machine without usable GPUs: gloo ranks on the CPU,
# for trying multi-process runs.
CPU_PROCESS_COUNTS = (2, 4)


def process_choices(
    resources: MachineResources | None, mode: str, device: str = AUTO_DEVICE
) -> list[Choice]:
    """Processes per node (`--nproc-per-node`): 1..N with N the GPUs torch can
    drive, else gloo ranks on the CPU."""
    rows = [Choice("1", "1", "one process")]
    if resources is None:
        return rows
    gpus = [gpu for gpu in resources.gpus if gpu.torch_usable is not False]
    if gpus and mode != "cpu" and device != "cpu":
        # Every rank takes cuda:LOCAL_RANK, so one chosen GPU and several
        # processes cannot go together.
        one_device = device not in (AUTO_DEVICE, "")
        why = "a chosen device runs one process: pick device auto" if one_device else ""
        for count in range(2, len(gpus) + 1):
            rows.append(
                Choice(
                    str(count), str(count), why or f"one per GPU, {count} GPUs (NCCL)", one_device
                )
            )
        return rows
    blocked = "gpu mode needs an accelerator" if mode == "gpu" else ""
    for count in CPU_PROCESS_COUNTS:
        detail = blocked or f"{count} CPU processes (gloo), for trying it"
        rows.append(Choice(str(count), str(count), detail, bool(blocked)))
    return rows
