"""The dashboard on a GAN vocoder run (two optimizer groups: discriminator, then generator), pure parts.

A real recorded run (tests/fixtures/events/vocoder_completed: `tiny_profile("vocoder")`, 30 steps on the demo voice,
validation every 6 steps from step 0, the discriminator at a quarter of the generator's learning rate) replayed
into a `RunStore`: one learning-rate line per group, the discriminator's loss beside the generator's, the generator's
parts, the Griffin-Lim reference line on the validation chart, the per-group profiler times, and the one moment the
validation metric first beats the reference. A one-optimizer run (lm_completed) must show what it showed before.
The Textual app on the same run is in tests/test_app_live.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainer_core.contract.event_lines import parse_event
from trainer_core.contract.eventlog import read_all
from trainer_core.contract.protocol import Event, ProfileBreakdownEvent, StepEvent, ValidationEvent
from vega_tui.store import RunStore
from vega_tui.widgets.breakdown import breakdown_text, format_ms, groups_text
from vega_tui.widgets.charts import (
    CHART_BUILDERS,
    loss_chart,
    lr_chart,
    parts_chart,
    validation_chart,
    validation_wanted,
)

FIXTURES = Path(__file__).parent / "fixtures" / "events"
VOCODER = FIXTURES / "vocoder_completed"


def vocoder_lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (VOCODER / "events.jsonl").read_text(encoding="utf-8").splitlines()]


def replay(events: list[Event], run_dir: Path = VOCODER) -> RunStore:
    store = RunStore(run_dir=run_dir)
    store.apply(events)
    return store


def vocoder_events() -> list[Event]:
    return read_all(VOCODER / "events.jsonl")


def of_type(events: list[Event], cls: type) -> list[Any]:
    return [event for event in events if isinstance(event, cls)]


def line(data: Any, label: str) -> Any:
    return next(line for line in data.lines if line.label == label)


# ---------------------------------------------------------------------------------------------------------------
# Learning rates and losses per optimizer group


def test_each_group_gets_its_own_learning_rate_line() -> None:
    events = vocoder_events()
    steps = of_type(events, StepEvent)
    assert steps[-1].lrs["discriminator"] != steps[-1].lrs["generator"]  # the fixture really has two rates
    state = replay(events).state
    assert state.groups == ["discriminator", "generator"] and state.primary_group == "generator"

    chart = lr_chart(state)
    assert [(ln.label, ln.color) for ln in chart.lines] == [("discriminator", "magenta"), ("generator", "green")]
    generator, discriminator = line(chart, "generator"), line(chart, "discriminator")
    # The primary group's rate is `lr`: every step of every window (lr_series). The other group's comes only
    # with the window's last step (`lrs`).
    assert generator.xs == [x for event in steps for x in event.step_series] == list(range(1, 31))
    assert generator.ys == [y for event in steps for y in event.lr_series]
    assert discriminator.xs == [event.step for event in steps]
    assert discriminator.ys == [event.lrs["discriminator"] for event in steps]
    assert "lr" not in {ln.label for ln in chart.lines}


def test_discriminator_and_generator_losses_are_separate_lines() -> None:
    events = vocoder_events()
    steps = of_type(events, StepEvent)
    state = replay(events).state
    chart = loss_chart(state)
    assert [(ln.label, ln.right) for ln in chart.lines] == [
        ("generator", False),
        ("smoothed", False),
        ("discriminator", True),  # ~1 beside the generator's ~100: a right axis of its own
    ]
    generator, discriminator = line(chart, "generator"), line(chart, "discriminator")
    assert generator.xs == list(range(1, 31))  # `loss` is generator.total, every step of every window
    assert generator.ys[-1] == pytest.approx(steps[-1].losses["generator.total"])
    assert discriminator.xs == [event.step for event in steps]
    assert discriminator.ys == [event.losses["discriminator.total"] for event in steps]
    assert "validation" not in {ln.label for ln in chart.lines}  # mel L1: it is on the validation chart
    assert loss_chart(state, log_y=True).title == "loss (log scale)"

    parts = parts_chart(state)
    assert parts.title == "loss parts (generator)"
    assert sorted(ln.label for ln in parts.lines) == ["adversarial", "feature", "mel"]
    assert line(parts, "mel").ys == [event.losses["generator.mel"] for event in steps]


def test_each_validation_logs_the_groups_losses_and_the_reference() -> None:
    events = vocoder_events()
    state = replay(events).state
    validations = of_type(events, ValidationEvent)
    logs = [ln.message for ln in state.logs]
    last = validations[-1]
    assert (
        f"validation at step {last.step}: loss {last.loss:.4g}, mel_l1 {last.metric_value:.4g} (griffin_lim 0.2145)"
        in logs
    )
    losses = [message for message in logs if message.startswith("training losses at step")]
    assert len(losses) == len(validations) - 1  # none at step 0: no training step yet
    final = of_type(events, StepEvent)[-1].losses
    assert losses[-1] == (
        f"training losses at step 30: discriminator {final['discriminator.total']:.3g} · generator "
        f"{final['generator.total']:.3g} (mel {final['generator.mel']:.3g}, adversarial "
        f"{final['generator.adversarial']:.3g}, feature {final['generator.feature']:.3g})"
    )


# ---------------------------------------------------------------------------------------------------------------
# The reference to beat


def test_validation_chart_draws_the_reference_as_a_flat_line() -> None:
    events = vocoder_events()
    validations = of_type(events, ValidationEvent)
    state = replay(events).state
    assert validation_wanted(state)
    assert (state.metric_name, state.reference_name) == ("mel_l1", "griffin_lim")
    chart = validation_chart(state)
    metric, reference = line(chart, "mel_l1"), line(chart, "griffin_lim")
    assert metric.xs == [event.step for event in validations] == [0, 6, 12, 18, 24, 30]
    assert metric.ys == [event.metrics["mel_l1"] for event in validations]
    assert reference.xs == [0, 30] and reference.ys == [validations[-1].reference["mel_l1"]] * 2
    assert chart.title == f"mel_l1 {validations[-1].metrics['mel_l1']:.3g} · griffin_lim 0.215"
    assert "passed" not in chart.markers  # 2.8 never beats 0.21 in 30 steps
    assert state.reference_passed_step is None


def with_reference(lines: list[dict[str, Any]], mel_l1: float, trainer_says_at: int | None = None) -> list[Event]:
    """The recorded run with Griffin-Lim's mel_l1 set to `mel_l1` (so training beats it), and the trainer's own
    log line just before the validation that first beats it, as `_validation_event` writes it."""
    out: list[Event] = []
    for raw in lines:
        if raw["type"] == "validation":
            raw = {**raw, "reference": {**raw["reference"], "mel_l1": mel_l1}}
            if raw["step"] == trainer_says_at:
                message = f"step {raw['step']}: mel_l1 {raw['metric_value']:.4g} passes griffin_lim's {mel_l1:.4g}"
                out.append(parse_event({**raw, "type": "log", "level": "info", "message": message}))
        out.append(parse_event(raw))
    return out


@pytest.mark.parametrize("trainer_says", [True, False], ids=["trainer-logs-it", "dashboard-logs-it"])
def test_first_validation_below_the_reference_is_said_once(trainer_says: bool) -> None:
    # Recorded mel_l1: 3.81 at 0, 3.50 at 6, 3.18 at 12, 2.96 at 18, 2.85 at 24, 2.83 at 30: 18 is the first below 3.
    state = replay(with_reference(vocoder_lines(), 3.0, 18 if trainer_says else None)).state
    assert state.reference_passed_step == 18
    assert [(m.kind, m.step) for m in state.markers if m.kind == "passed"] == [("passed", 18)]
    said = [ln for ln in state.logs if "passes griffin_lim" in ln.message]
    assert len(said) == 1, said  # once, whoever says it
    assert said[0].kind == ("log" if trainer_says else "validation")
    assert said[0].message.startswith("step 18: mel_l1 2.956 passes griffin_lim")
    assert validation_chart(state).markers["passed"] == [18]
    assert line(validation_chart(state), "griffin_lim").ys == [3.0, 3.0]


def test_the_untrained_model_at_step_0_does_not_count_as_passing() -> None:
    state = replay(with_reference(vocoder_lines(), 10.0)).state  # every validation is below 10, step 0 too
    assert state.reference_passed_step == 6
    assert [m.step for m in state.markers if m.kind == "passed"] == [6]


# ---------------------------------------------------------------------------------------------------------------
# Profiler times per group


def test_breakdown_keeps_each_groups_phases() -> None:
    events = vocoder_events()
    last = of_type(events, ProfileBreakdownEvent)[-1]
    state = replay(events).state
    assert state.breakdown_groups == {
        group: {"forward": times["forward_s"], "backward": times["backward_s"], "optimizer": times["optimizer_s"]}
        for group, times in last.groups.items()
    }
    # Recorded: discriminator 6.99/10.7/4.12 ms, generator 6.50/16.8/1.10 ms.
    text = groups_text(state.breakdown_groups).plain
    assert text == "per group fwd/bwd/opt ms: discriminator 7.0/11/4.1 · generator 6.5/17/1.1"
    assert len(text) <= 78  # fits an 80-column terminal beside the bar's padding
    assert [format_ms(s) for s in (0.00042, 0.0042, 0.042)] == ["0.42", "4.2", "42"]  # a GPU's sub-ms phases


# ---------------------------------------------------------------------------------------------------------------
# One optimizer: as before


def test_one_optimizer_run_shows_what_it_showed_before() -> None:
    run_dir = FIXTURES / "lm_completed"
    state = replay(read_all(run_dir / "events.jsonl"), run_dir).state
    assert state.groups == [] and state.primary_group is None and state.reference == {}
    assert state.breakdown_groups is None and state.reference_passed_step is None
    assert not validation_wanted(state)  # the speech chart keeps its place
    lr = lr_chart(state)
    assert [(ln.label, ln.color) for ln in lr.lines] == [("lr", "green")]
    assert (lr.lines[0].xs, lr.lines[0].ys) == (state.series["lr"].xs, state.series["lr"].ys)
    loss = loss_chart(state)
    assert [(ln.label, ln.right) for ln in loss.lines] == [("loss", False), ("smoothed", False), ("validation", False)]
    assert line(loss, "validation").xs == [20, 40, 60]
    assert [ln.label for ln in parts_chart(state).lines] == ["ce"] and parts_chart(state).title == "loss parts"
    assert not any(ln.right for build in CHART_BUILDERS.values() for ln in build(state).lines)
    assert not any(ln.kind == "losses" or "passes" in ln.message for ln in state.logs)
    assert "\n" not in breakdown_text(state.breakdown, 78).plain
    assert validation_chart(state).title.startswith("bits_per_byte ")  # defined, but not on screen
