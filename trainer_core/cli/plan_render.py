"""The dry run's plan as a table for people (`trainer-core train --dry-run`); `--json` prints the
same facts as a document for programs (`trainer_core.cli.plan_document.plan_report`)."""

from __future__ import annotations

from trainer_core.cli.plan_document import plan_report
from trainer_core.contract.notify_config import URL_ENV, read_notify_config
from trainer_core.contract.plan_report import PlanData, PlanModel
from trainer_core.contract.profile_loader import machine_file_path
from trainer_core.data.validation_split import ValidationPlan
from trainer_core.plan import TrainPlan


def describe_model(m: PlanModel) -> str:
    """The plan's model row: a vocoder's generator and discriminators, or
    the transformer's shape."""
    if m.task:
        return f"custom task {m.task}"
    if (vits := m.vits) is not None:
        return (
            f"vits {vits.quality} (generator {vits.generator_parameters / 1e6:.1f}M, discriminator "
            f"{vits.discriminator_parameters / 1e6:.1f}M parameters; "
            f"{vits.duration_predictor} durations, resblock {vits.resblock}, "
            f"segments of {vits.segment_size} samples; ~"
            f"{vits.memory_estimate_bytes / 1024**3:.1f} GiB to train)"
        )
    if (v := m.vocoder) is not None:
        return (
            f"vocoder (generator {v.channels} channels x {v.blocks} blocks, segments of "
            f"{v.segment_frames} frames; {len(v.periods)} period + {v.resolutions} resolution "
            f"discriminators, width {v.discriminator_channels})"
        )
    return f"{m.kind} (hidden {m.hidden}, {m.layers} layers, {m.heads} heads)"


def speakers_row(data: PlanData) -> str:
    """The plan's speakers row: how many, how they were read, each one's clips and minutes."""
    figures = data.speakers.items()
    listing = ", ".join(f"{name} {f.clips} clips / {f.hours * 60:.1f} min" for name, f in figures)
    return f"{len(data.speakers)} ({data.speaker_mode}): {listing}"


def validation_text(v: ValidationPlan) -> str:
    """One line: items, those the cap left out, and the estimated share of wall time."""
    capped = (
        f" ({v.capped} more capped away by data.val_max_items = {v.max_items})" if v.capped else ""
    )
    when = f"every {v.every_steps} steps" if v.every_steps else "each epoch"
    size = f" x {v.item_size:.0f} segments per whole clip" if v.item_size > 1 else ""
    return (
        f"{v.items} items{capped}, {when}: ~{v.share:.1%} of wall time validating "
        f"(estimate: a validation item costs ~1/3 of a training item{size})"
    )


def render_plan(plan: TrainPlan) -> None:
    """Rich rendering of the plan for people; `--json` gives the same facts to programs."""
    from rich.console import Console
    from rich.table import Table

    d = plan_report(plan)
    table = Table(title="Training plan", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    added = f"  (+ {', '.join(plan.overrides)})" if plan.overrides else ""
    table.add_row("profile", d.profile + added)
    table.add_row("device", f"{d.device.device}  — {d.device.reason}")
    data = d.data
    table.add_row("data", f"{data.path}  [{data.mode}] — {data.reason}")
    table.add_row("usable", f"{data.usable} items, {data.hours:.3f} h; {data.skipped} skipped")
    if data.speakers:
        table.add_row("speakers", speakers_row(data))
    m = d.model
    table.add_row("model", describe_model(m))
    if plan.task is not None:
        table.add_row("code", plan.task.runs_code_text())
    if m.size is not None:
        table.add_row("model size", f"auto: {m.size.reason}")
    table.add_row("preload", f"{d.preload.where}: {d.preload.reason}")
    s = d.schedule
    length = f"{s.max_steps} steps" if s.max_steps else f"{s.epochs} epochs"
    if s.target_hours:
        length = f"time budget {s.target_hours} h (epochs planned after calibration)"
    warmup = s.warmup_effective
    fitted = f"warmup {s.warmup_steps} (fitted at calibration)"
    batch = f"batch {s.batch_size} x accum {s.grad_accum}"
    warmup_text = f"warmup {warmup}" if warmup is not None else fitted
    table.add_row(
        "schedule",
        f"{batch}, ~{s.steps_per_epoch} steps/epoch, {length}, {warmup_text}",
    )
    if plan.validation is not None:
        table.add_row("validation", validation_text(plan.validation))
    if (start := d.init_from) is not None:
        table.add_row("start from", start.text)
        if start.mapping is not None:
            table.add_row("maps", start.mapping.text)
        for change in start.settings or []:
            table.add_row("adopted", change)
    table.add_row("run folder", d.run_dir + (f"  (resume {plan.resume})" if plan.resume else ""))
    # a bad setting fails here, before any training
    notify = read_notify_config(machine_file_path())
    table.add_row(
        "notify",
        notify.where() if notify else f"off ([notify] in {machine_file_path()} or {URL_ENV})",
    )
    if plan.launch is not None:
        launch = plan.launch
        table.add_row(
            "processes",
            f"{launch.nproc} per node on {launch.device_kind} (asked for {launch.requested})",
        )
        if (nodes := launch.nodes) is not None:
            where = f"{nodes.master_addr}:{nodes.master_port}"
            table.add_row(
                "nodes", f"node {nodes.node_rank} of {nodes.nnodes}, rendezvous at {where}"
            )
        for note in launch.notes:
            table.add_row("note", note)
    for note in plan.notes:
        table.add_row("note", note)
    console = Console()
    console.print(table)
    for problem in plan.data.problems[:20]:
        console.print(f"  skipped {problem.path}: {problem.reason}")
    if len(plan.data.problems) > 20:
        console.print(
            f"  … and {len(plan.data.problems) - 20} more (trainer-core check-data"
            f" {plan.data.path})"
        )
