"""Set-up and clean-up stages around the loop: build the trainer, resume it, export at the end.

Under torchrun every rank builds the same trainer (same seed, so the same initial
weights), shards the data, resumes from the same checkpoint and checks that it agrees with
the other ranks; rank 0 alone exports.
"""

from __future__ import annotations

import logging
import random
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from trainer_core.contract import rundir
from trainer_core.contract.errors import VegaError
from trainer_core.contract.init_sources import audio_features, check_compatible
from trainer_core.contract.profile_loader import profile_to_toml
from trainer_core.contract.protocol import (
    DeviceSelectedEvent,
    LogEvent,
    PreloadDoneEvent,
    PreloadProgressEvent,
    TaskEvent,
    WarningEvent,
)
from trainer_core.engine.best_repair import repair_best
from trainer_core.engine.checkpoint_share import shared_resume
from trainer_core.engine.control_state import ControlState
from trainer_core.engine.distributed import (
    gather_digests,
    gather_ints,
    parameter_digest,
    seed_rank_stream,
    shard_task_data,
)
from trainer_core.engine.events import EventHub
from trainer_core.engine.faults import fault_warning, hold_at
from trainer_core.engine.precision import PrecisionPolicy, cuda_bf16_supported
from trainer_core.engine.task_contract import BUILDING, TaskCall
from trainer_core.engine.trainer import Trainer
from trainer_core.models.registry import build_task
from trainer_core.plan import TrainPlan, model_kind
from trainer_core.world import DistributedError

if TYPE_CHECKING:
    from trainer_core.engine.init_from import InitReport
    from trainer_core.engine.model_source import ModelSource
    from trainer_core.models.base import Task

log = logging.getLogger("trainer_core")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_trainer(plan: TrainPlan, hub: EventHub, control: ControlState, run_dir: Path) -> Trainer:
    p = plan.profile
    faults = fault_warning(p.debug)  # before the preload, the first place a switch can act
    if faults is not None:
        hub.warn(faults[1], code=faults[0])
    if p.compute.num_threads:
        torch.set_num_threads(p.compute.num_threads)
    seed_everything(p.run.seed)
    device = torch.device(plan.device.device)
    bf16 = cuda_bf16_supported(device) if device.type == "cuda" else None
    precision = PrecisionPolicy.resolve(p.train.precision, device.type, bf16_supported=bf16)
    d = plan.device
    hub.emit(
        DeviceSelectedEvent(
            mode=p.compute.mode,
            device=d.device,
            reason=d.reason,
            fallback=d.fallback,
            precision=precision.name,
        )
    )
    if device.type == "cuda":
        # TF32 only changes fp32 matmuls/convolutions; mixed-precision steps are unaffected.
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = p.train.tf32
    log.info(
        "precision: %s%s; torch %s",
        precision.describe(),
        f"; TF32 {'on' if p.train.tf32 else 'off'}" if device.type == "cuda" else "",
        torch.__version__,
    )
    if plan.model_size is not None:
        hub.emit(
            LogEvent(
                level="info", message=f"model size (model.size = auto): {plan.model_size['reason']}"
            )
        )
    # the task's factory and constructor: no task yet to name its files
    with TaskCall(None, BUILDING):
        task = build_task(
            p,
            plan.data,
            device,
            preload_where=plan.preload_where,
            progress=lambda fields: _preload_progress(hub, fields),
            start=plan.voice_start,
        )
    with TaskCall(task, BUILDING):
        preload = task.preload_done_event(plan.preload_reason)
        items, described = task.train_items(), task.describe()
    if preload is not None:
        hub.emit(PreloadDoneEvent(**preload))
    hub.emit(task_event(plan, task))
    _check_one_batch_fits(plan, items)
    for warning in described.get("warnings", []):
        hub.warn(warning, code="data")
    world = plan.world
    shard_task_data(task, world)
    trainer = Trainer(
        p, task, device, precision, hub, run_dir, profile_to_toml(p), control, world=world
    )
    # After the model is built, so every rank starts from the same weights but
    # draws its own dropout masks.
    seed_rank_stream(p.run.seed, world)
    params = sum(x.numel() for x in trainer.module.parameters())
    log.info(
        "model: %s with %.2fM parameters; %d training items",
        type(task.model).__name__,
        params / 1e6,
        task.train_items(),
    )
    if world.active:
        log.info(
            "data-parallel: %s on %s; global batch %d",
            world.describe(),
            device,
            trainer.global_batch(),
        )
    return trainer


def task_event(plan: TrainPlan, task: Task) -> TaskEvent:
    """Which task trains: a built-in by its kind, or model.task's factory with
    the file its module came from."""
    source, size = plan.task, sum(p.numel() for p in task.model.parameters() if p.requires_grad)
    if source is None:
        return TaskEvent(
            name=model_kind(plan.profile, plan.data.mode), speaks=task.speaks(), parameters=size
        )
    spec, file = source.spec, str(source.file) if source.file else None
    return TaskEvent(
        name=str(spec),
        module=spec.module,
        file=file,
        external=not spec.in_vega,
        speaks=task.speaks(),
        parameters=size,
    )


def _check_one_batch_fits(plan: TrainPlan, train_items: int) -> None:
    t, world = plan.profile.train, plan.world.world_size
    effective = t.batch_size * t.grad_accum * world
    if train_items >= effective:
        return
    ranks = f" x {world} processes" if world > 1 else ""
    raise VegaError(
        f"the training split has {train_items} items, fewer than one batch (train.batch_size"
        f" {t.batch_size} x train.grad_accum {t.grad_accum}{ranks} = {effective}); lower"
        " train.batch_size or add data"
    )


def load_start_source(plan: TrainPlan) -> ModelSource | None:
    """The model train.init_from names when the plan applies it (not on a resume), read
    and checked to fit this run before any data is loaded, so a wrong source fails in
    seconds, not after the preload."""
    from trainer_core.engine.model_source import load_model_source

    given, start = plan.profile.train.init_from, plan.init_from
    if given is None or not start or not start.get("applied"):
        return None
    t = plan.profile.train
    source = load_model_source(given, t.init_config, t.init_discriminator)
    p = plan.profile
    kind, audio = model_kind(p, plan.data.mode), audio_features(p.audio.model_dump())
    check_compatible(str(given), source.kind, source.audio, kind, audio)
    return source


def start_model(
    trainer: Trainer, plan: TrainPlan, hub: EventHub, source: ModelSource | None
) -> None:
    """Where the weights start: the run's own checkpoint when it resumes (that wins), else the model
    train.init_from names (`source`), else the fresh initialisation."""
    resumed = resume_into(trainer, plan, hub)
    given = plan.profile.train.init_from
    if resumed and given is not None:
        log.info(
            "train.init_from (%s) is not applied: the run resumed from its own checkpoint", given
        )
    elif source is not None:
        init_into(trainer, hub, source)


def init_into(trainer: Trainer, hub: EventHub, source: ModelSource) -> None:
    """Copy a trained model's weights into the fresh one (engine.init_from)
    and report what came along."""
    from trainer_core.engine.init_from import apply_init, export_prefix

    module = trainer.module
    if source.kind == "vits":
        report = _init_vits(trainer, source)
    else:
        prefix = (
            export_prefix(module, trainer.task.export_module(module))
            if source.file.form == "export"
            else ""
        )
        report = apply_init(module, source, prefix)
    hub.emit(report.event())
    log.info("%s", report.summary())
    for name, why in report.skipped:
        log.info("init_from: %s skipped (%s)", name, why)
    for note in report.notes:
        hub.warn(note, code="init_from_units")
    if not report.loaded and not report.mapped:
        hub.warn(
            f"nothing was loaded from {source.describe()}: no tensor has the same name and shape"
            " here (is the model's size the same as the source's?)",
            code="init_from_empty",
        )


def _init_vits(trainer: Trainer, source: ModelSource) -> InitReport:
    """A VITS start: rows by symbol and speaker, strictly for a Piper
    checkpoint (engine.vits_init)."""
    from trainer_core.engine.vits_init import apply_vits_init

    task, t = trainer.task, trainer.profile.train
    vocabulary = task.symbols.vocabulary()  # type: ignore[attr-defined]  # a VitsTask
    speakers = task.speaker_names  # type: ignore[attr-defined]
    strict = source.file.form in ("piper", "hf")
    return apply_vits_init(trainer.module, source, vocabulary, speakers, strict, t.init_speaker)


def resume_into(trainer: Trainer, plan: TrainPlan, hub: EventHub) -> bool:
    """Restore a checkpoint into a freshly built trainer and say what was restored; False when
    nothing was (no --resume, or --resume auto with no checkpoint yet)."""
    if plan.resume is None:
        return False
    found = shared_resume(plan.resume, trainer.run_dir, trainer.world)
    if found is None:
        log.warning(
            "--resume auto: no complete checkpoint in %s; starting from step 0", trainer.run_dir
        )
        return False
    path, state, warnings = found
    for warning in warnings:
        hub.warn(warning, code="checkpoint_skipped")
    restored = trainer.restore(state)
    _check_ranks_resumed_alike(trainer, path)
    scale = restored["loss_scale"]
    log.info(
        "resumed from %s: step %d, epoch %d (item %d), lr %.6g%s",
        path,
        restored["step"],
        restored["epoch"],
        restored["item"],
        restored["lr"],
        f", loss scale {scale:g}" if scale is not None else "",
    )
    for difference in profile_differences(state.get("profile_toml", ""), trainer.profile_toml):
        log.warning("profile differs from the checkpoint's: %s", difference)
    if trainer.world.is_main and (repaired := repair_best(trainer.run_dir)) is not None:
        hub.warn(repaired, code="best_repaired")
    return True


def _check_ranks_resumed_alike(trainer: Trainer, path: Path) -> None:
    """Under DDP every rank must have restored the same checkpoint (rank 0
    sends it to the others)."""
    s = trainer.state
    rows = gather_ints(trainer.world, [s.step, s.epoch, s.item])
    if any(row != rows[0] for row in rows):
        raise DistributedError(
            f"the ranks resumed from different places (step, epoch, item per rank: {rows}); every"
            f" rank reads {path} as rank 0 sent it: start every node with the same Vega and profile"
        )


def check_ranks_agree(trainer: Trainer, hub: EventHub) -> list[str]:
    """Each rank's parameter digest at the end of training, logged by every
    rank; rank 0 warns if they differ."""
    digest = parameter_digest(trainer.module.state_dict())
    log.info("parameter digest of %s: %s", trainer.world.describe(), digest)
    digests = gather_digests(trainer.world, digest)
    if trainer.world.is_main and len(set(digests)) > 1:
        listing = ", ".join(f"rank {r}: {d[:12]}" for r, d in enumerate(digests))
        hub.warn(
            f"the ranks ended with different parameters ({listing}); report this as a bug",
            code="ddp_diverged",
        )
    return digests


def _flatten(toml_text: str) -> dict[str, object]:
    try:
        data = tomllib.loads(toml_text)
    except tomllib.TOMLDecodeError:
        return {}
    return {
        f"{section}.{key}": value
        for section, fields in data.items()
        if isinstance(fields, dict)
        for key, value in fields.items()
    }


def profile_differences(saved_toml: str, current_toml: str) -> list[str]:
    """`section.key: old -> new` for every field that changed since the checkpoint was written."""
    old, new = _flatten(saved_toml), _flatten(current_toml)
    return [
        f"{key}: {old.get(key)!r} -> {new.get(key)!r}"
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    ]


def finalize(trainer: Trainer, plan: TrainPlan, hub: EventHub, run_dir: Path) -> dict:
    """Export the final model and draw the report; failures here are
    reported, never lose the run."""
    from trainer_core.engine.export import ExportError, export_model
    from trainer_core.engine.hf_exports import export_hf_folders
    from trainer_core.engine.report import write_report

    out: dict = {}
    if trainer.state.step > 0:
        config = {
            **trainer.task.model_config(),
            "step": trainer.state.step,
            "profile": trainer.profile_toml,
        }
        try:
            weights, _ = export_model(
                trainer.task.export_module(trainer.module), config, run_dir / "export"
            )
        # the checkpoints hold the trained model; say so rather than fail the run
        except ExportError as exc:
            hub.error(f"{exc}; the trained weights are in {run_dir / rundir.CHECKPOINTS}")
        else:
            out["export"] = str(weights)
            log.info("exported %s", weights)
        out.update(export_hf_folders(trainer, hub, run_dir))
    if plan.profile.logging.report:
        try:
            out["report"] = str(write_report(run_dir))
        except Exception as exc:  # a plotting problem must not fail a finished run
            hub.emit(WarningEvent(code="report_failed", message=f"report.png not written: {exc}"))
    return out


def _preload_progress(hub: EventHub, fields: dict[str, Any]) -> None:
    hold_at("preload")  # a fault-injection point: the kill drill holds the trainer mid-preload
    hub.emit(PreloadProgressEvent(**fields))
