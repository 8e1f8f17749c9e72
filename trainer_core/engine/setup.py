"""Set-up and clean-up stages around the loop: build the trainer, resume it, export at the end."""

from __future__ import annotations

import logging
import random
import tomllib
from pathlib import Path

import numpy as np
import torch

from trainer_core.engine.checkpoint import find_resume, load_checkpoint
from trainer_core.engine.control_state import ControlState
from trainer_core.engine.events import EventHub
from trainer_core.engine.precision import PrecisionPolicy, cuda_bf16_supported
from trainer_core.engine.trainer import Trainer
from trainer_core.errors import VegaError
from trainer_core.models.base import build_task
from trainer_core.plan import TrainPlan
from trainer_core.profile_loader import profile_to_toml

log = logging.getLogger("trainer_core")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_trainer(plan: TrainPlan, hub: EventHub, control: ControlState, run_dir: Path) -> Trainer:
    p = plan.profile
    if p.compute.num_threads:
        torch.set_num_threads(p.compute.num_threads)
    seed_everything(p.run.seed)
    device = torch.device(plan.device.device)
    bf16 = cuda_bf16_supported(device) if device.type == "cuda" else None
    precision = PrecisionPolicy.resolve(p.train.precision, device.type, bf16_supported=bf16)
    d = plan.device
    hub.emit(
        "device_selected", mode=p.compute.mode, device=d.device, reason=d.reason, fallback=d.fallback,
        precision=precision.name,
    )
    log.info("precision: %s; torch %s", precision.describe(), torch.__version__)
    task = build_task(
        p, plan.data, device, preload_where=plan.preload_where,
        progress=lambda fields: hub.emit("preload_progress", **fields),
    )
    preload = task.preload_done_event(plan.preload_reason)
    if preload is not None:
        hub.emit("preload_done", **preload)
    effective = p.train.batch_size * p.train.grad_accum
    if task.train_items() < effective:
        raise VegaError(
            f"the training split has {task.train_items()} items, fewer than one batch "
            f"(train.batch_size {p.train.batch_size} x train.grad_accum {p.train.grad_accum} = {effective}); "
            "lower train.batch_size or add data"
        )
    for warning in task.describe().get("warnings", []):
        hub.warn(warning, code="data")
    trainer = Trainer(p, task, device, precision, hub, run_dir, profile_to_toml(p), control)
    params = sum(x.numel() for x in trainer.model.parameters())
    log.info("model: %s with %.2fM parameters; %d training items", type(task.model).__name__, params / 1e6, task.train_items())
    return trainer


def resume_into(trainer: Trainer, plan: TrainPlan, hub: EventHub) -> None:
    """Restore a checkpoint into a freshly built trainer and say what was restored."""
    if plan.resume == "auto":
        found = find_resume(trainer.run_dir)
        if found is None:
            log.warning("--resume auto: no complete checkpoint in %s; starting from step 0", trainer.run_dir)
            return
        path, state, warnings = found
        for warning in warnings:
            hub.warn(warning, code="checkpoint_skipped")
    else:
        path = Path(plan.resume).expanduser()
        state = load_checkpoint(path)
    restored = trainer.restore(state)
    scale = restored["loss_scale"]
    log.info(
        "resumed from %s: step %d, epoch %d (item %d), lr %.6g%s", path, restored["step"], restored["epoch"],
        restored["item"], restored["lr"], f", loss scale {scale:g}" if scale is not None else "",
    )
    for difference in profile_differences(state.get("profile_toml", ""), trainer.profile_toml):
        log.warning("profile differs from the checkpoint's: %s", difference)


def _flatten(toml_text: str) -> dict[str, object]:
    try:
        data = tomllib.loads(toml_text)
    except tomllib.TOMLDecodeError:
        return {}
    return {f"{section}.{key}": value for section, fields in data.items() if isinstance(fields, dict) for key, value in fields.items()}


def profile_differences(saved_toml: str, current_toml: str) -> list[str]:
    """`section.key: old -> new` for every field that changed since the checkpoint was written."""
    old, new = _flatten(saved_toml), _flatten(current_toml)
    return [f"{key}: {old.get(key)!r} -> {new.get(key)!r}" for key in sorted(old.keys() | new.keys()) if old.get(key) != new.get(key)]


def finalize(trainer: Trainer, plan: TrainPlan, hub: EventHub, run_dir: Path) -> dict:
    """Export the final model and draw the report; failures here are reported, never lose the run."""
    from trainer_core.engine.export import ExportError, export_model
    from trainer_core.engine.report import write_report

    out: dict = {}
    if trainer.state.step > 0:
        config = {**trainer.task.model_config(), "step": trainer.state.step, "profile": trainer.profile_toml}
        try:
            weights, _ = export_model(trainer.model, config, run_dir / "export")
        except ExportError as exc:  # the checkpoints hold the trained model; say so rather than fail the run
            hub.error(f"{exc}; the trained weights are in {trainer.checkpoints.folder}")
        else:
            out["export"] = str(weights)
            log.info("exported %s", weights)
    if plan.profile.logging.report:
        try:
            out["report"] = str(write_report(run_dir))
        except Exception as exc:  # a plotting problem must not fail a finished run
            hub.emit("warning", code="report_failed", message=f"report.png not written: {exc}")
    return out
