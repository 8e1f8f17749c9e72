"""The run dashboard with a live tiny trainer under it (started with `vega_tui.runner.TrainerProcess.spawn`):
the controls end to end (pause, resume, save, evaluate, quit-cancel, stop, resume from a checkpoint, detach and
reattach, a trainer killed under the dashboard) and vocoder runs on small and roomy terminals.
"""

from __future__ import annotations

import json
import os
import signal
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from dash_pilot import (
    WAIT_S,
    DashApp,
    copy_fixture,
    current_chart_data,
    events_of,
    log_view_text,
    plain,
    run_screen,
    settled,
    status_text,
    wait_until,
)
from trainer_core.tiny_profiles import tiny_profile
from vega_tui import runner
from vega_tui.chart_specs import CHARTS, chart_spec
from vega_tui.screens.run import RunScreen
from vega_tui.widgets.breakdown import BreakdownBar
from vega_tui.widgets.charts import ChartGrid
from vega_tui.widgets.checkpoints import CheckpointPanel
from vega_tui.widgets.status import ProblemBanner

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


TINY_PROFILE = tiny_profile(
    "lm",
    run={"name": "live", "seed": None},
    model={"dropout": None},
    train={"max_steps": 100000, "eval_every_steps": 100000, "checkpoint_every_epochs": 100000, "lr": None},
    sample={"max_new_bytes": 8},
    logging={"step_interval_s": 0.1},
)


@pytest.fixture
def live_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny profile and corpus; no machine file, no inherited fault injection, one thread per trainer."""
    for key in [key for key in os.environ if key.startswith("VEGA_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("VEGA_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    words = ["a", "quiet", "fox", "reads", "the", "old", "book", "by", "the", "river", "while", "small", "dogs", "walk"]
    for n in range(4):
        rows = [" ".join(words[(n + i + j) % len(words)] for j in range(8)) + "." for i in range(60)]
        (corpus / f"story-{n}.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    profile = tmp_path / "tiny.toml"
    profile.write_text(TINY_PROFILE, encoding="utf-8")
    (tmp_path / "config").mkdir()
    return tmp_path


def spawn_trainer(root: Path) -> runner.TrainerProcess:
    argv = runner.train_argv(root / "tiny.toml", run_dir=root / "run", data=root / "corpus")
    return runner.TrainerProcess.spawn(argv, root / "run")


def acked(screen: RunScreen, cmd: str) -> bool:
    return any(line.kind == "command_ack" and f"command {cmd} accepted" in line.message for line in screen.state.logs)


def kinds_after(screen: RunScreen, marker: str, kind: str) -> list[str]:
    """Messages of `kind` log lines that come after the first line containing `marker`."""
    lines = list(screen.state.logs)
    start = next((i for i, line in enumerate(lines) if marker in line.message), len(lines))
    return [line.message for line in lines[start:] if line.kind == kind]


async def test_controls_against_a_live_trainer(live_run: Path) -> None:
    process = spawn_trainer(live_run)
    run_dir = live_run / "run"
    started = [process]
    try:
        app = DashApp(run_dir, process)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = run_screen(pilot)
            await wait_until(
                pilot,
                lambda: screen.state.status == "training" and screen.state.step >= 3 and runner.socket_ready(run_dir),
                "training to start",
            )
            palette = {command.title for command in app.get_system_commands(screen)}
            assert {"Pause", "Save", "Eval", "Stop", "Detach", "Quit"} <= palette

            await pilot.press("p")
            await wait_until(pilot, lambda: "  PAUSED  " in status_text(screen), "the paused state on screen")
            assert "pause: sent; the trainer acknowledged it" in app.messages
            await pilot.press("p")  # the same key resumes
            await wait_until(pilot, lambda: screen.state.status == "training", "training again")

            await pilot.press("s")
            await wait_until(
                pilot,
                lambda: kinds_after(screen, "command save accepted", "checkpoint_saved"),
                "the requested checkpoint",
            )
            saved_step = max(screen.state.checkpoints)
            written = f"save: checkpoint written: {screen.state.checkpoints[saved_step].path}"
            await wait_until(pilot, lambda: written in app.messages, "the dashboard saying the save is done")
            assert "saving…" not in status_text(screen)
            await pilot.press("3")
            table = screen.query_one(CheckpointPanel).table
            await wait_until(pilot, lambda: str(saved_step) in {key.value for key in table.rows}, "its table row")
            await pilot.press("1")

            await pilot.press("e")
            await wait_until(
                pilot, lambda: kinds_after(screen, "command evaluate accepted", "validation"), "a validation"
            )
            assert len(screen.state.series["val_loss"]) >= 1
            await wait_until(
                pilot,
                lambda: any(m.startswith("evaluate: validation loss") for m in app.messages),
                "the dashboard saying the evaluation is done",
            )

            await pilot.press("q")  # a live run: asks; Cancel keeps everything as it was
            await wait_until(pilot, lambda: not isinstance(app.screen, RunScreen), "the quit question")
            await pilot.press("c")
            await wait_until(pilot, lambda: app.screen is screen, "back on the dashboard")
            assert process.alive()

            await pilot.press("x")
            await wait_until(pilot, lambda: not isinstance(app.screen, RunScreen), "the stop question")
            await pilot.press("y")
            await wait_until(pilot, lambda: screen.state.status == "stopped", "the stopped state")
            assert process.wait(WAIT_S) == 0
            await wait_until(pilot, lambda: screen.trainer_alive is False, "the trainer to be seen gone")

            await resume_from_checkpoint(pilot, screen, saved_step)
            resumed = screen.process
            assert resumed is not None and resumed.pid != process.pid
            started.append(resumed)

            await pilot.press("d")  # detach: the app closes, the trainer goes on
            await wait_until(pilot, lambda: not app.is_running, "the app to exit")
        assert resumed.alive()
        await reattach_and_watch_it_crash(run_dir, resumed)
    finally:
        for proc in started:
            if proc.alive():
                proc.popen.kill()
                proc.wait(10)


async def resume_from_checkpoint(pilot: Pilot, screen: RunScreen, step: int) -> None:
    """Select the checkpoint of `step` in the table and press r: a new trainer resumes in the same folder."""
    await pilot.press("3")
    panel = screen.query_one(CheckpointPanel)
    await wait_until(
        pilot,
        lambda: panel.files is not None and step in panel.files.checkpoints and panel.files.checkpoints[step].exists,
        "the checkpoint files to be scanned",
    )
    panel.table.move_cursor(row=panel.table.get_row_index(str(step)))
    assert panel.selected_step() == step
    await pilot.press("r")
    await wait_until(pilot, lambda: screen.state.resumed and screen.state.status == "training", "the resumed run")
    hello = events_of(screen.run_dir, "hello")[-1]
    assert hello.resumed and hello.pid == screen.process.pid
    resume_at = hello.argv.index("--resume")
    assert Path(hello.argv[resume_at + 1]).name == f"step-{step:08d}.pt"


async def reattach_and_watch_it_crash(run_dir: Path, trainer: runner.TrainerProcess) -> None:
    """Reattach without a process handle: the whole history shows; killing the trainer shows a crash."""
    app = DashApp(run_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = run_screen(pilot)
        await wait_until(
            pilot, lambda: screen.trainer_alive is True and screen.state.status == "training", "the reattached live run"
        )
        loss = screen.state.series["loss"]
        assert loss.xs[0] <= 2  # history from the start, not just from the reattach
        trainer.popen.send_signal(signal.SIGKILL)
        trainer.wait(WAIT_S)
        banner = screen.query_one(ProblemBanner)
        await wait_until(pilot, lambda: "died without finishing" in plain(banner), "the crash to be shown")
        assert screen.state.status == "crashed" and "  CRASHED  " in status_text(screen)


# ------------------------------------------------------------------------------------------------ vocoder runs
# A recorded GAN vocoder run (two optimizer groups; tests/test_vocoder_dashboard.py checks the numbers).


async def test_vocoder_run_on_a_small_terminal(tmp_path: Path) -> None:
    run_dir = copy_fixture("vocoder_completed", tmp_path)
    async with DashApp(run_dir).run_test(size=(80, 24)) as pilot:
        screen = await settled(pilot)
        grid = screen.query_one(ChartGrid)
        loss = grid.chart("loss")
        assert [(line.label, line.right) for line in loss.data.lines] == [
            ("generator", False),
            ("smoothed", False),
            ("discriminator", True),
        ]
        assert "discriminator" in loss.render().plain
        lr = grid.chart("lr")
        assert grid.current == "lr" and [line.label for line in lr.data.lines] == ["discriminator", "generator"]
        assert "discriminator" in lr.render().plain and "generator" in lr.render().plain

        # The validation chart takes the speech chart's place: `c` cycles through it, never through speech.
        assert grid.shown_secondary() == ["lr", "throughput", "memory", "parts", "validation"]
        validation = grid.chart("validation")
        for _ in range(4):
            await pilot.press("c")
        assert grid.current == "validation"
        await wait_until(
            pilot, lambda: validation.data == current_chart_data(screen, validation), "the validation chart"
        )
        assert validation.region.area > 0 and grid.chart("speech").region.area == 0
        assert [line.label for line in validation.data.lines] == ["mel_l1", "griffin_lim"]
        assert "griffin_lim" in validation.render().plain
        await pilot.press("c")
        assert grid.current == "lr"

        bar = screen.query_one(BreakdownBar)
        assert bar.region.height == 2
        first, second = bar.render().plain.splitlines()
        assert first.startswith("profiler ") and second.startswith("per group fwd/bwd/opt ms: discriminator ")
        regions = [screen.query_one(selector).region for selector in ("#status", "#tabs", "#breakdown", "Footer")]
        for upper, lower in pairwise(regions):
            assert upper.bottom <= lower.y, (upper, lower)
        assert regions[-1].bottom <= 24

        await pilot.press("2")
        await pilot.pause(0.1)
        logs = log_view_text(screen)
        assert "training losses at step 30: discriminator" in logs and "(griffin_lim 0.2145)" in logs


def beat_the_reference(run_dir: Path, mel_l1: float, step: int) -> None:
    """Rewrite the recorded log so that Griffin-Lim's mel_l1 is `mel_l1`, with the trainer's own 'passes' line
    before the validation at `step` (the first below it), seq numbers kept contiguous."""
    path = run_dir / "events.jsonl"
    events: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event["type"] == "validation":
            event["reference"]["mel_l1"] = mel_l1
            if event["step"] == step:
                said = f"step {step}: mel_l1 {event['metric_value']:.4g} passes griffin_lim's {mel_l1:.4g}"
                events.append({**event, "type": "log", "level": "info", "message": said})
        events.append(event)
    lines = [json.dumps({**event, "seq": seq}) for seq, event in enumerate(events)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


async def test_vocoder_run_that_beats_its_reference_on_a_roomy_terminal(tmp_path: Path) -> None:
    run_dir = copy_fixture("vocoder_completed", tmp_path)
    beat_the_reference(run_dir, 3.0, 18)  # recorded mel_l1 at 12, 18: 3.18, 2.96
    async with DashApp(run_dir).run_test(size=(120, 40)) as pilot:
        screen = await settled(pilot)
        grid = screen.query_one(ChartGrid)
        visible = [chart.build_name for chart in grid.charts() if chart.region.area > 0]
        assert visible == ["loss", "lr", "throughput", "memory", "parts", "validation"]
        # Every chart on screen comes from a declaration (vega_tui/chart_specs.py).
        declared = [(f"chart-{spec.id}", spec.id) for spec in CHARTS]
        assert [(chart.id, chart.build_name) for chart in grid.charts()] == declared
        full = grid.chart("loss").region.width
        shown = [c for c in grid.charts() if c.region.area > 0]
        assert all((c.region.width == full) == chart_spec(c.build_name).place.wide for c in shown)
        validation = grid.chart("validation")
        assert validation.region.width == grid.chart("loss").region.width  # the speech chart's whole row
        assert validation.data.markers["passed"] == [18]
        assert validation.data.lines[1].ys == [3.0, 3.0]
        drawn = validation.render().plain
        assert "griffin_lim" in drawn and "beats ref" in drawn
        assert screen.state.reference_passed_step == 18
        said = [line for line in screen.state.logs if "passes griffin_lim" in line.message]
        assert [line.kind for line in said] == ["log"]  # the trainer said it: the dashboard does not repeat it


# ------------------------------------------------------------------------------------------------ snapshots
