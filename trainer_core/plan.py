"""The training plan: profile, device, data and memory resolved before any work starts.

`trainer-core train --dry-run` prints it; a real run starts from the same object, so what the
dashboard previews is exactly what the trainer will do. Torch is not imported here.

Data-parallel runs: `plan_launch` decides, before torchrun starts, how many processes the compute
mode allows on this machine (gpu mode with fewer GPUs than asked is an error; mixed falls back to
fewer ranks, or to CPU ranks, with a warning). Under torchrun each rank's plan carries its `World`,
and `select_rank_device` gives it cuda:LOCAL_RANK or the CPU, the same kind on every rank.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer_core.contract import rundir
from trainer_core.contract.errors import DataError, DeviceError, VegaError
from trainer_core.contract.init_sources import VoiceStart, audio_features, plan_start
from trainer_core.contract.profile import Profile
from trainer_core.contract.profile_loader import find_profile, load_profile, machine_file_path
from trainer_core.contract.resources import (
    DeviceChoice,
    GpuInfo,
    MachineResources,
    probe,
    select_device,
)
from trainer_core.contract.task_source import TaskSource, resolve_task
from trainer_core.data.item_selection import scan_for_training
from trainer_core.data.scan import DataReport, estimate_preload_bytes
from trainer_core.data.validation_split import (
    ValidationPlan,
    capped_away,
    held_out_count,
    plan_validation,
)
from trainer_core.torch_check import TORCH
from trainer_core.warmup import fitted_warmup, warmup_note
from trainer_core.world import SINGLE, Nodes, World, launch_notes

# Preload into RAM only when the estimate leaves this share of available memory free.
RAM_MARGIN = 0.5


@dataclass
class TrainPlan:
    profile_path: Path
    profile: Profile
    overrides: list[str]
    resources: MachineResources
    device: DeviceChoice
    data: DataReport
    run_dir: Path
    resume: str | None
    preload_bytes: int
    preload_where: str
    preload_reason: str
    steps_per_epoch: int
    validation: ValidationPlan | None = None
    """Validation items (after the cap) and the estimated share of wall time spent validating."""
    warmup_steps: int | None = None
    """The warmup the run will use when known now (None: fitted after a time
    budget's calibration)."""
    notes: list[str] = field(default_factory=list)
    world: World = SINGLE
    backend: str | None = None
    """The torch.distributed backend once this rank joined the process group."""
    launch: LaunchPlan | None = None
    """Set by `trainer-core train --nproc-per-node N` before torchrun starts
    (what --dry-run shows)."""
    model_size: dict[str, Any] | None = None
    """`model.size = "auto"`: the shape chosen, why, and every candidate measured."""
    init_from: dict[str, Any] | None = None
    """`train.init_from`: what the run starts from (checked to fit), or why it
    is not applied; None: scratch."""
    task: TaskSource | None = None
    """`model.task`: the module the run imports, its file, and the machine
    file's pattern that allows it."""
    voice_start: VoiceStart | None = None
    """VITS: the symbol map the run keeps (its start model's, or its own on
    a resume); None: a new map."""

    @property
    def data_mode(self) -> str:
        return self.data.mode


def start_settings(
    profile: Profile, kind: str, resume: str | None, run_dir: Path
) -> tuple[Profile, list[str]]:
    """The profile with what the start model decides (a Piper voice's shape
    and audio; a fine-tuning rate)."""
    from trainer_core.models.vits.start_settings import adopt_start

    return adopt_start(profile, kind, resume, run_dir)


def vits_start(
    profile: Profile, report: DataReport, resume: str | None, run_dir: Path
) -> tuple[VoiceStart | None, dict[str, Any] | None]:
    """The symbol map a VITS run keeps, and what maps from its start model onto this corpus."""
    from trainer_core.models.vits.start_symbols import plan_voice_start

    return plan_voice_start(profile, report, resume, run_dir)


def model_kind(profile: Profile, data_mode: str) -> str:
    if profile.model.task is not None:
        return "custom"
    if profile.model.kind != "auto":
        return profile.model.kind
    return "tts" if data_mode == "voice" else "lm"


def choose_preload(profile: Profile, need: int, available: int) -> tuple[str, str]:
    """RAM when the estimate fits with margin, else the disk feature cache; say why."""
    gib = 1024**3
    if profile.data.preload != "auto":
        return profile.data.preload, f"data.preload = {profile.data.preload!r} in the profile"
    if need <= available * RAM_MARGIN:
        return "ram", f"needs ~{need / gib:.2f} GiB, {available / gib:.1f} GiB available"
    return (
        "disk",
        f"needs ~{need / gib:.2f} GiB, more than half of the {available / gib:.1f} GiB available",
    )


def estimate_split(profile: Profile, report: DataReport) -> tuple[int, int, int]:
    """(training items, validation items, items the cap left out) estimated
    from the scan, before loading.

    Voice: the capped-away items train (data.voice_dataset). Text: items are
    windows of context_bytes; the held-out share is by bytes, and capped-away
    windows stay held out, unused (data.text).
    """
    d = profile.data
    if report.mode == "text":
        windows = max(1, report.text.text_bytes // d.context_bytes)
        held = min(windows - 1, int(windows * d.val_fraction)) if windows > 1 else 0
        val = min(held, d.val_max_items) if d.val_max_items > 0 else held
        return max(1, windows - held), val, held - val
    items = report.usable_count
    if report.voice.held_out:  # the corpus's own split, already capped (data.item_selection)
        return max(1, items - report.voice.held_out), report.voice.held_out, 0
    val = held_out_count(items, d.val_fraction, d.val_max_items)
    return max(1, items - val), val, capped_away(items, d.val_fraction, d.val_max_items)


def estimate_steps_per_epoch(profile: Profile, report: DataReport, world_size: int = 1) -> int:
    """Optimizer steps per epoch, from the usable items after the validation
    split (all ranks together)."""
    train_items = estimate_split(profile, report)[0]
    return max(1, train_items // (profile.train.batch_size * profile.train.grad_accum * world_size))


def estimate_validation(
    profile: Profile, report: DataReport, world_size: int = 1
) -> ValidationPlan:
    """Validation items and the estimated share of wall time spent on them
    (data.validation_split)."""
    t = profile.train
    _, val, capped = estimate_split(profile, report)
    step_items = t.batch_size * t.grad_accum * world_size
    spe = estimate_steps_per_epoch(profile, report, world_size)
    size = clip_segments(profile, report) if model_kind(profile, report.mode) == "vocoder" else 1.0
    return plan_validation(
        val, capped, profile.data.val_max_items, t.eval_every_steps, spe, step_items, size
    )


def clip_segments(profile: Profile, report: DataReport) -> float:
    """A vocoder's mean clip length in training segments: it validates whole
    clips and trains on segments."""
    segment_s = (
        profile.vocoder.segment_frames * profile.audio.hop_length / profile.audio.sample_rate
    )
    return max(1.0, report.voice.hours_usable * 3600 / max(1, report.usable_count) / segment_s)


def plan_warmup(profile: Profile, steps_per_epoch: int) -> tuple[int | None, str | None]:
    """(warmup the run will use, note when it differs from
    train.warmup_steps), as engine.warmup decides.

    A time budget's steps are known only after calibration: (None, a note
    when the warmup may shrink then).
    """
    t = profile.train
    if t.max_steps is not None:
        return t.warmup_steps, None
    if t.target_hours:
        note = (
            f"train.warmup_steps ({t.warmup_steps}) is shortened to 10% of the steps the time"
            " budget plans if it would take more than half of them (known after calibration)"
            if t.warmup_steps
            else None
        )
        return None, note
    planned = t.epochs * steps_per_epoch
    warmup = fitted_warmup(t.warmup_steps, planned)
    if warmup == t.warmup_steps:
        return warmup, None
    return warmup, warmup_note(
        t.warmup_steps, warmup, planned, "planned (train.epochs x steps per epoch)"
    )


# --------------------------------------------------------------------------------------------------
# Data-parallel: how many processes, on which devices


@dataclass(frozen=True)
class LaunchPlan:
    """What `--nproc-per-node N` becomes on this machine: processes, their device kind, and why."""

    requested: int
    nproc: int
    device_kind: str
    notes: tuple[str, ...] = ()
    nodes: Nodes | None = None
    """--nnodes and its rendezvous; None on one machine."""


def _cuda_gpus(resources: MachineResources) -> list[GpuInfo]:
    """CUDA GPUs torch can use (unknown counts as usable), by index."""
    return sorted((g for g in resources.gpus if g.torch_usable is not False), key=lambda g: g.index)


def _wants_cpu(profile: Profile) -> bool:
    device = (profile.compute.device or "").strip().lower()
    return profile.compute.mode == "cpu" or device == "cpu"


def _refuse_single_device(profile: Profile) -> None:
    device = (profile.compute.device or "").strip().lower()
    if device and device != "cpu":
        raise DeviceError(
            f"compute.device / --device {profile.compute.device!r} names one device, but every"
            " data-parallel process uses its own GPU (cuda:LOCAL_RANK); drop --device and choose"
            " GPUs with CUDA_VISIBLE_DEVICES"
        )


def plan_launch(
    profile: Profile, requested: int, resources: MachineResources, nodes: Nodes | None = None
) -> LaunchPlan:
    """Processes per node for `--nproc-per-node requested`, following the compute mode (see the
    module docstring), on this machine of `nodes`."""
    return dataclasses.replace(_plan_processes(profile, requested, resources), nodes=nodes)


def _plan_processes(profile: Profile, requested: int, resources: MachineResources) -> LaunchPlan:
    if requested < 1:
        raise VegaError(f"--nproc-per-node must be at least 1, got {requested}")
    _refuse_single_device(profile)
    if _wants_cpu(profile):
        return LaunchPlan(requested, requested, "cpu")
    have = len(_cuda_gpus(resources))
    if have >= requested:
        return LaunchPlan(requested, requested, "cuda")
    if profile.compute.mode == "gpu":
        raise DeviceError(
            f"compute mode gpu: --nproc-per-node {requested} needs {requested} CUDA GPUs, this"
            f" machine has {have} ({resources.accelerator_note}); use --nproc-per-node"
            f" {max(1, have)}"
            + (" or --mode mixed" if have else ", or --mode cpu / mixed to train on the CPU")
        )
    if have:
        note = (
            f"compute mode mixed: {requested} processes asked for but {have} usable CUDA GPU(s): "
            f"training with {have} process(es), one per GPU"
        )
        return LaunchPlan(requested, have, "cuda", (note,))
    note = (
        f"compute mode mixed: no usable CUDA GPU ({resources.accelerator_note}): "
        f"the {requested} processes train on the CPU (gloo)"
    )
    return LaunchPlan(requested, requested, "cpu", (note,))


def select_rank_device(profile: Profile, world: World, resources: MachineResources) -> DeviceChoice:
    """This rank's device under torchrun: cuda:LOCAL_RANK when every local
    rank gets a GPU, else the CPU."""
    _refuse_single_device(profile)
    mode, who = profile.compute.mode, world.describe()
    if _wants_cpu(profile):
        return DeviceChoice(
            mode=mode,
            device="cpu",
            kind="cpu",
            reason=f"{who} on the CPU (gloo): compute mode {mode}",
        )
    gpus = _cuda_gpus(resources)
    if len(gpus) >= world.local_world_size:
        gpu = next((g for g in gpus if g.index == world.local_rank), None)
        reason = f"{who} on cuda:{world.local_rank} (NCCL)" + (f": {gpu.label}" if gpu else "")
        return DeviceChoice(
            mode=mode, device=f"cuda:{world.local_rank}", kind="cuda", reason=reason, gpu=gpu
        )
    if mode == "gpu":
        raise DeviceError(
            f"compute mode gpu: {world.local_world_size} processes on this node need as many CUDA"
            f" GPUs, found {len(gpus)} ({resources.accelerator_note}); start fewer processes per"
            " node"
        )
    reason = (
        f"compute mode mixed: {world.local_world_size} processes on this node but {len(gpus)}"
        f" usable CUDA GPU(s): every rank trains on the CPU (gloo); {who}"
    )
    return DeviceChoice(
        mode=mode, device="cpu", kind="cpu", reason=reason, fallback=True, warnings=[reason]
    )


def check_resume_request(resume: str | None, run_dir: Path | None, world: World = SINGLE) -> None:
    """Fail early on a resume that cannot work, before any data is scanned or torch is loaded."""
    if resume == "auto" and run_dir is None:
        raise VegaError("--resume auto continues a run folder: pass it with --run-dir RUN_DIR")
    # Machines other than node 0 receive the checkpoint from rank 0: they need no copy of the file.
    missing = resume not in (None, "auto") and not Path(str(resume)).expanduser().is_file()
    if missing and world.node_rank == 0:
        raise VegaError(
            f"--resume {resume}: no such checkpoint file; pass a .pt file from a run's checkpoints/"
            " folder, or --resume auto with --run-dir"
        )


def make_plan(
    profile_ref: str,
    overrides: list[str],
    run_dir: Path | None = None,
    resume: str | None = None,
    use_machine_file: bool = True,
    world: World = SINGLE,
) -> TrainPlan:
    """The plan; `world` is this process's place under torchrun (its device is
    then cuda:LOCAL_RANK or the CPU)."""
    check_resume_request(resume, run_dir, world)
    path = find_profile(profile_ref)
    profile = load_profile(path, overrides, machine_file="default" if use_machine_file else None)
    # Before anything else: a module this machine does not allow stops the plan here,
    # having run none of its code.
    task = (
        resolve_task(profile.model.task, machine_file_path())
        if profile.model.task is not None
        else None
    )
    if profile.data.path is None:
        raise DataError(f"{path}: no data folder: set data.path in the profile or pass --data DIR")
    resources = probe(torch_check=TORCH if profile.compute.mode != "cpu" else None)
    if world.active:
        device = select_rank_device(profile, world, resources)
    else:
        c = profile.compute
        device = select_device(c.mode, c.min_gpu_memory_gb, c.device, resources)
    report = scan_for_training(profile.data, profile.run.seed)
    target = (
        run_dir
        if run_dir is not None
        else rundir.propose_run_dir(profile.run.runs_dir, profile.run.name)
    )
    if resume is not None and resume != "auto" and run_dir is None:
        # Resuming from a checkpoint file continues in that checkpoint's run folder.
        target = Path(resume).expanduser().resolve().parent.parent
    profile, model_size = auto_size(
        profile, report, device.device, world, target if resume else None
    )
    kind = model_kind(profile, report.mode)
    # The model a run starts from may decide its shape and audio (a Piper voice):
    # known before sizes and preload.
    profile, adopted = start_settings(profile, kind, resume, target)
    a = profile.audio
    need = estimate_preload_bytes(report, a.sample_rate, a.hop_length, a.n_mels)
    where, why = choose_preload(profile, need, resources.ram_available_bytes)
    plan = TrainPlan(
        profile_path=path,
        profile=profile,
        overrides=list(overrides),
        resources=resources,
        device=device,
        data=report,
        run_dir=target,
        resume=resume,
        preload_bytes=need,
        preload_where=where,
        preload_reason=why,
        steps_per_epoch=estimate_steps_per_epoch(profile, report, world.world_size),
        validation=estimate_validation(profile, report, world.world_size),
        world=world,
        model_size=model_size,
        task=task,
    )
    audio = audio_features(profile.audio.model_dump())
    plan.init_from = plan_start(
        profile.train.init_from, kind, audio, resume, target, profile.train.init_config
    )
    if plan.init_from is not None:
        plan.init_from["settings"] = adopted
    if kind == "vits":
        plan.voice_start, mapping = vits_start(profile, report, resume, target)
        if plan.init_from is not None and mapping:
            plan.init_from["mapping"] = mapping
    plan.warmup_steps, warmup_change = plan_warmup(profile, plan.steps_per_epoch)
    plan.notes.extend(w for w in device.warnings if w != device.reason)
    if warmup_change:
        plan.notes.append(warmup_change)
    if world.active and world.is_main:
        plan.notes.extend(launch_notes())
    return plan


def auto_size(
    profile: Profile, report: DataReport, device: str, world: World, resumed_run: Path | None
) -> tuple[Profile, dict[str, Any] | None]:
    """`model.size = "auto"` resolved: measured here for a new run, read back
    from the run folder on resume."""
    if profile.model.size != "auto":
        return profile, None
    if resumed_run is not None:
        return _size_of_run(profile, resumed_run), {
            "reason": f"the size {resumed_run.name} was started with"
        }
    if world.active:
        raise VegaError(
            'model.size = "auto" is measured in one process: run `trainer-core train --dry-run`'
            " once and set model.hidden, model.encoder_layers and model.heads to the size it prints"
        )
    # torch: only when a size is to be measured
    from trainer_core.models.size_probes import size_model

    sized, choice = size_model(profile, report, model_kind(profile, report.mode), device)
    return sized, choice.to_dict()


def _size_of_run(profile: Profile, run_dir: Path) -> Profile:
    import tomllib

    frozen = run_dir / rundir.PROFILE
    try:
        saved = tomllib.loads(frozen.read_text(encoding="utf-8"))
        shape = {key: int(saved["model"][key]) for key in ("hidden", "encoder_layers", "heads")}
        dropout, lr = float(saved["model"]["dropout"]), float(saved["train"]["lr"])
    except (OSError, KeyError, ValueError, TypeError, tomllib.TOMLDecodeError) as exc:
        raise VegaError(
            f"{frozen}: cannot read the model size this run was started with ({exc})"
        ) from exc
    model = profile.model.model_copy(
        update={**shape, "dropout": dropout, "attention_dropout": None, "size": "fixed"}
    )
    return profile.model_copy(
        update={"model": model, "train": profile.train.model_copy(update={"lr": lr})}
    )
