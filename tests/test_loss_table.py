"""Losses weighted from a table: `weighted_total` sums weight * part in the table's order, and
the vocoder and vits tasks' totals equal the hand-written sums they replaced to the bit, on a real
step of tiny models (the voice task's: test_voice_task and test_pitch, where it is built)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import TEST_VOICE
from trainer_core.contract.profile import Profile
from trainer_core.models import gan_vocoder
from trainer_core.models.loss_table import LossTableError, weighted_total
from trainer_core.models.registry import build_task
from trainer_core.models.vits import losses as vits_losses
from trainer_core.models.vits.task import VitsTask
from trainer_core.models.vocoder_task import VocoderTask
from trainer_core.tiny_profiles import Kind, tiny_sections

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_the_total_sums_in_the_tables_order_with_each_weight() -> None:
    # In float32, (1e8 - 1e8) + 1 is 1 but (-1e8 + 1) + 1e8 is 0: the table's order decides.
    parts = {name: torch.tensor(value) for name, value in (("a", 1e8), ("b", -1e8), ("c", 1.0))}
    assert weighted_total(parts, {"a": 1.0, "b": 1.0, "c": 1.0}).item() == 1.0
    assert weighted_total(parts, {"b": 1.0, "c": 1.0, "a": 1.0}).item() == 0.0
    x, y = torch.tensor(0.7, requires_grad=True), torch.tensor(1.3, requires_grad=True)
    total = weighted_total({"x": x * 3, "y": y.square()}, {"x": 0.25, "y": 45.0})
    total.backward()
    assert total.item() == (0.25 * (x * 3) + 45.0 * y.square()).item()
    assert x.grad is not None and y.grad is not None
    assert x.grad.item() == pytest.approx(0.75) and y.grad.item() == pytest.approx(90.0 * 1.3)


@pytest.mark.parametrize(
    ("parts", "weights", "named"),
    [
        (["mel", "kl"], {"mel": 1.0, "kl": 1.0, "duration": 2.0}, "did not compute: duration"),
        (["mel", "kl", "pitch"], {"mel": 1.0, "kl": 1.0}, "computed without a weight: pitch"),
        (["mel"], {}, "the weight table is empty"),
    ],
)
def test_a_part_without_a_weight_or_a_weight_without_a_part_is_refused(
    parts: list[str], weights: dict[str, float], named: str
) -> None:
    with pytest.raises(LossTableError, match=named) as caught:
        weighted_total({name: torch.tensor(1.0) for name in parts}, weights)
    assert "loss_weights" in str(caught.value)  # says where to fix it


def _task(kind: Kind, tmp_path: Path, weights: dict[str, float]) -> VocoderTask | VitsTask:
    data = {"path": str(TEST_VOICE), "cache_dir": str(tmp_path / "cache")}
    profile = Profile.model_validate(tiny_sections(kind, data=data, **{kind: weights}))
    task = build_task(profile, TEST_VOICE, "cpu")
    assert isinstance(task, VocoderTask | VitsTask)
    return task


def test_the_vocoder_totals_are_todays_hand_written_sums(tmp_path: Path) -> None:
    weights = {"mel_weight": 45.0, "adversarial_weight": 0.3, "feature_weight": 1.7}
    task = _task("vocoder", tmp_path, weights)
    assert isinstance(task, VocoderTask)
    batch, _ = next(task.train_batches(0, 2))
    carry: dict = {}
    critic = task.group_losses(task.model, batch, "discriminator", carry)
    assert set(critic) == {"total"}  # the discriminators step on their least-squares loss alone
    fake = carry["fake"].detach()
    real_logits, fake_logits, _, _ = task.model.discriminators(batch["wave"], fake)
    assert torch.equal(critic["total"], gan_vocoder.discriminator_loss(real_logits, fake_logits))
    made = task.group_losses(task.model, batch, "generator", carry)
    v = task.profile.vocoder
    today = v.mel_weight * made["mel"] + v.adversarial_weight * made["adversarial"]
    today = today + v.feature_weight * made["feature"]
    assert torch.equal(made["total"].detach(), today)
    assert list(task.loss_weights("generator")) == ["mel", "adversarial", "feature"]


def test_the_vits_totals_are_todays_hand_written_sums(tmp_path: Path) -> None:
    weights = {"kl_weight": 0.7, "duration_weight": 1.3, "adversarial_weight": 0.9}
    task = _task("vits", tmp_path, {**weights, "feature_weight": 2.1})
    assert isinstance(task, VitsTask)
    batch, _ = next(task.train_batches(0, 2))
    carry: dict = {}
    torch.manual_seed(0)  # the generator's forward samples latents
    critic = task.group_losses(task.model, batch, "discriminator", carry)
    assert set(critic) == {"total"}
    real_logits, fake_logits, _, _ = task.model.model_d(carry["real"], carry["out"].audio.detach())
    today_critic = vits_losses.discriminator_loss(real_logits, fake_logits)[0]
    assert torch.equal(critic["total"], today_critic)
    made = task.group_losses(task.model, batch, "generator", carry)
    v, p = task.profile.vits, made
    today = v.mel_weight * p["mel"] + v.kl_weight * p["kl"] + v.duration_weight * p["duration"]
    today = today + v.adversarial_weight * p["adversarial"] + v.feature_weight * p["feature"]
    assert torch.equal(made["total"].detach(), today)
