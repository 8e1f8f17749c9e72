"""The launch screen's "processes per node" list: `--nproc-per-node` for the
run, from this machine's GPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vega_tui.widgets.choice_list import ChoiceList
from vega_tui.widgets.mode_picker import process_choices

if TYPE_CHECKING:
    from trainer_core.contract.resources import MachineResources


class ProcessList(ChoiceList):
    """1..N processes (N: the GPUs torch can drive), or gloo ranks on the
    CPU where there is no usable GPU."""

    def on_mount(self) -> None:
        self.set_choices(process_choices(None, "mixed"), "1")

    def show(self, resources: MachineResources | None, mode: str, device: str, wanted: int) -> int:
        """Offer what this machine, compute mode and device allow; the count
        kept (1 when `wanted` is not)."""
        self.set_choices(process_choices(resources, mode, device), str(wanted))
        return self.count

    @property
    def count(self) -> int:
        return int(self.value or "1")
