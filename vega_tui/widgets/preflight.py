"""The preflight summary: what `trainer-core train --dry-run --json` says the run will do.

The panel only formats a plan dict (the trainer's JSON); it never computes anything itself. The run
folder is shown as `<runs folder>/<name>-<start time>`: the folder is named when Start is pressed, so
the summary holds no clock and two runs started from one preflight never share a folder.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from trainer_core.contract.units import format_bytes, format_duration

MAX_PROBLEMS_SHOWN = 3
# Above this estimated share of wall time spent validating, the preflight shows it as a warning.
HIGH_VALIDATION_SHARE = 0.1
_STAMP = re.compile(r"-\d{8}-\d{6}(-\d+)?$")


def run_folder_parts(plan: dict[str, Any]) -> tuple[Path, str]:
    """(runs folder, run name) from the plan's proposed run folder `<runs>/<name>-<YYYYmmdd-HHMMSS>`."""
    proposed = Path(plan["run_dir"])
    return proposed.parent, _STAMP.sub("", proposed.name)


class PreflightPanel(Static):
    """Shows 'computing', the plan, or the problem that blocks the run; `text` is what it shows, as plain text."""

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

    def show_plan(self, plan: dict[str, Any]) -> None:
        self.set_class(False, "-problem")
        rows = plan_rows(plan)
        self.text = "\n".join(f"{label} {value if isinstance(value, str) else value.plain}" for label, value in rows)
        self.update(plan_renderable(rows))


def plan_renderable(rows: list[tuple[str, Text | str]]) -> RenderableType:
    table = Table.grid(padding=(0, 1))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for label, value in rows:
        table.add_row(label, value)
    return table


def plan_rows(plan: dict[str, Any]) -> list[tuple[str, Text | str]]:
    """The summary as (label, value) rows, in reading order."""
    from trainer_core.contract.profile_loader import (
        display_path,  # pydantic-heavy module: not on the first frame's path
    )

    rows: list[tuple[str, Text | str]] = [("device", _device_text(plan.get("device", {})))]
    data = plan.get("data", {})
    rows.append(("data", _data_text(data)))
    if data.get("speakers"):
        rows.append(("speakers", _speakers_text(data)))
    rows += [("skipped", Text(line, style="yellow")) for line in _problem_lines(data)]
    rows.append(("RAM", _ram_text(plan.get("preload", {}))))
    rows.append(("model", _model_text(plan.get("model", {}))))
    if plan.get("task"):
        rows.append(
            ("code", Text(str(plan["task"].get("text", "")), style="yellow" if plan["task"].get("external") else ""))
        )
    rows.append(("plan", _schedule_text(plan.get("schedule", {}))))
    if plan.get("validation"):
        rows.append(("validate", _validation_text(plan["validation"])))
    if plan.get("init_from"):
        rows += init_from_rows(plan["init_from"])
    runs, name = run_folder_parts(plan)
    rows.append(("run", f"{display_path(runs)}/{name}-<start time>"))
    rows += [("note", Text(str(note), style="yellow")) for note in plan.get("notes", [])]
    return rows


def _device_text(device: dict[str, Any]) -> Text:
    """The device and the mode that chose it; the reason is on the compute mode row already."""
    text = Text(str(device.get("device", "?")), style="bold")
    text.append(f" · {device.get('mode', '?')} mode", style="dim")
    if device.get("fallback"):
        text.append(" · no usable accelerator, CPU instead", style="yellow")
    return text


def _data_text(data: dict[str, Any]) -> str:
    usable, skipped = data.get("usable", 0), data.get("skipped", 0)
    parts = [str(data.get("mode", "?")), f"{usable} usable, {skipped} skipped"]
    if data.get("mode") == "voice" and data.get("hours"):
        parts.append(format_duration(float(data["hours"]) * 3600))
    return " · ".join(parts)


def _speakers_text(data: dict[str, Any]) -> str:
    """Multi-speaker data: how many speakers, how they were read, and each one's clips and time."""
    speakers: dict[str, Any] = data["speakers"]
    listing = " · ".join(
        f"{name} {figures.get('clips', 0)} clips, {format_duration(float(figures.get('hours', 0.0)) * 3600)}"
        for name, figures in speakers.items()
    )
    return f"{len(speakers)} by {data.get('speaker_mode', '?')}: {listing}"


def _problem_lines(data: dict[str, Any]) -> list[str]:
    problems = data.get("problems", [])
    lines = [f"{Path(p.get('path', '?')).name}: {p.get('reason', '')}" for p in problems[:MAX_PROBLEMS_SHOWN]]
    if len(problems) > MAX_PROBLEMS_SHOWN:
        lines.append(f"… and {len(problems) - MAX_PROBLEMS_SHOWN} more (trainer-core check-data shows all)")
    return lines


def _ram_text(preload: dict[str, Any]) -> str:
    size = format_bytes(float(preload.get("estimated_bytes", 0)))
    if preload.get("where") == "disk":
        return f"~{size}: streamed from the disk feature cache"
    return f"~{size}, preloaded into RAM"


def _model_text(model: dict[str, Any]) -> str:
    if model.get("task"):
        return f"custom task {model['task']}"
    if model.get("kind") == "vocoder":
        return _vocoder_text(model.get("vocoder"))
    if model.get("kind") == "vits":  # an older trainer's plan does not describe it
        shape = model.get("vits")
        return vits_text(shape) if isinstance(shape, dict) else "vits (generator + discriminator)"
    text = f"{model.get('kind', '?')}, hidden {model.get('hidden', '?')}"
    layers = model.get("layers")
    if isinstance(layers, int):
        text += f", {layers} layer{'' if layers == 1 else 's'}"
    size = model.get("size")
    return f"{text}; model.size auto: {size['reason']}" if isinstance(size, dict) and "reason" in size else text


def _vocoder_text(shape: Any) -> str:
    """A GAN vocoder by its generator and discriminators (the plan's hidden/layers are a transformer's: unused)."""
    if not isinstance(shape, dict):
        return "vocoder (GAN: generator + discriminators)"  # a plan from before the trainer described it
    periods, resolutions = len(shape.get("periods") or ()), shape.get("resolutions", "?")
    return (
        f"vocoder, generator {shape.get('channels', '?')} channels x {shape.get('blocks', '?')} blocks; "
        f"{periods} period + {resolutions} resolution discriminators"
    )


def vits_text(shape: dict[str, Any]) -> str:
    """A VITS voice by its Piper quality level, its generator and discriminator, its training
    window and the memory a step needs (the plan's hidden/layers are the transformer's: unused)."""
    quality = shape.get("quality")
    level = f"Piper quality {quality}" if quality and quality != "custom" else "custom shape"
    sizes = (
        f"generator {_millions(shape.get('generator_parameters'))} + discriminator "
        f"{_millions(shape.get('discriminator_parameters'))} parameters"
    )
    width = f"hidden {shape.get('hidden_channels', '?')} x {shape.get('layers', '?')} layers"
    samples, frames = shape.get("segment_size", "?"), shape.get("segment_frames", "?")
    window = f"segments of {samples} samples ({frames} frames)"
    memory = shape.get("memory_estimate_bytes")
    needs = f"; ~{format_bytes(memory)} to train" if isinstance(memory, (int, float)) else ""
    return f"vits, {level}: {sizes}, {width}; {window}{needs}"


def _millions(count: Any) -> str:
    return f"{count / 1e6:.1f}M" if isinstance(count, (int, float)) else "?"


def init_from_rows(start: dict[str, Any]) -> list[tuple[str, Text | str]]:
    """What the run starts from; for a vits source, what of the corpus its symbol map covers
    ("maps") and the settings its checkpoint brings, which replace the profile's ("adopts")."""
    text = start.get("text", start.get("given", "?"))
    rows: list[tuple[str, Text | str]] = [("start from", str(text))]
    mapping = start.get("mapping")
    if isinstance(mapping, dict) and mapping.get("text"):
        rows.append(("maps", str(mapping["text"])))  # it names the new symbols itself
    settings = start.get("settings")
    if not isinstance(settings, list) or not start.get("applied", True):
        return rows
    piper = start.get("form") == "piper"  # its shape and audio decide the model
    whose = "the checkpoint's settings" if piper else "settings for starting from it"
    if settings:
        head = f"{whose} replace the profile's ({len(settings)}):"
        rows.append(("adopts", Text(head, style="yellow")))
        rows += [("", f"  {line}") for line in settings]
    elif piper:
        rows.append(("adopts", f"{whose}: the profile's already match them"))
    return rows


def _schedule_text(schedule: dict[str, Any]) -> str:
    accum = schedule.get("grad_accum") or 1
    batch = f"batch {schedule.get('batch_size')}" + (f" x {accum} accumulated" if accum > 1 else "")
    per_epoch = schedule.get("steps_per_epoch", 0)
    if schedule.get("target_hours"):
        return f"time budget {schedule['target_hours']} h (epochs planned after a short benchmark), {batch}"
    if schedule.get("max_steps"):
        return f"{schedule['max_steps']} steps (~{per_epoch}/epoch), {batch}"
    epochs = schedule.get("epochs", 0)
    return f"{epochs} epochs x {per_epoch} steps = {epochs * per_epoch} steps, {batch}"


def _validation_text(validation: dict[str, Any]) -> Text:
    """Validation items (and those the cap left out) and the estimated share of wall time, in yellow when high."""
    items, capped, share = validation.get("items", 0), validation.get("capped", 0), validation.get("estimated_share", 0)
    every = validation.get("every_steps")
    text = Text(f"{items} items" + (f" ({capped} capped away)" if capped else ""))
    text.append(f", every {every} steps" if every else ", each epoch")
    text.append(f" · ~{share:.0%} of the time (estimate)", style="yellow" if share > HIGH_VALIDATION_SHARE else "dim")
    return text
