"""The voice `Task`: the TTS acoustic model bound to preloaded mel features and its text encoder.

Construction does the heavy lifting once: preload every usable recording's log-mel (RAM or the disk
feature cache), build the text vocabulary from the training transcripts, split and bucket the data,
and build the model. The engine then only asks for batches, losses, metrics and samples.

Samples: each `sample.sentences` entry is synthesised with predicted durations, turned into audio
by the vocoder `tts.vocoder` names (Griffin-Lim by default, or a trained GAN vocoder) and written
as 16-bit WAV to `samples/step-<8 digits>/<NN>.wav`; a voice with several speakers says each
sentence in the voice of each of its first MAX_SAMPLE_SPEAKERS speakers (by name), as
`<NN>-<speaker>.wav`. Beside them, `make_views` draws a fixed held-out clip's mel and alignment
(`voice_views`: mel.png, alignment.png).

Rebuilding elsewhere (`trainer-core synth`): `model_config()` (the export's config.json) holds the
architecture, the text encoder state and the audio parameters; a checkpoint holds the vocabulary in
the model's `text_symbols` buffer and everything else in its profile TOML.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainer_core.data.cache_location import cache_folder
from trainer_core.data.preload import PreloadWhere, VoiceFeatures, preload_voice
from trainer_core.data.speakers import speaker_names
from trainer_core.data.voice_dataset import VoiceDataset
from trainer_core.models.base import Batch, SampleResult, Task, count_parameters, unwrap_model
from trainer_core.models.eval_cache import EvalCache
from trainer_core.models.free_running import (
    FreeRunning,
    FreeRunningResult,
    HeldOutSentence,
    evaluate_free_running,
    pick_sentences,
)
from trainer_core.models.griffin_lim import write_wav
from trainer_core.models.griffin_lim_batch import evaluation_threads
from trainer_core.models.loss_table import weighted_total
from trainer_core.models.mel_vocoders import load_vocoder
from trainer_core.models.registry import TaskRequest, register_task
from trainer_core.models.text_frontend import TextEncoder
from trainer_core.models.tts import AcousticModel, build_tts_model
from trainer_core.models.tts_config import TtsConfig
from trainer_core.models.voice_views import ClipViews

if TYPE_CHECKING:
    from trainer_core.contract.profile import Profile
    from trainer_core.data.scan_report import DataReport

log = logging.getLogger("trainer_core")
ARCHITECTURE = "mas-fft-tts"
# Skipped files listed by name in describe(); the rest are counted (the
# data_scan event lists them all).
MAX_LISTED_SKIPS = 20
# Mel statistics come from at most this many training items: enough for stable per-bin figures, and
# quick even when the features stream from the disk cache.
MAX_STATS_ITEMS = 1000
# Samples at each evaluation are spoken by at most this many speakers: a 100-speaker corpus must not
# write hundreds of files per evaluation.
MAX_SAMPLE_SPEAKERS = 8


def choose_where(where: str | None, profile: Profile) -> PreloadWhere:
    """The plan's choice when given, else data.preload, where "auto" means
    RAM (nobody measured memory)."""
    wanted = where or profile.data.preload
    if wanted not in ("ram", "disk", "auto"):
        raise ValueError(f'preload place must be "ram" or "disk", got {wanted!r}')
    return "disk" if wanted == "disk" else "ram"


def mel_statistics(
    features: VoiceFeatures, indices: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-bin mean and standard deviation of the log-mel frames of `indices`
    (an even subsample of a big set)."""
    stride = max(1, math.ceil(len(indices) / MAX_STATS_ITEMS))
    total = torch.zeros(features.n_mels, dtype=torch.float64)
    squares = torch.zeros(features.n_mels, dtype=torch.float64)
    frames = 0
    for index in indices[::stride]:
        mel = features.get_mel(index).double()
        total += mel.sum(dim=1)
        squares += mel.square().sum(dim=1)
        frames += mel.shape[1]
    mean = total / max(frames, 1)
    variance = (squares / max(frames, 1) - mean.square()).clamp(min=0.0)
    return mean.float(), variance.sqrt().float()


def samples_folder(out_dir: Path, step: int) -> Path:
    return out_dir / f"step-{step:08d}"


def sample_name(number: int, speaker: str | None) -> str:
    """`01.wav`, or `01-alice.wav` for a voice with several speakers (a name
    made safe for any file system)."""
    if speaker is None:
        return f"{number:02d}.wav"
    return f"{number:02d}-{re.sub(r'[^A-Za-z0-9._-]', '_', speaker)}.wav"


class VoiceTask(Task):
    """TTS on preloaded features: the engine's `Task` for voice mode."""

    def __init__(
        self,
        profile: Profile,
        report: DataReport,
        device: torch.device | str,
        progress: Callable[[dict[str, Any]], None] | None = None,
        where: str | None = None,
    ) -> None:
        self.profile = profile
        self.report = report
        self.device = torch.device(device)
        self.where = choose_where(where, profile)
        self.features: VoiceFeatures = preload_voice(
            report, profile, self.device, self.where, progress, pitch=profile.model.pitch
        )
        self._log_preload()
        self.encoder = TextEncoder.from_profile(self.features.texts, profile.tts)
        log.info("text input: %s, %d symbols", self.encoder.units, self.encoder.vocab_size)
        d = profile.data
        # The model's speakers in id order; one speaker (or none named) means no speaker embedding.
        self.speaker_names = speaker_names(self.features.speakers)
        self._speaker_index = {name: i for i, name in enumerate(self.speaker_names)}
        self.speaker_ids = (
            [self.speaker_id(name) for name in self.features.speakers]
            if self.multi_speaker
            else None
        )
        if self.multi_speaker:
            log.info("speakers: %d (%s)", len(self.speaker_names), ", ".join(self.speaker_names))
        self.dataset = VoiceDataset(
            self.features,
            self.encoder.encode,
            d.val_fraction,
            profile.run.seed,
            val_max_items=d.val_max_items,
            speaker_ids=self.speaker_ids,
        )
        self.dataset.pin_memory = self.device.type == "cuda"
        log.info(
            "validation: %d items (%d more capped away by data.val_max_items, training instead)",
            self.dataset.val_items(),
            self.dataset.val_capped,
        )
        self.config = TtsConfig.from_profile(profile, self.encoder.vocab_size, self.speaker_names)
        codes, phonemes = self.encoder.symbol_codes(), self.encoder.units == "phonemes"
        self.model: AcousticModel = build_tts_model(self.config, profile.run.seed, codes, phonemes)
        self.model.set_mel_stats(*mel_statistics(self.features, self.dataset.train_ids))
        self.model.to(self.device)
        tts = profile.tts
        # Loaded now: a vocoder that does not fit these mels is an error before any training.
        self.vocoder = load_vocoder(
            tts.vocoder, profile.audio, str(self.device), tts.griffin_lim_iters
        )
        if self.vocoder.trained:
            log.info(
                "samples and free-running scores are heard through the vocoder %s",
                self.vocoder.name,
            )
        self._free_running: FreeRunning | None = None
        self.views = ClipViews(self.dataset, self.encoder)

    @property
    def multi_speaker(self) -> bool:
        return len(self.speaker_names) >= 2

    def speaker_id(self, name: str) -> int:
        return self._speaker_index[name]

    def _log_preload(self) -> None:
        f = self.features
        log.info(
            "preloaded %d recordings into %s in %.2f s (%d from the feature cache, %d decoded)",
            len(f),
            "RAM" if f.where == "ram" else "the disk cache",
            f.seconds,
            f.cache_hits,
            f.decoded,
        )
        for path, reason in f.skipped:
            log.warning("skipped %s at preload: %s", path, reason)

    # ------------------------------------------------------------------ data

    def train_items(self) -> int:
        return self.dataset.train_items()

    def train_batches(
        self, epoch: int, batch_size: int, start_item: int = 0
    ) -> Iterator[tuple[Batch, int]]:
        return self.dataset.train_batches(epoch, batch_size, start_item)

    def val_batches(self, batch_size: int) -> Iterator[Batch]:
        return self.dataset.val_batches(batch_size)

    # ------------------------------------------------------------------ losses

    def compute_losses(self, model: nn.Module, batch: Batch) -> dict[str, torch.Tensor]:
        text, mel = (batch["text"], batch["text_lens"]), (batch["mel"], batch["mel_lens"])
        parts = model(*text, *mel, batch.get("f0"), batch.get("speaker"))
        terms = dict(parts)
        if "pitch" in terms:  # one weight on their sum (tts.pitch_loss_weight), rounded as always
            terms["pitch_and_voicing"] = terms.pop("pitch") + terms.pop("voicing")
        total = weighted_total(terms, self.loss_weights())
        return {"total": total, **{name: value.detach() for name, value in parts.items()}}

    def loss_weights(self) -> dict[str, float]:
        """The loss table (part -> weight, [tts]), summed in this order; the pitch and post-net
        parts only where the model computes them (model.pitch, model.postnet_layers)."""
        tts, config = self.profile.tts, self.config
        weights = {
            "mel": 1.0,  # no weight field: the other parts are weighed against the mel L1
            "prior": tts.prior_loss_weight,
            "duration": tts.duration_loss_weight,
        }
        if config.pitch:
            weights["pitch_and_voicing"] = tts.pitch_loss_weight
        if config.postnet_layers:  # the decoder's own mel L1, so the post-net only refines
            weights["mel_before_postnet"] = 1.0
        return weights

    def val_metrics(self, losses_mean: dict[str, float]) -> dict[str, float]:
        return {"mel_l1": losses_mean["mel"]} if "mel" in losses_mean else {}

    # ------------------------------------------------------------------ samples

    def make_samples(self, model: nn.Module, out_dir: Path, step: int) -> list[SampleResult]:
        """Synthesise every `sample.sentences` entry to
        `out_dir/step-<step>/<NN>.wav` (01, 02, ...)."""
        inner = unwrap_model(model)
        if not isinstance(inner, AcousticModel):
            raise TypeError(f"voice samples need an AcousticModel, got {type(inner).__name__}")
        was_training = inner.training
        inner.eval()
        try:
            return self._write_samples(inner, samples_folder(out_dir, step))
        finally:
            inner.train(was_training)

    def _write_samples(self, model: AcousticModel, folder: Path) -> list[SampleResult]:
        tts, audio = self.profile.tts, self.profile.audio
        voices: list[str | None] = (
            list(self.speaker_names[:MAX_SAMPLE_SPEAKERS]) if self.multi_speaker else [None]
        )
        results = []
        for number, sentence in enumerate(self.profile.sample.sentences, start=1):
            ids = self.encoder.encode(sentence)
            if not ids:
                log.warning(
                    "sample sentence %d (%r) has no symbols to say; skipped", number, sentence
                )
                continue
            for voice in voices:
                speaker = self.speaker_id(voice) if voice is not None else None
                wave = self.vocoder(model.synthesise(ids, tts.length_scale, speaker))
                path = write_wav(folder / sample_name(number, voice), wave, audio.sample_rate)
                results.append(SampleResult(kind="audio", path=path, text=sentence))
        return results

    def make_views(self, model: nn.Module, out_dir: Path, step: int) -> list[SampleResult]:
        """A fixed held-out clip's mel.png and alignment.png in
        `out_dir/step-<step>/` (voice_views)."""
        inner = unwrap_model(model)
        if not isinstance(inner, AcousticModel):
            raise TypeError(f"voice views need an AcousticModel, got {type(inner).__name__}")
        return self.views.write(inner, samples_folder(out_dir, step), step)

    # ------------------------------------------------------------------ free-running evaluation

    def speaks(self) -> bool:
        return True

    def free_running(self, model: nn.Module) -> FreeRunningResult | None:
        inner = unwrap_model(model)
        if not isinstance(inner, AcousticModel):
            raise TypeError(
                f"free-running evaluation needs an AcousticModel, got {type(inner).__name__}"
            )
        if self._free_running is None:
            self._free_running = self._held_out_sentences()
        if not self._free_running.sentences:
            return None
        self._free_running.progress = self.report_progress
        return evaluate_free_running(self._free_running, inner, self.encoder)

    def free_running_estimate(self) -> float | None:
        """Before the first pass: the floor's cost (the same sentences vocoded
        and scored), computed or cached."""
        if self._free_running is None:
            self._free_running = self._held_out_sentences()
        if not self._free_running.sentences:
            return None
        with evaluation_threads():  # as the pass itself runs
            self._free_running.floor()
        return self._free_running.floor_seconds

    def _held_out_sentences(self) -> FreeRunning:
        """The fixed set: validation items with something to say, spread over their lengths."""
        f, a = self.features, self.profile.audio
        ids = self.dataset.val_ids  # items with no symbols to say are never among them
        seconds = [f.frames[i] * a.hop_length / a.sample_rate for i in ids]
        speakers = self.speaker_ids
        candidates = [
            HeldOutSentence(
                f.item_ids[i], f.texts[i], f.paths[i], speakers[i] if speakers else None
            )
            for i in ids
        ]
        picked = pick_sentences(candidates, seconds, self.profile.train.free_running_items)
        vocoder = self.vocoder if self.vocoder.trained else None
        cache = EvalCache(cache_folder(self.profile.data.cache_dir) / "evaluation")
        return FreeRunning(
            [candidates[k] for k in picked], a, self.profile.tts, vocoder=vocoder, cache=cache
        )

    # ------------------------------------------------------------------ descriptions

    def shard(self, rank: int, world_size: int) -> None:
        self.dataset.shard(rank, world_size)

    def model_config(self) -> dict[str, Any]:
        """Architecture, text encoder and audio parameters: enough for
        `trainer-core synth --export`."""
        return {
            "kind": "tts",
            "architecture": ARCHITECTURE,
            **asdict(self.config),
            "text": self.encoder.state_dict(),
            "audio": self.profile.audio.model_dump(mode="json"),
            "tts": self.profile.tts.model_dump(mode="json"),
            # How the run held sentences out: `trainer-core evaluate` on an
            # export then scores the same ones.
            "held_out": {
                "val_fraction": self.profile.data.val_fraction,
                "val_max_items": self.profile.data.val_max_items,
                "speakers": self.profile.data.speakers,
            },
        }

    def hours(self) -> float:
        """Hours of (trimmed) audio in the features, from their frame counts."""
        a = self.profile.audio
        return sum(self.features.frames) * a.hop_length / a.sample_rate / 3600.0

    def preload_done_event(self, reason: str = "") -> dict[str, Any]:
        """The fields of a `preload_done` event for this task's preload."""
        f = self.features
        return {
            "items": len(f),
            "seconds": f.seconds,
            "where": f.where,
            "bytes": f.feature_bytes,
            "reason": reason,
        }

    def warnings(self) -> list[str]:
        """Problems worth showing beside the run: skipped files, items the
        model cannot align, no validation."""
        notes = [
            f"{path.name}: skipped at preload ({reason})" for path, reason in self.features.skipped
        ]
        if self.dataset.empty_text_ids:
            notes.append(
                f"{len(self.dataset.empty_text_ids)} transcript(s) have no symbols and are not"
                " trained on"
            )
        short = self._too_few_frames()
        if short:
            notes.append(
                f"{short} item(s) have fewer mel frames than text symbols, so no alignment can give"
                " every symbol a frame: check those transcripts match their audio"
            )
        if self.dataset.val_items() == 0:
            notes.append(
                "no validation items (data.val_fraction is 0 or the data is tiny): no best-model"
                " tracking"
            )
        return notes

    def _too_few_frames(self) -> int:
        frames = self.features.frames
        return sum(1 for i, tokens in enumerate(self.dataset.tokens) if tokens.numel() > frames[i])

    def describe(self) -> dict[str, Any]:
        preload = self.features.describe()
        return {
            "task": "tts",
            "architecture": ARCHITECTURE,
            "text_units": self.encoder.units,
            "vocab_size": self.encoder.vocab_size,
            "speakers": list(self.speaker_names),
            "parameters": count_parameters(self.model),
            "items": self.train_items(),
            "val_items": self.dataset.val_items(),
            "val_capped": self.dataset.val_capped,
            "hours": self.hours(),
            "padding_fraction": self.dataset.padding_fraction(self.profile.train.batch_size),
            "preload": preload,
            "skipped_files": [
                {"path": str(path), "reason": reason}
                for path, reason in self.features.skipped[:MAX_LISTED_SKIPS]
            ],
            "warnings": self.warnings(),
        }


def _voice_task(request: TaskRequest) -> VoiceTask:
    return VoiceTask(
        request.profile,
        request.report,
        request.device,
        progress=request.progress,
        where=request.preload_where,
    )


register_task("voice", _voice_task)
