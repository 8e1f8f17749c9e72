"""The watch-only dashboard in a terminal (what `vega-tui serve` runs without --allow-control):
run controls are refused with a notice, `w` only says where a sample is, `q` just quits."""

from __future__ import annotations

from pathlib import Path

import pytest

from dash_pilot import DashApp, copy_fixture, settled, wait_until
from serve_helpers import write_wav
from vega_tui import read_only
from vega_tui.widgets.samples import SamplesPanel

pytestmark = pytest.mark.anyio
WAV = "samples/step-00000000/01.wav"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_read_only_refuses_controls_and_w_names_the_file(tmp_path: Path) -> None:
    run_dir = copy_fixture("vits_completed", tmp_path)
    write_wav(run_dir / WAV)
    app = DashApp(run_dir)
    app.read_only = True
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await settled(pilot)
        await pilot.press("x")
        assert f"cannot stop the run: {read_only.HINT}" in app.messages
        assert read_only.HINT == "this dashboard is read-only (served without --allow-control)"
        await pilot.press("4")
        panel = screen.query_one(SamplesPanel)
        audio = next(item for item in panel.items() if item.path == run_dir / WAV)
        panel.list_view.index = panel.items().index(audio)
        await pilot.press("w")
        where = f"w opens a sample in the browser under vega-tui serve; here it is {audio.path}"
        await wait_until(pilot, lambda: where in app.messages, "the notice naming the file")
        await pilot.press("q")  # no "stop the trainer?" question: a watcher only leaves
        await wait_until(pilot, lambda: app.return_code == 0, "the app to quit")
