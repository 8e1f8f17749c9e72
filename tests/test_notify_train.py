"""The real trainer notifies a webhook on 127.0.0.1 from the environment: a completed run and a run that fails
(debug.fail_at_step) each reach the server as what they are, and the webhook's URL appears in none of the run's
files. A non-finite stop's `error` event carries its own code, which the notification names."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import FAULTS_ON, TrainerLauncher
from notify_server import recording_server
from trainer_core.contract.errors import VegaError
from trainer_core.contract.eventlog import EventWriter, read_all
from trainer_core.contract.notices import Notice, NoticeTracker
from trainer_core.contract.protocol import ErrorEvent, FinishedEvent
from trainer_core.engine.events import EventHub
from trainer_core.engine.nonfinite_guard import NonfiniteStop
from trainer_core.engine.run import RunOutcome

SECRET = "vega-topic-s3cr3t"


def test_finished_and_failed_runs_reach_the_webhook(trainers: TrainerLauncher) -> None:
    with recording_server() as inbox:
        env = {"VEGA_NOTIFY_URL": f"{inbox.url}/{SECRET}", "VEGA_NOTIFY_FORMAT": "json", **FAULTS_ON}
        runs = {
            "completed": trainers.run_here("done", {"train.max_steps": 12}, env=env),
            "failed": trainers.run_here("boom", {"train.max_steps": 12, "debug.fail_at_step": 3}, env=env),
        }
        codes = {name: run.wait() for name, run in runs.items()}
        received = inbox.wait_for(2)
    assert codes == {"completed": 0, "failed": 1}, {n: r.stderr[-2000:] for n, r in runs.items()}
    assert all(r.path == f"/{SECRET}" for r in received)
    notices = {n["title"].split(":")[0]: n for n in (json.loads(r.body) for r in received)}
    assert {n["kind"] for n in notices.values()} == {"finished", "failed"}
    by_run = {notices[f"vega {run.run_dir.name}"]["kind"]: notices[f"vega {run.run_dir.name}"] for run in runs.values()}
    assert "finished at step 12" in by_run["finished"]["title"]
    assert "failed at step 2" in by_run["failed"]["title"]
    assert by_run["failed"]["message"].startswith("injected failure at step 3")
    for run in runs.values():
        log = (run.run_dir / "trainer.log").read_text(encoding="utf-8")
        assert "notifications: json payloads to host 127.0.0.1 (from VEGA_NOTIFY_URL)" in log
        for path in Path(run.run_dir).rglob("*"):
            if path.is_file() and path.suffix in (".jsonl", ".log", ".toml", ".json"):
                assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path


def test_a_nonfinite_stop_is_named_in_its_error_event_and_notice(tmp_path: Path) -> None:
    writer = EventWriter(tmp_path / "events.jsonl")
    hub, tracker = EventHub(writer), NoticeTracker("nan")
    hub.listeners.append(lambda event: notices.append(tracker.observe(event)))
    notices: list[Notice | None] = []
    for exc in (NonfiniteStop("the loss was non-finite in 10 steps in a row"), VegaError("data folder is empty")):
        RunOutcome(started=0.0).fail(exc, hub, exit_code=2)
        hub.emit(FinishedEvent(status="failed", step=0, epoch=0, seconds=1.0))
    writer.close()
    codes = [e.code for e in read_all(tmp_path / "events.jsonl") if isinstance(e, ErrorEvent)]
    assert codes == ["nonfinite_stop", None]  # another user-facing error keeps no code (negative control)
    assert [n.kind for n in notices if n is not None] == ["nonfinite_stop", "failed"]
