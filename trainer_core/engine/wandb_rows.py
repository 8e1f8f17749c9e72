"""W&B rows from events, for the live sink and for a resume's replay from events.jsonl.

A resume starts W&B after the step W&B's files hold and trains from the checkpoint: the rows in
between (up to about a second before a kill, often the checkpoint step's) come from events.jsonl.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer_core.contract import rundir
from trainer_core.contract.protocol import (
    Event,
    FreeRunningEvent,
    SampleEvent,
    StepEvent,
    ValidationEvent,
)

LOGGED = (StepEvent, ValidationEvent, FreeRunningEvent, SampleEvent)  # the events W&B logs


@dataclass
class Row:
    """One step's W&B row: scalars, and the sample events whose files become its media."""

    scalars: dict[str, Any] = field(default_factory=dict)
    samples: list[SampleEvent] = field(default_factory=list)


def event_rows(event: Event) -> list[tuple[int, dict[str, Any]]]:
    """(step, scalars) of each row an event adds to (none for samples: media are logged apart)."""
    if isinstance(event, StepEvent):
        return _step_rows(event)
    if isinstance(event, ValidationEvent):
        parts = {**_prefixed("val/", event.losses), **_prefixed("val/", event.metrics)}
        return [(event.step, _real({"val/loss": event.loss, **parts}))]
    if isinstance(event, FreeRunningEvent):
        return [(event.step, _real(_free_running(event)))]
    return []


def replay_rows(events: Iterable[Event], after: int, upto: int) -> dict[int, Row]:
    """The rows of steps `after` < step <= `upto`, as last trained (a resume retrains steps)."""
    rows: dict[int, Row] = {}
    trained = 0  # the last step trained so far in the log
    for event in events:
        if isinstance(event, StepEvent):
            first = event.step_series[0] if event.step_series else event.step
            if first <= trained:  # a resume trained from here again: its rows replace the old ones
                for step in [step for step in rows if step >= first]:
                    del rows[step]
            trained = event.step
        for step, scalars in event_rows(event):
            if after < step <= upto:
                rows.setdefault(step, Row()).scalars.update(scalars)
        if isinstance(event, SampleEvent) and after < event.step <= upto:
            rows.setdefault(event.step, Row()).samples.append(event)
    return dict(sorted(rows.items()))


def in_run_folder(event: SampleEvent, run_dir: Path) -> SampleEvent:
    """The sample as this run folder holds it (by step folder and name: a moved or copied folder
    logs its own copy); as recorded when the folder lacks it."""
    recorded = Path(event.path)
    here = run_dir / rundir.SAMPLES / recorded.parent.name / recorded.name
    return event.model_copy(update={"path": str(here)}) if here.is_file() else event


def _step_rows(event: StepEvent) -> list[tuple[int, dict[str, Any]]]:
    series = zip(event.step_series, event.loss_series, event.lr_series, strict=False)
    rows = [(step, _real({"train/loss": loss, "train/lr": lr})) for step, loss, lr in series]
    scalars = {
        "train/loss": event.loss,
        "train/lr": event.lr,
        "train/samples_per_s": event.samples_per_s,
        "train/data_wait_frac": event.data_wait_frac,
        "train/grad_norm": event.grad_norm,
        "train/loss_scale": event.loss_scale,
        "train/micro_batch": event.micro_batch,
        "train/epoch": event.epoch,
        **_prefixed("train/", event.losses),
        **_prefixed("train/lr/", event.lrs),
    }
    return [*rows, (event.step, _real(scalars))]


def _prefixed(prefix: str, values: dict[str, float]) -> dict[str, float]:
    return {f"{prefix}{name}": value for name, value in values.items()}


def _real(values: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


def _free_running(event: FreeRunningEvent) -> dict[str, Any]:
    return {
        "free_running/distance": event.distance,
        "free_running/duration_ratio": event.duration_ratio,
        "free_running/vuv_agreement": event.vuv_agreement,
        "free_running/acoustic_distance": event.acoustic_distance,
        "free_running/floor_distance": event.floor_distance,
        "free_running/floor_vuv_agreement": event.floor_vuv_agreement,
    }
