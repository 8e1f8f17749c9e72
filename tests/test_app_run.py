"""The run dashboard (vega_tui/screens/run.py) driven with Textual's pilot, on recorded runs.

Recorded runs (tests/fixtures/events/*, real trainer logs copied to tmp_path) check what the dashboard shows:
status, charts, fault markers, checkpoints, samples, the log pane, crashed and failed runs, damaged logs.
Snapshot tests pin the layout at 80x24 and 120x40 (regenerate them with
`pytest tests/test_app_run.py --snapshot-update` after an intended change, or when the fixtures are
re-recorded). Live trainers under the dashboard: tests/test_app_live.py.
"""

from __future__ import annotations

import getpass
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import psutil
import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from dash_pilot import (
    GIB,
    STATUS_OF_FINISHED,
    DashApp,
    copy_fixture,
    events_of,
    log_view_text,
    plain,
    run_screen,
    settled,
    status_text,
    wait_until,
)
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.resources import MachineResources
from vega_tui import runner
from vega_tui.screens.run import RunScreen
from vega_tui.widgets.breakdown import BreakdownBar
from vega_tui.widgets.charts import ChartGrid, RunChart, loss_chart
from vega_tui.widgets.checkpoints import CheckpointPanel
from vega_tui.widgets.logs import LogPane
from vega_tui.widgets.resources import ResourceLine, ResourcesPanel
from vega_tui.widgets.samples import SamplesPanel
from vega_tui.widgets.status import ProblemBanner

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("name", ["lm_completed", "lm_stopped", "lm_faults", "lm_failed", "lm_killed"])
async def test_status_line_shows_state_and_progress(name: str, tmp_path: Path) -> None:
    run_dir = copy_fixture(name, tmp_path)
    finished = events_of(run_dir, "finished")
    steps = events_of(run_dir, "step")
    expected_state = STATUS_OF_FINISHED[finished[-1].status] if finished else "CRASHED"
    expected_step = finished[-1].step if finished else steps[-1].step
    async with DashApp(run_dir).run_test(size=(80, 24)) as pilot:
        screen = await settled(pilot)
        text = status_text(screen)
        assert text.startswith(name)
        assert f"  {expected_state}  " in text
        assert f"step {expected_step}" in text
        assert "cpu fp32" in text and "world 1" in text and "samples/s" in text


async def test_completed_run_charts_checkpoints_and_samples(tmp_path: Path) -> None:
    run_dir = copy_fixture("lm_completed", tmp_path)
    saved = {event.step for event in events_of(run_dir, "checkpoint_saved")}
    best_step = events_of(run_dir, "best_model")[-1].step
    samples = events_of(run_dir, "sample")
    async with DashApp(run_dir).run_test(size=(120, 40)) as pilot:
        screen = await settled(pilot)
        grid = screen.query_one(ChartGrid)
        loss = grid.chart("loss").data
        assert {line.label for line in loss.lines} == {"loss", "smoothed", "validation"}
        validation = next(line for line in loss.lines if line.label == "validation")
        assert len(validation.xs) == len(events_of(run_dir, "validation"))
        assert sorted(loss.markers["checkpoint"]) == sorted(saved)
        for name in ("lr", "throughput"):
            assert grid.chart(name).data.points > 0, name
        assert "loss" in grid.chart("loss").render().plain  # the legend is drawn

        await pilot.press("3")
        table = screen.query_one(CheckpointPanel).table
        assert screen.focused is table
        assert table.row_count == len(saved)
        best_row = [str(cell) for cell in table.get_row(str(best_step))]
        assert "★ best" in best_row
        assert best_row[4] == "missing"  # the fixture keeps the log, not the .pt files
        others = [str(table.get_row(str(step))[3]) for step in saved - {best_step}]
        assert all(cell == "" for cell in others)

        await pilot.press("4")
        items = screen.query_one(SamplesPanel).items()
        assert [item.sample.step for item in items] == [event.step for event in samples]
        first_prompt_line = samples[0].text.splitlines()[0]
        assert first_prompt_line in plain(items[0].query_one("Static"))  # text samples are shown inline


async def test_fault_markers_on_the_step_axis(tmp_path: Path) -> None:
    run_dir = copy_fixture("lm_faults", tmp_path)
    oom = events_of(run_dir, "oom_recovered")[0].step
    nonfinite = events_of(run_dir, "nonfinite")[0].step
    async with DashApp(run_dir).run_test(size=(80, 24)) as pilot:
        screen = await settled(pilot)
        chart = screen.query_one(ChartGrid).chart("loss")
        assert chart.data.markers["oom"] == [oom]
        assert chart.data.markers["nonfinite"] == [nonfinite]
        drawn = chart.render().plain
        assert "OOM" in drawn and "non-finite" in drawn and "best" in drawn  # legend entries of the markers
        throughput = screen.query_one(ChartGrid).chart("throughput")
        assert throughput.region.area == 0  # compact layout: one secondary chart at a time
        await pilot.press("c")
        assert screen.query_one(ChartGrid).current == "throughput"
        await wait_until(
            pilot,
            lambda: throughput.data is not None and throughput.data.markers.get("oom") == [oom],
            "the OOM marker on the throughput chart",
        )
        assert throughput.region.area > 0


async def test_log_scale_toggle_redraws_the_loss_chart(tmp_path: Path) -> None:
    run_dir = copy_fixture("lm_completed", tmp_path)
    async with DashApp(run_dir).run_test(size=(80, 24)) as pilot:
        screen = await settled(pilot)
        chart = screen.query_one(ChartGrid).chart("loss")
        assert not chart.data.log_y
        await pilot.press("l")
        assert chart.data.log_y and chart.data.title == "loss (log scale)"
        assert "log scale" in chart.render().plain
        await pilot.press("l")
        assert not chart.data.log_y


async def test_charts_redraw_only_when_the_store_changes(tmp_path: Path) -> None:
    run_dir = copy_fixture("lm_completed", tmp_path)
    async with DashApp(run_dir).run_test(size=(80, 24)) as pilot:
        screen = await settled(pilot)
        grid = screen.query_one(ChartGrid)
        chart = grid.chart("loss")
        # Wait for the chart to show the whole store (the last batches may land after the first draw).
        whole = lambda: chart.data == loss_chart(screen.state, grid.log_y, chart.size.width)  # noqa: E731
        await wait_until(pilot, whole, "the whole log drawn")
        draws = chart.draws
        await pilot.pause(1.2)  # several timer ticks with nothing new
        assert chart.draws == draws
        events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()]
        steps = [event for event in events if event.get("type") == "step"]
        seq = events[-1]["seq"] + 1  # no gap: a gap would add a warning line of its own
        log = {"v": 1, "seq": seq, "t": time.time(), "type": "log", "level": "info", "message": "appended"}
        step = {
            **steps[-1],
            "seq": seq + 1,
            "step": 61,
            "loss": 9.5,
            "steps_in_window": 1,
            "step_series": [61],
            "loss_series": [9.5],
            "lr_series": [0.0],
        }
        with open(run_dir / "events.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(log) + "\n")
        await wait_until(
            pilot, lambda: any(line.message == "appended" for line in screen.state.logs), "the log line read"
        )
        await pilot.pause(0.8)
        assert chart.draws == draws  # the store moved, but nothing the loss chart shows
        with open(run_dir / "events.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(step) + "\n")
        await wait_until(pilot, lambda: chart.draws > draws and 61 in chart.data.lines[0].xs, "a redraw for a step")


async def test_log_pane_filter_and_search(tmp_path: Path) -> None:
    run_dir = copy_fixture("lm_faults", tmp_path)
    async with DashApp(run_dir).run_test(size=(80, 24)) as pilot:
        screen = await settled(pilot)
        await pilot.press("2")
        pane = screen.query_one(LogPane)
        assert "level ≥ info" in pane.header_text().plain
        everything = pane.shown
        assert everything == sum(1 for line in screen.state.logs if line.level != "debug")

        await pilot.press("f")  # info -> warning
        assert pane.min_level == "warning"
        warnings = [line for line in screen.state.logs if line.level in ("warning", "error", "critical")]
        assert 0 < pane.shown == len(warnings) < everything
        await pilot.press("f", "f", "f")  # error -> debug -> info
        assert pane.min_level == "info" and pane.shown == everything

        await pilot.press("slash")
        search = screen.query_one("#log-search", Input)
        assert search.has_focus
        await pilot.press(*"memory")
        await wait_until(pilot, lambda: pane.search == "memory", "the search to apply")
        expected = [line for line in screen.state.logs if "memory" in line.message.lower()]
        assert 0 < pane.shown == len(expected) < everything
        assert "search 'memory'" in pane.header_text().plain
        await pilot.pause(0.1)
        assert all(
            "memory" in row.lower() for row in log_view_text(screen).splitlines() if "INFO" in row or "WARN" in row
        )
        await pilot.press("escape")  # closes the box and clears the search
        assert not search.display and pane.search == "" and pane.shown == everything


async def test_damaged_log_still_opens_and_counts_bad_lines(tmp_path: Path) -> None:
    """Malformed lines, a seq gap, an unknown event type from a newer trainer and a truncated last line."""
    run_dir = copy_fixture("lm_completed", tmp_path)
    path = run_dir / "events.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    # Line 8 and line 20 are lost (two seq gaps), line 19 is retyped as an event a newer trainer invented,
    # and the last line (the finished event) is cut in half: a trainer killed mid-write.
    damaged = lines[:8] + ["this is not json", '{"v": 1, "seq": "x"}'] + lines[9:20]
    damaged[-1] = json.dumps({**json.loads(damaged[-1]), "type": "quantum_flux"})
    damaged += lines[21:]
    damaged[-1] = damaged[-1][: len(damaged[-1]) // 2]
    path.write_text("\n".join(damaged), encoding="utf-8")
    async with DashApp(run_dir).run_test(size=(80, 24)) as pilot:
        screen = run_screen(pilot)
        await wait_until(
            pilot,
            lambda: screen.state.malformed_lines >= 2 and screen.state.unknown_events == 1,
            "the damage to be counted",
        )
        await pilot.press("2")
        header = screen.query_one(LogPane).header_text().plain
        assert "bad lines 2" in header and "seq gaps 2" in header and "unknown events 1" in header
        assert screen.state.step > 0
        await wait_until(pilot, lambda: screen.state.status == "crashed", "no finished event: a crash")
        await pilot.press("1")
        assert screen.query_one(ChartGrid).chart("loss").region.area > 0


async def test_crashed_run_shows_the_log_tail_and_stays_usable(tmp_path: Path) -> None:
    run_dir = copy_fixture("lm_killed", tmp_path)
    (run_dir / "trainer.log").write_text("starting\nloading data\nSegmentation fault (core dumped)\n")
    async with DashApp(run_dir).run_test(size=(80, 24)) as pilot:
        app = pilot.app
        screen = await settled(pilot)
        assert screen.state.status == "crashed"
        banner = plain(screen.query_one(ProblemBanner))
        assert "died without finishing" in banner and "Segmentation fault (core dumped)" in banner
        assert screen.query_one(ProblemBanner).display
        await pilot.press("p")  # no trainer: the reason is reported, nothing hangs
        await wait_until(pilot, lambda: any(m.startswith("pause:") for m in app.messages), "the pause reply")
        assert "no trainer is listening" in next(m for m in app.messages if m.startswith("pause:"))
        await pilot.press("2")
        assert "Segmentation fault" in log_view_text(screen)
        await pilot.press("x")  # nothing to stop: a message, no dialog
        await wait_until(pilot, lambda: any(m.startswith("stop:") for m in app.messages), "the stop reply")
        assert isinstance(app.screen, RunScreen)


async def test_stale_socket_of_a_dead_trainer_is_reported(tmp_path: Path) -> None:
    import socket

    run_dir = copy_fixture("lm_killed", tmp_path)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(run_dir / "control.sock"))  # bound, never listening, then closed: what a SIGKILL leaves
    stale.close()
    async with DashApp(run_dir).run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        await pilot.press("s")
        await wait_until(pilot, lambda: any(m.startswith("save:") for m in pilot.app.messages), "the save reply")
        reply = next(m for m in pilot.app.messages if m.startswith("save:"))
        assert "stale" in reply and "not running" in reply


async def test_failed_run_shows_the_error(tmp_path: Path) -> None:
    run_dir = copy_fixture("lm_failed", tmp_path)
    error = events_of(run_dir, "error")[-1].message
    async with DashApp(run_dir).run_test(size=(80, 24)) as pilot:
        screen = await settled(pilot)
        assert "FAILED" in status_text(screen)
        assert f"The run failed: {error}" in plain(screen.query_one(ProblemBanner))
        await pilot.press("p")
        assert any("the run has failed" in message for message in pilot.app.messages)


async def test_profiler_bar_and_live_resources(tmp_path: Path) -> None:
    run_dir = copy_fixture("lm_completed", tmp_path)
    breakdown = events_of(run_dir, "profile_breakdown")[-1]
    async with DashApp(run_dir, probe=runner_free_probe()).run_test(size=(120, 40)) as pilot:
        screen = await settled(pilot)
        bar = screen.query_one(BreakdownBar).render().plain
        phases = ("data_s", "transfer_s", "forward_s", "backward_s", "optimizer_s")
        total = sum(getattr(breakdown, phase) for phase in phases)
        assert f"fwd {breakdown.forward_s / total:.0%}" in bar and f"bwd {breakdown.backward_s / total:.0%}" in bar
        assert "█" in bar
        panel = screen.query_one(ResourcesPanel)
        await wait_until(pilot, lambda: panel.resources is not None, "a probe of this machine")
        assert panel.resources.ram_total_bytes == psutil.virtual_memory().total
        line = plain(screen.query_one(ResourceLine))
        total = f"/{psutil.virtual_memory().total / GIB:.1f} GiB"
        assert line.startswith("CPU") and "RAM" in line and total in line


def add_audio_sample(
    run_dir: Path,
    step: int = 60,
    number: int = 1,
    text: str = "Hello from Vega.",
    recorded_root: str = "/elsewhere/run",
) -> Path:
    """A real 0.2 s wav where the trainer writes it (`samples/step-<8 digits>/<NN>.wav`) and the `sample`
    event announcing it, recorded under another run folder path, as after a move."""
    import numpy as np
    import soundfile

    relative = Path("samples") / f"step-{step:08d}" / f"{number:02d}.wav"
    path = run_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    tone = 0.2 * np.sin(2 * np.pi * 440 * number * np.arange(4410) / 22050)
    soundfile.write(path, tone.astype("float32"), 22050)
    last = read_all(run_dir / "events.jsonl")[-1]
    event = {
        "v": 1,
        "seq": last.seq + 1,
        "t": last.t,
        "type": "sample",
        "step": step,
        "kind": "audio",
        "path": f"{recorded_root}/{relative}",
        "text": text,
    }
    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(event) + "\n")
    return path


async def test_audio_sample_plays_locally_or_shows_scp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = copy_fixture("lm_completed", tmp_path)
    wav = add_audio_sample(run_dir)
    bin_dir, played = tmp_path / "bin", tmp_path / "played.txt"
    bin_dir.mkdir()
    player = bin_dir / "paplay"  # stands in for a sound server this machine does not have
    player.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {played}\n")
    player.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    async with DashApp(run_dir).run_test(size=(80, 24)) as pilot:
        screen = await settled(pilot)
        await pilot.press("4")
        panel = screen.query_one(SamplesPanel)
        audio = [item for item in panel.items() if item.sample.kind == "audio"]
        assert len(audio) == 1 and audio[0].path == wav  # found in this run folder, not at the recorded path
        shown = plain(audio[0].query_one("Static"))
        assert str(wav) in shown and "Hello from Vega." in shown
        panel.list_view.index = panel.items().index(audio[0])
        await pilot.press("a")
        await wait_until(pilot, lambda: played.is_file() and played.read_text().strip() == str(wav), "the player")
        assert f"play: playing {wav.name} with paplay" in pilot.app.messages

        monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
        await pilot.press("a")
        host = events_of(run_dir, "hello")[0].host  # the machine the trainer ran on
        scp = f"scp {getpass.getuser()}@{host}:{wav} ."
        await wait_until(pilot, lambda: any(scp in message for message in pilot.app.messages), "the scp command")


def test_recorded_sample_paths_resolve_in_place_and_after_a_move(tmp_path: Path) -> None:
    from vega_tui.widgets.checkpoints import locate

    run_dir = copy_fixture("lm_completed", tmp_path / "here")
    wav = add_audio_sample(run_dir, 120, 2, recorded_root=str(run_dir))
    recorded = events_of(run_dir, "sample")[-1].path
    assert locate(run_dir, recorded, "samples") == wav, "in place: the recorded file itself"
    moved = tmp_path / "there" / "run"
    shutil.copytree(run_dir, moved)
    assert locate(moved, recorded, "samples") == moved / "samples" / "step-00000120" / "02.wav"
    assert locate(moved, recorded, "samples").is_file(), "moved: the copy inside the new folder, step folder kept"
    assert locate(moved, "/x/samples/../../etc/passwd", "samples") == moved / "samples" / "passwd"


async def test_samples_group_by_step_and_one_sentence_is_compared_across_steps(tmp_path: Path) -> None:
    """A run folder moved after training: every sample resolves inside it, and [ ] walk one sentence's steps."""
    original = copy_fixture("lm_completed", tmp_path / "before")
    sentences = ["Hi.", "A longer sentence."]
    for step in (60, 90):
        for number, text in enumerate(sentences, start=1):
            add_audio_sample(original, step, number, text, recorded_root=str(original))
    run_dir = tmp_path / "moved" / original.name
    run_dir.parent.mkdir()
    shutil.move(str(original), str(run_dir))
    async with DashApp(run_dir).run_test(size=(100, 40)) as pilot:
        screen = await settled(pilot)
        await pilot.press("4")
        panel = screen.query_one(SamplesPanel)
        audio = [item for item in panel.items() if item.sample.kind == "audio"]
        assert [item.path for item in audio] == [
            run_dir / "samples" / f"step-{s:08d}" / f"0{n}.wav" for s in (60, 90) for n in (1, 2)
        ]
        assert all(item.path.is_file() for item in audio), "each path names the real file in the moved folder"
        steps = [item.sample.step for item in panel.items()]
        opened = [item.sample.step for item in panel.items() if "── step" in plain(item.query_one("Static"))]
        assert opened == list(dict.fromkeys(steps)) and {60, 90} <= set(opened), "one rule opens each step's group"
        panel.list_view.focus()
        panel.list_view.index = panel.items().index(audio[1])  # step 60, second sentence
        await pilot.press("right_square_bracket")
        assert panel.selected() is audio[3], "] goes to the same sentence at the next evaluation"
        await pilot.press("right_square_bracket")
        assert panel.selected() is audio[3], "there is no later one: the cursor stays"
        await pilot.press("left_square_bracket")
        assert panel.selected() is audio[1]
        assert "same sentence" in plain(panel.query_one("#sample-detail"))


def runner_free_probe() -> Callable[[], MachineResources]:
    """The real probe (psutil/NVML of this machine), as the dashboard uses it."""
    from vega_tui.widgets.resources import read_resources

    return read_resources


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_layout_has_no_overlap_on_any_tab(size: tuple[int, int], tmp_path: Path) -> None:
    run_dir = copy_fixture("lm_killed", tmp_path)  # the crash banner takes room too
    parts = ["#status", "#problem", "#tabs", "#breakdown", "Footer"]
    if size == (120, 40):
        parts.insert(1, "#resource-line")
    async with DashApp(run_dir).run_test(size=size) as pilot:
        screen = await settled(pilot)
        for key, tab in enumerate(("charts", "logs", "checkpoints", "samples", "resources"), start=1):
            await pilot.press(str(key))
            await pilot.pause(0.05)
            regions = {selector: screen.query_one(selector).region for selector in parts}
            assert all(region.area > 0 for region in regions.values()), (tab, regions)
            ordered = list(regions.values())
            for upper, lower in pairwise(ordered):
                assert upper.bottom <= lower.y, (tab, upper, lower)
            assert ordered[-1].bottom <= size[1]
            pane = screen.query_one(f"#tab-{tab}")
            assert pane.region.area > 0 and regions["#tabs"].contains_region(pane.region), tab
            visible = [chart.id for chart in screen.query(RunChart) if chart.region.area > 0]
            if tab == "charts":
                assert len(visible) == (6 if size == (120, 40) else 2), visible
                assert all(
                    regions["#tabs"].contains_region(chart.region)
                    for chart in screen.query(RunChart)
                    if chart.region.area > 0
                )


async def test_trainer_that_dies_before_its_first_event(tmp_path: Path) -> None:
    """A spawned trainer that exits at once (an invalid profile) is shown as crashed with its error."""
    profile = tmp_path / "bad.toml"
    profile.write_text("[train]\nbatch_size = -1\n", encoding="utf-8")
    run_dir = tmp_path / "run"
    process = runner.TrainerProcess.spawn(runner.train_argv(profile, run_dir=run_dir), run_dir)
    async with DashApp(run_dir, process).run_test(size=(80, 24)) as pilot:
        screen = run_screen(pilot)
        banner = screen.query_one(ProblemBanner)
        await wait_until(pilot, lambda: "batch_size = -1: must be >= 1" in plain(banner), "the error on screen")
        assert "  CRASHED  " in status_text(screen) and process.poll() == 2


def test_dashboard_imports_no_heavy_modules() -> None:
    """The run screen and its widgets load in a fresh interpreter without torch, librosa, matplotlib."""
    code = (
        "import json, sys; import vega_tui.screens.run; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'librosa', 'matplotlib', 'numba'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


# ------------------------------------------------------------------------------------------------ a live trainer


async def _settled_snapshot(pilot: Pilot) -> None:
    await settled(pilot)
    screen = run_screen(pilot)
    await wait_until(
        pilot,
        lambda: "GPU0" in plain(screen.query_one(ResourceLine)) or pilot.app.size.width < 110,
        "the fixed resources",
    )


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_dashboard_snapshot(size: tuple[int, int], tmp_path: Path, snap_compare: Any) -> None:
    run_dir = copy_fixture("lm_completed", tmp_path)
    assert snap_compare(DashApp(run_dir), terminal_size=size, run_before=_settled_snapshot)
