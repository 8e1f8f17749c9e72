"""Overtraining: validation loss rising several evaluations in a row while the training loss falls is said once
per episode, with the best checkpoint named; the event reaches the webhook and the dashboard's banner."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from notify_server import recording_server
from trainer_core.contract.eventlog import EventWriter, read_all
from trainer_core.contract.notices import NoticeTracker
from trainer_core.contract.notify_config import NotifyConfig
from trainer_core.contract.protocol import BestModelEvent, StepEvent, ValidationEvent
from trainer_core.engine.events import EventHub
from trainer_core.engine.notify import NotifySink, WebhookSender
from trainer_core.engine.overtraining import OvertrainingDetector, OvertrainingWatch
from vega_tui.store import RunStore
from vega_tui.widgets.status import problem_text, status_first_line


def fired(vals: list[float | None], trains: list[float | None], evals: int = 3) -> list[int]:
    """Indexes of the validations at which the watch speaks."""
    watch = OvertrainingWatch(evals)
    return [i for i, (v, t) in enumerate(zip(vals, trains, strict=True)) if watch.add(v, t) is not None]


FALLING = [3.0 - 0.2 * i for i in range(12)]


def test_rising_validation_with_falling_training_is_said_once_per_episode() -> None:
    vals = [1.0, 0.9, 0.8, 0.85, 0.9, 0.95, 1.0, 1.1, 0.7, 0.75, 0.8, 0.9]
    # Fires at the third rise after the best (0.95), not at the fourth or fifth; a new best (0.7) starts a
    # new episode, which fires again at its own third rise.
    assert fired(vals, FALLING) == [5, 11]
    assert fired(vals, FALLING, evals=2) == [4, 10]


def test_noisy_or_falling_validation_is_not_overtraining() -> None:
    assert fired([1.0, 1.1, 1.0, 1.1, 1.05, 1.2, 1.1, 1.15, 1.12, 1.3, 1.2, 1.25], FALLING) == []
    assert fired([1.0 - 0.05 * i for i in range(12)], FALLING) == []
    # A validation without a finite loss neither counts nor breaks the count.
    assert fired([1.0, 1.1, None, 1.2, math.nan, 1.3], FALLING[:6]) == [5]


def test_validation_and_training_rising_together_is_not_overtraining() -> None:
    # Negative control of the training-loss condition: the same validation curve fires with a falling one.
    vals = [0.8, 0.85, 0.9, 0.95]
    assert fired(vals, [1.0, 1.1, 1.2, 1.3]) == []
    assert fired(vals, [1.3, 1.2, 1.1, 1.0]) == [3]
    assert fired(vals, [1.3, 1.2, 1.1, 1.0], evals=0) == []  # train.overtraining_evals = 0: off


def steps(first: int, losses: list[float]) -> StepEvent:
    numbers = list(range(first, first + len(losses)))
    return StepEvent(step=numbers[-1], epoch=0, loss=losses[-1], lr=1e-3, samples_per_s=10.0, data_wait_frac=0.0,
                     micro_batch=8, step_series=numbers, loss_series=losses, steps_in_window=len(losses))  # fmt: skip


def test_the_trainer_event_names_the_best_checkpoint_reaches_the_webhook_and_the_banner(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "step-00000020.pt").write_bytes(b"weights")
    (checkpoints / "best.json").write_text(json.dumps({"step": 20, "path": "step-00000020.pt", "val_loss": 0.8}))
    writer = EventWriter(tmp_path / "events.jsonl")
    hub = EventHub(writer)
    hub.listeners.append(OvertrainingDetector(3, hub, checkpoints).on_event)
    with recording_server() as inbox:
        sender = WebhookSender(NotifyConfig(inbox.url, "json", "test"))
        hub.listeners.append(NotifySink(sender, NoticeTracker("kmr")).on_event)
        for i, val in enumerate([1.0, 0.8, 0.85, 0.9, 0.95, 1.0]):
            train = 2.0 - 0.1 * i
            hub.emit(steps(10 * i + 1, [train + 0.05, train, train - 0.05]))
            hub.emit(ValidationEvent(step=10 * i + 10, epoch=0, loss=val))
        assert sender.close(drain_s=10)
        writer.close()
        received = [json.loads(r.body) for r in inbox.wait_for(1)]
    events = read_all(tmp_path / "events.jsonl")
    found = [e for e in events if e.type == "overtraining"]
    assert len(found) == 1  # at the fifth validation; the sixth (still rising) says nothing more
    event = found[0]
    assert (event.step, event.evaluations, event.best_step) == (50, 3, 20)
    assert event.best_path == str(checkpoints / "step-00000020.pt")
    assert event.val_losses == [0.8, 0.85, 0.9, 0.95]
    assert event.train_losses == pytest.approx([1.9, 1.8, 1.7, 1.6]) and str(event.best_path) in event.message
    assert [r["kind"] for r in received] == ["overtraining"]
    assert received[0]["title"] == "vega kmr: overtraining at step 50" and "step-00000020.pt" in received[0]["message"]
    store = RunStore(run_dir=tmp_path)
    store.apply(events)
    banner = problem_text(store.state)
    assert banner is not None and banner.plain.startswith("OVERTRAINING since step 50: validation loss rose 3")
    assert "(overtraining, best step 20)" in status_first_line(store.state, None).plain
    assert any(line.kind == "overtraining" for line in store.state.logs)
    store.apply([BestModelEvent(step=70, path="step-00000070.pt", val_loss=0.7)])  # a new best ends it
    assert problem_text(store.state) is None
