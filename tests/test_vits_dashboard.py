"""The dashboard on a vits run (two optimizer groups: discriminator, then generator), pure parts.

A real recorded run (tests/fixtures/events/vits_completed: `tiny_profile("vits")`, 16 steps on the
test voice, validated at steps 0, 8 and 16, free-running speech at each validation after the
start; recorded by `scripts/record_fixtures.sh vits_completed`) replayed into a `RunStore`: the
generator's loss beside the discriminator's, the generator's parts with the KL and duration terms,
one learning-rate line per group, the validation chart with mel_l1 and the other validation
metrics on a right axis of their own, and the log lines. The Textual app on a live vits run is
in tests/test_vits_pilot.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainer_core.contract.eventlog import read_all
from trainer_core.contract.protocol import (
    Event,
    FreeRunningEvent,
    ProfileBreakdownEvent,
    StepEvent,
    ValidationEvent,
)
from vega_tui.store import RunStore
from vega_tui.widgets.breakdown import groups_text
from vega_tui.widgets.charts import (
    loss_chart,
    lr_chart,
    parts_chart,
    speech_chart,
    validation_chart,
    validation_wanted,
)

VITS = Path(__file__).parent / "fixtures" / "events" / "vits_completed"
PARTS = ("mel", "kl", "duration", "adversarial", "feature")


@pytest.fixture(scope="module")
def events() -> list[Event]:
    return read_all(VITS / "events.jsonl")


def replay(events: list[Event]) -> RunStore:
    store = RunStore(run_dir=VITS)
    store.apply(events)
    return store


def of_type(events: list[Event], cls: type) -> list[Any]:
    return [event for event in events if isinstance(event, cls)]


def line(data: Any, label: str) -> Any:
    return next(line for line in data.lines if line.label == label)


def test_the_recording_is_a_vits_run_with_both_groups_every_step(events: list[Event]) -> None:
    steps = of_type(events, StepEvent)
    assert [event.step for event in steps] == list(range(1, 17))
    wanted = {"discriminator.total", "generator.total", *(f"generator.{part}" for part in PARTS)}
    assert all(set(event.losses) == wanted for event in steps)
    assert all(event.loss == event.losses["generator.total"] for event in steps)
    assert [e.vocoder for e in of_type(events, FreeRunningEvent)] == ["vits", "vits"]


def test_generator_and_discriminator_losses_are_separate_lines(events: list[Event]) -> None:
    steps = of_type(events, StepEvent)
    state = replay(events).state
    assert state.groups == ["discriminator", "generator"] and state.primary_group == "generator"
    chart = loss_chart(state)
    assert [(ln.label, ln.right) for ln in chart.lines] == [
        ("generator", False),
        ("smoothed", False),
        ("discriminator", True),  # ~3 beside the generator's ~100: a right axis of its own
    ]
    generator, discriminator = line(chart, "generator"), line(chart, "discriminator")
    assert generator.xs == list(range(1, 17))
    assert generator.ys == [event.losses["generator.total"] for event in steps]
    assert discriminator.xs == list(range(1, 17))
    assert discriminator.ys == [event.losses["discriminator.total"] for event in steps]
    assert discriminator.ys[-1] == pytest.approx(3.0561165809631348)  # recorded
    assert chart.markers["best"] == [8, 16] and chart.markers["checkpoint"] == [8, 9, 16]


def test_the_parts_chart_has_mel_kl_duration_adversarial_and_feature(events: list[Event]) -> None:
    steps = of_type(events, StepEvent)
    parts = parts_chart(replay(events).state)
    assert parts.title == "loss parts (generator)"
    assert sorted(ln.label for ln in parts.lines) == sorted(PARTS)
    for part in PARTS:
        assert line(parts, part).xs == list(range(1, 17))
        assert line(parts, part).ys == [event.losses[f"generator.{part}"] for event in steps]
    assert line(parts, "kl").ys[0] > 2 * line(parts, "kl").ys[-1]  # recorded: 2.23, then 0.25
    assert len({ln.color for ln in parts.lines}) == len(PARTS)


def test_each_group_has_a_learning_rate_line(events: list[Event]) -> None:
    steps = of_type(events, StepEvent)
    chart = lr_chart(replay(events).state)
    colors = [(ln.label, ln.color) for ln in chart.lines]
    assert colors == [("discriminator", "magenta"), ("generator", "green")]
    assert line(chart, "generator").ys == [event.lr for event in steps]
    assert line(chart, "discriminator").ys == [event.lrs["discriminator"] for event in steps]


def test_the_validation_chart_shows_mel_l1_and_others_on_the_right(events: list[Event]) -> None:
    validations = of_type(events, ValidationEvent)
    state = replay(events).state
    assert validation_wanted(state)  # two groups: validation takes the speech chart's place
    assert state.metric_name == "mel_l1" and state.reference == {}
    chart = validation_chart(state)
    assert [(ln.label, ln.right) for ln in chart.lines] == [
        ("mel_l1", False),
        ("duration", True),
        ("kl", True),
    ]
    mel = line(chart, "mel_l1")
    assert mel.xs == [0, 8, 16] == [event.step for event in validations]
    assert mel.ys == [event.metrics["mel_l1"] for event in validations]
    assert line(chart, "kl").ys == [event.metrics["kl"] for event in validations]
    assert line(chart, "duration").ys == [event.metrics["duration"] for event in validations]
    assert chart.title == "mel_l1 2.35"  # recorded 2.354 at step 16
    assert len({ln.color for ln in chart.lines}) == 3  # no metric shares the mel_l1 line's colour
    assert chart.markers == {"best": [8, 16]}


def test_free_running_speech_is_kept_and_logged(events: list[Event]) -> None:
    state = replay(events).state
    speech = speech_chart(state)  # not on screen for a vits run, but its data is kept
    assert line(speech, "free-running").xs == [8, 16]
    logs = [ln.message for ln in state.logs if ln.kind == "free_running"]
    assert len(logs) == 2
    expected = "free-running at step 16: distance 2.787 (floor 3.126 through vits)"
    assert logs[-1].startswith(expected)


def test_each_validation_logs_both_groups_losses_kl_and_duration(events: list[Event]) -> None:
    final = of_type(events, StepEvent)[-1].losses
    state = replay(events).state
    logs = [ln.message for ln in state.logs if ln.kind == "losses"]
    assert len(logs) == 2  # steps 8 and 16; none at step 0, before any training step
    parts = ", ".join(f"{part} {final[f'generator.{part}']:.3g}" for part in PARTS)
    assert logs[-1] == (
        f"training losses at step 16: discriminator {final['discriminator.total']:.3g} · "
        f"generator {final['generator.total']:.3g} ({parts})"
    )
    recorded = "(mel 2.06, kl 0.247, duration 2.93, adversarial 1.63, feature 0.986)"
    assert recorded in logs[-1]


def test_breakdown_and_samples(events: list[Event]) -> None:
    state = replay(events).state
    last = of_type(events, ProfileBreakdownEvent)[-1]
    groups = state.breakdown_groups or {}
    assert set(groups) == {"discriminator", "generator"}
    assert groups["generator"]["backward"] == last.groups["generator"]["backward_s"]
    assert groups_text(groups).plain.startswith("per group fwd/bwd/opt ms: discriminator ")
    kinds = [(row.step, row.kind, Path(row.path).name) for row in state.samples]
    at_16 = [(16, "audio", "01.wav"), (16, "image", "mel.png"), (16, "image", "alignment.png")]
    assert kinds[-3:] == at_16
    assert state.status == "finished" and state.best_step == 16 and state.step == 16
