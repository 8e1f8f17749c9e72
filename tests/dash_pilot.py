"""The run dashboard under Textual's pilot: the app attached to one run, and waits and readers for tests."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from trainer_core.contract.eventlog import read_all
from trainer_core.contract.nvml import GpuInfo
from trainer_core.contract.protocol import Event
from trainer_core.contract.resources import MachineResources
from vega_tui import app as vega_app
from vega_tui import runner
from vega_tui.app import VegaApp
from vega_tui.screens.run import RunScreen
from vega_tui.widgets.charts import CHART_BUILDERS, ChartData, ChartGrid, RunChart
from vega_tui.widgets.checkpoints import CheckpointPanel
from vega_tui.widgets.logs import LogPane
from vega_tui.widgets.status import StatusLine

FIXTURES = Path(__file__).parent / "fixtures" / "events"
# Generous: trainers and other tests share two cores. Never a timed assertion, only an upper bound.
WAIT_S = 60.0
GIB = 1024**3
STATUS_OF_FINISHED = {"completed": "FINISHED", "stopped": "STOPPED", "failed": "FAILED"}


def fixed_resources() -> MachineResources:
    """A fixed machine for layouts that must render the same everywhere (one GPU, 16 threads, 64 GiB)."""
    gpu = GpuInfo(
        index=0,
        name="NVIDIA H100 80GB HBM3",
        memory_total_bytes=80 * GIB,
        memory_free_bytes=60 * GIB,
        memory_used_bytes=20 * GIB,
        utilization_pct=87.0,
        temperature_c=64.0,
    )
    return MachineResources(
        cpu_logical=16,
        cpu_physical=8,
        cpu_percent=37.0,
        ram_total_bytes=64 * GIB,
        ram_available_bytes=40 * GIB,
        gpus=[gpu],
        mps_available=False,
        accelerator_note="1 NVIDIA GPU",
    )


class DashApp(VegaApp):
    """The real app shell attached to one run; it records notifications so tests can read them."""

    CSS_PATH = str(Path(vega_app.__file__).with_name("app.tcss"))  # relative paths resolve from the subclass

    def __init__(
        self,
        run_dir: Path,
        process: runner.TrainerProcess | None = None,
        probe: Callable[[], MachineResources] | None = fixed_resources,
    ) -> None:
        super().__init__(start="attach", run_dir=run_dir)
        self.process, self.probe = process, probe
        self.messages: list[str] = []

    def open_run(self, run_dir: Path, process: runner.TrainerProcess | None = None) -> None:
        self.push_screen(RunScreen(run_dir, process or self.process, read_resources=self.probe))

    def notify(self, message: str, **kwargs: Any) -> None:
        self.messages.append(str(message))
        super().notify(message, **kwargs)


def copy_fixture(name: str, tmp_path: Path) -> Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    return target


def run_screen(pilot: Pilot) -> RunScreen:
    screen = pilot.app.screen
    assert isinstance(screen, RunScreen), f"expected the run dashboard, got {screen!r}"
    return screen


async def wait_until(pilot: Pilot, predicate: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(0.05)
    detail = ""
    if isinstance(pilot.app.screen, RunScreen):
        state = pilot.app.screen.state
        screen = pilot.app.screen
        files = screen.query_one(CheckpointPanel).files is not None
        detail = (
            f"; status {state.status}, step {state.step}, trainer alive {screen.trainer_alive}, files scanned "
            f"{files}, last logs {[line.message for line in list(state.logs)[-3:]]}"
        )
    pytest.fail(f"timed out after {timeout:g} s waiting for {what}{detail}")


def current_chart_data(screen: RunScreen, chart: RunChart) -> ChartData:
    """What `chart` shows once it caught up with the store (read at its width, as the grid reads it)."""
    builder, grid, columns = CHART_BUILDERS[chart.build_name], screen.query_one(ChartGrid), chart.size.width
    if chart.build_name == "loss":
        return builder(screen.state, grid.log_y, columns)
    return builder(screen.state, columns=columns)


async def settled(pilot: Pilot) -> RunScreen:
    """The whole log applied, the trainer checked, files scanned and the visible charts drawn."""
    screen = run_screen(pilot)
    panel = screen.query_one(CheckpointPanel)
    await wait_until(
        pilot,
        lambda: screen.follower is not None and screen.follower.wait_caught_up(0) and screen.state.version > 0,
        "the event log to be read",
    )
    await wait_until(
        pilot,
        lambda: (
            screen.trainer_alive is False
            and panel.files is not None
            and screen.state.status in ("finished", "stopped", "failed", "crashed")
        ),
        "a settled run",
    )
    loss = screen.query_one(ChartGrid).chart("loss")

    def charts() -> list[RunChart]:  # asked again each time: a vocoder run swaps the validation chart in
        return [chart for chart in screen.query(RunChart) if chart.region.area > 0]

    await wait_until(pilot, lambda: all(c.data is not None for c in charts()) and loss.data.points > 0, "charts")
    # Secondary charts redraw at most once a second: wait until every visible chart shows the whole store.
    await wait_until(pilot, lambda: all(c.data == current_chart_data(screen, c) for c in charts()), "charts up to date")
    await pilot.pause(0.3)
    return screen


def events_of(run_dir: Path, kind: str) -> list[Event]:
    return [event for event in read_all(run_dir / "events.jsonl") if event.type == kind]


def status_text(screen: RunScreen) -> str:
    return screen.query_one(StatusLine).content.plain


def plain(widget: Any) -> str:
    content = widget.content
    return content.plain if hasattr(content, "plain") else str(content)


def log_view_text(screen: RunScreen) -> str:
    return screen.query_one(LogPane).view.plain_text()


# ------------------------------------------------------------------------------------------------ recorded runs
