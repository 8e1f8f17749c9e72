# examples/custom_task/src/vega_denoise/task.py
"""The denoiser as a Vega task: a voice's recordings plus white noise in, the clean voice out."""

import math
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

from trainer_core import api
from vega_denoise.model import Denoiser, draw

NOISE = 0.05  # standard deviation of the white noise added to the recordings
Batches = Iterator[tuple[api.Batch, int]]


class DenoiseTask(api.Task):
    def __init__(self, request: api.TaskRequest) -> None:
        p = self.profile = request.profile
        where = api.choose_where(request.preload_where, p)
        waves = api.preload_waves(request.report, p, where, request.progress)
        d = p.data
        self.data = api.SegmentDataset(waves, 4096, d.val_fraction, p.run.seed, d.val_max_items)
        self.mel = api.MelExtractor(p.audio, request.device)
        torch.manual_seed(p.run.seed)
        self.model = Denoiser().to(request.device)

    def train_items(self) -> int:
        return self.data.train_items()

    def train_batches(self, epoch: int, batch_size: int, start_item: int = 0) -> Batches:
        return self.data.train_batches(epoch, batch_size, start_item)

    def val_batches(self, batch_size: int) -> Iterator[api.Batch]:
        # whole held-out clips, the same noise each time
        for number, batch in enumerate(self.data.val_batches()):
            seeded = torch.Generator().manual_seed(number)
            noise = torch.randn(batch["wave"].shape, generator=seeded)
            yield {"wave": batch["wave"], "noise": NOISE * noise}

    def shard(self, rank: int, world_size: int) -> None:
        self.data.shard(rank, world_size)

    def compute_losses(self, model: nn.Module, batch: api.Batch) -> dict[str, torch.Tensor]:
        clean = batch["wave"]
        # a resume draws the same
        noise = batch["noise"] if "noise" in batch else NOISE * torch.randn_like(clean)
        denoised = model(clean + noise)
        wave_l1 = (denoised - clean).abs().mean()
        mel_l1 = (self.mel.batch(denoised) - self.mel.batch(clean)).abs().mean()
        total = wave_l1 + 0.01 * mel_l1
        return {"total": total, "wave_l1": wave_l1.detach(), "mel_l1": mel_l1.detach()}

    def val_metrics(self, losses_mean: dict[str, float]) -> dict[str, float]:
        # White noise's mean |value| is NOISE * sqrt(2 / pi): 1.0 means none of it was removed.
        return {"noise_left": losses_mean["wave_l1"] / (NOISE * math.sqrt(2 / math.pi))}

    def make_samples(self, model: nn.Module, out_dir: Path, step: int) -> list[api.SampleResult]:
        folder, batch = api.samples_folder(out_dir, step), next(self.val_batches(1))
        noisy = batch["wave"][0] + batch["noise"][0]
        with torch.no_grad():
            heard = api.unwrap_model(model)(noisy[None].to(self.mel.device))[0].cpu()
        wav = api.write_wav(folder / "denoised.wav", heard.numpy(), self.profile.audio.sample_rate)
        left = float((heard - batch["wave"][0]).abs().mean() / batch["noise"].abs().mean())
        (report := folder / "report.txt").write_text(f"step {step}: {left:.0%} of the noise left\n")
        picture = draw(folder / "waves.png", noisy, heard)
        return [
            api.SampleResult("audio", wav, "the first held-out clip, denoised"),
            api.SampleResult("text", report, report.read_text().strip()),
            api.SampleResult("image", picture, "noisy (grey), denoised (blue)"),
        ]

    def model_config(self) -> dict[str, object]:
        return {"kind": "denoiser", "noise": NOISE, "sample_rate": self.profile.audio.sample_rate}

    def describe(self) -> dict[str, object]:
        size = api.count_parameters(self.model)
        return {"task": "denoiser", "parameters": size, "items": self.train_items()}


def factory(request: api.TaskRequest) -> DenoiseTask:
    """What model.task names: Vega calls it with the profile, the scanned data and the device."""
    return DenoiseTask(request)
