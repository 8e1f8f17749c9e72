"""`trainer-core resources`: CPU, RAM, GPUs and MPS on this machine, and
what each compute mode would pick.

`--mode` / `--device` also check one choice: the report is printed either way, and the command
exits 2 with the reason when that choice cannot be satisfied, so scripts can ask "can this box do
--mode gpu?". `VEGA_FAKE_GPUS` (a JSON list of GPU dicts) replaces NVML: a testing hook only.
"""

from __future__ import annotations

import argparse
from typing import Any

from trainer_core.cli.commands import SUMMARIES
from trainer_core.contract.errors import DeviceError
from trainer_core.contract.resources import (
    MODES,
    DeviceChoice,
    GpuInfo,
    MachineResources,
    describe_modes,
    probe,
    select_device,
)
from trainer_core.contract.resources_report import resources_report
from trainer_core.contract.units import GIB, format_bytes
from trainer_core.torch_check import TORCH


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "resources",
        help=SUMMARIES["resources"],
        description=(
            "Show this machine's CPU, RAM, GPUs (NVML) and MPS, and the device each compute mode"
            " would pick."
        ),
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document instead of tables"
    )
    parser.add_argument(
        "--compute-mode",
        "--mode",
        dest="compute_mode",
        choices=MODES,
        help=(
            "check this compute mode: exit 2 if it cannot be satisfied; --mode is the older"
            " spelling"
        ),
    )
    parser.add_argument(
        "--device", help="check an explicit device (cpu, mps, cuda, cuda:N) under --mode"
    )
    parser.add_argument(
        "--min-gpu-memory-gb",
        type=_non_negative_float,
        default=2.0,
        metavar="X",
        help="mixed mode ignores GPUs with less free memory than this (GiB, default 2.0)",
    )
    parser.add_argument(
        "--no-torch",
        action="store_true",
        help="do not import torch to check that it can use the GPUs NVML found (faster)",
    )
    parser.set_defaults(handler=run)


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of GiB, got {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    resources = probe(torch_check=None if args.no_torch else TORCH)
    modes = describe_modes(resources, args.min_gpu_memory_gb)
    selected: DeviceChoice | DeviceError | None = None
    if args.compute_mode is not None or args.device is not None:
        try:
            selected = select_device(
                args.compute_mode or "mixed", args.min_gpu_memory_gb, args.device, resources
            )
        except DeviceError as exc:
            selected = exc
    if args.json:
        refused = str(selected) if isinstance(selected, DeviceError) else selected
        print(resources_report(resources, modes, refused).to_json())
    else:
        _print_tables(resources, modes, selected, args.min_gpu_memory_gb)
    if isinstance(selected, DeviceError):
        raise selected  # the CLI prints `error: …` and exits 2, after the report
    return 0


def _print_tables(
    resources: MachineResources,
    modes: dict[str, DeviceChoice | str],
    selected: DeviceChoice | DeviceError | None,
    min_gb: float,
) -> None:
    from rich.console import Console  # only the table view needs Rich

    console = Console()
    console.print(_machine_table(resources))
    if resources.gpus:
        console.print(_gpu_table(resources.gpus))
    console.print(_modes_table(modes, min_gb))
    if isinstance(selected, DeviceChoice):
        _print_selected(console, selected)


def _print_selected(console: Any, choice: DeviceChoice) -> None:
    from rich.text import Text

    console.print(Text.assemble("selected: ", (choice.device, "bold"), f" - {choice.reason}"))
    for warning in (w for w in choice.warnings if w != choice.reason):
        console.print(Text(f"warning: {warning}", style="yellow"))


def _machine_table(resources: MachineResources) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="Machine", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("CPU", Text(_cpu_text(resources)))
    ram = (
        f"{format_bytes(resources.ram_total_bytes)} total,"
        f" {format_bytes(resources.ram_available_bytes)} available"
    )
    table.add_row("RAM", Text(ram))
    table.add_row("NVIDIA GPUs", Text(str(len(resources.gpus))))
    table.add_row("Apple MPS", Text("available" if resources.mps_available else "not available"))
    table.add_row("Accelerator", Text(resources.accelerator_note))
    return table


def _cpu_text(resources: MachineResources) -> str:
    physical = f" ({resources.cpu_physical} physical)" if resources.cpu_physical else ""
    busy = f", {resources.cpu_percent:.0f} % busy" if resources.cpu_percent is not None else ""
    return f"{resources.cpu_logical} logical cores{physical}{busy}"


def _gpu_table(gpus: list[GpuInfo]) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="GPUs", title_justify="left")
    for column in ("device", "name", "free / total", "util", "temp", "power", "cc", "torch"):
        table.add_column(column, no_wrap=column != "name", overflow="fold")
    for gpu in gpus:
        cells = [
            f"cuda:{gpu.index}",
            gpu.name,
            f"{gpu.memory_free_bytes / GIB:.1f} / {format_bytes(gpu.memory_total_bytes)}",
            _optional(gpu.utilization_pct, "{:.0f} %"),
            _optional(gpu.temperature_c, "{:.0f} °C"),
            _optional(gpu.power_w, "{:.0f} W"),
            "{}.{}".format(*gpu.compute_capability) if gpu.compute_capability else "-",
            {True: "usable", False: "unusable", None: "unchecked"}[gpu.torch_usable],
        ]
        table.add_row(*(Text(cell) for cell in cells))
    return table


def _modes_table(modes: dict[str, DeviceChoice | str], min_gb: float) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"Compute modes (min GPU memory {min_gb:g} GiB)", title_justify="left")
    for column in ("mode", "device", "why"):
        table.add_column(column)
    for mode, choice in modes.items():
        if isinstance(choice, DeviceChoice):
            device = choice.device + (" (fallback)" if choice.fallback else "")
            why = Text(choice.reason)
            for warning in (w for w in choice.warnings if w != choice.reason):
                why.append(f"\nwarning: {warning}", style="yellow")
            table.add_row(Text(mode), Text(device), why)
        else:
            table.add_row(Text(mode), Text("unavailable", style="red"), Text(choice, style="red"))
    return table


def _optional(value: float | None, template: str) -> str:
    return "-" if value is None else template.format(value)
