"""The VITS `Task` (model.kind = "vits"): text to waveform end to end, Piper's
model trained by Vega's engine.

Data: the recordings themselves (`data.wave_preload`, as the vocoder), split and length-bucketed
like the voice task's (`data.vits_dataset`), and the transcripts as ids through the voice's symbol
map (`vits.symbols`). Each batch's linear spectrograms are computed on the device from its samples;
nothing spectral is preloaded.

Two optimizer groups, in update order: the discriminator (least squares, real segments against the
generator's output, detached), then the generator against the updated discriminator: mel L1
(weighted as Piper's c_mel), KL, the duration predictor's loss, the adversarial and feature-matching
losses. The generator's forward runs once per micro-batch, in the discriminator's pass, and its
output is carried to the generator's pass.

Validation (what picks the best checkpoint and early-stops): each held-out recording through the
posterior encoder and decoded whole ("total" is the mel L1 of that reconstruction), with the KL and
duration losses of a training forward under a fixed seed, so two validations of the same weights
agree. Samples, the alignment view and free-running scores speak audio directly (`vits.speech`,
`vits.views`). The export holds the generator.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainer_core.data.speakers import speaker_names
from trainer_core.data.vits_dataset import VitsDataset
from trainer_core.data.wave_preload import preload_waves
from trainer_core.models.base import (
    Batch,
    Carry,
    GroupSpec,
    SampleResult,
    Task,
    count_parameters,
    unwrap_model,
)
from trainer_core.models.free_running import FreeRunningResult
from trainer_core.models.loss_table import weighted_total
from trainer_core.models.registry import TaskRequest, register_task
from trainer_core.models.vits.batch_audio import BatchAudio, cut_segments
from trainer_core.models.vits.hf_export import base_model_of
from trainer_core.models.vits.losses import (
    discriminator_loss,
    feature_loss,
    generator_loss,
    kl_loss,
)
from trainer_core.models.vits.model import VitsModel
from trainer_core.models.vits.parts import frozen_parameters
from trainer_core.models.vits.shape import config_from_profile
from trainer_core.models.vits.speech import (
    VitsFreeRunning,
    VitsSpeaker,
    held_out_free_running,
    inference_scales,
    write_samples,
)
from trainer_core.models.vits.symbols import SymbolTable
from trainer_core.models.vits.views import VitsViews
from trainer_core.models.voice_task import choose_where

if TYPE_CHECKING:
    from trainer_core.contract.init_sources import VoiceStart
    from trainer_core.contract.profile import Profile
    from trainer_core.data.scan_report import DataReport

log = logging.getLogger("trainer_core")
ARCHITECTURE = "vits"
# Validation draws its noise from this seed, so the same weights always score the same.
VALIDATION_SEED = 20240611


class VitsTask(Task):
    """VITS on preloaded recordings: the engine's `Task` for model.kind = "vits"."""

    def __init__(
        self,
        profile: Profile,
        report: DataReport,
        device: torch.device | str,
        progress: Callable[[dict[str, Any]], None] | None = None,
        where: str | None = None,
        start: VoiceStart | None = None,
    ) -> None:
        self.profile, self.report, self.device = profile, report, torch.device(device)
        self.waves = preload_waves(report, profile, choose_where(where, profile), progress)
        for path, reason in self.waves.skipped:
            log.warning("skipped %s at preload: %s", path, reason)
        v, d = profile.vits, profile.data
        base = start.id_map if start is not None else None
        rows = max(v.num_symbols, start.num_symbols if start is not None else 0)
        mms = start.tokenizer if start is not None else None
        self.symbols, self.added_symbols = SymbolTable.build(
            self.waves.texts, profile.tts, rows, base, mms
        )
        if start is not None and self.added_symbols:
            log.info("symbols the start model lacks (new rows): %s", " ".join(self.added_symbols))
        self.speaker_names = speaker_names(self.waves.speakers)
        index = {name: i for i, name in enumerate(self.speaker_names)}
        speaker_ids = [index[name] for name in self.waves.speakers] if self.multi_speaker else None
        self.speaker_ids = speaker_ids
        self.dataset = VitsDataset(
            self.waves,
            self.symbols.encode,
            d.val_fraction,
            profile.run.seed,
            v.segment_size,
            d.val_max_items,
            speaker_ids,
        )
        self.dataset.pin_memory = self.device.type == "cuda"
        self.config = config_from_profile(
            profile, self.symbols.num_symbols, max(1, len(self.speaker_names))
        )
        torch.manual_seed(profile.run.seed)
        self.model: VitsModel = VitsModel(self.config).to(self.device)
        frozen = frozen_parameters(self.model, profile.train.freeze)
        for param in frozen:
            param.requires_grad_(False)
        self.audio = BatchAudio(profile.audio, self.device)
        self.speaker = VitsSpeaker.from_profile(self.symbols, profile, self.speaker_names)
        # its licence goes into export --hf's card
        self.base_model = base_model_of(profile.train.init_from)
        self.views = VitsViews(self.dataset, self.symbols, self.audio)
        self._free_running: VitsFreeRunning | None = None

    @property
    def multi_speaker(self) -> bool:
        return len(self.speaker_names) >= 2

    # ------------------------------------------------------------------ data

    def train_items(self) -> int:
        return self.dataset.train_items()

    def train_batches(
        self, epoch: int, batch_size: int, start_item: int = 0
    ) -> Iterator[tuple[Batch, int]]:
        return self.dataset.train_batches(epoch, batch_size, start_item)

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        return self.dataset.val_batches(batch_size)

    def shard(self, rank: int, world_size: int) -> None:
        self.dataset.shard(rank, world_size)

    # ------------------------------------------------------------------ optimizers and losses

    def optimizer_groups(self) -> list[GroupSpec]:
        """The discriminator, then the generator; a group whose parts are all
        frozen (train.freeze) is left out."""
        v = self.profile.vits
        trainable = [
            (name, [p for p in module.parameters() if p.requires_grad])
            for name, module in (
                ("discriminator", self.model.model_d),
                ("generator", self.model.model_g),
            )
        ]
        return [
            GroupSpec(
                name,
                params,
                lr=v.discriminator_lr if name == "discriminator" else None,
                betas=v.betas,
            )
            for name, params in trainable
            if params
        ]

    def primary_group(self) -> str:
        return "generator"

    def resting_groups(self, step: int) -> frozenset[str]:
        """The generator rests while a fresh discriminator warms up
        (vits.discriminator_warmup_steps)."""
        warmup = self.profile.vits.discriminator_warmup_steps or 0
        return frozenset({"generator"}) if step <= warmup else frozenset()

    def group_losses(
        self, model: nn.Module, batch: Batch, group: str, carry: Carry
    ) -> dict[str, torch.Tensor]:
        vits = unwrap_model(model)
        assert isinstance(vits, VitsModel)
        # the generator's forward, once per micro-batch, in the first group's pass
        if "out" not in carry:
            spec, spec_lens = self.audio.spectrogram(batch["wave"], batch["wave_lens"])
            out = vits.model_g(
                batch["text"], batch["text_lens"], spec, spec_lens, batch.get("speaker")
            )
            carry.update(
                spec=spec, out=out, real=cut_segments(batch["wave"], out.slice_starts, self.config)
            )
        if group == "discriminator":
            real_logits, fake_logits, _, _ = vits.model_d(
                carry["real"], carry["out"].audio.detach()
            )
            parts = {"least_squares": discriminator_loss(real_logits, fake_logits)[0]}
            return {"total": weighted_total(parts, self.loss_weights(group))}
        return self._generator_losses(vits, carry)

    def loss_weights(self, group: str) -> dict[str, float]:
        """Each optimizer group's loss table (part -> weight, [vits]), summed in this order."""
        v = self.profile.vits
        if group == "discriminator":  # its least-squares loss is its only part: no weight field
            return {"least_squares": 1.0}
        return {
            "mel": v.mel_weight,
            "kl": v.kl_weight,
            "duration": v.duration_weight,
            "adversarial": v.adversarial_weight,
            "feature": v.feature_weight,
        }

    def _generator_losses(self, vits: VitsModel, carry: Carry) -> dict[str, torch.Tensor]:
        out = carry["out"]
        frames = self.config.segment_frames
        target = self.audio.mel_of_spectrogram(carry["spec"])
        mel = (
            (
                self.audio.segment_frames(target, out.slice_starts, frames)
                - self.audio.mel(out.audio)
            )
            .abs()
            .mean()
        )
        kl = kl_loss(out.z_p, out.logs_q, out.m_p, out.logs_p, out.y_mask)
        duration = out.duration_loss.float().sum()
        _, fake_logits, real_features, fake_features = vits.model_d(carry["real"], out.audio)
        adversarial, feature = (
            generator_loss(fake_logits)[0],
            feature_loss(real_features, fake_features),
        )
        parts = {
            "mel": mel,
            "kl": kl,
            "duration": duration,
            "adversarial": adversarial,
            "feature": feature,
        }
        total = weighted_total(parts, self.loss_weights("generator"))
        return {"total": total, **{name: value.detach() for name, value in parts.items()}}

    def compute_losses(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
        """Validation: whole held-out clips reconstructed through the posterior;
        KL and duration at a fixed seed."""
        vits = unwrap_model(model)
        assert isinstance(vits, VitsModel)
        spec, spec_lens = self.audio.spectrogram(batch["wave"], batch["wave_lens"])
        speaker = batch.get("speaker")
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(VALIDATION_SEED)
            out = vits.model_g(batch["text"], batch["text_lens"], spec, spec_lens, speaker)
        heard = vits.model_g.reconstruct(spec, spec_lens, speaker)
        mel = self.audio.masked_mel_l1(
            self.audio.mel_of_spectrogram(spec), self.audio.mel(heard), spec_lens
        )
        kl = kl_loss(out.z_p, out.logs_q, out.m_p, out.logs_p, out.y_mask)
        return {"total": mel, "mel": mel, "kl": kl, "duration": out.duration_loss.float().sum()}

    def val_metrics(self, losses_mean: dict[str, float]) -> dict[str, float]:
        if "mel" not in losses_mean:
            return {}
        return {
            "mel_l1": losses_mean["mel"],
            "kl": losses_mean["kl"],
            "duration": losses_mean["duration"],
        }

    # ------------------------------------------------------------------
    # samples, views, free-running

    def make_samples(self, model: nn.Module, out_dir: Path, step: int) -> list[SampleResult]:
        return write_samples(
            self._generator(model), self.speaker, self.profile.sample.sentences, out_dir, step
        )

    def make_views(self, model: nn.Module, out_dir: Path, step: int) -> list[SampleResult]:
        return self.views.write(self._generator(model), out_dir, step)

    def speaks(self) -> bool:
        return True

    def free_running(self, model: nn.Module) -> FreeRunningResult | None:
        if self._free_running is None:
            self._free_running = held_out_free_running(
                self.dataset, self.waves, self.profile, self.audio, self.speaker_ids
            )
        if not self._free_running.sentences:
            return None
        return self.speaker.free_running(self._generator(model), self._free_running)

    def _generator(self, model: nn.Module):  # noqa: ANN202  # a Synthesizer
        vits = unwrap_model(model)
        assert isinstance(vits, VitsModel)
        return vits.model_g

    # ------------------------------------------------------------------ export and descriptions

    def export_module(self, model: nn.Module) -> nn.Module:
        return self._generator(model)

    def model_config(self) -> dict[str, Any]:
        return {
            "kind": "vits",
            "architecture": ARCHITECTURE,
            "vits": self.config.to_dict(),
            "symbols": self.symbols.state_dict(),
            "speaker_names": list(self.speaker_names),
            "audio": self.profile.audio.model_dump(mode="json"),
            "inference": inference_scales(self.profile),
            "quality": self.profile.vits.quality,
            "base_model": self.base_model,
            "held_out": {
                "val_fraction": self.profile.data.val_fraction,
                "val_max_items": self.profile.data.val_max_items,
                "speakers": self.profile.data.speakers,
            },
        }

    def preload_done_event(self, reason: str = "") -> dict[str, Any]:
        w = self.waves
        return {
            "items": len(w),
            "seconds": w.seconds,
            "where": w.where,
            "bytes": 4 * sum(w.lengths),
            "reason": reason,
        }

    def describe(self) -> dict[str, Any]:
        generator, discriminator = self.model.model_g, self.model.model_d
        warnings = [
            f"{path.name}: skipped at preload ({reason})" for path, reason in self.waves.skipped
        ]
        if self.dataset.empty_text_ids:
            warnings.append(
                f"{len(self.dataset.empty_text_ids)} transcript(s) have no symbol the voice knows"
            )
        if self.symbols.missing:
            listing = ", ".join(f"{s!r} x{n}" for s, n in self.symbols.missing.most_common(10))
            warnings.append(f"symbols left out of transcripts (not in the voice's map): {listing}")
        if not self.dataset.val_ids:
            warnings.append(
                "no validation items (data.val_fraction is 0 or the data is tiny): no best-model"
                " tracking"
            )
        return {
            "task": "vits",
            "architecture": ARCHITECTURE,
            "parameters": count_parameters(self.model),
            "generator_parameters": count_parameters(generator),
            "discriminator_parameters": count_parameters(discriminator),
            "symbols": self.symbols.num_symbols,
            "new_symbols": list(self.added_symbols),
            "speakers": list(self.speaker_names),
            "items": self.train_items(),
            "val_items": self.dataset.val_items(),
            "hours": self.waves.hours,
            "segment_samples": self.config.segment_size,
            "preload": self.waves.describe(),
            "warnings": warnings,
        }


def _vits_task(request: TaskRequest) -> VitsTask:
    return VitsTask(
        request.profile,
        request.report,
        request.device,
        progress=request.progress,
        where=request.preload_where,
        start=request.start,
    )


register_task("vits", _vits_task)
