"""Byte-level LM and its task: shapes, causality, tied weights, init loss, real training, sampling, dispatch."""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

import trainer_core
from trainer_core.contract.errors import ProfileError, VegaError
from trainer_core.contract.profile import Profile
from trainer_core.data.scan import scan_data
from trainer_core.data.scan_report import DataReport
from trainer_core.models.base import SampleResult, batch_to
from trainer_core.models.lm import ByteLM, LmConfig, LmTask, build_model, generate
from trainer_core.models.registry import build_task

DEMO_TEXT = Path(trainer_core.__file__).parent / "demo" / "text" / "corpus"


def _profile(**sections: dict) -> Profile:
    """A tiny text-mode profile; `sections` override whole-section fields."""
    base = {
        "run": {"seed": 11},
        "data": {"mode": "text", "context_bytes": 32, "val_fraction": 0.05},
        "model": {"kind": "lm", "hidden": 32, "encoder_layers": 2, "heads": 2, "ffn_mult": 2, "dropout": 0.0},
        "sample": {"prompts": ["The ", "It is"], "max_new_bytes": 24, "temperature": 0.8},
    }
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return Profile(**base)


def _model(profile: Profile | None = None) -> ByteLM:
    profile = profile or _profile()
    return build_model(LmConfig.from_profile(profile), profile.run.seed).eval()


@pytest.fixture(scope="module")
def demo_task() -> LmTask:
    task = build_task(_profile(), DEMO_TEXT, "cpu")
    assert isinstance(task, LmTask)
    return task


# ---------------------------------------------------------------------------------------------- the model


def test_forward_gives_next_byte_logits_and_rejects_overlong_input() -> None:
    model = _model()
    x = torch.randint(0, 256, (3, 20))
    assert model(x).shape == (3, 20, 256)
    with pytest.raises(ValueError, match="context"):
        model(torch.randint(0, 256, (1, 33)))


def test_attention_is_causal() -> None:
    model = _model()
    x = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    changed = x.clone()
    changed[:, 20] = (changed[:, 20] + 1) % 256
    with torch.no_grad():
        before, after = model(x), model(changed)
    assert torch.allclose(before[:, :20], after[:, :20], atol=1e-6)
    assert not torch.allclose(before[:, 20], after[:, 20], atol=1e-6)


def test_input_and_output_embeddings_are_one_tensor() -> None:
    model = _model()
    assert model.head.weight is model.byte_emb.weight
    names = [name for name, _ in model.named_parameters()]
    assert "byte_emb.weight" in names and "head.weight" not in names  # counted once


def test_loss_at_initialisation_is_near_uniform(demo_task: LmTask) -> None:
    batch, _ = next(demo_task.train_batches(0, 16))
    with torch.no_grad():
        losses = demo_task.compute_losses(demo_task.model, batch)
    assert set(losses) == {"total", "ce"}
    assert losses["total"].item() == pytest.approx(math.log(256), abs=0.1)


def test_weights_depend_only_on_the_seed_and_leave_the_global_rng_alone() -> None:
    state = torch.get_rng_state()
    first, second = _model(), _model()
    assert torch.equal(torch.get_rng_state(), state)
    assert all(
        torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True)
    )
    other = _model(_profile(run={"seed": 12}))
    assert not torch.equal(first.byte_emb.weight, other.byte_emb.weight)


# ------------------------------------------------------------------------------------------- the task


def test_short_training_run_on_the_demo_text_learns(demo_task: LmTask) -> None:
    task = build_task(_profile(data={"context_bytes": 64}, model={"hidden": 64}), DEMO_TEXT, "cpu")
    optimizer = torch.optim.AdamW(task.model.parameters(), lr=3e-3)
    task.model.train()
    losses = []
    for batch, _ in task.train_batches(epoch=0, batch_size=32):
        loss = task.compute_losses(task.model, batch)["total"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if len(losses) == 60:
            break
    assert sum(losses[-10:]) / 10 < math.log(256) - 2.0  # 5.55 nats at init; English bytes go far lower
    task.model.eval()
    with torch.no_grad():
        val = [task.compute_losses(task.model, b)["ce"].item() for b in task.val_batches(64)]
    bits = task.val_metrics({"ce": sum(val) / len(val)})["bits_per_byte"]
    assert bits < 8.0 * 0.75  # well below the 8 bits of a uniform guess


def test_val_metrics_convert_nats_to_bits(demo_task: LmTask) -> None:
    assert demo_task.val_metrics({"total": 2.0, "ce": math.log(2) * 3})["bits_per_byte"] == pytest.approx(3.0)


def test_describe_and_model_config(demo_task: LmTask) -> None:
    info = demo_task.describe()
    assert info["vocab_size"] == 256 and info["files"] == 61  # one file per chapter
    assert info["items"] == demo_task.train_items() > 0 and info["val_items"] > 0
    assert info["parameters"] == sum(p.numel() for p in demo_task.model.parameters())
    config = demo_task.model_config()
    rebuilt = ByteLM(LmConfig(**{k: config[k] for k in asdict(demo_task.config)}))
    rebuilt.load_state_dict(demo_task.model.state_dict())


def test_batch_to_moves_every_tensor(demo_task: LmTask) -> None:
    batch, _ = next(demo_task.train_batches(0, 2))
    moved = batch_to(batch, torch.device("cpu"))
    assert set(moved) == {"input", "target"} and all(t.device.type == "cpu" for t in moved.values())


# -------------------------------------------------------------------------------------------- sampling


def test_generate_is_deterministic_for_a_seed() -> None:
    model = _model()
    first = generate(model, b"Hello", 40, 0.9, torch.Generator().manual_seed(5))
    second = generate(model, b"Hello", 40, 0.9, torch.Generator().manual_seed(5))
    other = generate(model, b"Hello", 40, 0.9, torch.Generator().manual_seed(6))
    assert len(first) == 40 and first == second and first != other


def test_generate_crops_the_prompt_to_the_context() -> None:
    model = _model()
    long_prompt = bytes(range(65, 65 + 26)) * 4  # 104 bytes, context is 32
    cropped = generate(model, long_prompt, 50, 1.0, torch.Generator().manual_seed(1))
    tail_only = generate(model, long_prompt[-32:], 50, 1.0, torch.Generator().manual_seed(1))
    assert cropped == tail_only


def test_make_samples_writes_prompts_and_continuations(demo_task: LmTask, tmp_path: Path) -> None:
    demo_task.model.train()
    results = demo_task.make_samples(demo_task.model, tmp_path / "samples", step=7)
    assert demo_task.model.training  # the caller's mode is restored
    (result,) = results
    assert isinstance(result, SampleResult) and result.kind == "text"
    assert result.path == tmp_path / "samples" / "step-00000007.txt"
    written = result.path.read_bytes().decode("utf-8")
    assert written == result.text
    assert "\nThe " in written and "\nIt is" in written
    again = demo_task.make_samples(demo_task.model, tmp_path / "again", step=7)[0].text
    assert again == written  # a fixed sampling seed: evaluations are comparable


# -------------------------------------------------------------------------------------------- dispatch


def test_build_task_accepts_a_scan_report(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Some words for the model to read. " * 40, encoding="utf-8")
    report = scan_data(tmp_path, "text")
    task = build_task(_profile(), report, "cpu")
    assert isinstance(task, LmTask) and task.train_items() > 0


def test_voice_report_without_recordings_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    report = DataReport(path=tmp_path, mode="voice", reason="audio with transcripts")
    with pytest.raises(VegaError, match="no usable recordings with transcripts"):
        build_task(_profile(model={"kind": "auto"}), report, "cpu")
    with pytest.raises(ProfileError, match="model.kind"):
        build_task(_profile(), report, "cpu")
