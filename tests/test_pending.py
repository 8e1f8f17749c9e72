"""The dashboard's "saving…"/"evaluating…": shown from the request until the trainer's event, on a real store
fed real recorded events, drawn by the real status widget inside a Textual app."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from textual.app import App, ComposeResult

from trainer_core.contract.eventlog import read_all
from vega_tui.pending import PendingRequests
from vega_tui.store import RunStore
from vega_tui.widgets.status import StatusLine

pytestmark = pytest.mark.anyio
FIXTURE = Path(__file__).parent / "fixtures" / "events" / "lm_completed"


def live_store(tmp_path: Path) -> tuple[RunStore, list]:
    """A store holding a recorded run up to (not including) its last checkpoint and the events after it."""
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE, run_dir)
    events = read_all(run_dir / "events.jsonl")
    last_save = max(i for i, e in enumerate(events) if e.type == "checkpoint_saved")
    store = RunStore(run_dir=run_dir)
    store.apply(events[:last_save])
    return store, events[last_save:]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class StatusApp(App):
    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")


async def test_saving_shows_until_a_checkpoint_newer_than_the_request(tmp_path: Path) -> None:
    store, rest = live_store(tmp_path)
    saved = rest[0]
    pending = PendingRequests()
    earlier = store.state.last_checkpoint_t
    assert earlier < saved.t
    pending.ask("save", now=(earlier + saved.t) / 2)  # asked between the two saves
    pending.ask("evaluate", now=saved.t + 3600)  # asked after every event of this run
    async with StatusApp().run_test() as pilot:
        status = pilot.app.query_one(StatusLine)
        status.show(store.state, None, pending.labels())
        await pilot.pause()
        assert "saving…" in str(status.render()) and "evaluating…" in str(status.render())

        assert pending.settle(store.state) == [], "older checkpoints do not answer a newer request"
        store.apply([saved])
        assert pending.settle(store.state) == [("save", True)]
        assert store.state.last_checkpoint_path == saved.path
        status.show(store.state, None, pending.labels())
        await pilot.pause()
        assert "saving…" not in str(status.render()) and "evaluating…" in str(status.render())

    store.apply(rest[1:])  # ... to the run's finished event: nothing more will answer the evaluation
    assert store.state.status in ("finished", "stopped")
    assert pending.settle(store.state) == [("evaluate", False)] and pending.labels() == []


def test_a_refused_request_is_not_waited_for() -> None:
    pending = PendingRequests()
    pending.ask("save", now=1.0)
    pending.ask("pause", now=1.0)  # nothing to wait for: acknowledged means done
    assert pending.labels() == ["saving…"]
    pending.forget("save")
    assert pending.labels() == []
