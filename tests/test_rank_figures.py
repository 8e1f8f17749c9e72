"""Multi-process runs on the dashboard: per-rank figures from step events, and the launch choices that start them.

The store keeps each rank's samples/s and data wait from the latest step event (rank 0 gathers them at the
step boundary: `rank_samples_per_s`, `rank_data_wait_frac`), the status line names each rank's rate and the
slowest one, and the launch screen offers processes per node from this machine's GPUs (gloo on the CPU).
"""

from __future__ import annotations

from pathlib import Path

from trainer_core.contract.event_lines import parse_event
from trainer_core.contract.nvml import GpuInfo
from trainer_core.contract.resources import MachineResources
from vega_tui.runner import train_argv
from vega_tui.store import RunStore
from vega_tui.widgets.mode_picker import process_choices
from vega_tui.widgets.status import rank_text, status_second_line

GIB = 1024**3


def step(step: int, **fields: object):
    base = {
        "v": 1,
        "seq": step,
        "t": 1000.0 + step,
        "type": "step",
        "step": step,
        "epoch": 0,
        "loss": 2.0,
        "lr": 1e-3,
        "samples_per_s": 24.0,
        "data_wait_frac": 0.1,
        "micro_batch": 4,
        "step_series": [step],
        "loss_series": [2.0],
        "lr_series": [1e-3],
    }
    return parse_event({**base, **fields})


def machine(gpus: int, usable: bool | None = None) -> MachineResources:
    sizes = {"memory_total_bytes": 24 * GIB, "memory_free_bytes": 20 * GIB, "memory_used_bytes": 4 * GIB}
    infos = [GpuInfo(index=i, name=f"NVIDIA Test {i}", torch_usable=usable, **sizes) for i in range(gpus)]
    return MachineResources(
        cpu_logical=8,
        cpu_physical=4,
        cpu_percent=None,
        ram_total_bytes=32 * GIB,
        ram_available_bytes=16 * GIB,
        gpus=infos,
        mps_available=False,
        accelerator_note=f"{gpus} GPU(s)",
    )


def test_store_keeps_each_ranks_figures_from_the_latest_step() -> None:
    store = RunStore(run_dir=Path("run"))
    store.apply([step(1, world_size=2, rank_samples_per_s=[12.5, 11.5], rank_data_wait_frac=[0.1, 0.3])])
    store.apply([step(2, world_size=2, rank_samples_per_s=[12.0, 13.0], rank_data_wait_frac=[0.2, 0.0])])
    state = store.state
    assert state.rank_samples_per_s == [12.0, 13.0] and state.rank_data_wait_frac == [0.2, 0.0]
    assert rank_text(state) == "ranks 0 12.0/s · 1 13.0/s, slowest 0"
    assert "ranks 0 12.0/s · 1 13.0/s, slowest 0" in status_second_line(state).plain


def test_single_process_run_shows_the_world_size_not_ranks() -> None:
    store = RunStore(run_dir=Path("run"))
    store.apply([step(1)])
    assert store.state.rank_samples_per_s == [] and rank_text(store.state) is None
    assert "world 1" in status_second_line(store.state).plain


def test_process_choices_follow_gpus_mode_and_device() -> None:
    def rows(resources: MachineResources | None, mode: str, device: str = "auto") -> dict[str, bool]:
        return {c.value: c.disabled for c in process_choices(resources, mode, device)}

    assert rows(None, "mixed") == {"1": False}  # the machine is still being read
    assert rows(machine(0), "mixed") == {"1": False, "2": False, "4": False}  # gloo on the CPU
    assert rows(machine(0), "gpu") == {"1": False, "2": True, "4": True}
    assert rows(machine(3), "gpu") == {"1": False, "2": False, "3": False}  # one per GPU
    assert rows(machine(3), "cpu") == {"1": False, "2": False, "4": False}
    assert rows(machine(2), "mixed", "cuda:1") == {"1": False, "2": True}  # one chosen GPU: one process
    assert rows(machine(2, usable=False), "mixed") == {"1": False, "2": False, "4": False}
    gloo = process_choices(machine(0), "mixed")[1]
    assert "gloo" in gloo.detail and "CPU" in gloo.detail


def test_runner_asks_for_torchrun_only_for_several_processes() -> None:
    one = train_argv("p.toml", run_dir="r", nproc=1)
    assert "--nproc-per-node" not in one
    two = train_argv("p.toml", run_dir="r", nproc=2)
    assert two[two.index("--nproc-per-node") + 1] == "2"
