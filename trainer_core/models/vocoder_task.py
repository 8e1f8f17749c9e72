"""The vocoder `Task` (model.kind = "vocoder"): a GAN that turns Vega's log-mels back into audio.

Data: the same voice folders, scan, preload and cache as the acoustic model, but the samples
themselves (`data.wave_preload`); each step trains on fixed-length segments cut at seeded offsets
(`data.segment_dataset`). The mels are computed from those segments on the device by Vega's own mel
code (`MelExtractor.batch`), so the vocoder learns exactly the features an acoustic model trained
with the same [audio] settings predicts.

Two optimizer groups, in update order: the discriminators (least-squares loss on real against the
generator's output, detached), then the generator against the updated discriminators (mel L1,
feature matching and the adversarial loss, weighted in [vocoder]). The generator's output of a
micro-batch is computed once, in the discriminator's pass, and carried to the generator's pass.

Validation is copy synthesis of the held-out recordings, whole: mel L1 ("total", what picks the best
checkpoint) and a multi-resolution STFT distance; Griffin-Lim's scores on the same clips are the
reference line. Samples are copy-synthesised held-out clips. The export holds the generator alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainer_core.data.cache_location import cache_folder
from trainer_core.data.mel import MelExtractor
from trainer_core.data.segment_dataset import SegmentDataset
from trainer_core.data.wave_preload import Waves, preload_waves
from trainer_core.models.base import (
    Batch,
    Carry,
    GroupSpec,
    SampleResult,
    Task,
    count_parameters,
    unwrap_model,
)
from trainer_core.models.copy_synthesis import clip_scores, fit_length, reference_scores
from trainer_core.models.eval_cache import EvalCache
from trainer_core.models.gan_vocoder import (
    GanVocoder,
    adversarial_loss,
    discriminator_loss,
    feature_matching_loss,
)
from trainer_core.models.griffin_lim import write_wav
from trainer_core.models.loss_table import weighted_total
from trainer_core.models.mel_vocoders import vocoder_config
from trainer_core.models.registry import TaskRequest, register_task
from trainer_core.models.voice_task import choose_where, samples_folder

if TYPE_CHECKING:
    from trainer_core.contract.profile import Profile
    from trainer_core.data.scan_report import DataReport

log = logging.getLogger("trainer_core")
ARCHITECTURE = "istft-gan-vocoder"
# Mel statistics from at most this many training clips: stable per-bin
# figures, quick on a big corpus.
MAX_STATS_ITEMS = 200


def mel_statistics(
    waves: Waves, indices: list[int], extractor: MelExtractor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-bin mean and standard deviation of the log-mels of (an even subsample of) `indices`."""
    picked = indices[:: max(1, len(indices) // MAX_STATS_ITEMS)]
    mels = torch.cat([extractor([waves.get(i).numpy()])[0] for i in picked], dim=1).double()
    return mels.mean(dim=1).float(), mels.std(dim=1).clamp(min=1e-3).float()


class VocoderTask(Task):
    """A GAN vocoder on preloaded recordings: the engine's `Task` for model.kind = "vocoder"."""

    def __init__(
        self,
        profile: Profile,
        report: DataReport,
        device: torch.device | str,
        progress: Callable[[dict[str, Any]], None] | None = None,
        where: str | None = None,
    ) -> None:
        self.profile, self.report, self.device = profile, report, torch.device(device)
        self.waves = preload_waves(report, profile, choose_where(where, profile), progress)
        for path, reason in self.waves.skipped:
            log.warning("skipped %s at preload: %s", path, reason)
        d, a = profile.data, profile.audio
        segment = profile.vocoder.segment_frames * a.hop_length
        self.dataset = SegmentDataset(
            self.waves, segment, d.val_fraction, profile.run.seed, d.val_max_items
        )
        self.config = vocoder_config(profile)
        torch.manual_seed(profile.run.seed)
        self.model: GanVocoder = GanVocoder(self.config)
        cpu_extractor = MelExtractor(a)
        self.model.generator.set_mel_statistics(
            *mel_statistics(self.waves, self.dataset.train_ids, cpu_extractor)
        )
        self.model.to(self.device)
        self.extractor = MelExtractor(a, self.device)
        self._reference: dict[str, float] | None = None

    # ------------------------------------------------------------------ data

    def train_items(self) -> int:
        return self.dataset.train_items()

    def train_batches(
        self, epoch: int, batch_size: int, start_item: int = 0
    ) -> Iterator[tuple[Batch, int]]:
        return self.dataset.train_batches(epoch, batch_size, start_item)

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        return self.dataset.val_batches()

    def shard(self, rank: int, world_size: int) -> None:
        self.dataset.shard(rank, world_size)

    # ------------------------------------------------------------------ optimizers and losses

    def optimizer_groups(self) -> list[GroupSpec]:
        v = self.profile.vocoder
        return [
            GroupSpec(
                "discriminator",
                list(self.model.discriminators.parameters()),
                lr=v.discriminator_lr,
                betas=v.betas,
            ),
            GroupSpec("generator", list(self.model.generator.parameters()), betas=v.betas),
        ]

    def primary_group(self) -> str:
        return "generator"

    def group_losses(
        self, model: nn.Module, batch: Batch, group: str, carry: Carry
    ) -> dict[str, torch.Tensor]:
        vocoder = unwrap_model(model)
        assert isinstance(vocoder, GanVocoder)
        real = batch["wave"]
        if group == "discriminator":
            carry["mel"] = mel = self.extractor.batch(real)
            carry["fake"] = fake = fit_length(vocoder.generator(mel), real.shape[-1])
            real_logits, fake_logits, _, _ = vocoder.discriminators(real, fake.detach())
            parts = {"least_squares": discriminator_loss(real_logits, fake_logits)}
            return {"total": weighted_total(parts, self.loss_weights(group))}
        return self._generator_losses(vocoder, real, carry)

    def loss_weights(self, group: str) -> dict[str, float]:
        """Each optimizer group's loss table (part -> weight, [vocoder]), summed in this order."""
        v = self.profile.vocoder
        if group == "discriminator":  # its least-squares loss is its only part: no weight field
            return {"least_squares": 1.0}
        return {
            "mel": v.mel_weight,
            "adversarial": v.adversarial_weight,
            "feature": v.feature_weight,
        }

    def _generator_losses(
        self, vocoder: GanVocoder, real: torch.Tensor, carry: Carry
    ) -> dict[str, torch.Tensor]:
        fake = carry["fake"]
        mel = (self.extractor.batch(fake) - carry["mel"]).abs().mean()
        _, fake_logits, real_features, fake_features = vocoder.discriminators(real, fake)
        adversarial = adversarial_loss(fake_logits)
        feature = feature_matching_loss(real_features, fake_features)
        parts = {"mel": mel, "adversarial": adversarial, "feature": feature}
        total = weighted_total(parts, self.loss_weights("generator"))
        return {"total": total, **{name: value.detach() for name, value in parts.items()}}

    def compute_losses(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
        """Validation: copy synthesis of one held-out clip; "total" is its mel L1."""
        vocoder = unwrap_model(model)
        assert isinstance(vocoder, GanVocoder)
        real = batch["wave"]
        heard = vocoder.generator(self.extractor.batch(real))
        scores = clip_scores(heard, real, self.extractor, self.config.resolutions)
        return {"total": scores["mel"], **scores}

    def val_metrics(self, losses_mean: dict[str, float]) -> dict[str, float]:
        if "mel" not in losses_mean:
            return {}
        return {"mel_l1": losses_mean["mel"], "stft_distance": losses_mean["stft"]}

    def reference_scores(self) -> dict[str, float] | None:
        """Griffin-Lim's copy-synthesis scores on the held-out clips
        (computed once): the line to beat."""
        if self._reference is None and self.dataset.val_ids:
            clips = [self.waves.get(i) for i in self.dataset.val_ids]
            tts = self.profile.tts
            cache = EvalCache(cache_folder(self.profile.data.cache_dir) / "evaluation")
            self._reference = reference_scores(
                clips, self.profile.audio, self.config.resolutions, tts.griffin_lim_iters, cache
            )
        return self._reference

    def reference_name(self) -> str:
        return "griffin_lim"

    # ------------------------------------------------------------------ samples and export

    def make_samples(self, model: nn.Module, out_dir: Path, step: int) -> list[SampleResult]:
        """Copy-synthesise the first `vocoder.copy_items` held-out clips to
        `samples/step-<step>/<NN>.wav`."""
        vocoder = unwrap_model(model)
        assert isinstance(vocoder, GanVocoder)
        folder, rate = samples_folder(out_dir, step), self.profile.audio.sample_rate
        results = []
        for number, index in enumerate(
            self.dataset.val_ids[: self.profile.vocoder.copy_items], start=1
        ):
            real = self.waves.get(index).to(self.device)
            with torch.no_grad():
                heard = fit_length(
                    vocoder.generator(self.extractor.batch(real[None])), real.shape[-1]
                )[0]
            path = write_wav(folder / f"{number:02d}.wav", heard.float().cpu().numpy(), rate)
            results.append(
                SampleResult("audio", path, f"copy synthesis of {self.waves.item_ids[index]}")
            )
        return results

    def export_module(self, model: nn.Module) -> nn.Module:
        return unwrap_model(model).generator  # type: ignore[return-value]  # a GanVocoder

    def model_config(self) -> dict[str, Any]:
        return {
            "kind": "vocoder",
            "architecture": ARCHITECTURE,
            "vocoder": self.config.to_dict(),
            "audio": self.profile.audio.model_dump(mode="json"),
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
        generator, discriminators = self.model.generator, self.model.discriminators
        warnings = [
            f"{path.name}: skipped at preload ({reason})" for path, reason in self.waves.skipped
        ]
        if not self.dataset.val_ids:
            warnings.append(
                "no held-out clips (data.val_fraction is 0 or the data is tiny): no copy-synthesis"
                " score"
            )
        return {
            "task": "vocoder",
            "architecture": ARCHITECTURE,
            "parameters": count_parameters(self.model),
            "generator_parameters": count_parameters(generator),
            "discriminator_parameters": count_parameters(discriminators),
            "items": self.train_items(),
            "val_items": len(self.dataset.val_ids),
            "hours": self.waves.hours,
            "segment_samples": self.dataset.segment,
            "preload": self.waves.describe(),
            "warnings": warnings,
        }


def _vocoder_task(request: TaskRequest) -> VocoderTask:
    return VocoderTask(
        request.profile,
        request.report,
        request.device,
        progress=request.progress,
        where=request.preload_where,
    )


register_task("vocoder", _vocoder_task)
