"""The preflight summary: what `trainer-core train --dry-run --json` says the run will do.

The panel only formats the trainer's plan (`trainer_core.contract.plan_report.PlanReport`, parsed
from its JSON); it never computes anything itself. The run
folder is shown as `<runs folder>/<name>-<start time>`: the folder is named when Start is pressed,
so the summary holds no clock and two runs started from one preflight never share a folder.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from trainer_core.contract.units import format_bytes, format_duration

if TYPE_CHECKING:
    from trainer_core.contract.plan_report import (
        InitFrom,
        PlanData,
        PlanDevice,
        PlanModel,
        PlanReport,
        Preload,
        Schedule,
        ValidationEstimate,
        VitsShape,
        VocoderShape,
    )

MAX_PROBLEMS_SHOWN = 3
# Above this estimated share of wall time spent validating, the preflight shows it as a warning.
HIGH_VALIDATION_SHARE = 0.1
_STAMP = re.compile(r"-\d{8}-\d{6}(-\d+)?$")


def run_folder_parts(plan: PlanReport) -> tuple[Path, str]:
    """(runs folder, run name) from the plan's proposed run folder
    `<runs>/<name>-<YYYYmmdd-HHMMSS>`."""
    proposed = Path(plan.run_dir)
    return proposed.parent, _STAMP.sub("", proposed.name)


class PreflightPanel(Static):
    """Shows 'computing', the plan, or the problem that blocks the run; `text`
    is what it shows, as plain text."""

    text = ""

    def show_waiting(self, message: str = "computing the plan…") -> None:
        self.set_class(False, "-problem")
        self.text = message
        self.update(Text(message, style="dim italic"))

    def show_problem(self, title: str, message: str) -> None:
        self.set_class(True, "-problem")
        body = Text()
        body.append(f"{title}\n", style="bold red")
        body.append(message)
        self.text = body.plain
        self.update(body)

    def show_plan(self, plan: PlanReport) -> None:
        self.set_class(False, "-problem")
        rows = plan_rows(plan)
        self.text = "\n".join(
            f"{label} {value if isinstance(value, str) else value.plain}" for label, value in rows
        )
        self.update(plan_renderable(rows))


def plan_renderable(rows: list[tuple[str, Text | str]]) -> RenderableType:
    table = Table.grid(padding=(0, 1))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for label, value in rows:
        table.add_row(label, value)
    return table


def plan_rows(plan: PlanReport) -> list[tuple[str, Text | str]]:
    """The summary as (label, value) rows, in reading order."""
    from trainer_core.contract.profile_loader import (
        display_path,  # pydantic-heavy module: not on the first frame's path
    )

    rows: list[tuple[str, Text | str]] = [("device", _device_text(plan.device))]
    data = plan.data
    rows.append(("data", _data_text(data)))
    if data.speakers:
        rows.append(("speakers", _speakers_text(data)))
    rows += [("skipped", Text(line, style="yellow")) for line in _problem_lines(data)]
    rows.append(("RAM", _ram_text(plan.preload)))
    rows.append(("model", _model_text(plan.model)))
    if (task := plan.task) is not None:
        rows.append(("code", Text(task.text, style="yellow" if task.external else "")))
    rows.append(("plan", _schedule_text(plan.schedule)))
    if plan.validation is not None:
        rows.append(("validate", _validation_text(plan.validation)))
    if plan.init_from is not None:
        rows += init_from_rows(plan.init_from)
    runs, name = run_folder_parts(plan)
    rows.append(("run", f"{display_path(runs)}/{name}-<start time>"))
    rows += [("note", Text(note, style="yellow")) for note in plan.notes]
    return rows


def _device_text(device: PlanDevice) -> Text:
    """The device and the mode that chose it; the reason is on the compute mode row already."""
    text = Text(device.device, style="bold")
    text.append(f" · {device.mode} mode", style="dim")
    if device.fallback:
        text.append(" · no usable accelerator, CPU instead", style="yellow")
    return text


def _data_text(data: PlanData) -> str:
    parts = [data.mode, f"{data.usable} usable, {data.skipped} skipped"]
    if data.mode == "voice" and data.hours:
        parts.append(format_duration(data.hours * 3600))
    return " · ".join(parts)


def _speakers_text(data: PlanData) -> str:
    """Multi-speaker data: how many speakers, how they were read, and each one's clips and time."""
    listing = " · ".join(
        f"{name} {figures.clips} clips, {format_duration(figures.hours * 3600)}"
        for name, figures in data.speakers.items()
    )
    return f"{len(data.speakers)} by {data.speaker_mode}: {listing}"


def _problem_lines(data: PlanData) -> list[str]:
    problems = data.problems
    lines = [f"{Path(p.path).name}: {p.reason}" for p in problems[:MAX_PROBLEMS_SHOWN]]
    if len(problems) > MAX_PROBLEMS_SHOWN:
        lines.append(
            f"… and {len(problems) - MAX_PROBLEMS_SHOWN} more (trainer-core check-data shows all)"
        )
    return lines


def _ram_text(preload: Preload) -> str:
    size = format_bytes(float(preload.estimated_bytes))
    if preload.where == "disk":
        return f"~{size}: streamed from the disk feature cache"
    return f"~{size}, preloaded into RAM"


def _model_text(model: PlanModel) -> str:
    if model.task:
        return f"custom task {model.task}"
    if model.kind == "vocoder":
        return _vocoder_text(model.vocoder)
    if model.kind == "vits":  # an older trainer's plan does not describe it
        if model.vits is None:
            return "vits (generator + discriminator)"
        return vits_text(model.vits)
    layers = model.layers
    text = f"{model.kind}, hidden {model.hidden}, {layers} layer{'' if layers == 1 else 's'}"
    return f"{text}; model.size auto: {model.size.reason}" if model.size is not None else text


def _vocoder_text(shape: VocoderShape | None) -> str:
    """A GAN vocoder by its generator and discriminators (the plan's
    hidden/layers are a transformer's: unused)."""
    if shape is None:
        # a plan from before the trainer described it
        return "vocoder (GAN: generator + discriminators)"
    return (
        f"vocoder, generator {shape.channels} channels x {shape.blocks} blocks; "
        f"{len(shape.periods)} period + {shape.resolutions} resolution discriminators"
    )


def vits_text(shape: VitsShape) -> str:
    """A VITS voice by its Piper quality level, its generator and discriminator, its training
    window and the memory a step needs (the plan's hidden/layers are the transformer's: unused)."""
    quality = shape.quality
    level = f"Piper quality {quality}" if quality and quality != "custom" else "custom shape"
    sizes = (
        f"generator {shape.generator_parameters / 1e6:.1f}M + discriminator "
        f"{shape.discriminator_parameters / 1e6:.1f}M parameters"
    )
    width = f"hidden {shape.hidden_channels} x {shape.layers} layers"
    window = f"segments of {shape.segment_size} samples ({shape.segment_frames} frames)"
    needs = f"; ~{format_bytes(shape.memory_estimate_bytes)} to train"
    return f"vits, {level}: {sizes}, {width}; {window}{needs}"


def init_from_rows(start: InitFrom) -> list[tuple[str, Text | str]]:
    """What the run starts from; for a vits source, what of the corpus its symbol map covers
    ("maps") and the settings its checkpoint brings, which replace the profile's ("adopts")."""
    rows: list[tuple[str, Text | str]] = [("start from", start.text)]
    if start.mapping is not None and start.mapping.text:
        rows.append(("maps", start.mapping.text))  # it names the new symbols itself
    settings = start.settings
    if settings is None or not start.applied:
        return rows
    piper = start.form == "piper"  # its shape and audio decide the model
    whose = "the checkpoint's settings" if piper else "settings for starting from it"
    if settings:
        head = f"{whose} replace the profile's ({len(settings)}):"
        rows.append(("adopts", Text(head, style="yellow")))
        rows += [("", f"  {line}") for line in settings]
    elif piper:
        rows.append(("adopts", f"{whose}: the profile's already match them"))
    return rows


def _schedule_text(schedule: Schedule) -> str:
    accum = schedule.grad_accum
    batch = f"batch {schedule.batch_size}" + (f" x {accum} accumulated" if accum > 1 else "")
    per_epoch = schedule.steps_per_epoch
    if schedule.target_hours:
        hours = schedule.target_hours
        return f"time budget {hours} h (epochs planned after a short benchmark), {batch}"
    if schedule.max_steps:
        return f"{schedule.max_steps} steps (~{per_epoch}/epoch), {batch}"
    epochs = schedule.epochs
    return f"{epochs} epochs x {per_epoch} steps = {epochs * per_epoch} steps, {batch}"


def _validation_text(validation: ValidationEstimate) -> Text:
    """Validation items (and those the cap left out) and the estimated share of
    wall time, in yellow when high."""
    share = validation.estimated_share
    capped = f" ({validation.capped} capped away)" if validation.capped else ""
    text = Text(f"{validation.items} items{capped}")
    every = validation.every_steps
    text.append(f", every {every} steps" if every else ", each epoch")
    text.append(
        f" · ~{share:.0%} of the time (estimate)",
        style="yellow" if share > HIGH_VALIDATION_SHARE else "dim",
    )
    return text
