"""Live machine resources: per-GPU utilisation, memory and temperature; CPU; RAM.

`read_resources()` calls `trainer_core.contract.resources.probe()` (NVML + psutil, never torch) and
is meant for a worker thread every couple of seconds; the widgets only render the
`MachineResources` they are handed. `ResourcesPanel` is the detailed tab, `ResourceLine` the
one-line summary shown on roomy terminals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from trainer_core.contract.units import format_bytes

if TYPE_CHECKING:
    from trainer_core.contract.nvml import GpuInfo
    from trainer_core.contract.resources import MachineResources

PROBE_INTERVAL_S = 2.0
BAR_WIDTH = 20


def read_resources() -> MachineResources:
    """One probe of the machine (blocking: NVML and psutil). Imported lazily
    to keep start-up fast."""
    from trainer_core.contract.resources import probe

    return probe()


def meter(fraction: float | None, width: int = BAR_WIDTH) -> Text:
    """`[██████░░░░]` coloured green/yellow/red by load; blank when unknown."""
    if fraction is None:
        return Text("[" + " " * width + "]", style="dim")
    fraction = min(1.0, max(0.0, fraction))
    filled = round(fraction * width)
    color = "green" if fraction < 0.6 else "yellow" if fraction < 0.85 else "red"
    text = Text("[")
    text.append("█" * filled, style=color)
    text.append("░" * (width - filled), style="dim")
    text.append("]")
    return text


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}%"


def gpu_memory_fraction(gpu: GpuInfo) -> float | None:
    return gpu.memory_used_bytes / gpu.memory_total_bytes if gpu.memory_total_bytes else None


def ram_used(res: MachineResources) -> int:
    return max(0, res.ram_total_bytes - res.ram_available_bytes)


def resources_table(res: MachineResources) -> Table:
    """The detailed view: one row per GPU, then CPU and RAM."""
    table = Table(box=None, expand=False, pad_edge=False, show_header=True, header_style="bold")
    for column in ("device", "load", "", "memory", "", "temp"):
        table.add_column(column)
    for gpu in res.gpus:
        memory = f"{format_bytes(gpu.memory_used_bytes)} / {format_bytes(gpu.memory_total_bytes)}"
        temperature = "—" if gpu.temperature_c is None else f"{gpu.temperature_c:.0f}°C"
        util = None if gpu.utilization_pct is None else gpu.utilization_pct / 100
        table.add_row(
            gpu.label,
            meter(util, 10),
            _pct(gpu.utilization_pct),
            memory,
            meter(gpu_memory_fraction(gpu), 10),
            temperature,
        )
    cpu = None if res.cpu_percent is None else res.cpu_percent / 100
    table.add_row(
        f"CPU ({res.cpu_logical} threads)", meter(cpu, 10), _pct(res.cpu_percent), "", "", ""
    )
    ram = f"{format_bytes(ram_used(res))} / {format_bytes(res.ram_total_bytes)}"
    ram_fraction = ram_used(res) / res.ram_total_bytes if res.ram_total_bytes else None
    table.add_row("RAM", "", "", ram, meter(ram_fraction, 10), "")
    return table


def resources_summary(res: MachineResources) -> Text:
    """One line: `GPU0 87% 12.3/80.0 GiB 65°C · CPU 23% · RAM 5.1/23.5 GiB`."""
    parts = []
    for gpu in res.gpus:
        temperature = "" if gpu.temperature_c is None else f" {gpu.temperature_c:.0f}°C"
        memory = f"{gpu.memory_used_bytes / 1024**3:.1f}/{gpu.memory_total_gib:.1f} GiB"
        parts.append(f"GPU{gpu.index} {_pct(gpu.utilization_pct)} {memory}{temperature}")
    parts.append(f"CPU {_pct(res.cpu_percent)}")
    parts.append(f"RAM {ram_used(res) / 1024**3:.1f}/{res.ram_total_bytes / 1024**3:.1f} GiB")
    return Text(" · ".join(parts), no_wrap=True, overflow="ellipsis")


class ResourcesPanel(Static):
    """The Resources tab."""

    DEFAULT_CSS = """
    ResourcesPanel { height: 1fr; padding: 0 1; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.resources: MachineResources | None = None  # the latest probe shown

    def show(
        self, res: MachineResources | None, error: str | None = None, live: bool = True
    ) -> None:
        self.resources = res
        if not live:
            self.update(Text("live resources are off for this view", style="dim"))
            return
        if res is None:
            self.update(
                Text(
                    f"cannot read resources: {error}" if error else "reading resources…",
                    style="dim",
                )
            )
            return
        body = Text(
            f"{res.accelerator_note}\nrefreshed every {PROBE_INTERVAL_S:g} s\n", style="dim"
        )
        self.update(Group(body, resources_table(res)))


class ResourceLine(Static):
    """One-line resources summary (shown only on roomy terminals, see run.tcss)."""

    DEFAULT_CSS = """
    ResourceLine { height: 1; padding: 0 1; color: $text-muted; }
    """

    def show(self, res: MachineResources | None, live: bool = True) -> None:
        if not live or res is None:
            self.update(Text("resources: —" if live else "", style="dim"), layout=False)
            return
        self.update(resources_summary(res), layout=False)  # one row always: no layout pass needed
