"""The dry run's plan as the typed document `trainer-core train --dry-run --json` prints.

`plan_report(plan)` turns a `trainer_core.plan.TrainPlan` into a
`trainer_core.contract.plan_report.PlanReport` field by field, so a renamed field fails mypy here
and in the dashboard's reads of the model.
"""

from __future__ import annotations

import dataclasses

from trainer_core.contract.data_report import SpeakerFigures
from trainer_core.contract.plan_report import (
    InitFrom,
    LaunchInfo,
    ModelSize,
    NodesInfo,
    PlanData,
    PlanDevice,
    PlanModel,
    PlanReport,
    Preload,
    RankInfo,
    Schedule,
    TaskInfo,
    ValidationEstimate,
    VitsShape,
    VocoderShape,
)
from trainer_core.contract.profile import Profile
from trainer_core.data.scan import DataReport
from trainer_core.plan import TrainPlan, model_kind


def plan_report(plan: TrainPlan) -> PlanReport:
    """The typed document `trainer-core train --dry-run --json` prints and the dashboard reads."""
    p, d = plan.profile, plan.data
    kind = model_kind(p, d.mode)
    model = PlanModel(
        kind=kind,
        hidden=p.model.hidden,
        layers=p.model.encoder_layers,
        heads=p.model.heads,
        size=ModelSize.model_validate(plan.model_size) if plan.model_size is not None else None,
        task=p.model.task,
    )
    if kind in ("vocoder", "vits"):  # set only for its kind: `to_json` leaves unset parts out
        shape = vocoder_shape(p) if kind == "vocoder" else vits_shape(p, d)
        model = model.model_copy(update={kind: shape})
    device, speakers, val = plan.device, d.voice.speakers.items(), plan.validation
    return PlanReport(
        profile=str(plan.profile_path),
        overrides=list(plan.overrides),
        run_dir=str(plan.run_dir),
        resume=plan.resume,
        device=PlanDevice(
            mode=p.compute.mode,
            device=device.device,
            kind=device.kind,
            reason=device.reason,
            fallback=device.fallback,
        ),
        data=PlanData(
            path=str(d.path),
            mode=d.mode,
            reason=d.reason,
            usable=d.usable_count,
            skipped=len(d.problems),
            hours=d.voice.hours_usable,
            problems=[pr.to_entry() for pr in d.problems],
            speaker_mode=d.voice.speaker_mode,
            speakers={name: SpeakerFigures(clips=f.clips, hours=f.hours) for name, f in speakers},
        ),
        model=model,
        preload=Preload(
            estimated_bytes=plan.preload_bytes,
            available_bytes=plan.resources.ram_available_bytes,
            where=plan.preload_where,
            reason=plan.preload_reason,
        ),
        schedule=Schedule(
            batch_size=p.train.batch_size,
            grad_accum=p.train.grad_accum,
            steps_per_epoch=plan.steps_per_epoch,
            epochs=p.train.epochs,
            max_steps=p.train.max_steps,
            target_hours=p.train.target_hours,
            warmup_steps=p.train.warmup_steps,
            warmup_effective=plan.warmup_steps,
        ),
        validation=ValidationEstimate.model_validate(val.to_dict()) if val is not None else None,
        init_from=InitFrom.model_validate(plan.init_from) if plan.init_from is not None else None,
        task=TaskInfo.model_validate(plan.task.to_dict()) if plan.task is not None else None,
        distributed=_distributed(plan),
        notes=list(plan.notes),
    )


def _distributed(plan: TrainPlan) -> LaunchInfo | RankInfo | None:
    if plan.launch is not None:
        launch = LaunchInfo(
            nproc_per_node=plan.launch.nproc,
            device_kind=plan.launch.device_kind,
            requested=plan.launch.requested,
        )
        nodes = plan.launch.nodes
        if nodes is None:
            return launch
        where = NodesInfo.model_validate(dataclasses.asdict(nodes))
        return launch.model_copy(update={"nodes": where})
    w = plan.world
    if w.active:
        return RankInfo(
            rank=w.rank,
            world_size=w.world_size,
            local_rank=w.local_rank,
            local_world_size=w.local_world_size,
        )
    return None


def vocoder_shape(profile: Profile) -> VocoderShape:
    """A vocoder's size in the plan: the generator's and the discriminators' widths."""
    v = profile.vocoder
    return VocoderShape(
        channels=v.channels,
        blocks=v.blocks,
        segment_frames=v.segment_frames,
        discriminator_channels=v.discriminator_channels,
        periods=list(v.periods),
        resolutions=len(v.resolutions),
    )


def vits_shape(profile: Profile, report: DataReport) -> VitsShape:
    """A VITS voice in the plan: Piper quality level, sizes and a training memory estimate."""
    # torch, on the meta device: only for vits plans
    from trainer_core.models.vits.shape import model_sizes

    v = profile.vits
    sizes = model_sizes(profile, max(1, len(report.voice.speakers)))
    return VitsShape(
        quality=v.quality,
        hidden_channels=v.hidden_channels,
        layers=v.n_layers,
        resblock=v.resblock,
        upsample_rates=list(v.upsample_rates),
        duration_predictor=v.duration_predictor,
        **sizes,
    )
