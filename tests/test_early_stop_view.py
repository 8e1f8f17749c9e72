"""Early stopping, visible: a real short run whose patience runs out, its `finished` summary, and what the store
and the run dashboard make of its events (a chart marker, a log line, the status line, the best checkpoint)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from textual.pilot import Pilot

from conftest import TrainerLauncher, TrainerProcess, finished, of_type
from trainer_core.contract.resources import MachineResources
from vega_tui import app as vega_app
from vega_tui.app import VegaApp
from vega_tui.screens.run import RunScreen
from vega_tui.store import RunStore
from vega_tui.widgets.charts import loss_chart, validation_chart
from vega_tui.widgets.checkpoints import CheckpointPanel
from vega_tui.widgets.logs import LogPane
from vega_tui.widgets.status import StatusLine

# A learning rate this high diverges at once, so validation never improves after the first evaluation and the
# patience runs out after two more (the settings tests/test_train_run_folder.py trusts for the same reason).
DIVERGING = {
    "train.max_steps": 200,
    "train.lr": 1.0,
    "train.schedule": "constant",
    "train.warmup_steps": 0,
    "train.grad_clip": 0,
    "train.eval_every_steps": 4,
    "train.early_stopping_patience": 2,
}
WAIT_S = 60.0


@pytest.fixture(scope="module")
def early_run(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> TrainerProcess:
    launcher = TrainerLauncher(tmp_path_factory.mktemp("early"), corpus)
    try:
        run = launcher.run_here("early", DIVERGING)
    finally:
        launcher.close()
    assert run.proc.returncode == 0, run.stderr[-3000:]
    return run


def test_the_finished_summary_says_the_run_stopped_early_and_where_the_best_is(early_run: TrainerProcess) -> None:
    events = early_run.events()
    end = finished(events)
    best_step = of_type(events, "best_model")[-1].step
    assert end.status == "completed" and end.step < 200
    assert end.summary["early_stopped"] is True
    assert end.summary["best_step"] == best_step < end.step
    assert end.summary["best_checkpoint"].endswith(f"step-{best_step:08d}.pt")
    session = json.loads((early_run.run_dir / "session.json").read_text(encoding="utf-8"))
    assert session["summary"]["early_stopped"] is True and session["summary"]["best_step"] == best_step
    log = next(e.message for e in of_type(events, "log") if e.message.startswith("early stopping"))
    assert f"the best checkpoint is step {best_step}" in log


def test_the_store_marks_the_early_stop_and_the_best_checkpoint(early_run: TrainerProcess) -> None:
    events = early_run.events()
    end, best_step = finished(events), of_type(events, "best_model")[-1].step
    store = RunStore(run_dir=early_run.run_dir)
    store.apply(events)
    state = store.state
    assert state.early_stopped_step == end.step and state.best_step == best_step
    assert [(m.kind, m.step) for m in state.markers if m.kind == "early_stop"] == [("early_stop", end.step)]
    assert loss_chart(state).markers["early_stop"] == [end.step]
    assert validation_chart(state).markers == {"best": [best_step], "early_stop": [end.step]}
    expected = f"stopped early at step {end.step}"
    lines = [line.message for line in state.logs if line.message.startswith(expected)]
    assert len(lines) == 1 and lines[0].endswith(f"the best checkpoint is step {best_step}")
    assert [row.step for row in state.checkpoints.values() if row.best] == [best_step]

    # A log that lost its best_model line still marks the best row, from the finished summary.
    without_best = [e for e in events if e.type != "best_model"]
    again = RunStore(run_dir=early_run.run_dir)
    again.apply(without_best)
    assert [row.step for row in again.state.checkpoints.values() if row.best] == [best_step]


class AttachedApp(VegaApp):
    """The real app attached to one finished run, with a fixed machine so nothing probes this one."""

    CSS_PATH = str(Path(vega_app.__file__).with_name("app.tcss"))  # relative paths resolve from the subclass

    def __init__(self, run_dir: Path) -> None:
        super().__init__(start="attach", run_dir=run_dir)

    def open_run(self, run_dir: Path, process=None) -> None:
        machine = MachineResources(
            cpu_logical=2,
            cpu_physical=2,
            cpu_percent=10.0,
            ram_total_bytes=8 * 1024**3,
            ram_available_bytes=4 * 1024**3,
            gpus=[],
            mps_available=False,
            accelerator_note="no accelerator",
        )
        self.push_screen(RunScreen(run_dir, process, read_resources=lambda: machine))


async def _until(pilot: Pilot, check, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():
            return
        await pilot.pause(0.05)
    pytest.fail(f"timed out waiting for {what}")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_dashboard_shows_the_early_stop_and_the_best_checkpoint(early_run: TrainerProcess) -> None:
    events = early_run.events()
    end, best_step = finished(events), of_type(events, "best_model")[-1].step
    async with AttachedApp(early_run.run_dir).run_test(size=(120, 40)) as pilot:
        await _until(pilot, lambda: isinstance(pilot.app.screen, RunScreen), "the run dashboard")
        screen = pilot.app.screen
        assert isinstance(screen, RunScreen)
        await _until(pilot, lambda: screen.state.status == "finished", "the finished run")
        status = screen.query_one(StatusLine)
        await _until(pilot, lambda: "early stop" in status.content.plain, "the status line")
        assert f"FINISHED (early stop, best step {best_step})" in status.content.plain

        await pilot.press("3")
        table = screen.query_one(CheckpointPanel).table
        await _until(pilot, lambda: table.row_count >= 2, "the checkpoints table")
        marked = [key.value for key in table.rows if "★ best" in [str(cell) for cell in table.get_row(key)]]
        assert marked == [str(best_step)]
        assert str(end.step) in [key.value for key in table.rows]

        await pilot.press("2")
        logs = screen.query_one(LogPane)
        await _until(pilot, lambda: f"stopped early at step {end.step}" in logs.view.plain_text(), "the log line")
